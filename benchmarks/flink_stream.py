"""A Flink upsert job streaming into a table through lakelock's catalog front for a while, beside
lakelock's compactor: the Flink writer of benchmarks.streaming_health (`--writer flink`).

    stream = FlinkStream(options, checkpoint_every_s=2, readers=[reader.read])
    result = stream.run()       # FlinkStreamResult: samples, compactions, commits, the check

`options` is the demo pipeline's (demo.options.PipelineOptions), of which the run takes what
does not belong to the ingest job: `duration_s`, `rate`, `seed`, `update_ratio`, the compactor's
(`compactor`, `compact_every_s`, `full_plan_every_s`, `follow_poll_s`, `compactions_on` and the
table config: `table_config()`), `health_every_s`, `progress_every_s`, `timeout_s`, `workdir`
(emptied first) and `table` (the front's name of the table: catalog `lakelock`).

What runs: the lakelock service with its front on SQLite (demo.flink.front_service), a second
one for what readers make (SCRATCH: their compacted copies, so the first front's figures stay
the writer's and the compactor's), a Spark session (the compactor's and the readers') with the
fronts as its catalogs, with `trino` a Trino server (demo.trino) with the same two catalogs, the
Flink upsert job (flink_writer, demo.flink.start_writer) on a landing folder, and, from the
job's table on for `duration_s`:

    lander      a file every `file_interval_s` of `rate` upserts a second (demo.flink.GrowingFeed:
                the keys grow with event time, so a new partition opens every 3,600 upserts)
    compactor   demo.compaction.compact: the follower long-polling the service (the front's
                commits count the due partitions), or a run every `compact_every_s`
    sampler     the table's files per partition every `health_every_s` (demo.health.sample_at,
                from the metadata file the front's database names)
    readers     each reader's `read` (benchmarks.streaming_health.Reader), in a thread of its own,
                given the Trino server when there is one

Then the landing stops, the job commits what is left, the job is stopped (its restarts and
status), and the table is read by Iceberg's reader in Spark from its metadata file and compared
with the last row written for every key. The front's commits and refusals come from the
service's /metrics; the job's commits (when, rows added) from the snapshot summaries.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from compactor.report import RunReport
from demo.compaction import compact, run_line
from demo.flink import (
    GrowingFeed,
    current_metadata,
    flink_commits,
    front_counts,
    front_service,
    front_session,
    rows_of,
    start_writer,
    table_problems,
    wait_until,
)
from demo.health import Health, sample_at, static_table
from demo.options import PipelineOptions
from demo.result import warm_samples
from demo.trino import TrinoServer, front_catalog
from jobkit.spark import CatalogConfig

__all__ = [
    "COPIES",
    "LIVE",
    "SCRATCH",
    "FlinkStream",
    "FlinkStreamResult",
    "ReadBeside",
    "reader_trino",
]

log = logging.getLogger("benchmarks.flink_stream")

LIVE = "lakelock"
"""The catalog of the job's table, in Spark and in Trino: the run's front."""
SCRATCH = "scratch"
"""The catalog, in Spark and in Trino, of what readers make (their compacted copies): a front
of its own, so the run's front counts only the writer's and the compactor's commits."""
COPIES = f"{SCRATCH}.db"
"""The namespace of SCRATCH for the readers' copies (the reader makes it:
benchmarks.streaming_health.Reader)."""


class ReadBeside(Protocol):
    """A reader beside the jobs (benchmarks.streaming_health.Reader.read): called in a thread
    of its own with the Spark session, the table, the stream's window on time.monotonic(), the
    run's stop, whether the table has a commit yet and the run's Trino server (or None)."""

    def __call__(
        self,
        spark: Any,
        table: str,
        window: tuple[float, float],
        stop: threading.Event,
        committed: Callable[[], bool],
        *,
        trino: TrinoServer | None = None,
    ) -> None: ...


