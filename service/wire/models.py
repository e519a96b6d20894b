"""The HTTP API's bodies, both ways (docs/api.md): what the routes take and answer, and what the
client parses. Pydantic only, no FastAPI or server import, so `service.client` shares it.

    AcquireBody, ClaimBody, RenewBody, RevokeBody, SwitchBody, RunBody, DebtBody
                                                               requests (strict, no extra fields)
    Lease, Intent, Draining, TableState, ...                   answers (the routes' response
                                                               models, so openapi.json describes
                                                               them; the client's parsed answers)

    lease = Lease.model_validate_json(response.content)
    lease.partitions       # None: the whole table; else a tuple of partition names
    lease.model_dump(mode="json")

Every request body forbids unknown fields, so a typo ("ttl" for "ttl_s") is a 422 naming the
field instead of a silent default. Answers are frozen and ignore fields they do not know, so a
client keeps working against a newer service.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from service.wire.scope import MAX_NAME_CHARS, PARTITION_PATTERN, is_name

__all__ = [
    "HOLDER_PATTERN",
    "MAX_COUNTED_FILES",
    "MAX_COUNTED_PARTITIONS",
    "MAX_TOKEN",
    "READER_PATTERN",
    "REQUEST_ID_PATTERN",
    "TABLE_GLOB_PATTERN",
    "TABLE_PATTERN",
    "AcquireBody",
    "Backpressure",
    "BackpressureBody",
    "ClaimBody",
    "DebtBody",
    "Draining",
    "Due",
    "DuePartition",
    "Event",
    "Events",
    "GapsBody",
    "GapsRecorded",
    "IngestLag",
    "Intent",
    "IntentCause",
    "IntentRef",
    "LagBody",
    "Lease",
    "LeaseKind",
    "LeaseState",
    "OffsetGap",
    "PartitionFiles",
    "PartitionName",
    "ReaderBody",
    "ReaderHold",
    "ReleaseBody",
    "Released",
    "RenewBody",
    "Renewed",
    "RevokeBody",
    "RunBody",
    "RunId",
    "Runs",
    "Switch",
    "SwitchBody",
    "TableDebt",
    "TableDue",
    "TableState",
    "Tables",
    "Withdrawn",
    "partition_name",
]

_PART = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
TABLE_PATTERN = rf"^{_PART}\.{_PART}(\.{_PART})?$"
"""`namespace.table` or `catalog.namespace.table`; each part an identifier of at most 64 chars."""

TABLE_GLOB_PATTERN = r"^[A-Za-z0-9_.*?]{1,194}$"
"""A table name, or a glob of them (`lake.db.*`): `*` and `?` match any characters, dots too."""

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
# a token is a signed 64-bit integer in the database, but a JSON number is exact only up to
# 2**53 - 1 in most parsers (I-JSON, RFC 7493): no token, nor any bound sent, goes past that
MAX_TOKEN = 2**53 - 1
MAX_REPORT_DEPTH = 16
# an Iceberg snapshot id is a Java long, most of them past 2**53: exact in Python and in the
# database (BIGINT); a JavaScript reader must take it as a big integer
MIN_SNAPSHOT_ID, MAX_SNAPSHOT_ID = -(2**63), 2**63 - 1
HOLDER_PATTERN = r"^[\x20-\x7e]+$"  # printable ASCII

LeaseKind = Literal["commit", "maintenance", "claim"]
"""`commit`: shared, one micro-batch write. `maintenance`: exclusive on its scope, one
compaction step. `claim`: exclusive per table among claims only, one compactor's hold on a
table from its plan to its housekeeping (it holds no writer)."""

LeaseState = Literal["live", "released", "expired", "revoked"]

IntentCause = Literal["drain", "backpressure", "turn"]
"""Why an intent holds commits: a maintenance request's drain, a compactor's backpressure, or
a maintenance lease's turn of the table's head at the catalog front (docs/catalog-front.md §4)."""

Partitions = tuple[str, ...]
"""Partition names as Iceberg writes their paths (`dt=2024-06-20/hr=13`); None for a scope
means the whole table."""


# -- requests --------------------------------------------------------------------------------


class _Body(BaseModel):
    # strict: `true` is not a TTL and "5" is not a number; unknown fields are typos. Strings are
    # taken as sent (no stripping), so openapi.json's lengths and patterns are the whole rule.
    model_config = ConfigDict(extra="forbid", strict=True)


Holder = Annotated[str, Field(min_length=1, max_length=255, pattern=HOLDER_PATTERN)]


def _whole(value: Any) -> Any:
    # JSON has one number type: 7.0 is the integer 7 to JSON Schema (and JavaScript);
    # 7.5, "7" and true are still refused by the strict int
    return int(value) if isinstance(value, float) and value.is_integer() else value


# integers of a request body within their bounds: a whole float (7.0) is taken as the integer it
# is (the bounds sit inside the validator so openapi.json states them as `minimum`/`maximum`)
Token: TypeAlias = Annotated[Annotated[int, Field(ge=1, le=MAX_TOKEN)], BeforeValidator(_whole)]
Count: TypeAlias = Annotated[Annotated[int, Field(ge=0, le=MAX_TOKEN)], BeforeValidator(_whole)]
SnapshotId: TypeAlias = Annotated[
    Annotated[int, Field(ge=MIN_SNAPSHOT_ID, le=MAX_SNAPSHOT_ID)], BeforeValidator(_whole)
]

# the rules are in the schema for clients, and checked by AcquireBody's validator and the routes
# (`LAKELOCK_MAX_PARTITIONS`) with messages that say what to send instead
PartitionName = Annotated[
    str,
    Field(
        json_schema_extra={
            "pattern": PARTITION_PATTERN,
            "minLength": 2,
            "maxLength": MAX_NAME_CHARS,
        }
    ),
]


class AcquireBody(_Body):
    holder: Holder
    ttl_s: float = Field(gt=0, description="lease time to live; renew at a third of it")
    request_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        pattern=REQUEST_ID_PATTERN,
        description="1-128 letters, digits and . _ : -; repeat it on a retry to get the same "
        "lease back",
    )
    wait_s: float = Field(default=0.0, ge=0, description="long-poll: wait up to this long")
    partitions: list[PartitionName] | None = Field(
        default=None,
        description="the partitions the lease covers, each named by its Iceberg partition path "
        "(`dt=2024-06-20/hr=13`, `ts_day=2024-06-20`, `id_bucket=7`); absent or null: the whole "
        "table. At most LAKELOCK_MAX_PARTITIONS names, no duplicates",
        examples=[["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"]],
    )

    @field_validator("partitions")
    @classmethod
    def _distinct_names(cls, names: list[str] | None) -> list[str] | None:
        return None if names is None else _partition_names(names)


def partition_name(name: str) -> str:
    """`name` when it is a partition name, else a ValueError that says what to send."""
    if not is_name(name):
        raise ValueError(
            f"{name[:80]!r} is not a partition name; send Iceberg partition paths "
            "<field>=<value>[/<field>=<value>...] with URL-encoded values, e.g. "
            f"dt=2024-06-20/hr=13 (at most {MAX_NAME_CHARS} characters)"
        )
    return name


def _partition_names(names: list[str]) -> list[str]:
    """`names` when each is a partition name and none repeats, else a ValueError that says
    what to send."""
    if not names:
        raise ValueError(
            "partitions is empty; send at least one partition name, or leave the field out "
            "(or send null) for the whole table"
        )
    for name in names:
        partition_name(name)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"partition {name!r} is listed twice; send each name once")
        seen.add(name)
    return names


class ClaimBody(AcquireBody):
    """An acquire of a claim: the fields of AcquireBody. A claim covers the whole table, so
    `partitions` may only be left out (or null); a claim never waits, so `wait_s` is accepted
    and ignored: a claim another holder has is refused at once."""

    wait_s: float = Field(
        default=0.0, ge=0, description="accepted and ignored: a claim is granted or refused at once"
    )
    partitions: None = Field(
        default=None, description="leave it out: a claim covers the whole table"
    )

    @field_validator("partitions", mode="before")
    @classmethod
    def _whole_table(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(
                "a claim covers the whole table; leave partitions out (scope the maintenance "
                "leases taken under the claim instead)"
            )
        return value


class BackpressureBody(_Body):
    """A compactor holding the writers of partitions whose debt passed their hard bound, until
    it compacts them (docs/jobs.md §3): under its live claim on the table."""

    claim_id: str = Field(min_length=1, max_length=64, description="the table's live claim")
    holder: Holder = Field(
        description="who will compact them: the holder of the maintenance leases to come, "
        "whose grant covering a partition ends its backpressure"
    )
    partitions: list[PartitionName] = Field(
        min_length=1,
        description="the partitions over their bound, each named by its Iceberg partition path, "
        "each once",
        examples=[["dt=2024-06-20/hr=13"]],
        json_schema_extra={"uniqueItems": True},
    )
    reason: str = Field(min_length=1, max_length=1024, description="the debt, for the audit")

    @field_validator("partitions")
    @classmethod
    def _distinct_names(cls, names: list[str]) -> list[str]:
        return _partition_names(names)


MAX_COUNTED_PARTITIONS = 1000
"""Partitions one release or one debt report may count files of."""

MAX_COUNTED_FILES = 10_000_000
"""Files of one kind one release or one debt report may count in one partition: far more than
any commit adds or any partition holds, and small enough that no sum of the service's counts
overflows a database's integers (service.lock.due caps what it adds up)."""

