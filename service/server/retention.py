"""Pruning, as each replica runs it: `service.lock.retention.prune` every
LAKELOCK_PRUNE_INTERVAL_S on a thread of its own, counted in the metrics.

    pruner = Pruner(engine, settings, metrics); pruner.start(); ...; pruner.stop()
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from service.lock.db import Engine
from service.lock.retention import Pruned, prune
from service.server.metrics import Metrics
from service.server.periodic import Periodic
from service.server.settings import Settings

__all__ = ["Pruner"]

log = logging.getLogger("lakelock.retention")


class Pruner:
    """Runs `prune` every LAKELOCK_PRUNE_INTERVAL_S on a daemon thread (`Periodic`) until
    `stop()`; the first pass at a random point of the first interval, so that replicas started
    together (a deploy) do not prune at the same instants."""

    def __init__(self, engine: Engine, settings: Settings, metrics: Metrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        interval = settings.prune_interval_s
        self._periodic = Periodic(
            "pruning",
            self.prune_once,
            interval_s=interval,
            first_wait_s=random.uniform(0, interval),
            thread="lakelock-pruner",
            logger=log,
        )

    def start(self) -> None:
        self._periodic.start()

    @property
    def periodic(self) -> Periodic:
        """Its thread: `signal()` ends the pass in progress after its current batch."""
        return self._periodic

    def stop(self, timeout: float = 5.0) -> None:
        self._periodic.stop(timeout)

    def prune_once(self) -> Pruned:
        pruned = prune(
            self.engine,
            retention=timedelta(days=self.settings.retention_days),
            batch_rows=self.settings.prune_batch_rows,
            pause=self._periodic.wait,
        )
        self.metrics.pruned.labels("events").inc(pruned.events)
        self.metrics.pruned.labels("commit_leases").inc(pruned.commit_leases)
        self.metrics.pruned.labels("maintenance_leases").inc(pruned.maintenance_leases)
        self.metrics.pruned.labels("claims").inc(pruned.claims)
        if pruned.events or pruned.commit_leases or pruned.maintenance_leases or pruned.claims:
            log.info(
                "pruned rows past the retention",
                extra={
                    "events": pruned.events,
                    "commit_leases": pruned.commit_leases,
                    "maintenance_leases": pruned.maintenance_leases,
                    "claims": pruned.claims,
                    "batches": pruned.batches,
                    "longest_batch_ms": round(pruned.longest_batch_s * 1000, 1),
                },
            )
        return pruned
