"""The rewrite of one hot partition as a compactor that follows the stream makes it: seconds,
p50 and p95 over `--rewrites` rewrites, and where the time goes.

    python -m benchmarks.hot_partition                       # 10 rewrites of 4 batches each
    python -m benchmarks.hot_partition --rewrites 5 --batches 4 --rows 200 --json out.json
    python -m benchmarks.hot_partition --shuffle-partitions 200   # Spark's default, to compare

One local[2] Spark session (the jobs' settings), a lakelock service on SQLite (demo.service), the
demo's click-event table (demo.generate, partitioned by dt and hr, merge-on-read, its commits
counting their files per partition). Before each rewrite, `--batches` micro-batches of `--rows`
rows land in one hour partition through the gate as the streaming job writes them (the job's
MERGE, its snapshot properties, its per-partition counts handed to the lease's release): half
the rows new keys, half updates of keys the partition holds, so each batch adds a data file and
a position-delete file. The service then says the partition is due, and the rewrite is
`compactor.run.follow_table` on it, in the follower's own session (compactor.follow): its
maintenance lease, `rewrite_data_files` over the partition's small files with the deletes
applied, `rewrite_position_delete_files` dropping the deletes left applying to nothing, the
release that reports the partition compacted. Every `--cold-every`th partition of the table is
a cold one beside it, a few files each, so planning filters, as in a table that has a past.

Per rewrite, from the run's own report and Spark's status store:

    total        follow_table, from its start to the release's answer
    before       reading the table's spec (no Spark job), the names read back, the steps
    lease        asking for the maintenance lease and its grant (no writer in flight here)
    renews       under the lease, outside the steps: a renew before each step, the release
    per step     rewrite_data_files and rewrite_position_delete_files, each split into
                 planning   from the step's start to its first Spark job's submission: the table
                            loaded, the filter converted, the files planned (driver only)
                 spark      from the first job's submission to the last job's completion
                 commit     from there to the step's end: the Iceberg commit and the result
    jobs, tasks  the Spark jobs and tasks of the rewrite
    files        data and delete files of the partition before and after (pyiceberg's count of
                 the current snapshot: an independent reader)

The first rewrite warms the JVM up and is left out of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from service.wire.figures import quantile

__all__ = ["Rewrite", "main", "measure"]

TABLE = "local.db.hot"
DAY = "2024-06-20"
HOT_HOUR = 13


@dataclass
class StepTime:
    procedure: str
    seconds: float
    planning_s: float
    spark_s: float
    commit_s: float
    jobs: int
    tasks: int


@dataclass
class Rewrite:
    """One rewrite of the hot partition."""

    total_s: float
    lease_s: float
    # from the grant to the release's answer: the steps, the renews before each, the release
    hold_s: float = 0.0
    steps: list[StepTime] = field(default_factory=list)
    files_before: tuple[int, int] = (0, 0)
    files_after: tuple[int, int] = (0, 0)
    outcome: str = ""
    compacted: list[str] = field(default_factory=list)


# -- Spark's view of its jobs ------------------------------------------------------------------


def _job_count(spark: Any) -> int:
    """How many jobs the driver has started so far (ids count up from 0)."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs())


