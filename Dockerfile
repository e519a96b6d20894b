# lakelock service image: the FastAPI lease service only (no Spark, no jobs).
#
#   docker build -t lakelock .
#   docker run -p 8737:8737 -e LAKELOCK_DATABASE_URL=mysql+pymysql://... \
#       -e LAKELOCK_TOKENS=ingest:job:... lakelock
#   docker run --rm -e LAKELOCK_DATABASE_URL=... lakelock python -m service migrate
#
# See docs/deployment.md for ECS.

# -- build: a virtualenv with the pinned dependencies of `lakelock[service]`, and the sources --
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
COPY deploy/requirements.txt /tmp/requirements.txt
# every requirement is pinned in the file (tests/deploy/test_dockerfile.py checks it)
RUN /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: -r /tmp/requirements.txt

WORKDIR /app
# the service and its migrations, run from source: service/lock/migrate.py finds migrations/
# at the top. Only the server's parts, the catalog front with them: the client (service/client)
# and the operators' tools (service/ops) belong to other hosts.
COPY service/__init__.py service/__main__.py service/extras.py service/
COPY service/wire/ service/wire/
COPY service/lock/ service/lock/
COPY service/server/ service/server/
COPY service/catalog/ service/catalog/
COPY migrations/ migrations/
RUN /opt/venv/bin/python -m compileall -q service migrations

# -- runtime ---------------------------------------------------------------------------------
FROM python:3.11-slim

LABEL org.opencontainers.image.title="lakelock" \
      org.opencontainers.image.description="Lease-based write locks for Apache Iceberg tables"

# a fixed numeric id, so a platform can check it runs as non-root (runAsNonRoot)
RUN useradd --system --no-log-init --uid 10001 --gid 0 --home-dir /app --shell /usr/sbin/nologin lakelock

COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
# var/ holds the SQLite file of a local `docker run` without LAKELOCK_DATABASE_URL
RUN mkdir -p /app/var && chown 10001:0 /app/var

WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LAKELOCK_HOST=0.0.0.0 \
    LAKELOCK_PORT=8737 \
    LAKELOCK_WORKERS=1 \
    LAKELOCK_LOG_FORMAT=json

USER 10001
EXPOSE 8737

# liveness only: the process answers. Readiness (the database) is /readyz, for the load balancer.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LAKELOCK_PORT', '8737'), timeout=4)"]

# SIGTERM: pending long-polls answer at once, in-flight requests finish, exit 0 within
# LAKELOCK_SHUTDOWN_GRACE_S. X-Forwarded-For is believed from LAKELOCK_TRUSTED_PROXIES only
# (the load balancer's subnets, set by the deployment); workers from LAKELOCK_WORKERS.
STOPSIGNAL SIGTERM
CMD ["python", "-m", "service"]
