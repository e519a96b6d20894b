"""Tables: a table's switch, its open intents and the whole of its state, one table or a page of
them (`/v1/tables`, `/v1/tables/{table}`, `/v1/tables/{table}/switch`).

    SwitchBody    request: set ingest, maintenance and/or backpressure, with the reason
    Switch        a table's switch
    IntentCause   drain | backpressure | turn
    Intent        an open intent holding commits
    TableState    a table's switch, live leases, open intents, debt, lag, readers and due
    Tables        a page of the known tables
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from service.wire.common import Answer, Body, Partitions
from service.wire.debt import TableDebt
from service.wire.due import TableDue
from service.wire.ingest import IngestLag
from service.wire.leases import Lease
from service.wire.readers import ReaderHold

__all__ = ["Intent", "IntentCause", "Switch", "SwitchBody", "TableState", "Tables"]

IntentCause = Literal["drain", "backpressure", "turn"]
"""Why an intent holds commits: a maintenance request's drain, a compactor's backpressure, or
a maintenance lease's turn of the table's head at the catalog front (docs/catalog-front.md §4)."""


# -- requests --------------------------------------------------------------------------------


class SwitchBody(Body):
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


# -- answers ---------------------------------------------------------------------------------


class Switch(Answer):
    ingest: Literal["running", "paused"]
    maintenance: Literal["enabled", "disabled"]
    backpressure: Literal["enabled", "disabled"] = "enabled"
    reason: str | None
    by: str | None
    changed_s_ago: float | None


class Intent(Answer):
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


class TableState(Answer):
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


class Tables(Answer):
    """A page of the known tables, by name."""

    tables: tuple[TableState, ...]
    next: str | None = Field(
        default=None,
        description="more tables follow: ask again with `after` set to this (the last name "
        "of this page); null on the last page",
    )
