"""A lake of many tables, compacted by one compactor process, then by two.

    python -m benchmarks.fleet                                  # 200 tables, ~15 min
    python -m benchmarks.fleet --tables 40 --debt 6 --big 1 --ticks 2 --out var/fleet-small

The lake (`local.lake.*` in a Hadoop catalog under `--out`):

    healthy   most tables: a few data files of 128 MiB each, no delete file. Written through
              Iceberg's Java API as metadata only (the files are named, sized and counted in
              the manifests, never written): the compactor reads their metadata, never their
              data, so they cost the lake nothing to build
    big       `--big` tables the same way, with `--big-files` data files of 128 MiB over 100
              day partitions (a full plan of one reads all their manifest entries)
    debt      `--debt` real tables: 12 small files in one partition and a position delete file
              (one INSERT of 12 slices, one DELETE), which a plan compacts
    stream    `--ingest` tables of the demo's click events, each fed by the ingest job itself
              (`python -m ingest_gate`, one process per table, gated by the same service):
              `--ingest-batches` files of `--ingest-rows` events per round, read one per
              micro-batch until none is left (available-now), each batch a MERGE that adds
              small files and position deletes (benchmarks/streams.py)

Then, against one lakelock service (SQLite), `compactor run --config F --every 2s --ticks N`
over the pattern `local.lake.*`:

    one   one process: per tick, the seconds to list and rank the lake and the Spark jobs that
          took (from its `compactor.tick` line), tables planned and compacted, the tick's length
    two   the debt tables get their debt back (12 more small files, another delete), then two
          processes start at once: the same per tick and process, and from the service's audit
          trail: no table with claims or maintenance leases of the two processes overlapping in
          time, each debt table compacted by exactly one of them once (run reports)

In each round the ingest jobs run beside the compactors (a round ends when both are done):
their batches by outcome (the goal: 0 failed), the round's compactions per hour, and the debt
over time: every `--sample-s` the data and delete files of each table with debt or ingest, read
from its metadata file (plain JSON, not the code under test), drawn in `fleet.png`.

And, in this process, what ranking saves on a big table: `read_summary` (its summary) against
`collect_stats` (the full plan's read), in seconds and Spark jobs; and the plan-time curve: a full
plan (`collect_stats`, then `plan`) of tables of `--curve` data files of 1 MiB over 100 day
partitions, in this warm session. Writes `results.json`, `report.md` and `fleet.png` into
`--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.lake import local_lake
from benchmarks.streams import Streams, wait
from service.client import LeaseClient
from service.ops.iceberg_audit import metadata_file
from service.wire import EventName
from testkit import LocalService

__all__ = ["build_lake", "main", "overlaps", "tick_lines"]

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "local.lake"
_MIB = 1 << 20
_ENDS = (EventName.LEASE_RELEASED, EventName.LEASE_EXPIRED, EventName.LEASE_REVOKED)


def _create(spark: Any, table: str, *, partitioned: bool = True) -> None:
    spark.sql(
        f"""
        CREATE TABLE {table} (id BIGINT, dt DATE, payload STRING) USING iceberg
        {"PARTITIONED BY (dt)" if partitioned else ""}
        TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read',
                       'write.update.mode' = 'merge-on-read',
                       'write.merge.mode' = 'merge-on-read',
                       'write.delete.granularity' = 'file',
                       'write.distribution-mode' = 'none')
        """
    )


def _append_metadata_only(
    spark: Any, table: str, *, files: int, days: int, size: int = 128 * _MIB
) -> None:
    """One append of `files` data files of `size` bytes over `days` partitions, named in the
    manifests only (see the module docstring)."""
    from jobkit.spark import load_table

    jvm = spark._jvm
    loaded = load_table(spark, table)
    spec = loaded.spec()
    append = loaded.newAppend()
    for i in range(files):
        append.appendFile(
            jvm.org.apache.iceberg.DataFiles.builder(spec)
            .withPath(f"{loaded.location()}/data/virtual-{i:06d}.parquet")
            .withFormat("parquet")
            .withPartitionPath(_day_path(i % days))
            .withFileSizeInBytes(size)
            .withRecordCount(1_000_000)
            .build()
        )
    append.commit()


def _day_path(i: int) -> str:
    return f"dt={date(2024, 1, 1) + timedelta(days=i)}"


def add_debt(spark: Any, table: str, *, first_id: int) -> None:
    """12 small files of two rows in one partition (12 slices, no write distribution) and one
    position delete file."""
    spark.sql(
        f"INSERT INTO {table} SELECT id, DATE '2024-05-01', sha2(CAST(id AS STRING), 256) "
        f"FROM range({first_id}, {first_id + 24}, 1, 12)"
    )
    spark.sql(f"DELETE FROM {table} WHERE id = {first_id}")


def build_lake(
    spark: Any, *, tables: int, debt: int, big: int, big_files: int, ingest: int = 0
) -> dict[str, list[str]]:
    """The lake of the module docstring; the names of each kind (the stream tables are
    created empty: their ingest jobs fill them)."""
    from demo.generate import create_events_table

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {NAMESPACE}")
    names: dict[str, list[str]] = {"healthy": [], "big": [], "debt": [], "stream": []}
    bounds = (("debt", debt), ("stream", debt + ingest), ("big", debt + ingest + big))
    for i in range(tables):
        kind = next((k for k, bound in bounds if i < bound), "healthy")
        table = f"{NAMESPACE}.{kind}_{i:04d}"
        if kind == "stream":
            create_events_table(spark, table)
        else:
            _create(spark, table)
        if kind == "debt":
            add_debt(spark, table, first_id=0)
        elif kind == "big":
            _append_metadata_only(spark, table, files=big_files, days=100)
        elif kind == "healthy":
            _append_metadata_only(spark, table, files=4, days=1)
        names[kind].append(table)
    return names


def _config(out: Path, service: LocalService, max_concurrent: int) -> Path:
    path = out / "compactor.toml"
    path.write_text(
        f"""
