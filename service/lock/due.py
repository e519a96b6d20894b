"""Due partitions: the files each partition gained since it was last compacted, counted as
commits land, and the compactors that long-poll for them (docs/design.md §5.1).

    add_written(conn, table=t, written={"dt=2024-06-20": Files(2, 1)}, at=at, trigger=Trigger())
                                        a commit's files: the partitions that became due
    compacted(conn, table=t, partitions=["dt=2024-06-20"], at=at)
                                        a compaction: counts to zero, a due->compacted sample each
    forget(conn, t) / move(conn, source=t, destination=u)
                                        the table dropped / renamed (service.lock.drops)
    replace(conn, table=t, partitions={...}, at=at, trigger=Trigger())
                                        a compactor's measured debt, the correction
    poll(conn, tables=["lake.db.*"], holder=h, principal=p, limit=100, parked_s=30)
                                        Polled: the due partitions a follower may take now
    marker(conn)                        what moves when a partition becomes due, for long-polls
    of_table(conn, t, at)               TableDue | None, for the table's state
    figures(conn, at=at, max_tables=100)  [(table, Figures)] for the gauges

The counting functions run in their caller's transaction, under the table's row lock (a
release, a catalog commit, a debt report), so the counts of one table change in commit order.
Counting is not lock state: no audit event, no version bump. A partition becoming due wakes
the long-polls parked on `CHANNEL` (`db.wake`), at once in this process and, through another
replica, when its poller sees `marker` move. A compaction stores the time from due to compacted
(database clock) as a sample; the figures are over the samples of the last hour.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import ColumnElement

from service.lock import store
from service.lock.db import claims_t, due_samples_t, due_t, followers_t, now, tables_t, wake
from service.lock.rows import seconds
from service.wire import DuePartition, PartitionFiles, TableDue
from service.wire.figures import quantile
from service.wire.holders import acts_under

__all__ = [
    "CHANNEL",
    "FOLLOWING",
    "HOUR",
    "Figures",
    "Files",
    "Polled",
    "Trigger",
    "add_written",
    "compacted",
    "figures",
    "forget",
    "marker",
    "move",
    "of_table",
    "poll",
    "replace",
]

CHANNEL = "lakelock:due"
"""The wake channel of the long-polls for due partitions: never a table's name."""

HOUR = timedelta(hours=1)
"""The window of the due-to-compacted figures."""

FOLLOWING = timedelta(minutes=5)
"""A compactor that long-polled for a table within this long follows it."""

_CHUNK = 500  # names per IN (...): well under SQLite's and MySQL's limits on parameters


@dataclass(frozen=True, slots=True)
class Files:
    """A partition's files counted since its last compaction: data files, delete files, and of
    the delete files those that delete by equality (what a Flink upsert commits)."""

    data: int = 0
    deletes: int = 0
    equality: int = 0

    @classmethod
    def of(cls, sent: PartitionFiles) -> Files:
        """The counts a release or a debt report sent for one partition."""
        return cls(sent.data_files, sent.delete_files, sent.equality_delete_files)

    def __bool__(self) -> bool:
        return bool(self.data or self.deletes)

    def plus(self, other: Files) -> Files:
        return Files(
            _capped(self.data + other.data),
            _capped(self.deletes + other.deletes),
            _capped(self.equality + other.equality),
        )


@dataclass(frozen=True, slots=True)
class Trigger:
    """When a partition is due: its data files, its delete files, or its equality delete files
    counted since its last compaction reach these (LAKELOCK_DUE_DATA_FILES,
    LAKELOCK_DUE_DELETE_FILES, LAKELOCK_DUE_EQUALITY_DELETE_FILES). Equality deletes weigh
    most: every reader joins each one with every older data file of its partition, so one is
    enough by default (docs/design.md §5.1)."""

    data_files: int = 4
    delete_files: int = 4
    equality_delete_files: int = 1

    def due(self, files: Files) -> bool:
        return (
            files.data >= self.data_files
            or files.deletes >= self.delete_files
            or files.equality >= self.equality_delete_files
        )


# -- counting --------------------------------------------------------------------------------


def add_written(
    conn: Connection,
    *,
    table: str,
    written: Mapping[str, Files],
    at: datetime,
    trigger: Trigger,
) -> list[str]:
    """Add a commit's files per partition (`written`: name -> its Files); answers the
    partitions that became due with it. A partition it added no file to is left as it was."""
    counted = {name: files for name, files in written.items() if files}
    if not counted:
        return []
    rows = _rows(conn, table, counted)
    fresh: list[dict[str, Any]] = []
    grown: list[dict[str, Any]] = []
    became: list[str] = []
    for name, files in counted.items():
        row = rows.get(name)
        if row is None:
            due_at = at if trigger.due(files) else None
            fresh.append(_new(table, name, files, at, due_at, commits=1))
        else:
            files = _files(row).plus(files)
            due_at = row.due_at or (at if trigger.due(files) else None)
            grown.append(_changed(table, name, files, row, due_at, at, commits=row.commits + 1))
        if due_at is not None and (row is None or row.due_at is None):
            became.append(name)
    _write(conn, fresh, grown)
    if became:
        wake(CHANNEL)
    return became


