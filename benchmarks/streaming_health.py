"""The table's health while the stream runs: files per partition over time, what ingest pays,
what the compactor holds, and what readers pay, in three modes and two change formats.

    python -m benchmarks.streaming_health                      # 10 min per run, 6 runs
    python -m benchmarks.streaming_health --duration-s 240 --formats json --out var/sh-small
    python -m benchmarks.streaming_health --formats json --modes partitions \
        --plan hot_window=2m --out var/sh-hot       # a plan setting over the demo's
    python -m benchmarks.streaming_health --formats json --modes table,partitions \
        --update-window-h 3 --out var/sh-few        # batches that touch few partitions
    python -m benchmarks.streaming_health --formats json --modes partitions \
        --compactor follow,timer --rate 400 --out var/sh-follow  # the follower against the timer
    python -m benchmarks.streaming_health --writer flink      # a Flink job, 10 min per run, 2 runs
    python -m benchmarks.streaming_health --writer flink --modes partitions --compactor follow,timer
    python -m benchmarks.streaming_health --writer flink --modes partitions --trino
    python -m benchmarks.streaming_health --formats json --modes partitions --storage s3 --trino

Each run is the demo's pipeline (demo.pipeline: generator, gated streaming upsert, compactor, a
lakelock service on SQLite) for `--duration-s`, with the compactor of `--compactor`: `follow`
(the default: it long-polls the service for the partitions the commits made due and compacts
them at once, the full plan every `--full-plan-every-s`), `timer` (a run every
`--compact-every-s`, the cycle before it), or both, one run each, to compare; in one of:

    none         no compactor at all: the bare stream, the limit of what readers would pay
    table        the compactor with whole-table leases (`lease.scope = "table"`)
    partitions   the compactor with partition leases (the default)

for each format of `--formats`: `json` (click events with duplicates and late updates),
`debezium` (a MySQL table's change events: updates, deletes, key changes) and `canal` (the same
changes as canal-json; not in the default run). Measured:

    table        every `--sample-every-s` with pyiceberg from the metadata (demo.health): data
                 and delete files per partition, in total, bytes
    ingest       gate wait and backpressure seconds (and their share of the run), MERGE time
                 (p50, p95), gaps between commits (p50, max), failed batches
    compactor    each run's outcome and hold, the longest hold of one partition
    readers      at 30%, 60% and 90% of the stream's part of the run (from when the service,
                 Spark and the table are up to the end; about minutes 3, 6, 9): the current snapshot
                 is copied with CREATE TABLE ... AS SELECT (a compacted copy: a file or two per
                 partition), then three queries run on the snapshot and on the copy with Spark
                 (one warm-up, then the median of 3): a full count (on the copy, without delete
                 files, Iceberg answers it from metadata: the real limit of a compacted table),
                 a distinct count of keys (a scan on both) and a lookup of 100 keys. The ratio
                 is what the stream's files cost a reader. Reported beside them, not a goal:
                 the count with that metadata answer turned off on both (`count_read`: what
                 bounds the count's ratio). The queries share the two cores with the jobs, as
                 a reader on the same cluster would

With `--storage s3` the ingest writer's table is the demo's on S3 (`bin/run --storage s3`: the
project's S3 server, the catalog front as the jobs' catalog), the readers' copies in a front of
their own on the same server; with `--trino` too, Trino (demo.trino, its Iceberg connector on
the fronts) runs the readers' queries on the same snapshot and copy, and its count and lookup
count in the readers' goal. The service's due counts from the environment (`LAKELOCK_DUE_*`)
are recorded with each run and named in the report.

Goals (issue 40), after a warm-up of two compactor runs: the worst partition at most 12 data
files and 12 delete files at every sample; files per partition flat from the middle third of the
run to the last (at most 1.1 times); no failed batch; ingest wait plus backpressure at most 5%
of the run; queries (count, lookup) within 2x of the compacted copy. `report.md` says which
were met, per run. The table's partitions grow with event time (a new hour every 18 s of the
run at 200 events/s), so beside the total, the files per partition are compared between the two
thirds.

With `--writer flink` the stream is a Flink SQL upsert job instead (flink_writer, PyFlink; see
benchmarks.flink_stream), writing through lakelock's catalog front (the service on SQLite) while
the compactor compacts the same table through it: a file of `--rate` upserts lands every
second, over keys that grow with event time as the click events' do (a new hour every 3,600
upserts), and the job commits at each checkpoint (`--checkpoint-every-s`, 2 s). Its modes are
`none` and `partitions` (`table` compares the ingest job's whole-table commit leases; the Flink
job takes none); `--formats`, `--events` and `--update-window-h` are the ingest writer's and
refused. The table, the compactor and the readers are measured as above (the readers' copies
go to a front of their own, so the job's front counts only the job's and the compactor's
commits); with `--trino`, Trino (demo.trino, its Iceberg connector on the two fronts) runs the
readers' three queries too, on the same snapshot and copy (`FOR VERSION AS OF`), and its count
and lookup count in the readers' goal; instead of the ingest figures:

    flink        the job's restarts and final status (it is stopped once it took every file),
                 its commits and their gaps, read from the snapshot summaries; rows/s (rows
                 landed over the first landing to the commit of the last); the seconds from a
                 file's landing to the commit that took it (p50, p95, max): there is no gate,
                 so this is what the job waits; the front's commits by kind and its refusals
                 (the service's /metrics); the table, read by Iceberg's reader in Spark, holds
                 the last row landed for every key

and in place of the goals of no failed batch and of the ingest wait: no restart, the job
stopped (not failed), no commit refused or held back by the front.

Writes results.json (each run with its `writer`), report.md (a section per format, or for the
Flink writer, naming the writer) and streaming_health.png (files over time, a panel per
section, a line per mode) into `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.flink_stream import COPIES, FlinkStream, FlinkStreamResult, reader_trino
from compactor.report import RunReport
from demo.flink import TABLE
from demo.health import Health
from demo.lake import CATALOG, STORAGES, Lake
from demo.options import PipelineOptions
from demo.pipeline import Pipeline
from demo.result import PipelineResult
from demo.service import LocalService
from demo.trino import TrinoServer
from demo.trino import install as install_trino
from ingest_gate.job.table import WRITE_MODES, require_format_version
from jobkit.spark import CatalogConfig, error_message
from service.wire.figures import quantile

__all__ = [
    "COMPACTORS",
    "FLINK_MODES",
    "FORMATS",
    "KNOWN_FORMATS",
    "MODES",
    "Reader",
    "figures",
    "flink_figures",
    "goals",
    "main",
    "run_flink",
    "run_one",
]

MODES = ("none", "table", "partitions")
FLINK_MODES = ("none", "partitions")
WRITER_NAMES = ("ingest", "flink")
COMPACTORS = ("follow", "timer")
FORMATS = ("json", "debezium")  # the default run
KNOWN_FORMATS = (*FORMATS, "canal")
QUERY_POINTS = (0.3, 0.6, 0.9)
S3_COPIES = "copies"
"""With `--storage s3`, the Spark and Trino catalog of the readers' copies (_Copies)."""
QUERIES = {
    "count": "SELECT count(*) FROM {t}",
    "scan": "SELECT count(DISTINCT event_id) FROM {t}",
    "lookup": "SELECT count(*) FROM {t} WHERE event_id IN ({keys})",
}
"""The readers' queries by name, on a table `t` (`keys`: the lookup's, listed)."""
LOOKUP_KEYS = 100
PUSH_DOWN = "aggregate-push-down-enabled"
"""Iceberg's Spark read option that lets a count be answered from the manifests' row counts
(on a table without delete files); turned off for the count that reads (`count_read`)."""
GOALS = {
    "partition_peak_files": 12,
    "held_share": 0.05,
    "query_ratio": 2.0,
    "growth_per_partition": 1.1,
}
# the queries the readers' goal is on (the scan is reported, not a goal), Spark's and Trino's
GOAL_QUERIES = ("count", "lookup", "trino_count", "trino_lookup")