def _jobs(spark: Any, first: int, last: int) -> list[tuple[float, float, int]]:
    """(submitted ms, completed ms, tasks) of jobs `first` .. `last - 1`, from the driver's
    status store (kept with the UI off too)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    out = []
    for job_id in range(first, last):
        data = store.job(job_id)
        submitted, completed = data.submissionTime(), data.completionTime()
        if submitted.isEmpty() or completed.isEmpty():
            continue
        start, end = submitted.get().getTime(), completed.get().getTime()
        out.append((float(start), float(end), int(data.numTasks())))
    return sorted(out)


def _timed_steps(spark: Any, seen: list[StepTime]) -> Callable[[], None]:
    """Time every step a compactor run runs, split by Spark's jobs (nothing else runs Spark
    meanwhile: the batches come before the rewrite); returns the undo. What the timing itself
    costs (a few status-store reads) counts outside the steps."""
    import compactor.groups as groups
    import compactor.procedure as procedure
    import compactor.unleased as unleased

    # the steps under a lease (compactor.groups) and those without one (compactor.unleased)
    # call the name they imported: replaced there, and put back by the undo
    callers = [vars(groups), vars(unleased)]
    real = procedure.run_step

    def timed(session: Any, *, table: str, step: Any, properties: Any) -> dict[str, Any]:
        job_ids = _job_count(spark)
        started = time.time() * 1000
        try:
            out: dict[str, Any] = real(session, table=table, step=step, properties=properties)
            return out
        finally:
            ended = time.time() * 1000
            jobs = _jobs(spark, job_ids, _job_count(spark))
            first = jobs[0][0] if jobs else ended
            last = max((j[1] for j in jobs), default=first)
            seen.append(
                StepTime(
                    procedure=step.procedure,
                    seconds=(ended - started) / 1000,
                    planning_s=(first - started) / 1000,
                    spark_s=(last - first) / 1000,
                    commit_s=(ended - last) / 1000,
                    jobs=len(jobs),
                    tasks=sum(j[2] for j in jobs),
                )
            )

    for names in callers:
        names["run_step"] = timed

    def undo() -> None:
        for names in callers:
            names["run_step"] = real

    return undo


# -- the writes ---------------------------------------------------------------------------------


class Writer:
    """Micro-batches into the hot partition through the gate, as the streaming job writes
    them: one MERGE each, its counts handed to the lease's release."""

    def __init__(self, spark: Any, client: Any, *, rows: int) -> None:
        from ingest_gate.gate import Gate

        self.spark = spark
        self.gate = Gate(client, holder="bench-ingest", ttl_s=30.0, poll_s=5.0)
        self.rows = rows
        self.keys: list[str] = []
        self.batch = 0
        self.query = uuid.uuid4().hex
        self.at = datetime(2024, 6, 20, HOT_HOUR, tzinfo=UTC)

    def batch_rows(self, hour: int, count: int, *, updates: bool) -> list[tuple[Any, ...]]:
        """`count` rows of one batch, each key once (a MERGE takes one change a key): with
        `updates`, every other row updates a key of the partition from an earlier batch."""
        out = []
        old = self.keys[-count:] if updates else []
        fresh = []
        for i in range(count):
            self.at += timedelta(milliseconds=1)
            if i % 2 and old:
                key = old.pop()
            else:
                key = uuid.uuid4().hex
                fresh.append(key)
            out.append(
                (key, i, f"p{i % 500:04d}", "view", self.at.replace(tzinfo=None), hour, i / 2)
            )
        if hour == HOT_HOUR:
            self.keys.extend(fresh)
        return out

    def write(self, hour: int, count: int, *, updates: bool = True) -> None:
        from ingest_gate.job.merge import merge_sql
        from ingest_gate.job.snapshots import (
            batch_properties,
            committed_snapshot,
            partition_counts,
            with_commit_properties,
        )
        from jobkit.partition import read_spec
        from jobkit.predicate import partition_predicate

        spark = self.spark
        self.batch += 1
        rows = self.batch_rows(hour, count, updates=updates)
        frame = spark.createDataFrame(
            rows,
            "event_id STRING, user_id BIGINT, product_id STRING, event_type STRING, "
            "event_time TIMESTAMP, hr INT, amount DOUBLE",
        ).selectExpr(
            "event_id",
            "user_id",
            "product_id",
            "event_type",
            "event_time",
            f"DATE '{DAY}' AS dt",
            "hr",
            "amount",
        )
        view = f"bench_batch_{self.batch}"
        frame.createOrReplaceTempView(view)
        spec = read_spec(spark, TABLE)
        values = [(datetime.fromisoformat(DAY).date(), hour)]
        name = f"dt={DAY}/hr={hour}"
        statement = merge_sql(
            target=TABLE,
            source=view,
            key_columns=("event_id", "dt", "hr"),
            event_time_column="event_time",
            columns=frame.columns,
            partition_filter=partition_predicate(spec, values, catalog="local"),
        )
        with self.gate.commit(TABLE, partitions=[name]) as gate_pass:
            lease_id = None if gate_pass.lease is None else gate_pass.lease.lease_id
            props = batch_properties(query_id=self.query, batch_id=self.batch, lease_id=lease_id)
            with_commit_properties(spark, props, lambda: spark.sql(statement))
            found = committed_snapshot(spark, TABLE, query_id=self.query, batch_id=self.batch)
            if found is not None:
                counts = partition_counts(found[1])
                if counts is not None:
                    gate_pass.wrote(counts)
        spark.catalog.dropTempView(view)


