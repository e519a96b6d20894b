"""Prometheus metrics of the service.

Lease transitions are counted from the audit events a committed transaction recorded, so the
metrics and the trail cannot disagree; refusals that change nothing are counted by the API.

    counters, histograms   per process; with LAKELOCK_WORKERS > 1, `python -m service` sets up
                           prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR), so
                           whichever worker answers a scrape reports the sum over all of them
    state gauges           live leases by kind, open intents, paused tables: read from the
                           database at scrape time, so they are right whichever replica granted
                           the lease, and need no multiprocess handling

In one process (tests, LAKELOCK_WORKERS=1) each app gets its own registry.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.db import (
    commit_leases_t,
    intents_t,
    is_unavailable,
    maintenance_leases_t,
    now,
    tables_t,
)
from service.scope import label

__all__ = [
    "Metrics",
    "StateCollector",
    "read_state",
    "MULTIPROC_ENV",
    "multiprocess_folder",
    "process_exited",
]

log = logging.getLogger("lakelock.service")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

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
        self.hold = Histogram(
            "lakelock_lease_hold_seconds",
            "How long leases were held, from grant to release, expiry or revoke",
            ["kind", "scope"],
            buckets=_HOLD_BUCKETS,
            registry=own,
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
            if name == "lease.acquired":
                self.grants.labels(kind, scope).inc()
            elif name == "intent.opened":
                self.intents.labels(scope).inc()
            elif name == "lease.renew_failed":
                self.renew_failures.labels(detail.get("outcome", "unknown")).inc()
            elif name in ("lease.released", "lease.expired", "lease.revoked"):
                end = name.removeprefix("lease.")
                self.ends.labels(kind, end).inc()
                if end == "expired":
                    self.expiries.labels(kind).inc()
                if "held_s" in detail:
                    self.hold.labels(kind, scope).observe(float(detail["held_s"]))

    def track_state(self, engine: Engine) -> None:
        """Add the state gauges, read from `engine`'s database at each scrape."""
        self.registry.register(StateCollector(engine))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StateCollector(Collector):
    """The lock state as gauges, counted in the database at scrape time.

    Live is judged by expiry against the database clock, as the protocol does (see
    service.leases), so a lease the sweeper has not yet ended is not counted. When the database
    cannot be reached, the scrape still carries the process counters, with
    `lakelock_state_up` 0 and no state gauges.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # registering must not query the database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "lakelock_state_up", "1 if the state gauges could be read from the database"
        )
        try:
            with self.engine.connect() as conn:
                state = read_state(conn)
        except (DBAPIError, PoolTimeout) as exc:
            if isinstance(exc, DBAPIError) and not is_unavailable(exc):
                raise  # a bad statement or schema is a fault, not an outage
            log.warning("state gauges not read, database unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        live = GaugeMetricFamily("lakelock_live_leases", "Live leases", labels=["kind"])
        live.add_metric(["commit"], state["commit"])
        live.add_metric(["maintenance"], state["maintenance"])
        yield live
        yield GaugeMetricFamily(
            "lakelock_open_intents", "Open maintenance intents", value=state["intents"]
        )
        yield GaugeMetricFamily(
            "lakelock_paused_tables", "Tables whose ingest switch is paused", value=state["paused"]
        )


def read_state(conn: Connection) -> dict[str, int]:
    """Counts of live commit and maintenance leases, open intents and paused tables."""
    at = now(conn)
    counts: dict[str, int] = {}
    for kind, leases_t in (("commit", commit_leases_t), ("maintenance", maintenance_leases_t)):
        c = leases_t.c
        # by the (ended_at, expires_at) index: not ended, expiry ahead
        live = select(func.count()).where(c.ended_at.is_(None), c.expires_at > at)
        counts[kind] = conn.execute(live).scalar_one()
    counts["intents"] = conn.execute(
        select(func.count()).where(intents_t.c.expires_at > at)
    ).scalar_one()
    counts["paused"] = conn.execute(
        select(func.count()).where(tables_t.c.ingest == "paused")
    ).scalar_one()
    return counts


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