class Reader:
    """A reader beside the jobs: at each share of the stream's window in `points`, copies the
    current snapshot and times the same queries on the snapshot and on the copy. The copies go
    into the namespace `scratch` (made when missing, in a catalog of the reader's own) or,
    without one, beside the table."""

    def __init__(self, points: Sequence[float], *, scratch: str | None = None) -> None:
        self.points = points
        self.scratch = scratch
        self.results: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def read(
        self,
        spark: Any,
        table: str,
        window: tuple[float, float],
        stop: threading.Event,
        committed: Callable[[], bool],
        *,
        trino: TrinoServer | None = None,
    ) -> None:
        """Read `table` at each point of `window` (the stream's part of the run, on
        time.monotonic(): from when the service, Spark and the table are up to the end) until
        `stop`; a point waits for the stream's first commit (`committed`): a copy of a table
        without a commit says nothing. With `trino`, its catalogs named as Spark's, Trino runs
        the same queries on the same snapshot and copy."""
        began, until = window
        for n, point in enumerate(self.points):
            if stop.wait(max(0.0, began + point * (until - began) - time.monotonic())):
                return
            while not committed():
                if stop.wait(0.5):
                    return
            try:
                self.results.append({"at_share": point, **self._measure(spark, trino, table, n)})
            except Exception as exc:  # a reader's failure is a figure, not the benchmark's end
                self.errors.append(f"at {point:.0%}: {error_message(exc)}")

    def _measure(self, spark: Any, trino: TrinoServer | None, table: str, n: int) -> dict[str, Any]:
        newest = spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()
        if newest is None:
            return {"snapshot_id": None}
        snapshot = newest["snapshot_id"]
        namespace, name = table.rsplit(".", 1)
        if self.scratch:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.scratch}")
        copy = f"{self.scratch or namespace}.{name}_copy_{n}"
        spark.sql(f"DROP TABLE IF EXISTS {copy} PURGE")  # its files too
        spark.sql(
            f"CREATE TABLE {copy} USING iceberg PARTITIONED BY (dt, hr) "
            f"AS SELECT * FROM {table} VERSION AS OF {snapshot}"
        )
        try:
            keys = [
                r["event_id"]
                for r in spark.sql(
                    f"SELECT event_id FROM {copy} ORDER BY hash(event_id) LIMIT {LOOKUP_KEYS}"
                ).collect()
            ]
            files = spark.sql(f"SELECT count(*) AS n FROM {table}.files").first()["n"]
            copy_files = spark.sql(f"SELECT count(*) AS n FROM {copy}.files").first()["n"]
            out = {"snapshot_id": snapshot, "files": files, "copy_files": copy_files}
            out |= _timed(
                "",
                lambda q: spark.sql(q).collect(),
                f"{table} VERSION AS OF {snapshot}",
                copy,
                keys,
            )
            if trino is not None:
                live = f"{table} FOR VERSION AS OF {snapshot}"
                out |= _timed("trino_", trino.query, live, copy, keys)
            return out | _count_read(spark, table, snapshot, copy)  # not a goal: the last
        finally:
            spark.sql(f"DROP TABLE IF EXISTS {copy} PURGE")  # its files too