# -- the measurement ----------------------------------------------------------------------------


def partition_files(warehouse: Path, name: str) -> tuple[int, int]:
    """(data, delete) files of partition `name` now, read with pyiceberg (demo.health)."""
    from demo.health import Files, sample

    files = sample(warehouse, TABLE).partitions.get(name, Files())
    return files.data, files.deletes


def measure(
    *,
    rewrites: int,
    batches: int,
    rows: int,
    cold: int,
    workdir: Path,
    shuffle_partitions: int | None = None,
    on_line: Callable[[str], None] = print,
) -> list[Rewrite]:
    """Build the table, then `rewrites` times: `batches` batches into the hot partition, the
    rewrite; each rewrite's figures (the first is the warm-up)."""
    from compactor.config import LeaseConfig, TableConfig
    from compactor.follow import follow_session
    from compactor.report import Outcome
    from compactor.run import follow_table
    from demo.generate import create_events_table
    from demo.service import LocalService
    from ingest_gate.job.table import ensure_partition_summaries
    from jobkit.spark import CatalogConfig, build_session
    from service.client import LeaseClient

    warehouse = workdir / "warehouse"
    service = LocalService.start(
        db_url=f"sqlite:///{(workdir / 'lakelock.db').resolve()}",
        log_path=workdir / "service.log",
        # the hot partition is due after exactly its batches (the cold ones write 3 each)
        LAKELOCK_DUE_DATA_FILES=str(batches),
        LAKELOCK_DUE_DELETE_FILES=str(batches),
    )
    spark = build_session(
        CatalogConfig(warehouse=str(warehouse)),
        app_name="lakelock-hot-partition",
        master="local[2]",
    )
    spark.sparkContext.setLogLevel("ERROR")
    out: list[Rewrite] = []
    try:
        client = LeaseClient(service.url, token=service.token("job"))
        create_events_table(spark, TABLE)
        ensure_partition_summaries(spark, TABLE)
        writer = Writer(spark, client, rows=rows)
        for hour in range(cold):
            if hour != HOT_HOUR:
                for _ in range(3):
                    writer.write(hour, rows, updates=False)
        session = follow_session(spark)
        if shuffle_partitions is not None:
            session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        config = TableConfig(TABLE, lease=LeaseConfig(ttl=timedelta(seconds=30)))
        name = f"dt={DAY}/hr={HOT_HOUR}"
        for n in range(rewrites + 1):
            for _ in range(batches):
                writer.write(HOT_HOUR, rows)
            due = {d.partition: (d.data_files, d.delete_files) for d in _due(client)}
            if name not in due:
                raise RuntimeError(f"the service does not say {name} is due: {due}")
            before = partition_files(warehouse, name)
            steps: list[StepTime] = []
            undo = _timed_steps(spark, steps)
            try:
                report = follow_table(
                    session, client=client, config=config, due={name: due[name]}, holder="bench"
                )
            finally:
                undo()
            if report.outcome is not Outcome.COMPACTED:
                raise RuntimeError(f"the rewrite did not compact: {report.as_dict()}")
            rewrite = Rewrite(
                total_s=report.duration_s or 0.0,
                lease_s=report.lease_wait_s or 0.0,
                hold_s=report.hold_s or 0.0,
                steps=steps,
                files_before=before,
                files_after=partition_files(warehouse, name),
                outcome=str(report.outcome),
                compacted=list(report.compacted),
            )
            if n:
                out.append(rewrite)
            on_line(_line(n, rewrite))
    finally:
        spark.stop()
        service.stop()
    return out


def _due(client: Any) -> list[Any]:
    return list(client.due([TABLE], holder="bench", wait_s=5.0))


