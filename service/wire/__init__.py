"""What crosses the wire between the service and its clients; no FastAPI, SQLAlchemy or Spark.

    service.wire.models   the HTTP bodies both ways (pydantic), re-exported here:
                          `from service.wire import Lease`; each lives by its resource:
    service.wire.common   the bodies' bases and the field types they share
    service.wire.leases   commit and maintenance leases, a draining request's intent
    service.wire.claims   a compactor's claim and its backpressure
    service.wire.tables   a table's switch, intents and state
    service.wire.due      the files counted per partition, the partitions due
    service.wire.debt     a compactor's debt report
    service.wire.ingest   an ingest job's lag and skipped offsets
    service.wire.readers  the holds of jobs streaming out of a table
    service.wire.runs     the jobs' run reports
    service.wire.audit    the audit events as `GET /v1/events` answers them
    service.wire.errors   the error tree, and problem+json both ways
    service.wire.scope    partition names and the conflict rule of scopes
    service.wire.events   the audit events' names (`EventName`), re-exported here
    service.wire.holders  a holder and the runs under it (`<holder>/<run>`)
    service.wire.text     the few names a message shows of many (`a, b, c and 2 more`)
    service.wire.figures  quantiles of samples (nearest rank)

The client (the base install) needs all of it; so do the lock core and the server. It is the
lowest part that the lock core, the client, the operators' tools and the jobs may all import
(tests/project/test_layers.py), so the small rules they share live here, once.
"""

from service.wire.events import EventName
from service.wire.models import *  # noqa: F403
from service.wire.models import __all__ as _models

__all__ = ["EventName", *_models]
