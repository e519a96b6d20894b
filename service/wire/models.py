"""The HTTP API's bodies, both ways (docs/api.md): what the routes take and answer, and what the
client parses. Pydantic only, no FastAPI or server import, so `service.client` shares it.

The models live by the API's resources; this module names them all in one place, and
`service.wire` re-exports them (`from service.wire import Lease`):

    service.wire.common    the bases (strict requests, frozen answers) and the shared field types
    service.wire.leases    AcquireBody, RenewBody, ReleaseBody, RevokeBody; Lease, LeaseKind,
                           LeaseState, IntentRef, Draining, Renewed, Released, Withdrawn
    service.wire.claims    ClaimBody, BackpressureBody; Backpressure
    service.wire.tables    SwitchBody; Switch, IntentCause, Intent, TableState, Tables
    service.wire.due       PartitionFiles (a release's, a debt report's counts); DuePartition,
                           Due, TableDue
    service.wire.debt      DebtBody; TableDebt
    service.wire.ingest    LagBody, OffsetGap, GapsBody; IngestLag, GapsRecorded
    service.wire.readers   ReaderBody; ReaderHold
    service.wire.runs      RunBody; RunId, Runs
    service.wire.audit     Event, Events

    lease = Lease.model_validate_json(response.content)
    lease.partitions       # None: the whole table; else a tuple of partition names
    lease.model_dump(mode="json")

Every request body forbids unknown fields, so a typo ("ttl" for "ttl_s") is a 422 naming the
field instead of a silent default. Answers are frozen and ignore fields they do not know, so a
client keeps working against a newer service.
"""

from __future__ import annotations

from service.wire.audit import Event, Events
from service.wire.claims import Backpressure, BackpressureBody, ClaimBody
from service.wire.common import (
    HOLDER_PATTERN,
    MAX_TOKEN,
    TABLE_GLOB_PATTERN,
    TABLE_PATTERN,
    PartitionName,
    partition_name,
)
from service.wire.debt import DebtBody, TableDebt
from service.wire.due import (
    MAX_COUNTED_FILES,
    MAX_COUNTED_PARTITIONS,
    Due,
    DuePartition,
    PartitionFiles,
    TableDue,
)
from service.wire.ingest import GapsBody, GapsRecorded, IngestLag, LagBody, OffsetGap
from service.wire.leases import (
    REQUEST_ID_PATTERN,
    AcquireBody,
    Draining,
    IntentRef,
    Lease,
    LeaseKind,
    LeaseState,
    ReleaseBody,
    Released,
    RenewBody,
    Renewed,
    RevokeBody,
    Withdrawn,
)
from service.wire.readers import READER_PATTERN, ReaderBody, ReaderHold
from service.wire.runs import RunBody, RunId, Runs
from service.wire.tables import Intent, IntentCause, Switch, SwitchBody, Tables, TableState

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