def _timed(
    engine: str, run: Callable[[str], object], live: str, copy: str, keys: Sequence[Any]
) -> dict[str, Any]:
    """Each of QUERIES run by `run` on `live` (the snapshot, in the engine's words) and on
    `copy`: the medians and their ratio, keyed `{engine}{query}_s`, `_copy_s`, `_ratio`."""
    listed = ", ".join(repr(k) for k in keys)
    out: dict[str, Any] = {}
    for name, query in QUERIES.items():
        streamed = _median_s(lambda q=query: run(q.format(t=live, keys=listed)))
        compacted = _median_s(lambda q=query: run(q.format(t=copy, keys=listed)))
        out |= _against_copy(engine + name, streamed, compacted)
    return out


def _count_read(spark: Any, table: str, snapshot: int, copy: str) -> dict[str, Any]:
    """Spark's count on the snapshot and on the copy with Iceberg's answer from the manifests'
    row counts turned off (the read option PUSH_DOWN, for these reads alone): both read rows,
    as the live table's count does anyway while it has a delete file. The count's ratio less
    what the copy's metadata answer saves: what the stream's files cost a count that reads."""

    def count(name: str, **options: str) -> Callable[[], object]:
        read = spark.read.option(PUSH_DOWN, "false").options(**options)
        return lambda: read.table(name).count()

    streamed = _median_s(count(table, **{"snapshot-id": str(snapshot)}))
    return _against_copy("count_read", streamed, _median_s(count(copy)))


def _against_copy(key: str, streamed: float, compacted: float) -> dict[str, Any]:
    """A query's median seconds on the live snapshot and on the copy, and their ratio, keyed
    `{key}_s`, `{key}_copy_s`, `{key}_ratio`."""
    return {
        f"{key}_s": round(streamed, 3),
        f"{key}_copy_s": round(compacted, 3),
        f"{key}_ratio": round(streamed / compacted, 2) if compacted else None,
    }


def _read_beside(
    reader: Reader, pipeline: Pipeline, copies: _Copies | None, *, trino: bool = False
) -> threading.Thread:
    """`reader` in a thread beside the pipeline's jobs, from when its stream starts; a run by
    counts ends only once the reader is done (it needs the stream running). With `trino`, a
    Trino server on the pipeline's front and on `copies` (the table on S3) runs the queries
    too; one that does not start is the reader's error."""
    done = threading.Event()
    pipeline.waits_for.append(done)

    def committed() -> bool:
        return any(b.record.outcome != "empty" for b in pipeline.batches)

    def read() -> None:
        try:
            while not pipeline.streaming_started.wait(0.5):
                if pipeline.stop.is_set():
                    return
            assert pipeline.streaming is not None
            with contextlib.ExitStack() as stack:
                server = None
                if trino and copies is not None:
                    try:
                        server = stack.enter_context(_trino_on(pipeline, copies))
                    except Exception as exc:  # the run goes on; its report says why
                        reader.errors.append(f"Trino did not start: {error_message(exc)}")
                        return
                window, table = pipeline.streaming, pipeline.options.table
                reader.read(pipeline.spark, table, window, pipeline.stop, committed, trino=server)
        finally:
            done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


class _Copies:
    """With `--storage s3`, where the readers' copies go: a front of their own (a second
    service on SQLite in `workdir`, its warehouse beside the table's on the same S3 server),
    as the Flink writer's copies, so that the table's front sees only the jobs' commits and no
    token of it may drop a table. Started once the pipeline's lake is up (`catalogs`, the
    pipeline's more_catalogs: the copies' Spark catalog, with this front's operator token,
    which drops them); `stop` after the run."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.front: LocalService | None = None

    def catalogs(self, lake: Lake, service: LocalService | None) -> list[CatalogConfig]:
        self.front = LocalService.start(
            db_url=f"sqlite:///{(self.workdir / 'lakelock.db').resolve()}",
            log_path=self.workdir / "service.log",
            **lake.service_env(folder=S3_COPIES),
        )
        return [lake.front_catalog(self.front, S3_COPIES, role="operator", folder=S3_COPIES)]

    def stop(self) -> None:
        if self.front is not None:
            self.front.stop()


def _trino_on(pipeline: Pipeline, copies: _Copies) -> TrinoServer:
    """A Trino server reading the pipeline's table through its front and the copies through
    theirs, each catalog named as in Spark."""
    catalogs = {
        CATALOG: pipeline.lake.trino_catalog(pipeline.service),
        S3_COPIES: pipeline.lake.trino_catalog(copies.front),
    }
    return reader_trino(catalogs, pipeline.options.workdir / "trino")


def _median_s(query: Callable[[], object], runs: int = 3) -> float:
    query()  # warm-up: metadata loaded, code generated
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        query()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run_one(
    args: argparse.Namespace, fmt: str, mode: str, compactor: str = "follow"
) -> dict[str, Any]:
    """One run of the pipeline in `mode` for `fmt` with `compactor`; its figures."""
    length = f"{args.events} events" if args.events else f"{args.duration_s:g}s"
    print(f"== {fmt} / {_label(mode, compactor)}: {length}", flush=True)
    window = args.update_window_h
    options = _options(
        args,
        mode,
        compactor,
        f"{fmt}-{mode}",
        format=fmt,
        update_window=timedelta(hours=window) if window is not None else None,
        format_version=args.format_version,
        write_mode=args.write_mode,
        storage=args.storage,
    )
    copies = _Copies(options.workdir / S3_COPIES) if args.storage == "s3" and args.queries else None
    pipeline = Pipeline(
        options,
        on_progress=_progress,
        more_catalogs=copies.catalogs if copies else lambda lake, service: (),
    )
    scratch = f"{S3_COPIES}.db" if copies is not None else None
    reader = Reader(QUERY_POINTS if args.queries else (), scratch=scratch)
    thread = _read_beside(reader, pipeline, copies, trino=args.trino)
    try:
        result = pipeline.run()
        thread.join(timeout=60)
    finally:
        if copies is not None:
            copies.stop()
    return {
        **figures(fmt, mode, result, reader, compactor=None if mode == "none" else compactor),
        "plan": dict(args.plan),
        "update_window_h": args.update_window_h,
        "format_version": args.format_version,
        "write_mode": args.write_mode,
        "storage": args.storage,
        "due_settings": _due_settings(),
    }


def _due_settings() -> dict[str, str]:
    """The due counts the run's services take from the environment (`LAKELOCK_DUE_*`, e.g.
    LAKELOCK_DUE_DELETE_FILES=1), recorded with the run: its command line does not show them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("LAKELOCK_DUE_")}