@dataclass
class FlinkStreamResult:
    """What one run saw; times on time.time() unless said."""

    options: PipelineOptions
    duration_s: float
    health: list[Health]
    compactions: list[RunReport]
    # (when, rows landed by then, the marker rows included): one per file
    landed: list[tuple[float, int]]
    # the job's commits: (when, rows it added), in commit order
    commits: list[tuple[float, int]]
    # FlinkWriter.stop()'s report: job_id, status, restarts, checkpoints, error
    job: dict[str, Any]
    front_commits: dict[str, int]
    front_refusals: dict[str, int]
    table_problems: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return self.landed[-1][1] if self.landed else 0

    def warm(self) -> list[Health]:
        """The samples after the compactor's warm-up (demo.result.warm_samples)."""
        return warm_samples(
            self.health, self.compactions, compactions_on=self.options.compactions_on
        )

    def rows_per_s(self) -> float | None:
        """Rows landed over the time from the first landing to the commit of the last row."""
        taken = self.taken()
        if not taken or len(taken) < len(self.landed):
            return None
        seconds = taken[-1] - self.landed[0][0]
        return round(self.rows / seconds, 1) if seconds > 0 else None

    def lags(self) -> list[float]:
        """Per file, seconds from its landing to the commit that took its last row."""
        return [
            at - landed_at for at, (landed_at, _) in zip(self.taken(), self.landed, strict=False)
        ]

    def taken(self) -> list[float]:
        """Per file, when the commit that took its last row was made: the first commit by
        which the rows the job added reach the rows landed with the file (fewer than the files
        when the job stopped before taking them all: the table check says so)."""
        times: list[float] = []
        added, commits = 0, iter(self.commits)
        at = 0.0
        for _, rows in self.landed:
            while added < rows:
                found = next(commits, None)
                if found is None:
                    return times
                at, added = found[0], added + found[1]
            times.append(at)
        return times

    def gaps(self) -> list[float]:
        """Seconds between the job's commits."""
        return [b[0] - a[0] for a, b in itertools.pairwise(self.commits)]