FileCount: TypeAlias = Annotated[
    Annotated[int, Field(ge=0, le=MAX_COUNTED_FILES)], BeforeValidator(_whole)
]


class PartitionFiles(_Body):
    """Files of one partition: data files and delete files, and of the delete files those that
    delete by equality (a Flink upsert's; a partition is due at fewer of them)."""

    data_files: FileCount
    delete_files: FileCount
    equality_delete_files: FileCount = 0

    @model_validator(mode="after")
    def _equality_within_deletes(self) -> PartitionFiles:
        if self.equality_delete_files > self.delete_files:
            raise ValueError(
                f"equality_delete_files ({self.equality_delete_files}) counts some of the "
                f"delete_files ({self.delete_files}): send at most as many"
            )
        return self


# partition name -> its files; a key that is no partition name is refused (the schema says so
# too: no property outside the name's pattern)
CountedFiles = Annotated[
    dict[PartitionName, PartitionFiles],
    Field(max_length=MAX_COUNTED_PARTITIONS, json_schema_extra={"additionalProperties": False}),
]


def _counted(files: dict[str, PartitionFiles] | None) -> dict[str, PartitionFiles] | None:
    """`files` when each key is a partition name, else a ValueError that says what to send."""
    for name in files or {}:
        partition_name(name)
    return files


