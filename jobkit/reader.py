"""Keep a reader's hold (service.client.ReaderLease) at the position of a streaming query that
reads an Iceberg table.

    query = spark.readStream.format("iceberg").load("lake.db.orders")...start()
    follow(spark, query, hold)      # after each micro-batch: hold.advance(<its end snapshot>)

The Iceberg source's offsets are JSON (`{"version":1,"snapshot_id":..,"position":..,...}`);
after each batch the query has read up to its end offset's snapshot, which it may still need
(the next batch starts inside it), so that snapshot is the reader's position. When the source
reports its latest offset and that is the same snapshot, the reader is 0 snapshots behind;
otherwise (Iceberg 1.9's source reports no latest offset) the distance is unknown here, and
operators see how long ago the reader last advanced.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["Hold", "follow", "iceberg_snapshot"]

log = logging.getLogger(__name__)


class Hold(Protocol):
    """What `follow` moves: service.client.ReaderLease (jobkit imports no lakelock client)."""

    @property
    def snapshot_id(self) -> int | None: ...

    def advance(self, snapshot_id: int, *, snapshots_behind: int | None = None) -> None: ...


def iceberg_snapshot(offset: str | None) -> int | None:
    """The snapshot id of an Iceberg streaming offset (None for another source's offset)."""
    if not offset:
        return None
    try:
        parsed = json.loads(offset)
    except ValueError:
        return None
    snapshot = parsed.get("snapshot_id") if isinstance(parsed, dict) else None
    return int(snapshot) if snapshot is not None else None


def follow(spark: SparkSession, query: StreamingQuery, hold: Hold) -> Any:
    """Advance `hold` after each progress of `query` to its Iceberg source's end snapshot;
    returns the listener (`spark.streams.removeListener(...)` stops it)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    query_id = str(query.id)

    class Follow(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            return None

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            return None

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            if str(progress.id) != query_id:
                return
            for source in progress.sources:
                end = iceberg_snapshot(source.endOffset)
                if end is None:
                    continue
                latest = iceberg_snapshot(source.latestOffset)
                behind = 0 if latest == end else None
                if end != hold.snapshot_id or behind == 0:
                    hold.advance(end, snapshots_behind=behind)
                return

    listener = Follow()
    spark.streams.addListener(listener)
    return listener
