"""The lakelock client: what a job host imports (the base install: httpx and pydantic only).

    from service.client import LeaseClient, Renewer
    client = LeaseClient("http://lakelock:8737", token=secret)
    lease = client.acquire_commit("cat.db.events", holder="ingest:run-7", ttl_s=30, wait_s=10)

    service.client.lease_client   LeaseClient: the HTTP calls, retries, acquire_until
    service.client.renewer        Renewer, LeaseLost: keeping a lease alive, knowing it is lost
    service.client.reader         ReaderLease: a streaming reader's hold on snapshot expiry

Nothing here imports FastAPI, SQLAlchemy or Spark. Failures are the `service.wire.errors` tree,
re-exported here with the answers' models a job handles.
"""

from service.client.lease_client import (
    DEFAULT_URL,
    MAX_WAIT_S,
    UNAVAILABLE,
    Acquired,
    LeaseClient,
    NotGranted,
    Waited,
)
from service.client.reader import ReaderLease
from service.client.renewer import LeaseLost, Renewer
from service.wire import DebtBody, Draining, Lease, TableDebt
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
    "UNAVAILABLE",
    "Acquired",
    "ClaimHeld",
    "DebtBody",
    "Draining",
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
    "TableDebt",
    "Unavailable",
    "Waited",
]
