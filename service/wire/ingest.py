"""Ingest: how far an ingest query is behind its source, and the offsets it skipped
(`PUT /v1/tables/{table}/ingest-lag`, `POST /v1/tables/{table}/ingest-gaps`, TableState.ingest_lag).

    LagBody        request: an ingest query's lag per topic-partition, after a batch committed
    OffsetGap      request part: offsets of a topic-partition the source deleted before a read
    GapsBody       request: the ranges an ingest job skipped
    IngestLag      the latest lag reported, with its total
    GapsRecorded   the answer of a gap report
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from service.wire.common import Answer, Body, Count, Token

__all__ = [
    "MAX_SOURCE_PARTITIONS",
    "GapsBody",
    "GapsRecorded",
    "IngestLag",
    "LagBody",
    "OffsetGap",
    "QueryId",
    "SourcePartition",
]

MAX_SOURCE_PARTITIONS = 1000
"""Topic-partitions one lag report or gap report may name."""

SourcePartition = Annotated[str, Field(min_length=1, max_length=300)]
"""A topic-partition as the ingest job names it: `topic:partition` (`events:3`); a label, so
any name is kept as sent."""

QueryId = Annotated[str, Field(min_length=1, max_length=128)]


# -- requests --------------------------------------------------------------------------------


class LagBody(Body):
    """How far an ingest query is behind its source, measured after a batch committed: per
    topic-partition, the latest offset minus the end of the batch. The latest report of a
    table replaces the one before."""

    query_id: QueryId = Field(description="the streaming query (its id survives restarts)")
    batch_id: Count = Field(description="the batch after whose commit the lag was measured")
    partitions: dict[SourcePartition, Count] = Field(
        max_length=MAX_SOURCE_PARTITIONS,
        description="records behind, per topic-partition named `topic:partition`",
        examples=[{"events:0": 12, "events:1": 0}],
    )


class OffsetGap(Body):
    """`records` offsets from `start` of a topic-partition that the source deleted (retention,
    or by hand) before the ingest job read them."""

    topic: Annotated[str, Field(min_length=1, max_length=249)]
    partition: Count
    start: Count = Field(description="the first offset lost")
    records: Token = Field(description="how many offsets were lost, from `start` on (>= 1)")


class GapsBody(Body):
    """Ranges an ingest job skipped because its source no longer held them, each recorded as an
    `ingest.gap` event so that the loss is on the table's audit trail."""

    query_id: QueryId
    gaps: list[OffsetGap] = Field(min_length=1, max_length=MAX_SOURCE_PARTITIONS)


# -- answers ---------------------------------------------------------------------------------


class IngestLag(Answer):
    """The latest lag an ingest query reported for the table (`LagBody`), with its total."""

    query_id: str
    batch_id: int
    partitions: dict[str, int]
    records: int = Field(description="records behind over all its topic-partitions")
    reported_by: str | None = None
    reported_s_ago: float = Field(description="seconds since the report, by the database clock")


class GapsRecorded(Answer):
    recorded: int = Field(description="ingest.gap events written")
    records_lost: int = Field(description="offsets the gaps span")