def _line(n: int, r: Rewrite) -> str:
    steps = ", ".join(
        f"{s.procedure} {s.seconds:.2f}s (plan {s.planning_s:.2f} / spark {s.spark_s:.2f} / "
        f"commit {s.commit_s:.2f}; {s.jobs} jobs, {s.tasks} tasks)"
        for s in r.steps
    )
    label = "warm-up" if n == 0 else f"rewrite {n}"
    return (
        f"  {label}: {r.total_s:.2f}s, files {r.files_before[0]}+{r.files_before[1]} -> "
        f"{r.files_after[0]}+{r.files_after[1]}; lease {r.lease_s:.3f}s; {steps}"
    )


def summarise(rewrites: Sequence[Rewrite]) -> dict[str, Any]:
    """p50 and p95 of each figure over the rewrites."""

    def both(values: list[float]) -> dict[str, float]:
        return {
            "p50": quantile(values, 0.5, ndigits=3),
            "p95": quantile(values, 0.95, ndigits=3),
            "mean": round(statistics.mean(values), 3),
        }

    out: dict[str, Any] = {
        "rewrites": len(rewrites),
        "total_s": both([r.total_s for r in rewrites]),
        "lease_s": both([r.lease_s for r in rewrites]),
    }
    procedures = dict.fromkeys(s.procedure for r in rewrites for s in r.steps)
    for procedure in procedures:
        steps = [s for r in rewrites for s in r.steps if s.procedure == procedure]
        out[procedure] = {
            part: both([getattr(s, part) for s in steps])
            for part in ("seconds", "planning_s", "spark_s", "commit_s")
        } | {
            "jobs": both([float(s.jobs) for s in steps]),
            "tasks": both([float(s.tasks) for s in steps]),
        }
    in_steps = [sum(s.seconds for s in r.steps) for r in rewrites]
    # before the lease: the table's spec read, the names read back, the steps made
    out["before_lease_s"] = both([r.total_s - r.lease_s - r.hold_s for r in rewrites])
    # under the lease, not in a step: a renew before each step, the release
    out["renews_release_s"] = both([r.hold_s - x for r, x in zip(rewrites, in_steps, strict=True)])
    return out


def render(summary: dict[str, Any]) -> str:
    total, lease = summary["total_s"], summary["lease_s"]
    lines = [
        f"{summary['rewrites']} rewrites of one hot partition:",
        f"  total        p50 {total['p50']:.2f}s  p95 {total['p95']:.2f}s",
        f"  lease wait   p50 {lease['p50']:.3f}s  p95 {lease['p95']:.3f}s",
        f"  before the lease (spec, names, steps) p50 {summary['before_lease_s']['p50']:.3f}s",
        f"  renews before the steps and the release p50 {summary['renews_release_s']['p50']:.3f}s",
    ]
    for procedure in ("rewrite_data_files", "rewrite_position_delete_files"):
        step = summary.get(procedure)
        if step is None:
            continue
        lines.append(
            f"  {procedure}: p50 {step['seconds']['p50']:.2f}s p95 {step['seconds']['p95']:.2f}s"
            f" = planning {step['planning_s']['p50']:.2f} + spark {step['spark_s']['p50']:.2f}"
            f" + commit {step['commit_s']['p50']:.2f} (p50s); {step['jobs']['p50']:.0f} jobs, "
            f"{step['tasks']['p50']:.0f} tasks"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    summary, _, rest = (__doc__ or "").partition("\n")
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.hot_partition",
        description=summary,
        epilog=rest,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rewrites", type=int, default=10, help="measured rewrites")
    parser.add_argument("--batches", type=int, default=4, help="batches before each rewrite")
    parser.add_argument("--rows", type=int, default=400, help="rows per batch")
    parser.add_argument(
        "--cold", type=int, default=12, help="hours of the day with a cold partition beside"
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        help="the follower's session's spark.sql.shuffle.partitions (default: the follower's, "
        "1), to see what it saves",
    )
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("rewrites", "batches", "rows"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1")
    if not 0 <= args.cold <= 24:
        raise SystemExit("--cold must be within 0..24")
    with tempfile.TemporaryDirectory(prefix="lakelock-hot-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rewrites = measure(
            rewrites=args.rewrites,
            batches=args.batches,
            rows=args.rows,
            cold=args.cold,
            workdir=workdir,
            shuffle_partitions=args.shuffle_partitions,
        )
    summary = summarise(rewrites)
    print(render(summary))
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "rewrites": [asdict(r) for r in rewrites]}, indent=2)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