def run_flink(args: argparse.Namespace, mode: str, compactor: str = "follow") -> dict[str, Any]:
    """One run of the Flink upsert job through the catalog front in `mode` with `compactor`
    (benchmarks.flink_stream); its figures."""
    print(f"== flink / {_label(mode, compactor)}: {args.duration_s:g}s", flush=True)
    options = _options(args, mode, compactor, f"flink-{mode}", table=TABLE)
    reader = Reader(QUERY_POINTS if args.queries else (), scratch=COPIES)
    stream = FlinkStream(
        options,
        checkpoint_every_s=args.checkpoint_every_s,
        readers=[reader.read],
        trino=args.trino,
        on_progress=_progress,
    )
    result = stream.run()
    return {
        **flink_figures(mode, result, reader, compactor=None if mode == "none" else compactor),
        "plan": dict(args.plan),
        "checkpoint_every_s": args.checkpoint_every_s,
    }


def _options(
    args: argparse.Namespace, mode: str, compactor: str, folder: str, **extra: Any
) -> PipelineOptions:
    """The run's options from the command line, `extra` over them: the pipeline's, of which
    the Flink writer takes the stream's and the compactor's (benchmarks.flink_stream); the
    run's folder `folder` in `--out` (the compactor added, with one)."""
    return PipelineOptions(
        duration_s=args.duration_s,
        events=args.events,
        compactions=args.compactions if mode != "none" else 0,
        workdir=args.out / (folder if mode == "none" else f"{folder}-{compactor}"),
        rate=args.rate,
        compactor=compactor,
        compact_every_s=args.compact_every_s,
        full_plan_every_s=args.full_plan_every_s,
        seed=args.seed,
        lease_scope="table" if mode == "table" else "partitions",
        compactions_on=mode != "none",
        health_every_s=args.sample_every_s,
        max_hold_s=300.0,
        plan=dict(args.plan),
        **extra,
    )


def _label(mode: str, compactor: str) -> str:
    return mode if mode == "none" else f"{mode} / {compactor}"


def _progress(line: str) -> None:
    print("  " + line, flush=True)


def figures(
    fmt: str,
    mode: str,
    result: PipelineResult,
    reader: Reader,
    *,
    compactor: str | None = "follow",
) -> dict[str, Any]:
    """What the ingest writer's run measured (see the module docstring)."""
    batches = [b for b in result.batches if b.record.outcome != "empty"]
    merges = [b.record.commit_s for b in batches]
    ends = sorted(b.ended_at for b in batches)
    held = result.ingest_held()
    out: dict[str, Any] = {
        **_run("ingest", fmt, mode, compactor, result.duration_s),
        "batches": len(result.batches),
        "failed_batches": len(result.failed_batches),
        **held,
        "held_share": round(held["ingest_wait_share"], 4),
        "merge_p50_s": quantile(merges, 0.5, ndigits=3),
        "merge_p95_s": quantile(merges, 0.95, ndigits=3),
        **_gaps([b - a for a, b in itertools.pairwise(ends)]),
        **_table_figures(result.health, result.warm(), result.compactions, reader),
        "rows_correct": not result.verify(),
    }
    out["goals_missed"] = goals(out)
    return out


def flink_figures(
    mode: str,
    result: FlinkStreamResult,
    reader: Reader,
    *,
    compactor: str | None = "follow",
) -> dict[str, Any]:
    """What the Flink writer's run measured (see the module docstring): the table's, the
    compactor's and the readers' figures as the ingest writer's; the job's own instead of
    the ingest job's."""
    lags = result.lags()
    out: dict[str, Any] = {
        **_run("flink", None, mode, compactor, result.duration_s),
        "files_landed": len(result.landed),
        "rows_landed": result.rows,
        "rows_per_s": result.rows_per_s(),
        "flink_commits": len(result.commits),
        "flink_restarts": int(result.job["restarts"]),
        "flink_status": result.job["status"],
        "commit_lag_p50_s": quantile(lags, 0.5, ndigits=3),
        "commit_lag_p95_s": quantile(lags, 0.95, ndigits=3),
        "commit_lag_max_s": round(max(lags), 2) if lags else None,
        **_gaps(result.gaps()),
        "front_commits": result.front_commits,
        "front_refusals": result.front_refusals,
        **_table_figures(result.health, result.warm(), result.compactions, reader),
        "rows_correct": not result.table_problems,
        "table_problems": result.table_problems,
    }
    out["goals_missed"] = goals(out)
    return out


def _run(
    writer: str, fmt: str | None, mode: str, compactor: str | None, seconds: float
) -> dict[str, Any]:
    """Which run: the writer, its format (the ingest writer's), the mode, the compactor; how
    long it ran."""
    return {
        "writer": writer,
        "format": fmt,
        "mode": mode,
        "compactor": compactor,
        "ran_s": round(seconds, 1),
    }