class ReleaseBody(_Body):
    """A release by the lease's holder (`token` too for a maintenance lease), with what the
    lease did to the table's partitions (docs/design.md §5.1): a commit lease the files its
    commit added (`written`), a maintenance lease the partitions it compacted (`compacted`).
    Counted only by the release that ends the lease: a repeated release counts nothing again.
    `holder` and `token` may come as query parameters instead, as for `DELETE`."""

    holder: Holder | None = None
    token: Token | None = Field(default=None, description="required for maintenance leases")
    written: CountedFiles | None = Field(
        default=None,
        description="a commit lease only: the data files and delete files its commit added, "
        "per partition (named by its Iceberg partition path), at most 1000 partitions",
        examples=[{"dt=2024-06-20/hr=13": {"data_files": 2, "delete_files": 1}}],
    )
    compacted: list[PartitionName] | None = Field(
        default=None,
        max_length=MAX_COUNTED_PARTITIONS,
        description="a maintenance lease only: the partitions it compacted, each once, within "
        "the lease's scope; their counts go to zero",
        examples=[["dt=2024-06-20/hr=13"]],
        json_schema_extra={"uniqueItems": True},
    )

    @field_validator("written")
    @classmethod
    def _written_names(
        cls, files: dict[str, PartitionFiles] | None
    ) -> dict[str, PartitionFiles] | None:
        return _counted(files)

    @field_validator("compacted")
    @classmethod
    def _compacted_names(cls, names: list[str] | None) -> list[str] | None:
        return None if not names else _partition_names(names)


