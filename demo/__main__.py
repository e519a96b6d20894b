"""`python -m demo`: run the whole pipeline on embedded defaults, print and check the result.

    python -m demo                         # about two minutes
    python -m demo --duration-s 30 --summary out/demo-summary.json

Starts the lakelock service on SQLite, the event generator, the streaming upsert job through the
gate, and the compactor on a short schedule; shows progress; then prints a summary, writes it as
JSON, and exits 1 if the table does not hold exactly the latest row of every generated key.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demo.pipeline import Pipeline, PipelineOptions, PipelineResult

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    defaults = PipelineOptions()
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n")[0])
    parser.add_argument("--duration-s", type=float, default=defaults.duration_s)
    parser.add_argument("--workdir", type=Path, default=defaults.workdir)
    parser.add_argument("--rate", type=float, default=defaults.rate, help="events per second")
    parser.add_argument("--trigger-interval-s", type=float, default=defaults.trigger_interval_s)
    parser.add_argument("--compact-every-s", type=float, default=defaults.compact_every_s)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--summary", type=Path, default=Path("demo-summary.json"))
    return parser


def _positive(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("duration_s", "rate", "trigger_interval_s", "compact_every_s"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")


def _audit(result: PipelineResult) -> dict[str, Any]:
    """`lakelock audit` of the demo table: its snapshot history against the service's events
    (collected by the pipeline before it stopped the service)."""
    from service.iceberg_audit import audit, metadata_file, read_snapshots

    table = result.options.table
    snapshots = read_snapshots(metadata_file(result.options.workdir / "warehouse", table))
    return audit(snapshots, result.events, table=table, limit=1000).as_dict()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _positive(parser, args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    # py4j logs each call that Ctrl-C cuts short at ERROR, with a traceback; the demo says it
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    options = PipelineOptions(
        duration_s=args.duration_s,
        workdir=args.workdir,
        rate=args.rate,
        trigger_interval_s=args.trigger_interval_s,
        compact_every_s=args.compact_every_s,
        seed=args.seed,
    )
    print(f"lakelock demo: {args.duration_s:g}s, {args.rate:g} events/s, workdir {args.workdir}")
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