[service]
url = "{service.url}"
[catalog]
name = "local"
warehouse = "{(out / "warehouse").resolve()}"
[spark]
master = "local[2]"
[fleet]
max_concurrent = {max_concurrent}
claim_ttl = "30s"
[defaults.lease]
ttl = "30s"
[[tables]]
name = "{NAMESPACE}.*"
"""
    )
    return path


def _start(config: Path, log: Path, service: LocalService, ticks: int) -> subprocess.Popen:
    env = {**os.environ, "LAKELOCK_TOKEN": service.token("job"), "LAKELOCK_LOG_LEVEL": "INFO"}
    command = ["run", "--config", str(config), "--every", "2s", "--ticks", str(ticks)]
    return subprocess.Popen(
        [sys.executable, "-m", "compactor", *command],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def tick_lines(log: Path) -> list[dict[str, Any]]:
    """Every `compactor.tick` line of a compactor's log, in order."""
    out = []
    for line in log.read_text().splitlines():
        if '"event": "compactor.tick"' in line:
            out.append(json.loads(line[line.index("{") :]))
    return out


@dataclass
class Round:
    """What a round runs beside its compactor processes: the ingest jobs (by counts) and the
    debt sampler over `watched` tables."""

    out: Path
    config: Path
    service: LocalService
    ticks: int
    streams: Streams
    batches: int
    rows: int
    watched: Sequence[str]
    sample_s: float


def table_files(warehouse: Path, table: str) -> tuple[int, int]:
    """(data files, delete files) of `table`'s current snapshot, from its metadata file."""
    metadata = json.loads(metadata_file(warehouse, table).read_text())
    current = metadata.get("current-snapshot-id")
    for snap in metadata.get("snapshots", []):
        if snap["snapshot-id"] == current:
            summary = snap["summary"]
            return int(summary["total-data-files"]), int(summary["total-delete-files"])
    return 0, 0


def _sample(r: Round, warehouse: Path, started: float, stop: threading.Event) -> list[list]:
    """Every `r.sample_s` until `stop`: [seconds, data files, delete files] over `r.watched`."""
    samples: list[list] = []
    while True:
        files = [table_files(warehouse, t) for t in r.watched]
        samples.append(
            [
                round(time.monotonic() - started, 1),
                sum(f[0] for f in files),
                sum(f[1] for f in files),
            ]
        )
        if stop.wait(r.sample_s):
            return samples