def _gaps(gaps: list[float]) -> dict[str, Any]:
    """The seconds between the writer's commits: median and longest."""
    return {
        "commit_gap_p50_s": quantile(gaps, 0.5, ndigits=3),
        "commit_gap_max_s": round(max(gaps), 2) if gaps else None,
    }


def _table_figures(
    samples: list[Health], warm: list[Health], compactions: list[RunReport], reader: Reader
) -> dict[str, Any]:
    """The figures of the table, the compactor and the readers, whichever writer wrote."""
    origin = samples[0].at if samples else 0.0
    holds = [v for r in compactions for v in r.partition_hold_s.values()]
    follow = [r for r in compactions if r.mode == "follow"]
    follow_s = [r.duration_s or 0.0 for r in follow if r.outcome == "compacted"]
    return {
        "compactor_runs": len(compactions),
        "compactor_outcomes": _counts(str(r.outcome) for r in compactions),
        "compactor_hold_s": [round(r.hold_s or 0.0, 2) for r in compactions],
        "follow_runs": len(follow),
        "follow_run_p50_s": quantile(follow_s, 0.5, ndigits=3),
        "follow_run_p95_s": quantile(follow_s, 0.95, ndigits=3),
        "partition_hold_max_s": round(max(holds), 2) if holds else None,
        "backpressure_runs": sum(bool(r.backpressure) for r in compactions),
        **_partition_figures(warm),
        **_growth(samples),
        "queries": reader.results,
        "query_errors": reader.errors,
        "query_ratio_max": max(
            (q[f"{k}_ratio"] for q in reader.results for k in GOAL_QUERIES if q.get(f"{k}_ratio")),
            default=None,
        ),
        "samples": [
            [round(h.at - origin, 1), h.data_files, h.delete_files, h.bytes] for h in samples
        ],
        # per partition at each sample: [seconds, {partition: [data files, delete files]}]
        "partition_samples": [
            [round(h.at - origin, 1), {n: [f.data, f.deletes] for n, f in h.partitions.items()}]
            for h in samples
        ],
    }


