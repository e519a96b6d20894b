"""Prometheus metrics of the service.

Lease transitions are counted from the audit events a committed transaction recorded, so the
metrics and the trail cannot disagree; refusals that change nothing are counted by the API.

    counters, histograms   per process; with LAKELOCK_WORKERS > 1, `python -m service` sets up
                           prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR), so
                           whichever worker answers a scrape reports the sum over all of them
    state gauges           live leases by kind (commit, maintenance, claim) and the age of
                           each table's oldest maintenance lease, open intents, paused tables,
                           and the reported debt of the tables that owe most (small files,
                           delete files, partitions over target, per table, for at most
                           LAKELOCK_METRICS_MAX_TABLES tables), and the source lag
                           of the tables whose ingest is furthest behind, and their due
                           partitions, seconds from due to compacted (p50, p95 over the last
                           hour) and followers: read from the database at scrape time, so they
                           are right whichever replica granted the lease, and need no
                           multiprocess handling

In one process (tests, LAKELOCK_WORKERS=1) each app gets its own registry.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.lock.db import DatabaseError, Engine, PoolExhausted, is_unavailable
from service.lock.due import Figures
from service.lock.overview import overview
from service.wire import EventName, TableDebt
from service.wire.scope import label

__all__ = [
    "MULTIPROC_ENV",
    "Metrics",
    "StateCollector",
    "multiprocess_folder",
    "process_exited",
]

log = logging.getLogger("lakelock.service")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# the events that end a lease, by the label of its end
_ENDS = {
    EventName.LEASE_RELEASED: "released",
    EventName.LEASE_EXPIRED: "expired",
    EventName.LEASE_REVOKED: "revoked",
}

_HOLD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self) -> None:
        # the metrics live here; what a scrape renders is `self.registry`, which in
        # multiprocess mode reads every worker's files instead
        own = CollectorRegistry(auto_describe=True)
        # `scope`: table (a whole-table lease) or partitions (a partition-scoped one)
        self.grants = Counter("lakelock_grants", "Leases granted", ["kind", "scope"], registry=own)
        self.denials = Counter(
            "lakelock_denials",
            "Lease requests refused",
            ["kind", "reason", "scope"],
            registry=own,
        )
        self.expiries = Counter("lakelock_expiries", "Leases expired", ["kind"], registry=own)
        self.ends = Counter("lakelock_lease_ends", "Leases ended", ["kind", "end"], registry=own)
        self.renewals = Counter("lakelock_renewals", "Successful renews", ["kind"], registry=own)
        self.renew_failures = Counter(
            "lakelock_renew_failures", "Renews refused, by outcome", ["outcome"], registry=own
        )
        self.intents = Counter(
            "lakelock_intents_opened", "Intents opened (drains)", ["scope"], registry=own
        )
        self.pruned = Counter(
            "lakelock_pruned_rows",
            "Rows deleted past the retention (LAKELOCK_RETENTION_DAYS)",
            ["table"],
            registry=own,
        )
        # the catalog front (docs/catalog-front.md): `writer` leased (named a live lease or
        # claim) or foreign (named none)
        self.catalog_commits = Counter(
            "lakelock_catalog_commits",
            "Commits through the catalog front",
            ["kind", "writer"],
            registry=own,
        )
        self.catalog_refusals = Counter(
            "lakelock_catalog_refusals",
            "Commits the catalog front refused (403) or held back (429, once per commit "
            "however long it was parked), by reason",
            ["reason"],
            registry=own,
        )
        # parked commits (docs/catalog-front.md §4): `how` a parked commit was judged again,
        # `look` (the lock's state, no file read) or `try` (a whole commit)
        self.catalog_parked_judged = Counter(
            "lakelock_catalog_parked_judged",
            "Parked commits judged again after their first try, by how",
            ["how"],
            registry=own,
        )
        self.catalog_parked = Gauge(
            "lakelock_catalog_parked_commits",
            "Commits the catalog front parks now, waiting for a hold to end",
            registry=own,
            multiprocess_mode="livesum",
        )
        self.hold = Histogram(
            "lakelock_lease_hold_seconds",
            "How long leases were held, from grant to release, expiry or revoke",
            ["kind", "scope"],
            buckets=_HOLD_BUCKETS,
            registry=own,
        )
        # summed over the live workers: how many clients wait on a long-poll right now
        self.parked = Gauge(
            "lakelock_parked_long_polls",
            "Long-polls (wait_s, wait) parked, waiting for a change or their deadline",
            registry=own,
            multiprocess_mode="livesum",
        )
        # of those, the compactors parked on GET /v1/due, waiting for a partition to be due
        self.followers_waiting = Gauge(
            "lakelock_due_followers_waiting",
            "Long-polls for due partitions (GET /v1/due) parked now: followers waiting",
            registry=own,
            multiprocess_mode="livesum",
        )
        self.latency = Histogram(
            "lakelock_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            registry=own,
        )
        if os.environ.get(MULTIPROC_ENV):
            from prometheus_client.multiprocess import MultiProcessCollector

            self.registry = CollectorRegistry()
            MultiProcessCollector(self.registry)
        else:
            self.registry = own

    def observe_events(self, events: list[dict[str, Any]]) -> None:
        """Count the transitions of one committed transaction."""
        for event in events:
            name, kind = event["event"], event.get("kind") or "none"
            detail = event.get("detail") or {}
            scope = label(detail.get("partitions"))
            if name == EventName.LEASE_ACQUIRED:
                self.grants.labels(kind, scope).inc()
            elif name == EventName.CATALOG_COMMIT:
                writer = "foreign" if detail.get("foreign") else "leased"
                self.catalog_commits.labels(kind, writer).inc()
            elif name == EventName.CATALOG_REFUSED:
                self.catalog_refusals.labels(detail.get("reason") or "unknown").inc()
            elif name == EventName.INTENT_OPENED and detail.get("cause") != "turn":
                self.intents.labels(scope).inc()
            elif name == EventName.LEASE_RENEW_FAILED:
                self.renew_failures.labels(detail.get("outcome", "unknown")).inc()
            elif name in _ENDS:
                end = _ENDS[name]
                self.ends.labels(kind, end).inc()
                if end == "expired":
                    self.expiries.labels(kind).inc()
                if "held_s" in detail:
                    self.hold.labels(kind, scope).observe(float(detail["held_s"]))

    def track_state(self, engine: Engine, *, max_tables: int = 100) -> None:
        """Add the state gauges, read from `engine`'s database at each scrape; the per-table
        debt gauges for the `max_tables` tables with the most debt."""
        self.registry.register(StateCollector(engine, max_tables=max_tables))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StateCollector(Collector):
    """The lock state as gauges, read at scrape time (`service.lock.overview`). When the
    database cannot be reached, the scrape still carries the process counters, with
    `lakelock_state_up` 0 and no state gauges.
    """

    def __init__(self, engine: Engine, *, max_tables: int = 100) -> None:
        self.engine = engine
        self.max_tables = max_tables

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # registering must not query the database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "lakelock_state_up", "1 if the state gauges could be read from the database"
        )
        try:
            with self.engine.connect() as conn:
                seen = overview(conn, max_tables=self.max_tables)
        except (DatabaseError, PoolExhausted) as exc:
            if isinstance(exc, DatabaseError) and not is_unavailable(exc):
                raise  # a bad statement or schema is a fault, not an outage
            log.warning("state gauges not read, database unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        live = GaugeMetricFamily("lakelock_live_leases", "Live leases", labels=["kind"])
        age = GaugeMetricFamily(
            "lakelock_oldest_lease_seconds",
            "How long the oldest live lease of each kind has been held (0: none is live)",
            labels=["kind"],
        )
        for kind, count in seen.live.items():
            live.add_metric([kind], count)
            age.add_metric([kind], seen.oldest_s[kind])
        yield live
        yield age
        yield _per_table(
            "lakelock_maintenance_lease_seconds",
            "How long the oldest live maintenance lease of each table has been held (the tables "
            "that have one)",
            seen.maintenance_by_table,
        )
        yield GaugeMetricFamily(
            "lakelock_open_intents",
            "Open intents: drains of maintenance requests, backpressure, and turns of the head "
            "at the catalog front",
            value=seen.intents,
        )
        yield _per_table(
            "lakelock_backpressure_partitions",
            "Partitions whose commits a compactor's backpressure holds (debt over its hard bound; "
            "not while the table's backpressure or maintenance switch is off)",
            seen.backpressure,
        )
        yield GaugeMetricFamily(
            "lakelock_paused_tables", "Tables whose ingest switch is paused", value=seen.paused
        )
        yield from _debt_gauges(seen.heaviest)
        yield from _due_gauges(seen.due)
        yield _per_table(
            "lakelock_ingest_lag_records",
            "Records an ingest query was behind its source after its last batch, over all its "
            "topic-partitions (the LAKELOCK_METRICS_MAX_TABLES tables furthest behind)",
            [(table, reported.records) for table, reported in seen.behind],
        )


def _per_table(name: str, help_text: str, values: Iterable[tuple[str, float]]) -> GaugeMetricFamily:
    """A gauge with one series per (table, value) given."""
    family = GaugeMetricFamily(name, help_text, labels=["table"])
    for table, value in values:
        family.add_metric([table], value)
    return family


_DEBT_GAUGES = (
    ("small_files", "Data files under the small size, as last reported"),
    ("delete_files", "Delete files that still apply, as last reported"),
    ("partitions_over_target", "Partitions a rewrite would change, as last reported"),
    ("partitions_over_bound", "Partitions past the hard bound of debt, as last reported"),
    ("worst_partition", "The most small plus delete files in one partition, as last reported"),
)


def _debt_gauges(heaviest: list[tuple[str, TableDebt]]) -> Iterator[GaugeMetricFamily]:
    """`lakelock_table_<count>{table}` for the tables given (the most indebted): one series per
    table and count, so the number of series is bounded by LAKELOCK_METRICS_MAX_TABLES."""
    for name, help_text in _DEBT_GAUGES:
        values = [(table, getattr(owed, name)) for table, owed in heaviest]
        yield _per_table(
            f"lakelock_table_{name}",
            f"{help_text} (the LAKELOCK_METRICS_MAX_TABLES tables with the most debt)",
            # None: not in a report from before the count existed
            [(table, value) for table, value in values if value is not None],
        )


def _due_gauges(tables: list[tuple[str, Figures]]) -> Iterator[GaugeMetricFamily]:
    """The due partitions of the tables given (docs/design.md §5.1), read from the database as
    every state gauge: the same figures whichever replica answers, and as the status page
    shows them; bounded by LAKELOCK_METRICS_MAX_TABLES, the slowest to be compacted first."""
    took = GaugeMetricFamily(
        "lakelock_due_to_compacted_seconds",
        "Seconds from a partition becoming due to its compaction, by quantile (0.5, 0.95) over "
        "the due partitions compacted in the last hour (the LAKELOCK_METRICS_MAX_TABLES tables "
        "slowest to be compacted)",
        labels=["table", "quantile"],
    )
    for table, figures in tables:
        for quantile, value in (("0.5", figures.p50_s), ("0.95", figures.p95_s)):
            if value is not None:
                took.add_metric([table, quantile], value)
    yield took
    yield _per_table(
        "lakelock_due_partitions",
        "Partitions due for compaction now: their files counted since their last compaction "
        "reached LAKELOCK_DUE_DATA_FILES, LAKELOCK_DUE_DELETE_FILES or "
        "LAKELOCK_DUE_EQUALITY_DELETE_FILES",
        [(table, figures.partitions_due) for table, figures in tables],
    )
    yield _per_table(
        "lakelock_due_oldest_seconds",
        "How long the table's longest-waiting due partition has been due (the tables with "
        "partitions due now)",
        [(t, f.oldest_due_s) for t, f in tables if f.oldest_due_s is not None],
    )
    yield _per_table(
        "lakelock_due_followers",
        "Compactors that long-polled for the table's due partitions in the last 5 minutes",
        [(table, figures.followers) for table, figures in tables],
    )


@contextmanager
def multiprocess_folder() -> Iterator[Path]:
    """Turn on prometheus-client's multiprocess mode for the worker processes started inside:
    an operator's PROMETHEUS_MULTIPROC_DIR, emptied first (an earlier run's files would count
    twice), else a temporary folder removed afterwards. Enter before any worker starts.

    Raises:
        OSError: the folder cannot be created or emptied.
    """
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):
            stale.unlink()
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="lakelock-metrics-") as created:
        os.environ[MULTIPROC_ENV] = created
        try:
            yield Path(created)
        finally:
            del os.environ[MULTIPROC_ENV]


def process_exited() -> None:
    """Bookkeeping for a worker that stops: drops its live-gauge files, if multiprocess."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client.multiprocess import mark_process_dead

        mark_process_dead(os.getpid())
