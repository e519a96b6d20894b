"""The Kafka side of the ingest job: where the checkpoint stands, what the topic still holds,
what retention took, and how far behind the job is.

    progress = KafkaProgress(spark, config, client)   # what the job uses, from the parts:
    progress.reader_options()         # the retention check: RetentionLoss, or gaps recorded
    progress.after_batch(7, query_id) # {"events:0": 12, ...}, reported to the service

    offsets = KafkaOffsets(spark, reader_options)          # Kafka's own client, in the driver JVM
    needed = Checkpoint(spark, location).position()        # {(topic, p): next offset}
    lost = lost_ranges(needed, offsets.earliest(needed))   # [Gap("events", 0, 100, 150)]
    lag_of(needed, offsets.latest(needed))                 # {"events:0": 12, ...}

A topic's records are deleted by retention (time or size) or by hand (`deleteRecords`) whether
or not a consumer read them. Spark's Kafka source notices only when it next reads (and then
fails with `failOnDataLoss`, or skips ahead silently without it). The job checks before it
starts: the end of the last committed batch (the checkpoint's offsets) against the earliest
offset each partition still holds; a partition whose earliest offset moved past it lost the
records between. By default the job stops and says which ranges and the two ways on; with
`on_data_loss = "skip"` it records each gap as a lakelock event (`ingest.gap`) and reads on from
the earliest offset.

Lag is per topic-partition: the latest offset minus the end of the last committed batch. The
job puts it in each batch's log line and reports it to the service (status, metrics, page).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.wire.errors import TRANSIENT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest_gate.job.config import IngestConfig
    from service.client import LeaseClient

log = logging.getLogger(__name__)

__all__ = [
    "Checkpoint",
    "Gap",
    "KafkaOffsets",
    "KafkaProgress",
    "Position",
    "RetentionLoss",
    "lag_of",
    "lost_ranges",
    "position_label",
]

Position = dict[tuple[str, int], int]
"""(topic, partition) -> an offset: the next one to read, or the next one a partition will get."""


@dataclass(frozen=True, order=True)
class Gap:
    """Offsets [start, end) of one topic-partition that retention deleted before they were read."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start

    def as_dict(self) -> dict[str, Any]:
        """As the service takes it (`OffsetGap`): where the gap starts and how many it lost."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "records": self.records,
        }


class RetentionLoss(RuntimeError):
    """Kafka no longer holds records the job has not read: the job stops instead of skipping."""

    def __init__(self, table: str, gaps: list[Gap]) -> None:
        self.table = table
        self.gaps = gaps
        ranges = "; ".join(
            f"{position_label(g.topic, g.partition)} offsets {g.start}..{g.end - 1} "
            f"({g.records} records)"
            for g in gaps
        )
        super().__init__(
            f"{table}: Kafka's retention deleted records this job had not read: {ranges}. The "
            "job stopped so that nothing is skipped silently. Two ways on: (1) run it with "
            'on_data_loss = "skip" (--on-data-loss skip) to start again from the earliest '
            "offsets, each gap recorded as an ingest.gap event in lakelock's audit trail; or "
            "(2) backfill the lost ranges from the source of record (a fresh snapshot of the "
            "source table, or the records produced again), then run the job as before."
        )


def position_label(topic: str, partition: int) -> str:
    """`events:3`: how a topic-partition is named in log lines, reports and metrics."""
    return f"{topic}:{partition}"


def lost_ranges(needed: Position, earliest: Position) -> list[Gap]:
    """The ranges between where the job must read on and where each partition now starts."""
    return sorted(
        Gap(topic, partition, start, earliest[(topic, partition)])
        for (topic, partition), start in needed.items()
        if earliest.get((topic, partition), start) > start
    )


def lag_of(position: Position, latest: Position) -> dict[str, int]:
    """Records behind, per topic-partition: latest offset minus the job's position (a partition
    the job has no position for yet is behind by all it holds: its position is its earliest,
    given as 0 here only when the caller knows no better)."""
    return {
        position_label(topic, partition): max(end - position.get((topic, partition), 0), 0)
        for (topic, partition), end in sorted(latest.items())
    }


def _offsets_json(text: str) -> Position:
    """The source offsets of a checkpoint's offset file: its last line (one source),
    `{"topic": {"0": 12, ...}}`."""
    last = [line for line in text.splitlines() if line.strip()][-1]
    data = json.loads(last)
    return {
        (topic, int(p)): int(offset) for topic, parts in data.items() for p, offset in parts.items()
    }


class Checkpoint:
    """A streaming query's checkpoint folder, read through Hadoop's file system (any location
    the query can use). Spark writes `offsets/<batch>` (where a batch ends) before it runs the
    batch and `commits/<batch>` after; `metadata` holds the query id."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        self._jvm = spark._jvm
        self._root = self._jvm.org.apache.hadoop.fs.Path(location)
        self._fs = self._root.getFileSystem(spark._jsc.hadoopConfiguration())

    def _read(self, *parts: str) -> str | None:
        path = self._jvm.org.apache.hadoop.fs.Path(self._root, "/".join(parts))
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def _ids(self, folder: str) -> list[int]:
        path = self._jvm.org.apache.hadoop.fs.Path(self._root, folder)
        if not self._fs.exists(path):
            return []
        names = [status.getPath().getName() for status in self._fs.listStatus(path)]
        return sorted(int(name) for name in names if name.isdigit())

    def query_id(self) -> str | None:
        text = self._read("metadata")
        return None if text is None else str(json.loads(text)["id"])

    def batch_end(self, batch_id: int) -> Position | None:
        """Where batch `batch_id` ends (the next offset of each partition after it)."""
        text = self._read("offsets", str(batch_id))
        return None if text is None else _offsets_json(text)

    def position(self) -> Position | None:
        """Where a restarted query reads on: the end of its last committed batch, or the
        offsets it started from when no batch committed yet; None for a new checkpoint."""
        committed = self._ids("commits")
        if committed:
            end = self.batch_end(committed[-1])
            if end is not None:
                return end
        start = self._read("sources", "0", "0")
        return _offsets_json(start) if start is not None else None