def _round(name: str, processes: int, r: Round, seed: int) -> dict[str, Any]:
    logs = [r.out / f"{name}-{i}.log" for i in range(processes)]
    started = time.monotonic()
    stop = threading.Event()
    samples: list[list] = []
    sampler = threading.Thread(
        target=lambda: samples.extend(_sample(r, r.out / "warehouse", started, stop)), daemon=True
    )
    sampler.start()
    jobs = r.streams.start(batches=r.batches, rows=r.rows, seed=seed) if r.batches else []
    running = [_start(r.config, log, r.service, r.ticks) for log in logs]
    codes = [p.wait(3600) for p in running]
    ingest = wait(jobs)
    wall = time.monotonic() - started
    stop.set()
    sampler.join()
    if any(codes):
        tail = "\n".join(log.read_text()[-3000:] for log in logs)
        raise RuntimeError(f"round {name}: exit codes {codes}\n{tail}")
    per_process = [tick_lines(log) for log in logs]
    compactions = sum(
        1
        for ticks in per_process
        for t in ticks
        for o in t["outcomes"].values()
        if o == "compacted"
    )
    print(f"round {name}: {processes} process(es), {wall:.1f}s, ingest {ingest}", flush=True)
    for i, lines in enumerate(per_process):
        for t, tick in enumerate(lines, 1):
            print("  " + _tick_text(i, t, tick), flush=True)
    return {
        "processes": processes,
        "wall_s": round(wall, 1),
        "ticks": per_process,
        "compactions": compactions,
        "compactions_per_hour": round(compactions * 3600 / wall),
        "ingest": ingest,
        "debt_over_time": samples,
    }


def _tick_text(process: int, number: int, tick: dict[str, Any]) -> str:
    compacted = sum(1 for o in tick["outcomes"].values() if o == "compacted")
    return (
        f"process {process} tick {number}: {tick['tables']} tables ranked in "
        f"{tick['rank_s']:.2f}s ({tick['rank_spark_jobs']} Spark jobs), "
        f"{len(tick['queued'])} planned, {compacted} compacted, "
        f"{len(tick['left_to_others'])} left to the other, {tick['duration_s']:.1f}s"
    )


def _intervals(events: Sequence[dict[str, Any]], kind: str) -> list[tuple[float, float, str]]:
    """(start, end, process) of each `kind` lease in `events` (oldest first)."""
    start: dict[str, tuple[float, str]] = {}
    out = []
    for e in events:
        if e["kind"] != kind or not e["lease_id"]:
            continue
        at = datetime.fromisoformat(e["at"]).timestamp()
        if e["event"] == EventName.LEASE_ACQUIRED:
            start[e["lease_id"]] = (at, (e["holder"] or "").split("/")[0])
        elif e["event"] in _ENDS and e["lease_id"] in start:
            began, process = start.pop(e["lease_id"])
            out.append((began, at, process))
    return out


def overlaps(intervals: Sequence[tuple[float, float, str]]) -> int:
    """Pairs of intervals of different processes that overlap in time."""
    return sum(
        1
        for i, a in enumerate(intervals)
        for b in intervals[i + 1 :]
        if a[2] != b[2] and a[0] < b[1] and b[0] < a[1]
    )


def _check_two(
    client: LeaseClient, tables: Sequence[str], debt: Sequence[str], two: dict[str, Any]
) -> dict[str, Any]:
    """What the audit trail, the run reports and the tick lines say of the two-process round."""
    claim_overlaps = maintenance_overlaps = 0
    for table in tables:
        events = list(reversed(client.events(table=table, limit=1000)))
        claim_overlaps += overlaps(_intervals(events, "claim")) > 0
        maintenance_overlaps += overlaps(_intervals(events, "maintenance")) > 0
    in_round = dict.fromkeys(debt, 0)
    for ticks in two["ticks"]:
        for tick in ticks:
            for table, outcome in tick["outcomes"].items():
                if outcome == "compacted" and table in in_round:
                    in_round[table] += 1
    # the service's run history: one compaction per round, two in all
    reported = {
        t: sum(1 for r in client.runs(t, limit=50) if r["outcome"] == "compacted") for t in debt
    }
    return {
        "tables_with_overlapping_claims_of_two_processes": claim_overlaps,
        "tables_with_overlapping_maintenance_leases_of_two_processes": maintenance_overlaps,
        "debt_tables": len(debt),
        "debt_tables_compacted_once_in_round_two": sum(1 for n in in_round.values() if n == 1),
        "compactions_in_round_two_per_table": sorted(set(in_round.values())),
        "compactions_reported_per_debt_table_both_rounds": sorted(set(reported.values())),
    }


