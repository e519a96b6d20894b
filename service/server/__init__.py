"""The lease service: a FastAPI app over the lock core (`pip install 'lakelock[service]'`).

service.server.app        create_app(settings): engine in the lifespan, the error handler
service.server.routes     the HTTP routes: parse, one transaction, translate
service.server.runtime    what a process shares: engine, metrics, long-poll waits
service.server.auth       bearer tokens and roles
service.server.settings   LAKELOCK_* settings, validated at start-up
service.server.metrics    Prometheus metrics
service.server.page       the status page (static/status.html)
service.server.retention  pruning old events and ended leases
service.server.logs       JSON logs
service.server.serve      uvicorn, one process or workers
"""
