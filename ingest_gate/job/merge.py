"""The MERGE statement of one micro-batch: upserts, and deletes for change streams.

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
batch win a tie, the same rule as within a batch (see ingest_gate.job.changes).

A change stream's batch (one last change per key, `_deleted` true for a delete) merges with

    merge_sql(target="local.db.users", source="batch_7", key_columns=("userid",),
              columns=("userid", "name"), delete_column="_deleted")

    MERGE INTO `local`.`db`.`users` t
    USING `batch_7` s
    ON t.`userid` = s.`userid`
    WHEN MATCHED AND s.`_deleted` THEN DELETE
    WHEN MATCHED THEN UPDATE SET t.`userid` = s.`userid`, t.`name` = s.`name`
    WHEN NOT MATCHED AND NOT s.`_deleted` THEN INSERT (`userid`, `name`) VALUES (s.`userid`, ...)

Replaying a stretch of a change stream again, in order, converges: each batch leaves every key
it names in the state of its last change, whatever the table held before.

Under partition scope the ON condition also names the batch's partitions
(`partition_filter`, built by `jobkit.predicate.merge_filter`).
"""

from __future__ import annotations

from collections.abc import Sequence

from jobkit.sql import quote_identifier

__all__ = ["merge_sql"]


def merge_sql(
    *,
    target: str,
    source: str,
    key_columns: Sequence[str],
    event_time_column: str | None = None,
    columns: Sequence[str] | None = None,
    delete_column: str | None = None,
    partition_filter: str | None = None,
) -> str:
    """The MERGE INTO statement that applies view `source` to table `target`; with
    `partition_filter` (from `partition_predicate`) ANDed to the ON condition.

    `columns`: the table columns to write, by name (None: `*`, every column of the source); a
    column added to the table after they were read keeps its value (null in new rows).
    `event_time_column`: the json format's guard, a matched row changes only when the source
    row is as new or newer. `delete_column`: a boolean source column; true deletes the key
    (change streams; no event-time guard: a key's changes arrive in order).

    Raises:
        ValueError: no key column, or the event-time column is a key column.
    """
    if not key_columns:
        raise ValueError("key_columns must name at least one column")
    if event_time_column is not None and event_time_column in key_columns:
        raise ValueError(f"event_time_column {event_time_column!r} must not be a key column")
    on = " AND ".join(f"t.{quote_identifier(c)} = s.{quote_identifier(c)}" for c in key_columns)
    if partition_filter is not None:
        on += f" AND ({partition_filter})"
    if columns is None:
        update, insert = "UPDATE SET *", "INSERT *"
    else:
        names = [quote_identifier(c) for c in columns]
        update = "UPDATE SET " + ", ".join(f"t.{n} = s.{n}" for n in names)
        insert = f"INSERT ({', '.join(names)}) VALUES ({', '.join(f's.{n}' for n in names)})"
    matched = "WHEN MATCHED"
    if event_time_column is not None:
        ts = quote_identifier(event_time_column)
        matched += f" AND s.{ts} >= t.{ts}"
    clauses = [f"{matched} THEN {update}", f"WHEN NOT MATCHED THEN {insert}"]
    if delete_column is not None:
        deleted = f"s.{quote_identifier(delete_column)}"
        clauses = [
            f"WHEN MATCHED AND {deleted} THEN DELETE",
            f"{matched} THEN {update}",
            f"WHEN NOT MATCHED AND NOT {deleted} THEN {insert}",
        ]
    return (
        f"MERGE INTO {quote_identifier(target)} t\n"
        f"USING {quote_identifier(source)} s\n"
        f"ON {on}\n" + "\n".join(clauses)
    )
