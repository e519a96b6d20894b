"""Request and response bodies of the HTTP API (see docs/api.md), with their rules.

Every request body forbids unknown fields, so a typo ("ttl" for "ttl_s") is a 422 naming the
field instead of a silent default.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.leases import Draining, Lease, TableState

__all__ = [
    "TABLE_PATTERN",
    "TableName",
    "LeaseId",
    "AcquireBody",
    "RenewBody",
    "RevokeBody",
    "SwitchBody",
    "RunBody",
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
        description="Iceberg identifier namespace.table or catalog.namespace.table",
        examples=["lake.db.events"],
    ),
]
"""`namespace.table` or `catalog.namespace.table`; each part an identifier of at most 64 chars."""

LeaseId = Annotated[uuid.UUID, Path(description="a lease id as granted (a UUID)")]

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


Holder = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[\x20-\x7e]+$")]


class AcquireBody(_Body):
    holder: Holder
    ttl_s: float = Field(gt=0, description="lease time to live; renew at a third of it")
    request_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        description="repeat it on a retry to get the same lease back",
    )
    wait_s: float = Field(default=0.0, ge=0, description="long-poll: wait up to this long")

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str) -> str:
        if not _REQUEST_ID.match(value):
            raise ValueError("must be 1-128 characters of letters, digits and . _ : -")
        return value


class RenewBody(_Body):
    holder: Holder
    ttl_s: float | None = Field(default=None, gt=0)
    token: int | None = Field(default=None, ge=1, description="required for maintenance leases")


class RevokeBody(_Body):
    reason: str = Field(min_length=1, max_length=1024)


class SwitchBody(_Body):
    ingest: Literal["running", "paused"] | None = None
    maintenance: Literal["enabled", "disabled"] | None = None
    reason: str = Field(min_length=1, max_length=1024)


class RunBody(_Body):
    model_config = ConfigDict(extra="allow")

    outcome: str = Field(min_length=1, max_length=32)
    holder: str | None = Field(default=None, max_length=255)


def lease_out(lease: Lease | dict[str, Any]) -> dict[str, Any]:
    return lease if isinstance(lease, dict) else lease.as_dict()


def draining_out(draining: Draining) -> dict[str, Any]:
    return {
        "status": "draining",
        "table": draining.table,
        "intent": {
            "holder": draining.holder,
            "request_id": draining.request_id,
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
        "maintenance_lease": lease_out(state.maintenance_lease)
        if state.maintenance_lease
        else None,
        "intent": state.intent,
        "commit_leases": [lease_out(lease) for lease in state.commit_leases],
        "next_token": state.next_token,
    }
