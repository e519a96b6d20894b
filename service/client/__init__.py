"""The lakelock client: what a job host imports (the base install: httpx, pydantic, tenacity).

    from service.client import LeaseClient, Renewer
    client = LeaseClient("http://lakelock:8737", token=secret)
    lease = client.acquire_commit("cat.db.events", holder="ingest:run-7", ttl_s=30, wait_s=10)

    service.client.lease_client   LeaseClient: the protocol's calls, one method each
    service.client.waiting        acquire_until's loop: Acquired, Waited, NotGranted
    service.client.transport      one HTTP call: auth, timeouts, problem+json, the retry policy
    service.client.renewer        Renewer, LeaseLost: keeping a lease alive, knowing it is lost
    service.client.reader         ReaderLease: a streaming reader's hold on snapshot expiry

Nothing here imports FastAPI, SQLAlchemy or Spark. Failures are the `service.wire.errors` tree,
re-exported here with the answers' models a job handles.
"""

from service.client.lease_client import LeaseClient
from service.client.reader import ReaderLease
from service.client.renewer import LeaseLost, Renewer
from service.client.transport import DEFAULT_URL
from service.client.waiting import (
    MAX_WAIT_S,
    STOP_SLICE_S,
    UNAVAILABLE,
    Acquired,
    NotGranted,
    Stopped,
    Waited,
)
from service.wire import DebtBody, Draining, DuePartition, Lease, TableDebt
from service.wire.errors import (
    ClaimHeld,
    LakelockError,
    LeaseExpired,
    Locked,
    NotFound,
    NotOwner,
    OutcomeUnknown,
    ServerError,
    StaleToken,
    Unavailable,
)

__all__ = [
    "DEFAULT_URL",
    "MAX_WAIT_S",
    "STOP_SLICE_S",
    "UNAVAILABLE",
    "Acquired",
    "ClaimHeld",
    "DebtBody",
    "Draining",
    "DuePartition",
    "LakelockError",
    "Lease",
    "LeaseClient",
    "LeaseExpired",
    "LeaseLost",
    "Locked",
    "NotFound",
    "NotGranted",
    "NotOwner",
    "OutcomeUnknown",
    "ReaderLease",
    "Renewer",
    "ServerError",
    "StaleToken",
    "Stopped",
    "TableDebt",
    "Unavailable",
    "Waited",
]
