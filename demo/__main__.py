"""`python -m demo`: run the whole pipeline on embedded defaults, print and check the result.

    python -m demo                         # about two minutes
    python -m demo --duration-s 30 --summary out/demo-summary.json
    python -m demo --events 1200 --compactions 1   # until those counts are reached
    python -m demo --writer flink          # a Flink upsert job through the catalog front

Starts the lakelock service on SQLite, the event generator, the streaming upsert job through the
gate, and the compactor that follows the stream (`--compactor timer`: the compactor on a short
schedule instead, to compare); shows progress; then prints a summary, writes it as
JSON, and exits 1 if the table does not hold exactly the latest row of every generated key
(or, by counts, if the counts were not reached within --timeout-s). Last, it prints the commands
that look at what the run left behind: the table's plan, and a service on its lock database.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.extras import needs_extras

with needs_extras("python -m demo", extra="demo", requires=("pyspark", "fastapi", "pyiceberg")):
    from demo.lake import STORAGES
    from demo.options import COMPACTORS, PipelineOptions
    from demo.pipeline import Pipeline
    from demo.result import PipelineResult
    from ingest_gate.job.config import FORMATS, SCOPES, SOURCES
    from ingest_gate.job.table import require_format_version, require_write_mode

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    defaults = PipelineOptions()
    parser = argparse.ArgumentParser(
        prog="bin/run",
        description="Run the whole lakelock pipeline on this machine (a lakelock service on "
        "SQLite, an event generator, the streaming upsert job, the compactor), print a summary, "
        "and check that the table holds the latest row of every generated key.",
        epilog="Exit status: 0 check passed, 1 check failed, 130 interrupted (Ctrl-C).",
    )
    parser.add_argument(
        "--duration-s",
        type=float,
        help=f"run this long, then drain and check (default {defaults.duration_s:g})",
    )
    parser.add_argument(
        "--events",
        type=int,
        help="run by counts instead of time: write exactly this many events, then go on until "
        "the table has taken them all and --compactions compactions have succeeded",
    )
    parser.add_argument(
        "--writer",
        choices=("spark", "flink"),
        default="spark",
        help="spark: the streaming MERGE job through the gate (this page's options); flink: a "
        "Flink upsert job through the catalog front (bin/run --writer flink --help)",
    )
    # the options with a default, each: (flag, type, default, what it sets)
    for flag, kind, default, text in (
        ("--compactions", int, defaults.compactions, "with --events: compactions to wait for"),
        (
            "--timeout-s",
            float,
            defaults.timeout_s,
            "with --events: seconds before giving up (the check fails)",
        ),
        ("--workdir", Path, defaults.workdir, "where the run keeps everything; emptied first"),
        ("--rate", float, defaults.rate, "events per second"),
        ("--trigger-interval-s", float, defaults.trigger_interval_s, "seconds between batches"),
        (
            "--compactor",
            str,
            "follow",
            "follow | timer: compact partitions as the stream makes them due, or every "
            "--compact-every-s",
        ),
        (
            "--compact-every-s",
            float,
            defaults.compact_every_s,
            "with --compactor timer: seconds between compactor runs",
        ),
        (
            "--full-plan-every-s",
            float,
            defaults.full_plan_every_s,
            "with --compactor follow: seconds between the follower's full plans",
        ),
        ("--seed", int, defaults.seed, "generator seed"),
        (
            "--format",
            str,
            defaults.format,
            "json | debezium | canal: click events, or change events with deletes",
        ),
        (
            "--source",
            str,
            defaults.source,
            "files | kafka: a landing folder, or a topic of a broker "
            "the run starts (bin/kafka-local's)",
        ),
        (
            "--partitions",
            int,
            defaults.kafka_partitions,
            "with --source kafka: the topic's partitions",
        ),
        (
            "--lease-scope",
            str,
            defaults.lease_scope,
            "partitions | table: what each commit lease of the ingest job covers",
        ),
        (
            "--storage",
            str,
            defaults.storage,
            "file | s3: the table in a local folder, or in an S3 warehouse behind the "
            "service's catalog front (the project's S3 server unless --s3-endpoint)",
        ),
        (
            "--s3-endpoint",
            str,
            None,
            "with --storage s3: any S3 endpoint (keys from AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, region from AWS_REGION)",
        ),
        ("--s3-bucket", str, defaults.s3_bucket, "with --storage s3: the bucket"),
        (
            "--format-version",
            int,
            defaults.format_version,
            "2 | 3: the table's Iceberg format version; 3 writes a deletion vector per data "
            "file instead of position delete files",
        ),
        (
            "--write-mode",
            str,
            defaults.write_mode,
            "merge-on-read | copy-on-write: a batch writes a delete file beside each data file "
            "it changes, or rewrites that data file (no delete file for a reader to apply)",
        ),
        ("--summary", Path, Path("demo-summary.json"), "where to write the summary as JSON"),
    ):
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default %(default)s)")
    return parser


def _positive(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.events is not None and args.duration_s is not None:
        parser.error("--duration-s and --events exclude each other: run by time or by counts")
    for name in (
        "duration_s",
        "events",
        "rate",
        "trigger_interval_s",
        "compact_every_s",
        "full_plan_every_s",
    ):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if args.compactions < 0:
        parser.error("--compactions must be >= 0")
    for flag, value, known in (
        ("--compactor", args.compactor, COMPACTORS),
        ("--format", args.format, FORMATS),
        ("--source", args.source, SOURCES),
        ("--lease-scope", args.lease_scope, SCOPES),
    ):
        if value not in known:
            parser.error(f"{flag} must be one of {', '.join(known)}")
    _table_and_storage(parser, args)
    if args.partitions < 1:
        parser.error("--partitions must be >= 1")
    if args.timeout_s <= 0:
        parser.error("--timeout-s must be > 0")


def _table_and_storage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.storage not in STORAGES:
        parser.error(f"--storage must be one of {', '.join(STORAGES)}")
    if args.storage != "s3" and args.s3_endpoint:
        parser.error("--s3-endpoint goes with --storage s3")
    try:
        require_format_version(args.format_version)
    except ValueError as exc:
        parser.error(f"--format-version: {exc}")
    try:
        require_write_mode(args.write_mode)
    except ValueError as exc:
        parser.error(f"--write-mode: {exc}")


def look_around(summary: dict[str, object], workdir: Path) -> str:
    """The commands that look at what a run left in `workdir`: its table and its lock database.

    Paths are given as the user passed them (relative to where the demo ran), so the lines paste.
    """
    table = summary["table"]
    warehouse = workdir / "warehouse"
    database = workdir / "lakelock.db"
    if summary.get("storage") == "s3":
        where = [
            "  # the table's objects, in the S3 server's folder (bin/s3-local --dir "
            f"{workdir / 's3'} serves them again)",
            f"  find {workdir / 's3' / 'data'} -type f | head",
        ]
    else:
        where = [
            "  # the table's files and what a compaction would do now",
            f"  .venv/bin/python -m compactor plan --table {table} --warehouse {warehouse}",
        ]
    return "\n".join(
        [
            f"look at what the run left in {workdir}:",
            *where,
            "  # the lock service on the run's lock database (auth off: a local look only), then",
            "  # its state and audit trail; stop it with: kill %1",
            f"  LAKELOCK_AUTH=off LAKELOCK_DATABASE_URL=sqlite:///{database} "
            f".venv/bin/python -m service >{workdir / 'service-after.log'} 2>&1 &",
            "  curl -s --retry 30 --retry-connrefused --retry-delay 1 "
            "http://127.0.0.1:8737/readyz; echo",
            f"  curl -s http://127.0.0.1:8737/v1/tables/{table}; echo",
            f'  curl -s "http://127.0.0.1:8737/v1/events?table={table}&limit=20"; echo',
        ]
    )


def _audit(result: PipelineResult) -> dict[str, Any]:
    """`lakelock audit` of the demo table: its snapshot history against the service's events
    (both collected by the pipeline before it stopped the service and the storage)."""
    from service.ops.iceberg_audit import audit

    table = result.options.table
    return audit(result.snapshots, result.events, table=table, limit=1000).as_dict()


def _writer(argv: Sequence[str]) -> tuple[str, list[str]]:
    """`--writer spark|flink` (anywhere in the arguments) and the arguments without it."""
    rest = list(argv)
    for i, arg in enumerate(rest):
        if arg == "--writer" and i + 1 < len(rest):
            return rest[i + 1], rest[:i] + rest[i + 2 :]
        if arg.startswith("--writer="):
            return arg.split("=", 1)[1], rest[:i] + rest[i + 1 :]
    return "spark", rest


def main(argv: Sequence[str] | None = None) -> int:
    writer, rest = _writer(sys.argv[1:] if argv is None else argv)
    if writer == "flink":  # a Flink job through the catalog front instead (docs/flink.md)
        from demo.flink import main as flink_main

        return flink_main(rest)
    if writer != "spark":
        print(f"bin/run: --writer {writer!r}: spark or flink", file=sys.stderr)
        return 2
    parser = _parser()
    args = parser.parse_args(rest)
    _positive(parser, args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    # py4j logs each call that Ctrl-C cuts short at ERROR, with a traceback; the demo says it
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    defaults = PipelineOptions()
    options = PipelineOptions(
        duration_s=defaults.duration_s if args.duration_s is None else args.duration_s,
        events=args.events,
        compactions=args.compactions,
        timeout_s=args.timeout_s,
        workdir=args.workdir,
        rate=args.rate,
        trigger_interval_s=args.trigger_interval_s,
        compactor=args.compactor,
        compact_every_s=args.compact_every_s,
        full_plan_every_s=args.full_plan_every_s,
        seed=args.seed,
        lease_scope=args.lease_scope,
        format=args.format,
        source=args.source,
        kafka_partitions=args.partitions,
        storage=args.storage,
        s3_endpoint=args.s3_endpoint,
        s3_bucket=args.s3_bucket,
        format_version=args.format_version,
        write_mode=args.write_mode,
    )
    until = (
        f"{options.events} events and {options.compactions} compaction(s)"
        if options.by_counts
        else f"{options.duration_s:g}s"
    )
    print(f"lakelock demo: {until}, {args.rate:g} events/s, workdir {args.workdir}")
    try:
        result = Pipeline(options, on_progress=lambda line: print(line, flush=True)).run()
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130
    summary = result.summary()
    problems = result.verify()
    summary["audit"] = _audit(result)
    if summary["audit"]["violations"]:
        problems.append(
            f"lakelock audit: {len(summary['audit']['violations'])} commits broke a lease"
        )
    summary["checks"] = {"passed": not problems, "problems": problems}
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    width = max(len(k) for k in summary)
    print()
    for key, value in summary.items():
        if key not in ("checks", "audit"):
            print(f"  {key:<{width}}  {value}")
    audited = summary["audit"]
    print(
        f"\n  lakelock audit: {audited['verdict']} ({audited['snapshots_checked']} snapshots, "
        f"{audited['ingest_commits']} ingest, {audited['maintenance_commits']} maintenance)"
    )
    print(f"\nsummary written to {args.summary}")
    print(look_around(summary, args.workdir), end="\n\n")
    if problems:
        print("CHECK FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(
        f"check passed: {summary['rows_in_table']} rows = {summary['distinct_keys_generated']} "
        "distinct keys, each holding its latest values"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
