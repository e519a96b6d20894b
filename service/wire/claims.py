"""Claims: one compactor's hold on a table, and the backpressure it opens under it
(docs/jobs.md §3; `/v1/tables/{table}/claim`, `/v1/tables/{table}/backpressure`). A claim is
answered as a `Lease` of kind `claim` (service.wire.leases).

    ClaimBody          request: take a claim (AcquireBody's fields, the whole table, no wait)
    BackpressureBody   request: hold the writers of partitions over their debt bound
    Backpressure       what a backpressure request holds
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from service.wire.common import Answer, Body, Holder, PartitionName, partition_names
from service.wire.leases import AcquireBody

__all__ = ["Backpressure", "BackpressureBody", "ClaimBody"]


# -- requests --------------------------------------------------------------------------------


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


class BackpressureBody(Body):
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
        return partition_names(names)


# -- answers ---------------------------------------------------------------------------------


class Backpressure(Answer):
    """What a backpressure request holds: `partitions`, for `remaining_s` (as long as the claim,
    which each renew extends); none while `off` names a switch that is off: the table's
    `backpressure`, or its `maintenance` (no grant could end it)."""

    table: str
    partitions: list[str]
    switch: Literal["enabled", "disabled"]
    remaining_s: float = 0.0
    off: Literal["backpressure", "maintenance"] | None = None