class RenewBody(_Body):
    holder: Holder
    ttl_s: float | None = Field(default=None, gt=0)
    token: Token | None = Field(default=None, description="required for maintenance leases")


class RevokeBody(_Body):
    reason: str = Field(min_length=1, max_length=1024)


class SwitchBody(_Body):
    """Send `ingest`, `maintenance` or both, with the reason; leave a field out (not null) to
    keep its value."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["ingest"]},
                {"required": ["maintenance"]},
                {"required": ["backpressure"]},
            ]
        }
    )

    ingest: Literal["running", "paused"] | SkipJsonSchema[None] = None
    maintenance: Literal["enabled", "disabled"] | SkipJsonSchema[None] = None
    backpressure: Literal["enabled", "disabled"] | SkipJsonSchema[None] = Field(
        default=None,
        description="whether a compactor's backpressure holds commits to partitions over their "
        "debt bound (disabled: none is opened, and those open hold no commit)",
    )
    reason: str = Field(min_length=1, max_length=1024)

    @field_validator("ingest", "maintenance", "backpressure", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("leave the field out to keep its value; null is not a setting")
        return value

    @model_validator(mode="after")
    def _something_to_set(self) -> SwitchBody:
        if self.ingest is None and self.maintenance is None and self.backpressure is None:
            raise ValueError("send ingest, maintenance and/or backpressure with the reason")
        return self


class RunBody(_Body):
    model_config = ConfigDict(extra="allow")

    outcome: str = Field(min_length=1, max_length=32)
    holder: str | None = Field(default=None, max_length=255)

    @model_validator(mode="before")
    @classmethod
    def _shallow(cls, value: Any) -> Any:
        # a report is a few levels deep; a deeply nested one could not be read back
        if _depth(value) > MAX_REPORT_DEPTH:
            raise ValueError(
                f"the report is nested more than {MAX_REPORT_DEPTH} levels deep; flatten it"
            )
        return value


DateTimeText = Annotated[str, Field(max_length=64, json_schema_extra={"format": "date-time"})]


class DebtBody(_Body):
    """A table's compaction debt as a compactor measured it: the latest report of a table
    replaces the one before (`compactor.debt` says how each count is measured)."""

    snapshot_id: SnapshotId | None = Field(
        default=None,
        description="the Iceberg snapshot measured (null: an empty table); a 64-bit id, past "
        "2^53 in most tables",
    )
    data_files: Count = Field(description="live data files")
    small_files: Count = Field(description="data files under the compactor's small size")
    delete_files: Count = Field(description="delete files that still apply, dangling ones too")
    partitions_over_target: Count = Field(
        description="partitions a rewrite would change (enough small files, or delete files)"
    )
    partitions_over_bound: Count | None = Field(
        default=None,
        description="partitions past the compactor's hard bound of small or delete files, whose "
        "writers backpressure holds while a compactor compacts them",
    )
    worst_partition: Count | None = Field(
        default=None, description="the most small plus delete files in one partition"
    )
    records: Count | None = Field(default=None, description="live records, when known")
    partitions: CountedFiles | None = Field(
        default=None,
        description="small data files and delete files per partition, as measured on the "
        "table (at most 1000 partitions, those with the most files): when sent, they replace "
        "the files the service counted as commits landed, and a partition not named counts "
        "none (docs/design.md §5.1)",
        examples=[{"dt=2024-06-20/hr=13": {"data_files": 6, "delete_files": 2}}],
    )
    measured_at: DateTimeText | None = Field(
        default=None,
        description="when the compactor measured, by its clock: an RFC 3339 date-time with its "
        "offset (2024-06-20T13:05:00Z); kept as sent. The service stamps each report with its "
        "own clock too",
        examples=["2024-06-20T13:05:00Z"],
    )

    @field_validator("partitions")
    @classmethod
    def _partition_keys(
        cls, files: dict[str, PartitionFiles] | None
    ) -> dict[str, PartitionFiles] | None:
        return _counted(files)

    @field_validator("measured_at")
    @classmethod
    def _rfc3339(cls, value: str | None) -> str | None:
        if value is not None and not is_rfc3339(value):
            raise ValueError(
                f"{value[:40]!r} is not an RFC 3339 date-time; send it with its offset, e.g. "
                "2024-06-20T13:05:00Z"
            )
        return value


MAX_SOURCE_PARTITIONS = 1000
"""Topic-partitions one lag report or gap report may name."""

SourcePartition = Annotated[str, Field(min_length=1, max_length=300)]
"""A topic-partition as the ingest job names it: `topic:partition` (`events:3`); a label, so
any name is kept as sent."""

QueryId = Annotated[str, Field(min_length=1, max_length=128)]


class LagBody(_Body):
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


class OffsetGap(_Body):
    """`records` offsets from `start` of a topic-partition that the source deleted (retention,
    or by hand) before the ingest job read them."""

    topic: Annotated[str, Field(min_length=1, max_length=249)]
    partition: Count
    start: Count = Field(description="the first offset lost")
    records: Token = Field(description="how many offsets were lost, from `start` on (>= 1)")


class GapsBody(_Body):
    """Ranges an ingest job skipped because its source no longer held them, each recorded as an
    `ingest.gap` event so that the loss is on the table's audit trail."""

    query_id: QueryId
    gaps: list[OffsetGap] = Field(min_length=1, max_length=MAX_SOURCE_PARTITIONS)