class KafkaOffsets:
    """Earliest and latest offsets from Kafka's own client (kafka-clients, which Spark's Kafka
    source brings to the driver), configured from the job's `kafka.*` reader options.

    offsets = KafkaOffsets(spark, {"kafka.bootstrap.servers": "b:9092", "subscribe": "events"})
    offsets.topic_partitions()       # [("events", 0), ("events", 1)]
    offsets.earliest(), offsets.latest()
    offsets.close()
    """

    def __init__(self, spark: SparkSession, options: Mapping[str, str]) -> None:
        self._jvm = spark._jvm
        self._options = dict(options)
        props = self._jvm.java.util.Properties()
        for key, value in options.items():
            if key.startswith("kafka."):
                props.setProperty(key.removeprefix("kafka."), str(value))
        deserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
        props.setProperty("key.deserializer", deserializer)
        props.setProperty("value.deserializer", deserializer)
        props.setProperty("enable.auto.commit", "false")
        self._consumer = self._jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topic_partitions(self) -> list[tuple[str, int]]:
        """The partitions the reader options select (`subscribe`, `assign` or
        `subscribePattern`), as the broker knows them now."""
        if self._options.get("assign"):
            assigned = json.loads(self._options["assign"])
            return sorted((t, int(p)) for t, parts in assigned.items() for p in parts)
        if self._options.get("subscribe"):
            topics = [t.strip() for t in self._options["subscribe"].split(",") if t.strip()]
        else:
            pattern = self._jvm.java.util.regex.Pattern.compile(self._options["subscribePattern"])
            topics = [
                t for t in self._consumer.listTopics().keySet() if pattern.matcher(t).matches()
            ]
        out = []
        for topic in topics:
            for info in self._consumer.partitionsFor(topic) or []:
                out.append((str(info.topic()), int(info.partition())))
        return sorted(out)

    def earliest(self, partitions: Position | list[tuple[str, int]] | None = None) -> Position:
        return self._ask("beginningOffsets", partitions)

    def latest(self, partitions: Position | list[tuple[str, int]] | None = None) -> Position:
        return self._ask("endOffsets", partitions)

    def _ask(self, method: str, partitions: Position | list[tuple[str, int]] | None) -> Position:
        wanted = list(partitions) if partitions is not None else self.topic_partitions()
        asked = self._jvm.java.util.ArrayList()
        for topic, partition in wanted:
            asked.add(self._jvm.org.apache.kafka.common.TopicPartition(topic, partition))
        answer = getattr(self._consumer, method)(asked)
        return {
            (str(entry.getKey().topic()), int(entry.getKey().partition())): int(entry.getValue())
            for entry in answer.entrySet()
        }