def _timed(spark: Any, read: Callable[[], object], runs: int = 3) -> dict[str, Any]:
    """The median seconds of `runs` calls of `read`, and the Spark jobs each started."""
    from compactor.catalog import spark_jobs

    seconds = []
    jobs = spark_jobs(spark)
    for _ in range(runs):
        started = time.perf_counter()
        read()
        seconds.append(time.perf_counter() - started)
    return {
        "median_s": round(statistics.median(seconds), 3),
        "spark_jobs_per_read": (spark_jobs(spark) - jobs) / runs,
    }


def _big_costs(spark: Any, table: str) -> dict[str, Any]:
    from compactor.catalog import read_summary
    from compactor.config import TableConfig
    from compactor.stats import collect_stats

    small = TableConfig(table).small_file_bytes
    return {
        "summary": _timed(spark, lambda: read_summary(spark, table)),
        "full_plan_read": _timed(
            spark, lambda: collect_stats(spark, table=table, small_file_bytes=small)
        ),
    }


def plan_curve(spark: Any, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """A full plan (`collect_stats`, then `plan`) of a table of each size in `sizes` (data
    files of 1 MiB over 100 day partitions, metadata only), in this session once warm."""
    from compactor.config import TableConfig
    from compactor.plan import plan
    from compactor.stats import collect_stats

    out = []
    for files in sizes:
        table = f"local.sizes.files_{files}"
        spark.sql("CREATE NAMESPACE IF NOT EXISTS local.sizes")
        _create(spark, table)
        _append_metadata_only(spark, table, files=files, days=100, size=_MIB)
        config = TableConfig(table)

        def full_plan(table: str = table, config: TableConfig = config) -> object:
            stats = collect_stats(spark, table=table, small_file_bytes=config.small_file_bytes)
            return plan(stats, config, datetime.now(UTC))

        full_plan()  # its first read warms this table's metadata path up
        figures = _timed(spark, full_plan)
        print(f"plan of {files} files: {figures}", flush=True)
        out.append({"files": files, **figures})
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    parser.add_argument("--tables", type=int, default=200, help="tables in the lake")
    parser.add_argument("--debt", type=int, default=16, help="of them, tables with debt")
    parser.add_argument("--ingest", type=int, default=2, help="of them, tables with ingest")
    parser.add_argument("--big", type=int, default=3, help="of them, big healthy tables")
    parser.add_argument("--big-files", type=int, default=5000, help="data files of a big table")
    parser.add_argument("--ticks", type=int, default=4, help="ticks per compactor process")
    parser.add_argument("--max-concurrent", type=int, default=2)
    parser.add_argument(
        "--ingest-batches", type=int, default=20, help="micro-batches per ingest job and round"
    )
    parser.add_argument("--ingest-rows", type=int, default=200, help="events per micro-batch")
    parser.add_argument("--sample-s", type=float, default=5.0, help="debt sampling period")
    parser.add_argument(
        "--curve", default="3000,10000,30000", help="plan-time curve: data files, comma list"
    )
    parser.add_argument("--out", type=Path, default=Path("var/fleet"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with local_lake(args.out, app_name="lakelock-fleet-benchmark") as (spark, service):
        started = time.monotonic()
        names = build_lake(
            spark,
            tables=args.tables,
            debt=args.debt,
            big=args.big,
            big_files=args.big_files,
            ingest=args.ingest,
        )
        print(
            f"lake: {args.tables} tables ({len(names['debt'])} with debt, "
            f"{len(names['stream'])} with ingest, {len(names['big'])} big) built in "
            f"{time.monotonic() - started:.0f}s",
            flush=True,
        )
        costs = _big_costs(spark, names["big"][0]) if names["big"] else {}
        print(f"a big table ({args.big_files} files): {costs}", flush=True)
        r = Round(
            out=args.out,
            config=_config(args.out, service, args.max_concurrent),
            service=service,
            ticks=args.ticks,
            streams=Streams(args.out, names["stream"], service, args.out / "warehouse"),
            batches=args.ingest_batches,
            rows=args.ingest_rows,
            watched=[*names["debt"], *names["stream"]],
            sample_s=args.sample_s,
        )
        one = _round("one", 1, r, seed=1)
        for i, table in enumerate(names["debt"]):
            add_debt(spark, table, first_id=1000 + i)
        two = _round("two", 2, r, seed=2)
        tables = [t for kind in names.values() for t in kind]
        with LeaseClient(service.url, token=service.token("operator")) as client:
            checks = _check_two(client, tables, names["debt"], two)
        print(f"two processes, from the audit trail: {checks}", flush=True)
        curve = plan_curve(spark, [int(n) for n in args.curve.split(",") if n])
        results = {
            "tables": args.tables,
            "debt": args.debt,
            "ingest": args.ingest,
            "big": args.big,
            "big_files": args.big_files,
            "big_table_costs": costs,
            "one": one,
            "two": two,
            "checks": checks,
            "plan_curve": curve,
        }
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
        (args.out / "report.md").write_text(report(results))
        picture(results, args.out / "fleet.png")
        print(report(results))
        return 0 if _passed(results) else 1


def _passed(results: dict[str, Any]) -> bool:
    checks = results["checks"]
    batches = [b for name in ("one", "two") for b in results[name]["ingest"].values()]
    return (
        checks["tables_with_overlapping_claims_of_two_processes"] == 0
        and checks["tables_with_overlapping_maintenance_leases_of_two_processes"] == 0
        and checks["debt_tables_compacted_once_in_round_two"] == results["debt"]
        and all(b["exit"] == 0 and not b.get("failed") for b in batches)
    )


def picture(results: dict[str, Any], path: Path) -> None:
    """A PNG of the debt over time in each round: data files and delete files of the tables
    with debt or ingest, and when each compaction ended."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, name in zip(axes, ("one", "two"), strict=True):
        r = results[name]
        t, data, deletes = zip(*r["debt_over_time"], strict=True)
        ax.plot(t, data, label="data files", color="tab:blue")
        ax.plot(t, deletes, label="delete files", color="tab:red")
        ax.set_title(
            f"{r['processes']} compactor process(es): {r['compactions']} compactions in "
            f"{r['wall_s']:.0f} s",
            fontsize=9,
        )
        ax.set_xlabel("seconds into the round")
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"files of the {results['debt']} debt + {results['ingest']} ingest tables")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(results: dict[str, Any]) -> str:
    """The figures as a Markdown table, one row per process and tick."""
    lines = [
        f"{results['tables']} tables ({results['debt']} with debt, {results['ingest']} with "
        f"ingest, {results['big']} big of {results['big_files']} files)",
        "",
        "| round | process | tick | rank s | Spark jobs to rank | planned | compacted "
        "| left to the other | tick s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in ("one", "two"):
        for p, ticks in enumerate(results[name]["ticks"]):
            for t, tick in enumerate(ticks, 1):
                compacted = sum(1 for o in tick["outcomes"].values() if o == "compacted")
                lines.append(
                    f"| {name} | {p} | {t} | {tick['rank_s']:.2f} | {tick['rank_spark_jobs']} | "
                    f"{len(tick['queued'])} | {compacted} | {len(tick['left_to_others'])} | "
                    f"{tick['duration_s']:.1f} |"
                )
    costs = results["big_table_costs"]
    if costs:
        lines += [
            "",
            f"A big table: its summary in {costs['summary']['median_s']} s "
            f"({costs['summary']['spark_jobs_per_read']:g} Spark jobs), the full plan's read in "
            f"{costs['full_plan_read']['median_s']} s "
            f"({costs['full_plan_read']['spark_jobs_per_read']:g} Spark jobs).",
        ]
    lines += ["", "| round | s | compactions | per hour | ingest batches by outcome |"]
    lines.append("| --- | ---: | ---: | ---: | --- |")
    for name in ("one", "two"):
        r = results[name]
        lines.append(
            f"| {name} | {r['wall_s']} | {r['compactions']} | {r['compactions_per_hour']} | "
            f"{json.dumps(r['ingest'])} |"
        )
    lines += ["", "| data files | full plan s | Spark jobs |", "| ---: | ---: | ---: |"]
    lines += [
        f"| {c['files']:,} | {c['median_s']} | {c['spark_jobs_per_read']:g} |"
        for c in results["plan_curve"]
    ]
    lines += ["", "Two processes, from the audit trail: " + json.dumps(results["checks"]), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