READER_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
"""A reader's name, in the path of its hold: `orders-to-summary@host-1`."""

MAX_READER_TTL_S = 86400.0


class ReaderBody(_Body):
    """Where a job streaming out of the table stands: the snapshot it has not read past yet.
    `expire_snapshots` keeps that snapshot and every later one while the hold is live."""

    snapshot_id: SnapshotId = Field(
        description="the reader's position: it still needs this snapshot and the later ones"
    )
    ttl_s: float = Field(
        gt=0,
        le=MAX_READER_TTL_S,
        description="seconds the hold lasts without another PUT; put again at a third of it",
    )
    snapshots_behind: Count | None = Field(
        default=None, description="snapshots committed after the position, as the reader counts"
    )


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))"
)


def is_rfc3339(text: str) -> bool:
    """A `date-time` of RFC 3339 (JSON Schema's format): a real date and time, an offset
    (`Z` or +hh:mm), a leap second (:60) allowed."""
    found = _RFC3339.fullmatch(text)
    if found is None:
        return False
    year, month, day, hour, minute, second = (int(found.group(n)) for n in range(1, 7))
    offset_h, offset_m = (int(found.group(n) or 0) for n in (9, 10))
    try:
        datetime(year, month, day, hour, minute, min(second, 59))
    except ValueError:
        return False
    return second <= 60 and offset_h <= 23 and offset_m <= 59


def _depth(value: Any, level: int = 0) -> int:
    """How deep `value` nests, giving up (with a depth over the limit) past the limit."""
    if level > MAX_REPORT_DEPTH or not isinstance(value, dict | list):
        return level
    children = value.values() if isinstance(value, dict) else value
    return max((_depth(child, level + 1) for child in children), default=level + 1)


# -- answers ---------------------------------------------------------------------------------


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Lease(_Answer):
    """A lease as the service described it when it answered (remaining seconds by the
    database clock).

    lease.token        # the fencing token of a maintenance lease; None for commit leases, claims
    lease.remaining_s  # seconds left when the service answered
    lease.state        # live | released | expired | revoked
    lease.principal    # the token that took it: only it renews, releases, commits under it
    lease.renewals     # how often it was renewed
    """

    lease_id: str
    table: str
    kind: LeaseKind
    holder: str
    request_id: str
    token: int | None
    ttl_s: float
    remaining_s: float
    held_s: float = 0.0
    state: LeaseState = "live"
    partitions: Partitions | None = None
    principal: str | None = None
    renewals: int = 0


