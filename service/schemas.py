"""Request and response bodies of the HTTP API (see docs/api.md), with their rules.

Every request body forbids unknown fields, so a typo ("ttl" for "ttl_s") is a 422 naming the
field instead of a silent default.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from service.leases import Draining, Lease, TableState
from service.scope import MAX_NAME_CHARS, PARTITION_PATTERN, is_name

__all__ = [
    "TABLE_PATTERN",
    "REQUEST_ID_PATTERN",
    "HOLDER_PATTERN",
    "MAX_TOKEN",
    "TableName",
    "LeaseId",
    "AcquireBody",
    "RenewBody",
    "RevokeBody",
    "SwitchBody",
    "RunBody",
    "DrainingOut",
    "lease_out",
    "draining_out",
    "state_out",
]

_PART = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
TABLE_PATTERN = rf"^{_PART}\.{_PART}(\.{_PART})?$"

TableName = Annotated[
    str,
    Path(
        pattern=TABLE_PATTERN,
        max_length=194,
        description="Iceberg identifier namespace.table or catalog.namespace.table; compared "
        "case-insensitively (Spark's default), answered in lower case",
        examples=["lake.db.events"],
    ),
    AfterValidator(str.lower),
]
"""`namespace.table` or `catalog.namespace.table`; each part an identifier of at most 64 chars.

Its canonical form is lower case, on every backend: Spark resolves Iceberg identifiers
case-insensitively, so `lake.db.Events` and `lake.db.events` are one table and one lock."""

LeaseId = Annotated[uuid.UUID, Path(description="a lease id as granted (a UUID)")]

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
# a token is a signed 64-bit integer in the database, but a JSON number is exact only up to
# 2**53 - 1 in most parsers (I-JSON, RFC 7493): no token, nor any bound sent, goes past that
MAX_TOKEN = 2**53 - 1
MAX_REPORT_DEPTH = 16


class _Body(BaseModel):
    # strict: `true` is not a TTL and "5" is not a number; unknown fields are typos. Strings are
    # taken as sent (no stripping), so openapi.json's lengths and patterns are the whole rule.
    model_config = ConfigDict(extra="forbid", strict=True)


HOLDER_PATTERN = r"^[\x20-\x7e]+$"  # printable ASCII
Holder = Annotated[str, Field(min_length=1, max_length=255, pattern=HOLDER_PATTERN)]


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
Partitions = list[PartitionName]


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
    partitions: Partitions | None = Field(
        default=None,
        description="the partitions the lease covers, each named by its Iceberg partition path "
        "(`dt=2024-06-20/hr=13`, `ts_day=2024-06-20`, `id_bucket=7`); absent or null: the whole "
        "table. At most LAKELOCK_MAX_PARTITIONS names, no duplicates",
        examples=[["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"]],
    )

    @field_validator("partitions")
    @classmethod
    def _distinct_names(cls, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        if not names:
            raise ValueError(
                "partitions is empty; send at least one partition name, or leave the field out "
                "(or send null) for the whole table"
            )
        bad = next((name for name in names if not is_name(name)), None)
        if bad is not None:
            raise ValueError(
                f"{bad[:80]!r} is not a partition name; send Iceberg partition paths "
                "<field>=<value>[/<field>=<value>...] with URL-encoded values, e.g. "
                f"dt=2024-06-20/hr=13 (at most {MAX_NAME_CHARS} characters)"
            )
        seen: set[str] = set()
        repeated = next((name for name in names if name in seen or seen.add(name)), None)
        if repeated is not None:
            raise ValueError(f"partition {repeated!r} is listed twice; send each name once")
        return names


class RenewBody(_Body):
    holder: Holder
    ttl_s: float | None = Field(default=None, gt=0)
    token: int | None = Field(
        default=None, ge=1, le=MAX_TOKEN, description="required for maintenance leases"
    )

    @field_validator("token", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        # JSON has one number type: 7.0 is the integer 7 to JSON Schema (and JavaScript);
        # 7.5, "7" and true are still refused by the strict int
        return int(value) if isinstance(value, float) and value.is_integer() else value


class RevokeBody(_Body):
    reason: str = Field(min_length=1, max_length=1024)


class SwitchBody(_Body):
    """Send `ingest`, `maintenance` or both, with the reason; leave a field out (not null) to
    keep its value."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["ingest"]}, {"required": ["maintenance"]}]}
    )

    ingest: Literal["running", "paused"] | SkipJsonSchema[None] = None
    maintenance: Literal["enabled", "disabled"] | SkipJsonSchema[None] = None
    reason: str = Field(min_length=1, max_length=1024)

    @field_validator("ingest", "maintenance", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("leave the field out to keep its value; null is not a setting")
        return value

    @model_validator(mode="after")
    def _something_to_set(self) -> SwitchBody:
        if self.ingest is None and self.maintenance is None:
            raise ValueError("send ingest and/or maintenance with the reason")
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


def _depth(value: Any, level: int = 0) -> int:
    """How deep `value` nests, giving up (with a depth over the limit) past the limit."""
    if level > MAX_REPORT_DEPTH or not isinstance(value, dict | list):
        return level
    children = value.values() if isinstance(value, dict) else value
    return max((_depth(child, level + 1) for child in children), default=level + 1)


class _IntentOut(BaseModel):
    holder: str
    request_id: str
    partitions: list[str] | None
    remaining_s: float


class DrainingOut(BaseModel):
    """The 202 of a maintenance request while commit leases drain (see `draining_out`)."""

    status: Literal["draining"]
    table: str
    partitions: list[str] | None
    intent: _IntentOut
    in_flight_commits: int
    retry_after_s: float


def lease_out(lease: Lease | dict[str, Any]) -> dict[str, Any]:
    return lease if isinstance(lease, dict) else lease.as_dict()


def draining_out(draining: Draining) -> dict[str, Any]:
    return {
        "status": "draining",
        "table": draining.table,
        "partitions": draining.partitions,
        "intent": {
            "holder": draining.holder,
            "request_id": draining.request_id,
            "partitions": draining.partitions,
            "remaining_s": draining.intent_remaining_s,
        },
        "in_flight_commits": draining.in_flight_commits,
        "retry_after_s": draining.retry_after_s,
    }


def state_out(state: TableState) -> dict[str, Any]:
    return {
        "table": state.table,
        "version": state.version,
        "switch": {
            "ingest": state.ingest,
            "maintenance": state.maintenance,
            "reason": state.switch_reason,
            "by": state.switch_by,
            "changed_s_ago": state.switch_age_s,
        },
        "maintenance_leases": [lease_out(lease) for lease in state.maintenance_leases],
        "intents": [intent.as_dict() for intent in state.intents],
        # the oldest of each: what a client of the one-lease-per-table protocol reads
        "maintenance_lease": lease_out(state.maintenance_lease)
        if state.maintenance_lease
        else None,
        "intent": state.intent.as_dict() if state.intent else None,
        "commit_leases": [lease_out(lease) for lease in state.commit_leases],
        "next_token": state.next_token,
    }