def _counts(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _partition_figures(warm: list[Health]) -> dict[str, Any]:
    """Per partition, its mean and peak data and delete files over the warm samples; the
    worst partition of each."""
    if not warm:
        return {"warm_samples": 0}
    data: dict[str, list[int]] = {}
    deletes: dict[str, list[int]] = {}
    for h in warm:
        for name, f in h.partitions.items():
            data.setdefault(name, []).append(f.data)
            deletes.setdefault(name, []).append(f.deletes)
    return {
        "warm_samples": len(warm),
        "partition_mean_data_max": round(max(statistics.mean(v) for v in data.values()), 1),
        "partition_peak_data": max(max(v) for v in data.values()),
        "partition_mean_deletes_max": round(
            max((statistics.mean(v) for v in deletes.values()), default=0), 1
        ),
        "partition_peak_deletes": max((max(v) for v in deletes.values()), default=0),
        "table_files_peak": max(h.data_files + h.delete_files for h in warm),
    }


def _growth(samples: list[Health]) -> dict[str, Any]:
    """Mean total files (data plus delete) in the middle third and the last third of the run,
    and the same per partition (the partitions grow with event time)."""
    third = len(samples) // 3
    if third == 0:
        return {
            "files_middle_third": None,
            "files_last_third": None,
            "growth_last_third": None,
            "per_partition_middle_third": None,
            "per_partition_last_third": None,
            "growth_per_partition": None,
        }
    middle, last = samples[third : 2 * third], samples[2 * third :]

    def files(hs: list[Health]) -> float:
        return statistics.mean(h.data_files + h.delete_files for h in hs)

    def per_partition(hs: list[Health]) -> float | None:
        each = [(h.data_files + h.delete_files) / len(h.partitions) for h in hs if h.partitions]
        return round(statistics.mean(each), 2) if each else None

    middle_each, last_each = per_partition(middle), per_partition(last)
    return {
        "files_middle_third": round(files(middle), 1),
        "files_last_third": round(files(last), 1),
        "growth_last_third": round(files(last) / files(middle), 2) if files(middle) else None,
        "per_partition_middle_third": middle_each,
        "per_partition_last_third": last_each,
        "growth_per_partition": round(last_each / middle_each, 2)
        if middle_each and last_each is not None
        else None,
    }


def goals(f: dict[str, Any]) -> list[str]:
    """The goals of the module docstring this run missed (none for the `none` mode's
    partition and query goals: it is the baseline)."""
    missed = _flink_goals(f) if f.get("writer") == "flink" else _ingest_goals(f)
    if f["mode"] == "none":
        return missed
    checks = (
        ("partition_peak_data", "partition_peak_files", "peak data files of a partition"),
        ("partition_peak_deletes", "partition_peak_files", "peak delete files of a partition"),
        (
            "growth_per_partition",
            "growth_per_partition",
            "files per partition, last third over middle third",
        ),
        ("query_ratio_max", "query_ratio", "count or lookup time over the compacted copy's"),
    )
    for key, goal, what in checks:
        value = f.get(key)
        if value is not None and value > GOALS[goal]:
            missed.append(f"{what} {value} (goal <= {GOALS[goal]})")
    return missed


def _ingest_goals(f: dict[str, Any]) -> list[str]:
    """The ingest writer's goals missed: no failed batch, its wait a small share of the run."""
    missed: list[str] = []
    if f["failed_batches"]:
        missed.append(f"{f['failed_batches']} failed batches")
    share = f["ingest_wait_share"]
    if share > GOALS["held_share"]:
        missed.append(f"ingest wait {share:.1%} of the run (goal <= 5%)")
    return missed


def _flink_goals(f: dict[str, Any]) -> list[str]:
    """The Flink writer's goals missed: the job never restarted (a refused commit restarts
    it: its failed batch) and ran until stopped, the front refused none of its commits."""
    missed: list[str] = []
    if f["flink_restarts"]:
        missed.append(f"{f['flink_restarts']} Flink job restarts")
    if f["flink_status"] != "CANCELED":
        missed.append(f"the Flink job ended {f['flink_status']}, not stopped")
    refused = sum(f["front_refusals"].values())
    if refused:
        missed.append(f"{refused} commits refused or held back by the front")
    return missed


Row = tuple[str, Callable[[dict[str, Any]], str]]

INGEST_ROWS: tuple[Row, ...] = (
    ("batches (failed)", lambda r: f"{r['batches']} ({r['failed_batches']})"),
    (
        "ingest wait, share of run",
        lambda r: f"{r['ingest_wait_s']} s, {r['ingest_wait_share']:.1%}",
    ),
    ("of it backpressure", lambda r: f"{r['backpressure_s']} s, {r['backpressure_share']:.1%}"),
    ("MERGE p50 / p95", lambda r: f"{r['merge_p50_s']} / {r['merge_p95_s']} s"),
    ("commit gap p50 / max", lambda r: f"{r['commit_gap_p50_s']} / {r['commit_gap_max_s']} s"),
)
"""The report's rows of the ingest writer's own figures."""

FLINK_ROWS: tuple[Row, ...] = (
    ("Flink job restarts (status)", lambda r: f"{r['flink_restarts']} ({r['flink_status']})"),
    (
        "files landed (rows), rows/s taken",
        lambda r: f"{r['files_landed']} ({r['rows_landed']}), {r['rows_per_s']}",
    ),
    ("Flink commits", lambda r: str(r["flink_commits"])),
    (
        "front commits / refusals",
        lambda r: f"{_kinds(r['front_commits'])} / {_kinds(r['front_refusals'])}",
    ),
    (
        "file landed to its commit p50 / p95 / max",
        lambda r: f"{r['commit_lag_p50_s']} / {r['commit_lag_p95_s']} / {r['commit_lag_max_s']} s",
    ),
    ("commit gap p50 / max", lambda r: f"{r['commit_gap_p50_s']} / {r['commit_gap_max_s']} s"),
)
"""The report's rows of the Flink writer's own figures (no gate: no ingest wait)."""

TABLE_ROWS: tuple[Row, ...] = (
    ("compactor runs", lambda r: _outcomes(r)),
    (
        "follow runs, p50 / p95",
        lambda r: (
            f"{r.get('follow_runs', 0)}, {r.get('follow_run_p50_s')} / "
            f"{r.get('follow_run_p95_s')} s"
        ),
    ),
    ("longest hold of a partition", lambda r: _s(r.get("partition_hold_max_s"))),
    (
        "partition data files, worst mean / peak",
        lambda r: f"{r.get('partition_mean_data_max')} / {r.get('partition_peak_data')}",
    ),
    (
        "partition delete files, worst mean / peak",
        lambda r: f"{r.get('partition_mean_deletes_max')} / {r.get('partition_peak_deletes')}",
    ),
    ("table files, peak after warm-up", lambda r: str(r.get("table_files_peak"))),
    (
        "table files, middle -> last third",
        lambda r: f"{r['files_middle_third']} -> {r['files_last_third']}",
    ),
    (
        "files per partition, middle -> last third",
        lambda r: f"{r['per_partition_middle_third']} -> {r['per_partition_last_third']}",
    ),
    ("count, x compacted copy", lambda r: _ratios(r, "count")),
    ("count reading rows on both, x compacted copy", lambda r: _ratios(r, "count_read")),
    ("distinct keys (a scan), x compacted copy", lambda r: _ratios(r, "scan")),
    ("lookup of 100 keys, x compacted copy", lambda r: _ratios(r, "lookup")),
    ("Trino: count, x compacted copy", lambda r: _ratios(r, "trino_count")),
    ("Trino: distinct keys, x compacted copy", lambda r: _ratios(r, "trino_scan")),
    ("Trino: lookup of 100 keys, x compacted copy", lambda r: _ratios(r, "trino_lookup")),
    ("rows correct", lambda r: "yes" if r["rows_correct"] else "NO"),
    ("goals missed", lambda r: _missed(r)),
)
"""The report's rows of the table, the compactor and the readers, whichever writer wrote."""

WRITERS = {
    "ingest": "lakelock's streaming upsert (PySpark, gated by commit leases)",
    "flink": "a Flink SQL upsert job (PyFlink) through lakelock's catalog front",
}


def render_markdown(runs: list[dict[str, Any]], *, command: str) -> str:
    """The report: a table per section (a format of the ingest writer, or the Flink writer),
    a column per run."""
    lines = ["# Streaming health", "", f"`{command}`", ""]
    for section in dict.fromkeys(_section(r) for r in runs):
        of = [r for r in runs if _section(r) == section]
        writer = of[0].get("writer", "ingest")
        lines += [
            f"## {section}",
            "",
            f"Writer: {writer}, {WRITERS[writer]}.",
            "",
            *_settings_line(of),
            "| | " + " | ".join(_column(r) for r in of) + " |",
            "| --- |" + " ---: |" * len(of),
        ]
        rows = (FLINK_ROWS if writer == "flink" else INGEST_ROWS) + TABLE_ROWS
        if not any(q.get("trino_count_s") for r in of for q in r["queries"]):
            rows = tuple(row for row in rows if not row[0].startswith("Trino"))
        lines += [f"| {label} | " + " | ".join(get(r) for r in of) + " |" for label, get in rows]
        lines.append("")
        for r in of:
            lines += [f"- {_column(r)}: query error {e}" for e in r["query_errors"]]
            lines += [f"- {_column(r)}: table {p}" for p in r.get("table_problems", [])]
    return "\n".join(lines) + "\n"


def _settings_line(runs: list[dict[str, Any]]) -> list[str]:
    """The service settings the runs took from the environment, as a line of the report."""
    settings = {k: v for r in runs for k, v in r.get("due_settings", {}).items()}
    if not settings:
        return []
    return ["Service settings: " + ", ".join(f"`{k}={v}`" for k, v in settings.items()), ""]


def _section(r: dict[str, Any]) -> str:
    """The run's section of the report and panel of the chart: its format (ingest), or the
    Flink writer's."""
    if r.get("writer") == "flink":
        return "flink upsert"
    version = r.get("format_version", 2)
    section = str(r["format"]) if version == 2 else f"{r['format']}, format version {version}"
    if r.get("write_mode", "merge-on-read") != "merge-on-read":
        section += f", {r['write_mode']}"
    return section + (", on S3" if r.get("storage") == "s3" else "")


def _kinds(counts: dict[str, int]) -> str:
    """`{"data": 30, "maintenance": 4}` as `34 (30 data, 4 maintenance)`; `0` when empty."""
    if not counts:
        return "0"
    each = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return f"{sum(counts.values())} ({each})"


def _column(r: dict[str, Any]) -> str:
    compactor = r.get("compactor")
    return r["mode"] if not compactor else f"{r['mode']} ({compactor})"


def _missed(r: dict[str, Any]) -> str:
    missed = "; ".join(r["goals_missed"])
    if r["mode"] == "none":
        return f"(the baseline: no compaction) {missed}".strip()
    return missed or "none"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value} s"