class Intent(_Answer):
    """An open intent: maintenance request `request_id` is draining the commits on its scope
    (`cause` drain), a compactor holds back the writers of a partition in debt (backpressure),
    or a maintenance lease that lost the table's head at the catalog front commits next, its
    foreign data commits held meanwhile (turn; `request_id` is `turn-<lease id>`)."""

    holder: str
    request_id: str
    partitions: Partitions | None = None
    remaining_s: float
    open_s: float
    cause: IntentCause = "drain"
    principal: str | None = None


class IntentRef(_Answer):
    """The intent a draining maintenance request holds open."""

    holder: str
    request_id: str
    partitions: Partitions | None = None
    remaining_s: float


class Draining(_Answer):
    """The 202 of a maintenance request while the commit leases it conflicts with drain: its
    intent is open; ask again with the same request id (after `retry_after_s`, or at once with
    `wait_s`)."""

    status: Literal["draining"] = "draining"
    table: str
    partitions: Partitions | None = None
    intent: IntentRef
    in_flight_commits: int
    retry_after_s: float

    @property
    def request_id(self) -> str:
        return self.intent.request_id


class Switch(_Answer):
    ingest: Literal["running", "paused"]
    maintenance: Literal["enabled", "disabled"]
    backpressure: Literal["enabled", "disabled"] = "enabled"
    reason: str | None
    by: str | None
    changed_s_ago: float | None


class Backpressure(_Answer):
    """What a backpressure request holds: `partitions`, for `remaining_s` (as long as the claim,
    which each renew extends); none while `off` names a switch that is off: the table's
    `backpressure`, or its `maintenance` (no grant could end it)."""

    table: str
    partitions: list[str]
    switch: Literal["enabled", "disabled"]
    remaining_s: float = 0.0
    off: Literal["backpressure", "maintenance"] | None = None


class TableDebt(_Answer):
    """The latest compaction debt a compactor reported for the table (`DebtBody`), with who
    reported it and how long ago by the database clock.

    debt.weight   # small files + delete files: what `lakelock status` and the page rank by
    """

    snapshot_id: int | None
    data_files: int
    small_files: int
    delete_files: int
    partitions_over_target: int
    partitions_over_bound: int | None = None
    worst_partition: int | None = None
    records: int | None = None
    measured_at: str | None = None
    reported_by: str | None = None
    reported_s_ago: float = Field(description="seconds since the report, by the database clock")

    @property
    def weight(self) -> int:
        return self.small_files + self.delete_files


class DuePartition(_Answer):
    """A partition due for compaction: the files counted since it was last compacted reached
    the due threshold `due_s` seconds ago (by the database clock)."""

    table: str
    partition: str
    data_files: int = Field(description="data files added since its last compaction")
    delete_files: int = Field(description="delete files added since its last compaction")
    equality_delete_files: int = Field(
        default=0, description="of the delete files, those that delete by equality"
    )
    commits: int = Field(default=0, description="the commits that added them")
    due_s: float = Field(description="seconds since it became due")


class Due(_Answer):
    """The answer of the long-poll for due partitions: most files first."""

    due: tuple[DuePartition, ...]
    waited_s: float = Field(description="how long the call waited on the service")


class TableDue(_Answer):
    """The table's partitions as commits land (docs/design.md §5.1): what is due now, how long
    compaction took to follow over the last hour, and the compactors that follow the table."""

    partitions_due: int = Field(description="partitions due for compaction now")
    oldest_due_s: float | None = Field(
        default=None, description="seconds since the longest-waiting due partition became due"
    )
    partitions_counted: int = Field(
        description="partitions with files counted since their last compaction"
    )
    data_files: int = Field(description="data files counted over those partitions")
    delete_files: int = Field(description="delete files counted over those partitions")
    compacted_last_hour: int = Field(description="due partitions compacted in the last hour")
    due_to_compacted_p50_s: float | None = Field(
        default=None, description="median seconds from due to compacted, over the last hour"
    )
    due_to_compacted_p95_s: float | None = Field(
        default=None, description="95th percentile of the same"
    )
    followers: int = Field(
        default=0, description="compactors that long-polled for this table's due partitions lately"
    )
    followers_waiting: int = Field(
        default=0, description="those of them parked on their long-poll now"
    )


