"""What the HTTP API's bodies share (docs/api.md): their two bases, the names a path or a body
carries, and the bounded field types the requests are made of.

    Body             a request: strict, no extra fields
    Answer           an answer: frozen, fields it does not know ignored
    Holder           a holder's name, printable ASCII
    Token, Count     bounded integers of a request (a whole float such as 7.0 taken as one)
    SnapshotId       an Iceberg snapshot id, a 64-bit integer
    PartitionName    a partition named by its Iceberg partition path (`dt=2024-06-20/hr=13`)
    Partitions       the partitions of a scope in an answer; None: the whole table

Every request body forbids unknown fields, so a typo ("ttl" for "ttl_s") is a 422 naming the
field instead of a silent default. Answers are frozen and ignore fields they do not know, so a
client keeps working against a newer service.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from service.wire.scope import MAX_NAME_CHARS, PARTITION_PATTERN, is_name

__all__ = [
    "HOLDER_PATTERN",
    "MAX_SNAPSHOT_ID",
    "MAX_TOKEN",
    "MIN_SNAPSHOT_ID",
    "TABLE_GLOB_PATTERN",
    "TABLE_PATTERN",
    "Answer",
    "Body",
    "Count",
    "Holder",
    "PartitionName",
    "Partitions",
    "SnapshotId",
    "Token",
    "partition_name",
    "partition_names",
    "whole",
]

_PART = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
TABLE_PATTERN = rf"^{_PART}\.{_PART}(\.{_PART})?$"
"""`namespace.table` or `catalog.namespace.table`; each part an identifier of at most 64 chars."""

TABLE_GLOB_PATTERN = r"^[A-Za-z0-9_.*?]{1,194}$"
"""A table name, or a glob of them (`lake.db.*`): `*` and `?` match any characters, dots too."""

# a token is a signed 64-bit integer in the database, but a JSON number is exact only up to
# 2**53 - 1 in most parsers (I-JSON, RFC 7493): no token, nor any bound sent, goes past that
MAX_TOKEN = 2**53 - 1
# an Iceberg snapshot id is a Java long, most of them past 2**53: exact in Python and in the
# database (BIGINT); a JavaScript reader must take it as a big integer
MIN_SNAPSHOT_ID, MAX_SNAPSHOT_ID = -(2**63), 2**63 - 1
HOLDER_PATTERN = r"^[\x20-\x7e]+$"  # printable ASCII

Partitions = tuple[str, ...]
"""Partition names as Iceberg writes their paths (`dt=2024-06-20/hr=13`); None for a scope
means the whole table."""


# -- requests --------------------------------------------------------------------------------


class Body(BaseModel):
    # strict: `true` is not a TTL and "5" is not a number; unknown fields are typos. Strings are
    # taken as sent (no stripping), so openapi.json's lengths and patterns are the whole rule.
    model_config = ConfigDict(extra="forbid", strict=True)


Holder = Annotated[str, Field(min_length=1, max_length=255, pattern=HOLDER_PATTERN)]


def whole(value: Any) -> Any:
    # JSON has one number type: 7.0 is the integer 7 to JSON Schema (and JavaScript);
    # 7.5, "7" and true are still refused by the strict int
    return int(value) if isinstance(value, float) and value.is_integer() else value


# integers of a request body within their bounds: a whole float (7.0) is taken as the integer it
# is (the bounds sit inside the validator so openapi.json states them as `minimum`/`maximum`)
Token: TypeAlias = Annotated[Annotated[int, Field(ge=1, le=MAX_TOKEN)], BeforeValidator(whole)]
Count: TypeAlias = Annotated[Annotated[int, Field(ge=0, le=MAX_TOKEN)], BeforeValidator(whole)]
SnapshotId: TypeAlias = Annotated[
    Annotated[int, Field(ge=MIN_SNAPSHOT_ID, le=MAX_SNAPSHOT_ID)], BeforeValidator(whole)
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


def partition_name(name: str) -> str:
    """`name` when it is a partition name, else a ValueError that says what to send."""
    if not is_name(name):
        raise ValueError(
            f"{name[:80]!r} is not a partition name; send Iceberg partition paths "
            "<field>=<value>[/<field>=<value>...] with URL-encoded values, e.g. "
            f"dt=2024-06-20/hr=13 (at most {MAX_NAME_CHARS} characters)"
        )
    return name


def partition_names(names: list[str]) -> list[str]:
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


# -- answers ---------------------------------------------------------------------------------


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