def compacted(conn: Connection, *, table: str, partitions: Iterable[str], at: datetime) -> int:
    """The partitions were compacted: their counts go to zero, and each that was due stores
    the seconds from due to `at`; answers how many samples were stored."""
    names = list(dict.fromkeys(partitions))
    rows = _rows(conn, table, names)
    samples = [
        {
            "table_name": table,
            "partition_name": name,
            "due_at": row.due_at,
            "compacted_at": at,
            "seconds": max(0.0, seconds(at - row.due_at)),
        }
        for name, row in rows.items()
        if row.due_at is not None
    ]
    _forget(conn, table, list(rows))
    if samples:
        conn.execute(insert(due_samples_t), samples)
    return len(samples)


def forget(conn: Connection, table: str) -> int:
    """A dropped table owes nothing: its due partitions deleted (no sample); how many."""
    return store.forget_rows(conn, due_t, table)


def move(conn: Connection, *, source: str, destination: str) -> int:
    """A renamed table's due partitions go with it; how many."""
    return store.move_rows(conn, due_t, source, destination)


def replace(
    conn: Connection,
    *,
    table: str,
    partitions: Mapping[str, Files],
    at: datetime,
    trigger: Trigger,
) -> list[str]:
    """A compactor measured the table: its counts per partition replace those counted, and a
    partition it did not name counts nothing. A partition still due keeps when it became due,
    one newly due is due from `at`, one no longer due is not (no sample: nothing says it was
    compacted). Answers the partitions that became due."""
    counted = conn.execute(select(due_t).where(_c.table_name == table))
    rows = {row.partition_name: row for row in counted}
    measured = {name: files for name, files in partitions.items() if files}
    _forget(conn, table, [name for name in rows if name not in measured])
    fresh: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    became: list[str] = []
    for name, files in measured.items():
        row = rows.get(name)
        due_at = None
        if trigger.due(files):
            due_at = row.due_at if row is not None and row.due_at is not None else at
            if row is None or row.due_at is None:
                became.append(name)
        if row is None:
            fresh.append(_new(table, name, files, at, due_at, commits=0))
        else:
            kept.append(_changed(table, name, files, row, due_at, at, commits=row.commits))
    _write(conn, fresh, kept)
    if became:
        wake(CHANNEL)
    return became


COUNT_CAP = 1_000_000_000
"""The most a partition's count holds: past it a partition is due all the same, and the sum
over a table's partitions stays far inside a 64-bit integer (SQLite's SUM fails past one; a
job token's releases must not make the table's listing fail for everyone)."""


def _capped(count: int) -> int:
    return min(count, COUNT_CAP)


def _files(row: Any) -> Files:
    return Files(row.data_files, row.delete_files, row.equality_delete_files)


def _new(
    table: str, name: str, files: Files, at: datetime, due_at: datetime | None, *, commits: int
) -> dict[str, Any]:
    return {
        "table_name": table,
        "partition_name": name,
        "data_files": _capped(files.data),
        "delete_files": _capped(files.deletes),
        "equality_delete_files": _capped(files.equality),
        "commits": commits,
        "first_at": at,
        "due_at": due_at,
        "updated_at": at,
    }


def _changed(
    table: str,
    name: str,
    files: Files,
    row: Any,
    due_at: datetime | None,
    at: datetime,
    *,
    commits: int,
) -> dict[str, Any]:
    """The parameters of `_UPDATE` for a counted partition."""
    return {
        "t": table,
        "p": name,
        "data": files.data,
        "deletes": files.deletes,
        "equality": files.equality,
        "commits": _capped(commits),
        "first": row.first_at,
        "due": due_at,
        "at": at,
    }


_c = due_t.c
_UPDATE = (
    update(due_t)
    .where(_c.table_name == bindparam("t"), _c.partition_name == bindparam("p"))
    .values(
        data_files=bindparam("data"),
        delete_files=bindparam("deletes"),
        equality_delete_files=bindparam("equality"),
        commits=bindparam("commits"),
        first_at=bindparam("first"),
        due_at=bindparam("due"),
        updated_at=bindparam("at"),
    )
)


def _write(conn: Connection, fresh: list[dict[str, Any]], changed: list[dict[str, Any]]) -> None:
    if fresh:
        conn.execute(insert(due_t), fresh)
    if changed:
        conn.execute(_UPDATE, changed)


