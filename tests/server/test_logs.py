"""What a real service process writes on stderr: JSON lines, and never a secret."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from service.server.logs import JsonFormatter, mask_url
from tests.conftest import TOKENS, ServerProcess, auth, start_server
from tests.support.mariadb_user import password_user

pytestmark = pytest.mark.slow

TABLE = "lake.db.events"
UNKNOWN_SECRET = "not-a-configured-secret-42"


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    """A service at log level info, behind a load balancer on loopback (the test's client);
    on MariaDB it logs in with a password."""
    user = password_user(db_url) if db_url.startswith("mysql") else nullcontext(db_url)
    with user as url:
        server = start_server(
            url, tmp_path, LAKELOCK_LOG_LEVEL="info", LAKELOCK_TRUSTED_PROXIES="127.0.0.1"
        )
        yield server
        server.stop()


def _lines(server: ServerProcess) -> list[dict]:
    assert server.stop() == 0
    lines = []
    for number, raw in enumerate(server.log().splitlines(), 1):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            pytest.fail(f"log line {number} is not JSON: {raw!r}")
        assert {"ts", "level", "logger", "msg"} <= line.keys(), raw
        lines.append(line)
    return lines


def _exercise(server: ServerProcess) -> dict[str, httpx.Response]:
    """A lease's life and some refusals, as ingest, compactor and an intruder would call."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        seen = {}
        seen["commit"] = client.post(
            f"/v1/tables/{TABLE}/commit-leases",
            json={"holder": "ingest-1", "ttl_s": 30},
            headers={**auth("job"), "X-Request-ID": "req-from-ingest-1"},
        )
        lease = seen["commit"].json()
        seen["release"] = client.delete(
            f"/v1/leases/{lease['lease_id']}", params={"holder": "ingest-1"}, headers=auth("job")
        )
        seen["maintenance"] = client.post(
            f"/v1/tables/{TABLE}/maintenance-lease",
            json={"holder": "compactor-1", "ttl_s": 60},
            headers={**auth("job"), "X-Forwarded-For": "203.0.113.7"},
        )
        seen["intruder"] = client.get(
            "/v1/tables", headers={"Authorization": f"Bearer {UNKNOWN_SECRET}"}
        )
        seen["switch"] = client.put(
            f"/v1/tables/{TABLE}/switch",
            json={"ingest": "paused", "reason": "backfill"},
            headers=auth("operator"),
        )
        seen["health"] = client.get("/healthz")
    return seen


def test_every_line_is_json_with_one_line_per_request(server: ServerProcess):
    seen = _exercise(server)
    assert seen["commit"].status_code == 201
    assert seen["commit"].headers["X-Request-ID"] == "req-from-ingest-1"
    generated = seen["health"].headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)

    requests = [line for line in _lines(server) if line["logger"] == "lakelock.request"]
    by_id = {line["request_id"]: line for line in requests}
    commit = by_id["req-from-ingest-1"]
    assert commit["method"] == "POST"
    assert commit["path"] == f"/v1/tables/{TABLE}/commit-leases"
    assert commit["status"] == 201
    assert commit["caller"] == "job-client"
    assert isinstance(commit["duration_ms"], float) and commit["duration_ms"] >= 0
    assert by_id[generated]["path"] == "/healthz"
    assert by_id[seen["intruder"].headers["X-Request-ID"]]["status"] == 401
    maintenance = by_id[seen["maintenance"].headers["X-Request-ID"]]
    assert maintenance["client"] == "203.0.113.7", "X-Forwarded-For from the load balancer"
    # one line each, the readiness probes of start_server included
    assert len(requests) == len(by_id) and len(requests) >= len(seen)


def test_every_lease_transition_is_one_line_with_table_holder_lease_and_token(server):
    seen = _exercise(server)
    lease_id = seen["commit"].json()["lease_id"]
    token = seen["maintenance"].json()["token"]

    transitions = [line for line in _lines(server) if line["logger"] == "lakelock.lease"]
    events = [(line["event"], line["holder"], line["lease_id"]) for line in transitions]
    assert ("lease.acquired", "ingest-1", lease_id) in events
    assert ("lease.released", "ingest-1", lease_id) in events
    granted = next(
        line
        for line in transitions
        if line["event"] == "lease.acquired" and line["kind"] == "maintenance"
    )
    assert granted["table"] == TABLE and granted["token"] == token
    switch = next(line for line in transitions if line["event"] == "switch.set")
    assert switch["actor"] == "operator-client"


def test_no_token_secret_or_database_password_reaches_the_log(server: ServerProcess):
    _exercise(server)
    _lines(server)
    log = server.log()
    for secret in [*TOKENS.values(), UNKNOWN_SECRET]:
        assert secret not in log
    password = make_url(server.db_url).password
    if server.db_url.startswith("mysql"):
        assert password and password not in log
        assert mask_url(server.db_url) in log, "the masked URL says which database is used"


def test_mask_url_hides_only_the_password():
    assert mask_url("mysql+pymysql://lock:p@ss:w0rd@db:3306/x") == (
        "mysql+pymysql://lock:***@db:3306/x"
    )
    assert mask_url("sqlite:///var/lakelock.db") == "sqlite:///var/lakelock.db"


def test_formatter_keeps_the_traceback_on_the_same_line():
    import logging
    import sys

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exc"]
