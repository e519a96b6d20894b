"""The demo pipeline's knobs (demo.pipeline): one run's `PipelineOptions`, the compactor's table
config they make, and how the demo compacts (`COMPACTORS`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.procedure_config import RewriteDataFilesConfig
from demo.s3 import BUCKET

__all__ = ["COMPACTORS", "TOPIC", "PipelineOptions"]

TOPIC = "events"  # the demo's topic with `source="kafka"`
COMPACTORS = ("follow", "timer")
"""How the demo compacts: following the stream (the default), or every `compact_every_s`."""


@dataclass(frozen=True)
class PipelineOptions:
    """One run's knobs; the defaults are the demo's."""

    duration_s: float = 120.0
    workdir: Path = Path("var/demo")
    table: str = "local.db.events"
    rate: float = 200.0
    file_interval_s: float = 1.0
    trigger_interval_s: float = 2.0
    # "follow": the follower (long-polls for due partitions, full plan every
    # full_plan_every_s); "timer": a run every compact_every_s (see demo.pipeline).
    # `python -m demo` and benchmarks.streaming_health follow by default; the benchmarks built
    # on benchmarks.modes keep the timer they were measured with
    compactor: str = "timer"
    compact_every_s: float = 20.0
    full_plan_every_s: float = 300.0
    follow_poll_s: float = 10.0
    seed: int = 1
    update_ratio: float = 0.3
    duplicate_ratio: float = 0.1
    late_update_ratio: float = 0.05
    bad_ratio: float = 0.01
    # updates only to keys of the newest event hours (None: any key), so older partitions go
    # cold: the workload partition scopes are for (benchmarks/scopes.py)
    update_window: timedelta | None = None
    # the compactor leaves partitions a commit touched within it alone (0: only those a live
    # commit lease covers)
    hot_window: timedelta = timedelta(0)
    coordinated: bool = True
    # json: click events (duplicates, late updates); debezium, canal: change events of the
    # same table (updates, key changes, deletes), see demo.generate.ChangeGenerator
    format: str = "json"
    delete_ratio: float = 0.1
    key_change_ratio: float = 0.05
    lease_scope: str = "partitions"  # the key (event_id, dt, hr) holds both partition columns
    lease_ttl_s: float = 20.0
    max_hold_s: float = 120.0
    spark_master: str = "local[2]"
    progress_every_s: float = 5.0
    health_every_s: float = 5.0
    # False: no compactor at all (the streaming-health benchmark's baseline)
    compactions_on: bool = True
    # by counts (see demo.pipeline): `events` set switches from duration_s to counts
    events: int | None = None
    compactions: int = 1
    timeout_s: float = 900.0
    # files: a landing folder; kafka: a topic of a broker started for the run (demo.kafka)
    source: str = "files"
    kafka_partitions: int = 4
    # the compactor's plan settings over the demo's (compactor.config.PlanConfig field names,
    # e.g. {"trigger_small_files": 8}): what benchmarks.streaming_health --plan sweeps
    plan: dict[str, Any] = field(default_factory=dict)
    # file: a Hadoop catalog in the workdir; s3: the service's catalog front on an S3
    # warehouse, the checkpoints beside it (demo.lake): the project's S3 server, or
    # `s3_endpoint`'s bucket `s3_bucket` (keys from the AWS environment)
    storage: str = "file"
    s3_endpoint: str | None = None
    s3_bucket: str = BUCKET
    # the click-event table's format version: 2 (position delete files) or 3 (deletion
    # vectors), on either storage
    format_version: int = 2
    # how a batch changes rows of a data file: a delete file beside it (merge-on-read) or the
    # file rewritten (copy-on-write: no delete file for a reader to apply)
    write_mode: str = "merge-on-read"

    @property
    def by_counts(self) -> bool:
        return self.events is not None

    @property
    def events_per_file(self) -> float:
        """Events the generator writes each `file_interval_s` (a file, or messages to the topic)."""
        return self.rate * self.file_interval_s

    @property
    def follows(self) -> bool:
        """The compactor follows the stream (it needs the service: uncoordinated, the timer)."""
        return self.compactor == "follow" and self.coordinated

    def table_config(self) -> TableConfig:
        """The compactor's config of `table`: demo-sized thresholds (the files here are KBs,
        not the 128 MiB of a real table), `plan` over them."""
        return TableConfig(
            name=self.table,
            lease=LeaseConfig(
                ttl=timedelta(seconds=self.lease_ttl_s),
                max_wait=timedelta(seconds=60),
                scope=self.lease_scope,
            ),
            plan=PlanConfig(
                **{
                    "min_small_files": 8,
                    "min_delete_files": 8,
                    "hot_window": self.hot_window,
                    **self.plan,
                }
            ),
            rewrite_data_files=RewriteDataFilesConfig(
                options={
                    "target-file-size-bytes": str(8 * 1024 * 1024),
                    "min-input-files": "2",
                    "max-concurrent-file-group-rewrites": "2",
                    "partial-progress.enabled": "false",
                }
            ),
        )