def _chunks(names: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(names), _CHUNK):
        yield names[start : start + _CHUNK]


def _rows(conn: Connection, table: str, names: Iterable[str]) -> dict[str, Any]:
    """The counted rows of `names` of `table`, by partition name."""
    found: dict[str, Any] = {}
    for chunk in _chunks(list(names)):
        query = select(due_t).where(_c.table_name == table, _c.partition_name.in_(chunk))
        found.update((row.partition_name, row) for row in conn.execute(query))
    return found


def _forget(conn: Connection, table: str, names: Sequence[str]) -> None:
    for chunk in _chunks(names):
        conn.execute(delete(due_t).where(_c.table_name == table, _c.partition_name.in_(chunk)))


# -- the long-poll ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Polled:
    """One try of a follower's long-poll: what is due for it, and the marker read before."""

    due: list[DuePartition]
    marker: object


def marker(conn: Connection) -> object:
    """What moves when a partition becomes due (on any table): how many are due and the latest
    `due_at`. A parked long-poll that saw one value is woken when another is read."""
    count, latest = conn.execute(
        select(func.count(), func.max(_c.due_at)).where(_c.due_at.is_not(None))
    ).one()
    return (int(count), latest)


def poll(
    conn: Connection,
    *,
    tables: Sequence[str],
    holder: str,
    principal: str,
    limit: int,
    parked_s: float,
    scope: Sequence[str] | None = None,
) -> Polled:
    """The due partitions of the tables `tables` name (names or globs, lower case; `*` and `?`
    match any characters, dots too), most files first, at most `limit`: not those of a table
    another compactor holds the claim of (its holder neither `holder` nor a run under it, or
    `holder` a run under it), nor of a table whose maintenance is switched off (nothing could
    compact them), nor of a table outside `scope` (the token's table patterns; None: every
    table). The follower (`principal`, `holder`) is recorded as following `tables` within
    `scope`, parked for `parked_s` when nothing is due for it.
    The marker is read first: what becomes due after it, the long-poll wakes for."""
    at = now(conn)
    seen = marker(conn)
    found = _due(conn, tables, holder, limit, at, scope)
    parked = at + timedelta(seconds=parked_s) if parked_s > 0 and not found else None
    store.put_row(
        conn,
        followers_t,
        {"principal": principal, "holder": holder},
        {
            "tables": json.dumps(sorted(tables)),
            "scope": None if scope is None else json.dumps(sorted(scope)),
            "polled_at": at,
            "parked_until": parked,
        },
    )
    return Polled(found, seen)


def _like(pattern: str) -> str:
    """A table glob as a LIKE pattern (escaped with `/`, which no table name holds)."""
    escaped = pattern.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return escaped.replace("*", "%").replace("?", "_")


def _named(column: ColumnElement[str], tables: Sequence[str]) -> ColumnElement[bool]:
    return or_(*(column.like(_like(pattern), escape="/") for pattern in tables))


def _same_compactor(claimant: str, holder: str) -> bool:
    """A claim of `claimant` is `holder`'s own: the same holder, or a run of one under the
    other (`<holder>/<run>`, service.wire.holders): a follower's run polling under its claim,
    or a follower polling while one of its runs holds a claim of its own."""
    return acts_under(holder, claimant) or acts_under(claimant, holder)


def _due(
    conn: Connection,
    tables: Sequence[str],
    holder: str,
    limit: int,
    at: datetime,
    scope: Sequence[str] | None,
) -> list[DuePartition]:
    k = claims_t.c
    claims = conn.execute(
        select(k.table_name, k.holder).where(
            k.ended_at.is_(None), k.expires_at > at, _named(k.table_name, tables)
        )
    )
    left = {name for name, claimant in claims if not _same_compactor(claimant, holder)}
    switched = select(tables_t.c.name).where(
        tables_t.c.maintenance == "disabled", _named(tables_t.c.name, tables)
    )
    left.update(conn.execute(switched).scalars())
    query = (
        select(due_t)
        .where(_c.due_at.is_not(None), _named(_c.table_name, tables))
        .order_by(
            (_c.data_files + _c.delete_files).desc(), _c.due_at, _c.table_name, _c.partition_name
        )
    )
    if left:
        query = query.where(_c.table_name.not_in(sorted(left)))
    found: list[Any] = []
    batch = max(limit, 100)
    offset = 0
    while len(found) < limit:
        rows = conn.execute(query.limit(batch).offset(offset)).all()
        found += [row for row in rows if _within(row.table_name, scope)]
        if len(rows) < batch:
            break
        offset += batch
    return [
        DuePartition(
            table=row.table_name,
            partition=row.partition_name,
            data_files=row.data_files,
            delete_files=row.delete_files,
            equality_delete_files=row.equality_delete_files,
            commits=row.commits,
            due_s=max(0.0, seconds(at - row.due_at)),
        )
        for row in found[:limit]
    ]


