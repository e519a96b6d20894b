"""The upsert statement of one micro-batch.

    merge_sql(target="local.db.events", source="batch_7",
              key_columns=("event_id", "dt", "hr"), event_time_column="event_time")

gives

    MERGE INTO `local`.`db`.`events` t
    USING `batch_7` s
    ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr`
    WHEN MATCHED AND s.`event_time` >= t.`event_time` THEN UPDATE SET *
    WHEN NOT MATCHED THEN INSERT *

The event-time guard makes the statement idempotent: replaying a batch that already committed
matches every row with an equal event time and rewrites it with the same values, and an older
version of a key (a late update) never replaces a newer one. `>=` rather than `>` lets a later
batch win a tie, the same rule as within a batch (see ingest_gate.schema).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["merge_sql", "quote_identifier"]


def quote_identifier(name: str) -> str:
    """`a.b.c` -> `` `a`.`b`.`c` ``, each part back-quoted (back-quotes inside are doubled)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def merge_sql(
    *,
    target: str,
    source: str,
    key_columns: Sequence[str],
    event_time_column: str,
) -> str:
    """The MERGE INTO statement that upserts view `source` into table `target`.

    Raises:
        ValueError: no key column, or the event-time column is a key column.
    """
    if not key_columns:
        raise ValueError("key_columns must name at least one column")
    if event_time_column in key_columns:
        raise ValueError(f"event_time_column {event_time_column!r} must not be a key column")
    on = " AND ".join(f"t.{quote_identifier(c)} = s.{quote_identifier(c)}" for c in key_columns)
    ts = quote_identifier(event_time_column)
    return (
        f"MERGE INTO {quote_identifier(target)} t\n"
        f"USING {quote_identifier(source)} s\n"
        f"ON {on}\n"
        f"WHEN MATCHED AND s.{ts} >= t.{ts} THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )
