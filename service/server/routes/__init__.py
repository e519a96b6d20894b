"""The HTTP routes, a module per resource: parse, run one protocol call of service.lock in one
transaction, translate its answer.

    health     /healthz, /readyz, /metrics
    tables     a table's state and switch; the debt, lag and gaps reported of it
    readers    the holds of jobs streaming out of a table
    runs       compactor run reports
    leases     commit and maintenance leases, intents, a lease by its id
    claims     claims and the backpressure held under them
    due        the long-poll of the compactors that follow the stream for due partitions
    events     the audit trail
    common     what they share: path parameters, the runtime, bounds, declared problems
    catalog    the Iceberg REST catalog at /iceberg; included by the app only where the catalog
               is served (it imports pyiceberg)

`router` is the lease API: every module above but the catalog.
"""

from fastapi import APIRouter

from service.server.routes import claims, due, events, health, leases, readers, runs, tables

__all__ = ["router"]

# the resources' own routes, not routers included in it: `router.routes` lists every route
router = APIRouter(
    routes=[
        route
        for resource in (health, tables, readers, runs, leases, claims, due, events)
        for route in resource.router.routes
    ]
)