def _outcomes(r: dict[str, Any]) -> str:
    if not r["compactor_runs"]:
        return "none"
    counts = ", ".join(f"{n} {k}" for k, n in sorted(r["compactor_outcomes"].items()))
    pressed = f", {r['backpressure_runs']} with backpressure" if r["backpressure_runs"] else ""
    return f"{r['compactor_runs']} ({counts}{pressed})"


def _ratios(r: dict[str, Any], name: str) -> str:
    found = [q for q in r["queries"] if q.get(f"{name}_ratio") is not None]
    if not found:
        return "n/a"
    return " / ".join(f"{q[f'{name}_ratio']}x ({q[f'{name}_s']} s)" for q in found)


def render_chart(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = list(dict.fromkeys(_section(r) for r in runs))
    fig, axes = plt.subplots(1, len(sections), figsize=(7 * len(sections), 4), squeeze=False)
    colors = {
        "none": "tab:red",
        "table (follow)": "tab:orange",
        "partitions (follow)": "tab:green",
        "table (timer)": "tab:brown",
        "partitions (timer)": "tab:blue",
    }
    for ax, section in zip(axes[0], sections, strict=True):
        for r in (r for r in runs if _section(r) == section):
            t = [s[0] for s in r["samples"]]
            color = colors.get(_column(r), "tab:gray")
            ax.plot(t, [s[1] + s[2] for s in r["samples"]], color=color, label=_column(r))
            ax.plot(t, [s[2] for s in r["samples"]], color=color, ls=":", lw=1)
        ax.set_title(f"{section}: live files (solid: data + delete; dotted: delete)")
        ax.set_xlabel("seconds")
        ax.set_ylabel("files")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.streaming_health",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--writer",
        choices=WRITER_NAMES,
        default="ingest",
        help="what streams into the table: ingest, the demo's PySpark pipeline (the default); "
        "flink, a Flink SQL upsert job through the catalog front",
    )
    parser.add_argument("--duration-s", type=float, default=600.0, help="per run")
    parser.add_argument("--rate", type=float, default=200.0, help="events per second")
    parser.add_argument(
        "--compactor",
        default="follow",
        help="follow, timer, or follow,timer: one run per compactor (default follow)",
    )
    parser.add_argument(
        "--compact-every-s", type=float, default=20.0, help="the timer's seconds between runs"
    )
    parser.add_argument(
        "--full-plan-every-s",
        type=float,
        default=300.0,
        help="the follower's seconds between full plans",
    )
    parser.add_argument("--sample-every-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--formats",
        help=f"ingest only: the change formats, one run each (default {','.join(FORMATS)}); "
        "the Flink writer's are JSON-lines upserts, no format to choose",
    )
    parser.add_argument(
        "--modes",
        help=f"default {','.join(MODES)}; with --writer flink {','.join(FLINK_MODES)} (table "
        "compares the ingest job's whole-table commit leases: the Flink job takes none)",
    )
    parser.add_argument(
        "--checkpoint-every-s",
        type=float,
        help="flink only: the job's checkpoints, each a commit (default 2, the ingest "
        "trigger's interval)",
    )
    parser.add_argument("--no-queries", dest="queries", action="store_false")
    parser.add_argument(
        "--trino",
        action="store_true",
        help="Trino (demo.trino) runs the readers' queries too, on the same snapshot and "
        "copy, through the fronts (the ingest writer's with --storage s3)",
    )
    parser.add_argument(
        "--storage",
        choices=STORAGES,
        default="file",
        help="ingest only: where the table lives, as bin/run's --storage: file, a Hadoop "
        "catalog in the run's folder (the default); s3, the catalog front on an S3 "
        "warehouse (the project's S3 server)",
    )
    parser.add_argument(
        "--events",
        type=int,
        help="ingest only: run by counts instead (the test's small run): this many events, "
        "all ingested; the readers still come at shares of --duration-s",
    )
    parser.add_argument(
        "--compactions", type=int, default=1, help="with --events: compactor runs to wait for"
    )
    parser.add_argument(
        "--format-version",
        type=int,
        choices=(2, 3),
        help="ingest only: the table's format version, 2 (position delete files, the default) "
        "or 3 (a deletion vector per data file)",
    )
    parser.add_argument(
        "--write-mode",
        choices=WRITE_MODES,
        help="ingest only: how a batch changes rows of a data file, merge-on-read (a delete "
        "file beside it, the default) or copy-on-write (the data file rewritten)",
    )
    parser.add_argument(
        "--update-window-h",
        type=float,
        help="json only: updates touch keys of the newest event hours only, so each batch "
        "touches few partitions and the older ones go cold (default: any key)",
    )
    parser.add_argument(
        "--plan",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a compactor plan setting over the demo's (compactor.config.PlanConfig), e.g. "
        "--plan trigger_small_files=8; repeatable",
    )
    parser.add_argument("--out", type=Path, default=Path("var/streaming-health"))
    return parser