# -- what operators see ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Figures:
    """A table's due partitions now, due to compacted over the last hour, its followers."""

    partitions_due: int
    oldest_due_s: float | None  # how long the longest-waiting due partition has been due
    p50_s: float | None
    p95_s: float | None
    compacted: int
    followers: int

    @property
    def behind_s(self) -> float:
        """How far compaction is behind the stream: the p95 from due to compacted over the
        last hour, or how long a partition has been waiting now, whichever is longer."""
        return max(self.p95_s or 0.0, self.oldest_due_s or 0.0)


def of_table(conn: Connection, table: str, at: datetime) -> TableDue | None:
    """The table's due partitions, figures of the last hour and followers at `at`; None when
    nothing is counted, nothing was compacted in the last hour and no compactor follows it."""
    counted, due, data, deletes, oldest = conn.execute(
        select(
            func.count(),
            func.count(_c.due_at),
            func.coalesce(func.sum(_c.data_files), 0),
            func.coalesce(func.sum(_c.delete_files), 0),
            func.min(_c.due_at),
        ).where(_c.table_name == table)
    ).one()
    s = due_samples_t.c
    took = list(
        conn.execute(
            select(s.seconds).where(s.table_name == table, s.compacted_at >= at - HOUR)
        ).scalars()
    )
    following = [f for f in _followers(conn, at) if f.follows(table)]
    if not counted and not took and not following:
        return None
    return TableDue(
        partitions_due=int(due),
        oldest_due_s=None if oldest is None else max(0.0, seconds(at - oldest)),
        partitions_counted=int(counted),
        data_files=int(data),
        delete_files=int(deletes),
        compacted_last_hour=len(took),
        due_to_compacted_p50_s=quantile(took, 0.5),
        due_to_compacted_p95_s=quantile(took, 0.95),
        followers=len(following),
        followers_waiting=sum(1 for f in following if f.parked(at)),
    )


def figures(conn: Connection, *, at: datetime, max_tables: int) -> list[tuple[str, Figures]]:
    """The figures of the tables with due partitions or compactions in the last hour, at most
    `max_tables` of them: the furthest behind first (`Figures.behind_s`), then the most due."""
    s = due_samples_t.c
    took: dict[str, list[float]] = {}
    for name, spent in conn.execute(
        select(s.table_name, s.seconds).where(s.compacted_at >= at - HOUR)
    ):
        took.setdefault(name, []).append(spent)
    due: dict[str, tuple[int, datetime]] = {
        name: (int(count), oldest)
        for name, count, oldest in conn.execute(
            select(_c.table_name, func.count(), func.min(_c.due_at))
            .where(_c.due_at.is_not(None))
            .group_by(_c.table_name)
        )
    }
    followers = _followers(conn, at)
    seen = [
        (
            name,
            Figures(
                partitions_due=due[name][0] if name in due else 0,
                oldest_due_s=max(0.0, seconds(at - due[name][1])) if name in due else None,
                p50_s=quantile(took.get(name, []), 0.5),
                p95_s=quantile(took.get(name, []), 0.95),
                compacted=len(took.get(name, [])),
                followers=sum(1 for f in followers if f.follows(name)),
            ),
        )
        for name in sorted(set(took) | set(due))
    ]
    seen.sort(key=lambda x: (-x[1].behind_s, -x[1].partitions_due, x[0]))
    return seen[:max_tables]


def _matches(table: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(table, pattern) for pattern in patterns)


def _within(table: str, scope: Sequence[str] | None) -> bool:
    """Whether a token with the table patterns `scope` (None: every table) may see `table`."""
    return scope is None or _matches(table.lower(), scope)


@dataclass(frozen=True, slots=True)
class _Follower:
    tables: tuple[str, ...]
    scope: tuple[str, ...] | None  # its token's table patterns; None: every table
    parked_until: datetime | None

    def follows(self, table: str) -> bool:
        return _matches(table, self.tables) and _within(table, self.scope)

    def parked(self, at: datetime) -> bool:
        return self.parked_until is not None and self.parked_until > at


def _followers(conn: Connection, at: datetime) -> list[_Follower]:
    """The compactors that long-polled lately (`FOLLOWING`), or are parked now."""
    f = followers_t.c
    rows = conn.execute(
        select(f.tables, f.scope, f.parked_until).where(
            or_(f.polled_at >= at - FOLLOWING, f.parked_until > at)
        )
    )
    return [
        _Follower(
            tuple(json.loads(row.tables)),
            None if row.scope is None else tuple(json.loads(row.scope)),
            row.parked_until,
        )
        for row in rows
    ]
