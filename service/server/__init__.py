"""The lease service: a FastAPI app over the lock core (`pip install 'lakelock[service]'`).

service.server.app         create_app(settings): the engine and what runs beside requests
service.server.routes      the HTTP routes, a module per resource: parse, one call, translate
service.server.problems    every error as application/problem+json
service.server.middleware  request ids, body bounds, the request log
service.server.openapi     openapi.json with the problems, the bearer scheme and the bounds
service.server.runtime     what a process shares: engine, metrics, long-poll waits
service.server.periodic    the background threads: the sweeper, which ends what expired, and
                           the pruner's (service.server.retention: service.lock.retention)
service.server.auth        bearer tokens and roles
service.server.settings    LAKELOCK_* settings, validated at start-up
service.server.metrics     Prometheus metrics
service.server.page        the status page (static/status.html)
service.server.logs        JSON logs
service.server.serve       uvicorn, one process or workers

Every SQL statement on the lock's tables and every database error type is service.lock's (the
catalog's tables are service.catalog's): nothing here imports SQLAlchemy.
"""
