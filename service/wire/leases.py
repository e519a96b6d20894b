"""Leases: commit and maintenance leases taken, renewed, released and revoked, and the intent of
a maintenance request while it drains (docs/api.md, `/v1/tables/{table}/commit-leases`,
`/v1/tables/{table}/maintenance-lease`, `/v1/tables/{table}/intents/{request_id}`,
`/v1/leases/{lease_id}`).

    AcquireBody   request: take a commit or maintenance lease (ClaimBody takes its fields)
    RenewBody     request: renew a lease
    ReleaseBody   request: release a lease, with what it did to the table's partitions
    RevokeBody    request: an operator's revoke, with the reason
    LeaseKind     commit | maintenance | claim
    LeaseState    live | released | expired | revoked
    Lease         a lease as the service described it
    IntentRef     the intent a draining maintenance request holds open
    Draining      the 202 of a maintenance request while its conflicting commits drain
    Renewed       the answer of a renew
    Released      the answer of a release
    Withdrawn     the answer of a maintenance request's intent withdrawn

    lease = Lease.model_validate_json(response.content)
    lease.partitions       # None: the whole table; else a tuple of partition names
    lease.model_dump(mode="json")
"""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import Field, field_validator

from service.wire.common import (
    Answer,
    Body,
    Holder,
    PartitionName,
    Partitions,
    Token,
    partition_names,
)
from service.wire.due import MAX_COUNTED_PARTITIONS, CountedFiles, PartitionFiles, counted_files

__all__ = [
    "REQUEST_ID_PATTERN",
    "AcquireBody",
    "Draining",
    "IntentRef",
    "Lease",
    "LeaseKind",
    "LeaseState",
    "ReleaseBody",
    "Released",
    "RenewBody",
    "Renewed",
    "RevokeBody",
    "Withdrawn",
]

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"

LeaseKind = Literal["commit", "maintenance", "claim"]
"""`commit`: shared, one micro-batch write. `maintenance`: exclusive on its scope, one
compaction step. `claim`: exclusive per table among claims only, one compactor's hold on a
table from its plan to its housekeeping (it holds no writer)."""

LeaseState = Literal["live", "released", "expired", "revoked"]


# -- requests --------------------------------------------------------------------------------


class AcquireBody(Body):
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
        return None if names is None else partition_names(names)


class ReleaseBody(Body):
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
        return counted_files(files)

    @field_validator("compacted")
    @classmethod
    def _compacted_names(cls, names: list[str] | None) -> list[str] | None:
        return None if not names else partition_names(names)


class RenewBody(Body):
    holder: Holder
    ttl_s: float | None = Field(default=None, gt=0)
    token: Token | None = Field(default=None, description="required for maintenance leases")


class RevokeBody(Body):
    reason: str = Field(min_length=1, max_length=1024)


# -- answers ---------------------------------------------------------------------------------


class Lease(Answer):
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


class IntentRef(Answer):
    """The intent a draining maintenance request holds open."""

    holder: str
    request_id: str
    partitions: Partitions | None = None
    remaining_s: float


class Draining(Answer):
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


class Renewed(Answer):
    outcome: Literal["ok"] = "ok"
    lease: Lease


class Released(Answer):
    lease_id: str
    state: LeaseState
    released: Literal[True] = True
    lease: Lease


class Withdrawn(Answer):
    table: str
    request_id: str
    withdrawn: bool