def _setting(text: str) -> tuple[str, str]:
    """`key=value` of --plan: the key a PlanConfig field, the value as a config file gives it
    (pydantic converts it; main() checks the settings together)."""
    from compactor.config import PlanConfig

    names = [f.name for f in dataclasses.fields(PlanConfig)]
    key, sep, value = text.partition("=")
    if not sep or key not in names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use KEY=VALUE with KEY one of {', '.join(names)}"
        )
    return key, value


def _check_plan(parser: argparse.ArgumentParser, settings: Sequence[tuple[str, str]]) -> None:
    """Exit with pydantic's message when the --plan settings make no valid plan config."""
    from pydantic import ValidationError

    from compactor.config import PlanConfig

    try:
        PlanConfig(**dict(settings))
    except ValidationError as exc:
        parser.error(f"--plan: {exc.errors()[0]['msg']}")


def _check_ingest(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit when the ingest writer's options do not go together: Trino reads its table
    through the front, on S3; a table of format version 3 is on local files. Its format
    version at its default (2)."""
    if args.trino and args.storage != "s3":
        parser.error(
            "--trino reads the ingest writer's table through the catalog front: add "
            "--storage s3 (on local files the table is in a Hadoop catalog of the demo's, "
            "which Trino cannot read)"
        )
    args.format_version = args.format_version or 2
    args.write_mode = args.write_mode or "merge-on-read"
    try:
        require_format_version(args.format_version)
    except ValueError as exc:
        parser.error(f"--format-version: {exc}")
    _check_trino(parser, args)


def _check_trino(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.trino and not args.queries:
        parser.error("--trino runs the readers' queries: it is no use with --no-queries")


def _check_flink(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit when an option of the ingest writer is given with --writer flink; its
    checkpoints at their default."""
    feed = "the Flink writer lands JSON-lines upserts for --duration-s"
    table = (
        "the Flink writer's table is of format version 2, merge-on-read (its upserts write "
        "equality deletes)"
    )
    for flag, given, why in (
        ("--formats", args.formats, feed),
        ("--events", args.events, feed),
        ("--update-window-h", args.update_window_h, feed),
        ("--format-version", args.format_version, table),
        ("--write-mode", args.write_mode, table),
    ):
        if given is not None:
            parser.error(f"{flag} is for --writer ingest: {why}")
    if args.storage != "file":
        parser.error(
            "--storage is for --writer ingest: the Flink writer's table is in a front on "
            "local files"
        )
    if args.checkpoint_every_s is None:
        args.checkpoint_every_s = 2.0
    _check_trino(parser, args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_plan(parser, args.plan)
    flink = args.writer == "flink"
    if flink:
        _check_flink(parser, args)
    elif args.checkpoint_every_s is not None:
        parser.error("--checkpoint-every-s is for --writer flink (its job's checkpoints)")
    else:
        _check_ingest(parser, args)
    if args.update_window_h is not None and args.formats != "json":
        parser.error("--update-window-h is for --formats json (the click events' updates)")
    formats = ["flink"] if flink else (args.formats or ",".join(FORMATS)).split(",")
    modes = (args.modes or ",".join(FLINK_MODES if flink else MODES)).split(",")
    compactors = args.compactor.split(",")
    for asked, known in (
        (formats, ["flink"] if flink else KNOWN_FORMATS),
        (modes, FLINK_MODES if flink else MODES),
        (compactors, COMPACTORS),
    ):
        unknown = [x for x in asked if x not in known]
        if unknown:
            raise SystemExit(f"unknown {unknown[0]!r}: use {', '.join(known)}")
    if args.trino:  # before any run: a Trino that cannot be had fails here, not after one
        try:
            install_trino()
        except Exception as exc:
            parser.error(f"--trino: {error_message(exc)}")
    args.out = args.out.resolve()  # the runs' warehouses are file:// URIs in it
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [
        run_flink(args, mode, compactor) if flink else run_one(args, fmt, mode, compactor)
        for fmt in formats
        for mode in modes
        for compactor in (compactors if mode != "none" else compactors[:1])
    ]
    command = "python -m benchmarks.streaming_health " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    markdown = render_markdown(runs, command=command.strip())
    (args.out / "results.json").write_text(json.dumps(runs, indent=2) + "\n")
    (args.out / "report.md").write_text(markdown)
    render_chart(runs, args.out / "streaming_health.png")
    print(markdown)
    print(f"chart: {args.out / 'streaming_health.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
