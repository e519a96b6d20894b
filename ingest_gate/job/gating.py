"""How the ingest job passes the gate before each commit (ingest_gate.gate, docs/jobs.md): a
lakelock `Gate` built from the job's config, or `Ungated` for runs without a service.

    make_gate(config, spark, stop=...) -> GateLike   the config's gate (`gate_enabled`), or Ungated
    Ungated().commit(table, partitions=...)  a pass granted at once, coordinated with nothing
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest_gate.job.config import IngestConfig

__all__ = ["GateLike", "Ungated", "make_gate"]

log = logging.getLogger(__name__)


class GateLike(Protocol):
    def commit(
        self, table: str, *, partitions: Sequence[str] | None = None
    ) -> contextlib.AbstractContextManager[Any]: ...


@dataclass
class _UngatedPass:
    partitions: Sequence[str] | None
    lease: None = None

    def check(self) -> None:
        return None

    def wrote(self, counts: Any) -> None:
        return None  # no service to tell

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": "table" if self.partitions is None else list(self.partitions),
            "waited_s": 0.0,
            "wait_reasons": [],
            "lease_calls_s": 0.0,
            "outcome": "ungated",
        }


class Ungated:
    """A gate that grants at once: for runs without a lakelock service (`--no-gate`). Commits
    then rely on Iceberg's validation alone, and fail whenever compaction overlaps."""

    @contextlib.contextmanager
    def commit(
        self, table: str, *, partitions: Sequence[str] | None = None
    ) -> Iterator[_UngatedPass]:
        yield _UngatedPass(partitions)


def make_gate(
    config: IngestConfig, spark: SparkSession, *, stop: threading.Event | None = None
) -> GateLike:
    """The gate of `config`: a lakelock `Gate` whose job groups cancel Spark work, or `Ungated`.
    `stop` (the job's stop) ends a pass that still waits for its lease."""
    if not config.gate_enabled:
        log.warning("gate disabled: commits to %s are not coordinated", config.table)
        return Ungated()
    from ingest_gate.gate import Gate
    from jobkit.spark import SparkJobGroups
    from service.client import LeaseClient

    client = LeaseClient(config.lakelock_url, token=config.lakelock_token)
    return Gate(
        client,
        holder=config.holder,
        ttl_s=config.lease_ttl_s,
        max_hold_s=config.max_hold_s,
        policy=config.policy,  # type: ignore[arg-type]  # validated by IngestConfig
        poll_s=config.poll_s,
        job_groups=SparkJobGroups(spark.sparkContext),
        stop=stop,
    )