class KafkaProgress:
    """The ingest job's view of its Kafka source: the retention check at start, the lag after
    each batch, both told to the service when the job has one (`client`).

    progress = KafkaProgress(spark, config, client)
    options = progress.reader_options()      # raises RetentionLoss, or records the gaps
    lag = progress.after_batch(batch_id, query_id)   # {"events:0": 12}, reported
    """

    def __init__(
        self, spark: SparkSession, config: IngestConfig, client: LeaseClient | None
    ) -> None:
        from ingest_gate.job.source import kafka_reader_options

        self._spark = spark
        self._config = config
        self._client = client
        self._options = kafka_reader_options(config)
        self._checkpoint = Checkpoint(spark, config.checkpoint_path)
        self._offsets: KafkaOffsets | None = None

    def _kafka(self) -> KafkaOffsets:
        if self._offsets is None:
            self._offsets = KafkaOffsets(self._spark, self._options)
        return self._offsets

    def close(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None

    def reader_options(self) -> dict[str, str]:
        """The reader options for this start, once the checkpoint's position was checked
        against what the topics still hold.

        Raises:
            RetentionLoss: records were lost and `on_data_loss` is `stop` (the default).
            service.wire.errors.LakelockError: the gaps could not be recorded (`skip`).
        """
        needed = self._checkpoint.position()
        if not needed:
            return self._options  # a new query: startingOffsets decides
        gaps = lost_ranges(needed, self._kafka().earliest(list(needed)))
        if not gaps:
            return self._options
        if self._config.on_data_loss == "stop":
            raise RetentionLoss(self._config.table, gaps)
        query_id = self._checkpoint.query_id() or "unknown"
        log.warning(
            "%s: skipping what Kafka's retention deleted before it was read (on_data_loss = "
            "skip): %s",
            self._config.table,
            json.dumps([g.as_dict() for g in gaps]),
        )
        if self._client is not None:
            self._client.record_ingest_gaps(
                self._config.table,
                query_id=query_id,
                gaps=[g.as_dict() for g in gaps],
            )
        # Spark's source then reads on from each partition's earliest offset; it would refuse
        # with failOnDataLoss, which stays on in every start that found nothing lost
        return {**self._options, "failOnDataLoss": "false"}

    def after_batch(self, batch_id: int, query_id: str) -> dict[str, int] | None:
        """Records behind per topic-partition after batch `batch_id`, reported to the service
        (a transient failure to report is logged: the next batch reports again)."""
        end = self._checkpoint.batch_end(batch_id)
        if end is None:
            return None
        lag = lag_of(end, self._kafka().latest(list(end)))
        if self._client is not None:
            try:
                self._client.report_ingest_lag(
                    self._config.table, query_id=query_id, batch_id=batch_id, partitions=lag
                )
            except TRANSIENT as exc:
                log.warning(
                    "lag of batch %d not reported (the next batch reports): %s", batch_id, exc
                )
        return lag