class FlinkStream:
    """One run (see the module docstring)."""

    def __init__(
        self,
        options: PipelineOptions,
        *,
        checkpoint_every_s: float = 2.0,
        readers: Sequence[ReadBeside] = (),
        trino: bool = False,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self.checkpoint_every_s = checkpoint_every_s
        self.readers = list(readers)
        self.trino = trino
        self.on_progress = on_progress or (lambda line: log.info("%s", line))
        self.stop = threading.Event()
        self.health: list[Health] = []
        self.compactions: list[RunReport] = []
        self.landed: list[tuple[float, int]] = []
        self.crashed: list[tuple[str, BaseException]] = []
        self._lock = threading.Lock()

    def run(self) -> FlinkStreamResult:
        """Run it (see the module docstring); everything started is stopped on every path.

        Raises:
            RuntimeError: the Flink job ended on its own, or a part of the run failed.
            TimeoutError: the job did not take what landed within `timeout_s`.
        """
        o = self.options
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            service = stack.enter_context(front_service(o.workdir))
            self.on_progress(f"lakelock service at {service.url}, its catalog front at /iceberg")
            scratch = stack.enter_context(front_service(o.workdir / SCRATCH))
            copies = CatalogConfig(
                name=SCRATCH,
                type="rest",
                warehouse=(o.workdir / SCRATCH / "warehouse").as_uri(),
                # the operator's token: the readers drop their copies
                properties={"uri": f"{scratch.url}/iceberg", "token": scratch.token("operator")},
            )
            spark = front_session(
                service,
                o.workdir,
                app_name="lakelock-streaming-health-flink",
                extra_conf=copies.spark_conf(),
            )
            stack.callback(spark.stop)
            stack.callback(self.stop.set)
            trino = None
            if self.trino:
                trino = stack.enter_context(_trino(service, scratch, o.workdir / "trino"))
                self.on_progress(f"Trino {trino.url} reading both fronts")
            return self._run(service, spark, trino, started)

    def _run(
        self, service: Any, spark: Any, trino: TrinoServer | None, started: float
    ) -> FlinkStreamResult:
        o = self.options
        feed = GrowingFeed(o.workdir / "landing", update_ratio=o.update_ratio, seed=o.seed)
        writer = start_writer(service, feed, o.workdir, self.checkpoint_every_s)
        try:
            job_id = writer.job_id(timeout_s=o.timeout_s)
            self.on_progress(f"Flink upsert job {job_id} running (PyFlink MiniCluster)")
            deadline = time.monotonic() + o.timeout_s
            wait_until(
                "the job's table",
                lambda: current_metadata(service.db_url, o.table) is not None,
                writer=writer,
                deadline=deadline,
            )
            self._stream(service, spark, trino, feed, writer)
            wait_until(
                "every landed row committed",
                lambda: self._committed_rows(service.db_url) >= feed.rows,
                writer=writer,
                deadline=time.monotonic() + o.timeout_s,
            )
        finally:
            job = writer.stop()
        metadata = _current(service.db_url, o.table)
        commits, refusals = front_counts(service.url, service.token("reader"))
        return FlinkStreamResult(
            options=o,
            duration_s=time.monotonic() - started,
            health=list(self.health),
            compactions=list(self.compactions),
            landed=list(self.landed),
            commits=flink_commits(metadata),
            job=job,
            front_commits=commits,
            front_refusals=refusals,
            table_problems=table_problems(rows_of(spark, metadata), feed),
        )

    def _stream(
        self,
        service: Any,
        spark: Any,
        trino: TrinoServer | None,
        feed: GrowingFeed,
        writer: Any,
    ) -> None:
        """The stream's part: lander, compactor, sampler and readers for `duration_s`, then
        stopped and joined.

        Raises:
            RuntimeError: the Flink job ended, or a part failed (the first failure).
        """
        from service.client import LeaseClient

        o = self.options
        client = LeaseClient(service.url, token=service.token("job"))
        began = time.monotonic()
        window = (began, began + o.duration_s)
        parts: list[tuple[str, Callable[[], None]]] = [
            ("lander", lambda: self._land(feed)),
            ("sampler", lambda: self._sample(service.db_url)),
            ("progress", lambda: self._progress(began)),
        ]
        if o.compactions_on:
            parts.append(
                ("compactor", lambda: compact(spark, client, o, stop=self.stop, on_run=self._ran))
            )

        def committed() -> bool:
            return _has_snapshot(service.db_url, o.table)

        for n, read in enumerate(self.readers):
            parts.append(
                (
                    f"reader {n}",
                    lambda r=read: r(spark, o.table, window, self.stop, committed, trino=trino),
                )
            )
        threads = [self._start(name, part) for name, part in parts]
        try:
            while time.monotonic() < window[1] and not self.stop.wait(0.5):
                if not writer.running():
                    raise RuntimeError(f"the Flink job ended while streaming: {writer.log_path}")
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(timeout=600)
        if self.crashed:
            name, error = self.crashed[0]
            raise RuntimeError(f"the Flink stream's {name} stopped with an error") from error

    def _start(self, name: str, part: Callable[[], None]) -> threading.Thread:
        """`part` in a thread of its own; an exception stops the whole run (after cleanup)."""

        def guarded() -> None:
            try:
                part()
            except BaseException as exc:
                log.exception("the Flink stream's %s failed", name)
                self.crashed.append((name, exc))
                self.stop.set()

        thread = threading.Thread(target=guarded, name=f"flink-stream-{name}", daemon=True)
        thread.start()
        return thread

    def _land(self, feed: GrowingFeed) -> None:
        """A file every `file_interval_s`, of the upserts owed at `rate` a second by then."""
        o = self.options
        began, owed, n = time.monotonic(), 0.0, 0
        while not self.stop.wait(max(0.0, began + (n + 1) * o.file_interval_s - time.monotonic())):
            n += 1
            owed += o.events_per_file
            rows, owed = int(owed), owed - int(owed)
            if rows:
                feed.write(rows=rows)
                self.landed.append((time.time(), feed.rows))

    def _sample(self, db_url: str) -> None:
        """The table as a reader finds it, every `health_every_s` (demo.health)."""
        while not self.stop.wait(self.options.health_every_s):
            self.health.append(sample_at(_current(db_url, self.options.table)))

    def _progress(self, began: float) -> None:
        while not self.stop.wait(self.options.progress_every_s):
            ok = sum(r.outcome == "compacted" for r in self.compactions)
            files = f"  {self.health[-1].line()}" if self.health else ""
            rows = self.landed[-1][1] if self.landed else 0
            self.on_progress(
                f"t={time.monotonic() - began:5.0f}s  files={len(self.landed)} rows={rows}"
                f"  compactions={ok}/{len(self.compactions)}" + files
            )

    def _ran(self, report: RunReport) -> None:
        """A compactor run ended (published already): count it and say what it did."""
        with self._lock:
            self.compactions.append(report)
            number = len(self.compactions)
        self.on_progress(run_line(number, report))

    def _committed_rows(self, db_url: str) -> int:
        return sum(rows for _, rows in flink_commits(_current(db_url, self.options.table)))


def _trino(live: Any, scratch: Any, workdir: Path) -> TrinoServer:
    """A Trino server (1 GB of heap) reading the run's front as LIVE and the readers' as
    SCRATCH, each with its reader token: a query engine's reads, through the fronts as the
    Spark session's."""
    catalogs = {
        LIVE: front_catalog(f"{live.url}/iceberg", live.token("reader")),
        SCRATCH: front_catalog(f"{scratch.url}/iceberg", scratch.token("reader")),
    }
    return reader_trino(catalogs, workdir)


def reader_trino(catalogs: dict[str, dict[str, str]], workdir: Path) -> TrinoServer:
    """The readers' Trino server: 1 GB of heap (it shares the cores and memory with the
    jobs), `catalogs` by name, in `workdir`."""
    return TrinoServer(catalogs, heap="1G", workdir=workdir)


def _current(db_url: str, table: str) -> str:
    """The table's current metadata file; the table exists (the job made it)."""
    metadata = current_metadata(db_url, table)
    if metadata is None:
        raise RuntimeError(f"{table} is gone from the front's catalog")
    return metadata


def _has_snapshot(db_url: str, table: str) -> bool:
    """Whether the table has a commit yet: a reader's copy of no snapshot says nothing."""
    return static_table(_current(db_url, table)).current_snapshot() is not None
