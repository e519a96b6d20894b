"""Pruning, as each replica runs it: `service.lock.retention.prune` every
LAKELOCK_PRUNE_INTERVAL_S on a thread of its own, counted in the metrics.

    thread = pruner(engine, settings, metrics); thread.start(); ...; thread.signal(); thread.join()
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

__all__ = ["pruner"]

log = logging.getLogger("lakelock.retention")


def pruner(engine: Engine, settings: Settings, metrics: Metrics) -> Periodic:
    """`prune` every LAKELOCK_PRUNE_INTERVAL_S, its first pass at a random point of the first
    interval, so that replicas started together (a deploy) do not prune at the same instants;
    a pass stops after its current batch when the thread is signalled."""
    interval = settings.prune_interval_s

    def prune_once() -> None:
        pruned = prune(
            engine,
            retention=timedelta(days=settings.retention_days),
            batch_rows=settings.prune_batch_rows,
            pause=thread.wait,
        )
        _counted(pruned, metrics)

    thread = Periodic(
        "pruning",
        prune_once,
        interval_s=interval,
        first_wait_s=random.uniform(0, interval),
        thread="lakelock-pruner",
        logger=log,
    )
    return thread


_ROWS = (
    "events",
    "commit_leases",
    "maintenance_leases",
    "claims",
    "due_partitions",
    "due_samples",
    "followers",
    "idempotency_keys",
)


def _counted(pruned: Pruned, metrics: Metrics) -> None:
    rows = {label: getattr(pruned, label) for label in _ROWS}
    for label, deleted in rows.items():
        metrics.pruned.labels(label).inc(deleted)
    if any(rows.values()):
        log.info(
            "pruned rows past the retention",
            extra={
                **rows,
                "batches": pruned.batches,
                "longest_batch_ms": round(pruned.longest_batch_s * 1000, 1),
            },
        )