class IngestLag(_Answer):
    """The latest lag an ingest query reported for the table (`LagBody`), with its total."""

    query_id: str
    batch_id: int
    partitions: dict[str, int]
    records: int = Field(description="records behind over all its topic-partitions")
    reported_by: str | None = None
    reported_s_ago: float = Field(description="seconds since the report, by the database clock")


class ReaderHold(_Answer):
    """A live reader's hold on snapshot expiry."""

    reader: str
    snapshot_id: int
    snapshots_behind: int | None = None
    remaining_s: float = Field(description="seconds until it lapses without another PUT")
    held_s: float = Field(description="seconds since the reader first put it")
    advanced_s_ago: float = Field(description="seconds since its position last moved")


class GapsRecorded(_Answer):
    recorded: int = Field(description="ingest.gap events written")
    records_lost: int = Field(description="offsets the gaps span")


class TableState(_Answer):
    """A table's switch, live leases and open intents (oldest first), and its state version."""

    table: str
    version: int = Field(description="the id of the table's newest event; grows with each change")
    switch: Switch
    maintenance_leases: tuple[Lease, ...]
    intents: tuple[Intent, ...]
    # the oldest of each, for clients of the one-lease-per-table protocol
    maintenance_lease: Lease | None
    intent: Intent | None
    commit_leases: tuple[Lease, ...]
    next_token: int
    claims: tuple[Lease, ...] = Field(
        default=(), description="the live claim (at most one): which compactor has the table"
    )
    debt: TableDebt | None = Field(
        default=None, description="the latest compaction debt reported (null: none yet)"
    )
    ingest_lag: IngestLag | None = Field(
        default=None, description="the latest source lag an ingest job reported (null: none)"
    )
    readers: tuple[ReaderHold, ...] = Field(
        default=(),
        description="live holds of jobs streaming out of the table, the oldest position first",
    )
    due: TableDue | None = Field(
        default=None,
        description="partitions due, due to compacted over the last hour, followers (null: "
        "nothing counted, compacted or following)",
    )


class Tables(_Answer):
    """A page of the known tables, by name."""

    tables: tuple[TableState, ...]
    next: str | None = Field(
        default=None,
        description="more tables follow: ask again with `after` set to this (the last name "
        "of this page); null on the last page",
    )


class Renewed(_Answer):
    outcome: Literal["ok"] = "ok"
    lease: Lease


class Released(_Answer):
    lease_id: str
    state: LeaseState
    released: Literal[True] = True
    lease: Lease


class Withdrawn(_Answer):
    table: str
    request_id: str
    withdrawn: bool


class Event(_Answer):
    """One audit event: what changed on a table, who did it, and its details."""

    id: int
    at: datetime = Field(description="when, by the database clock (UTC)")
    table: str
    event: str
    lease_id: str | None
    kind: str | None
    holder: str | None
    token: int | None
    actor: str | None
    detail: dict[str, Any]

    @field_serializer("at")
    def _utc(self, at: datetime) -> str:
        # the database clock is naive UTC; the wire says so
        return at.isoformat() + "Z" if at.tzinfo is None else at.isoformat()


class Events(_Answer):
    events: tuple[Event, ...]


class Runs(_Answer):
    runs: tuple[dict[str, Any], ...] = Field(
        description="run reports, newest first: run_id, reported_at and the report's fields"
    )
    kept: int = Field(
        default=0,
        description="how many runs the service keeps per table (LAKELOCK_RUNS_KEPT): no older "
        "run is there to answer",
    )


class RunId(_Answer):
    run_id: int
