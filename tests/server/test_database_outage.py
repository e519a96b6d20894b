"""The lock database goes away and comes back, under a real service process.

The service reaches MariaDB through a loopback proxy the test controls (tests/support/tcp_proxy.py):
`cut()` drops every connection and refuses new ones (a failover, a restarted server);
`blackhole()` holds them silent (a dead network), where only the client's timeouts help.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import _empty_mariadb, auth, start_server
from tests.support.helpers import wait_parked, wait_until
from tests.support.mariadb_user import password_user
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.dialect]

TABLE = "lake.db.events"
DB_TIMEOUT_S = 1.0
# the timeouts allow about 2 s (connect 1 s + one read 1 s); a hang would last the client's
# 60 s: this tells the two apart on the busiest machine
PROMPT_S = 30.0


@pytest.fixture
def proxy(mariadb_session_url: str) -> Iterator[TcpProxy]:
    _empty_mariadb(mariadb_session_url)
    url = make_url(mariadb_session_url)
    with TcpProxy(url.host or "127.0.0.1", url.port or 3306) as proxy:
        yield proxy


@pytest.fixture
def server(proxy: TcpProxy, mariadb_session_url: str, tmp_path: Path):
    """The service logging in with a password, through the proxy."""
    with password_user(mariadb_session_url) as user_url:
        url = make_url(user_url).set(host="127.0.0.1", port=proxy.port)
        server = start_server(
            url.render_as_string(hide_password=False),
            tmp_path,
            LAKELOCK_DB_TIMEOUT_S=str(DB_TIMEOUT_S),
            LAKELOCK_RETRY_AFTER_S="2",
            LAKELOCK_LOG_LEVEL="info",
        )
        yield server
        server.stop()


def _commit(server, holder: str, **body) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/tables/{TABLE}/commit-leases",
        json={"holder": holder, "ttl_s": 120, **body},
        headers=auth("job"),
        timeout=60,
    )


def _timed(call) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def _assert_unavailable(response: httpx.Response, took: float) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:lakelock:unavailable"
    assert int(response.headers["Retry-After"]) >= 1
    assert took < PROMPT_S, f"answered after {took:.1f}s, not promptly"


def _wait_ready(server, within: float = 30.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        if httpx.get(server.url + "/readyz", timeout=10).status_code == 200:
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"/readyz not 200 within {within}s of the database returning")


def _rows(mariadb_url: str) -> list[tuple[str, str]]:
    engine = create_engine(mariadb_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT holder, id FROM lakelock_commit_leases")).all()
    engine.dispose()
    return [tuple(row) for row in rows]


@pytest.mark.parametrize("outage", ["cut", "blackhole"])
def test_lease_calls_answer_503_during_an_outage_and_resume_after_it(
    server, proxy: TcpProxy, mariadb_session_url: str, outage: str
):
    before = _commit(server, "ingest-before")
    assert before.status_code == 201, before.text

    getattr(proxy, outage)()

    _assert_unavailable(*_timed(lambda: httpx.get(server.url + "/readyz", timeout=60)))
    _assert_unavailable(*_timed(lambda: _commit(server, "ingest-during", request_id="r-1")))
    _assert_unavailable(
        *_timed(
            lambda: httpx.post(
                f"{server.url}/v1/leases/{before.json()['lease_id']}/renew",
                json={"holder": "ingest-before"},
                headers=auth("job"),
                timeout=60,
            )
        )
    )
    _assert_unavailable(
        *_timed(
            lambda: httpx.get(f"{server.url}/v1/tables/{TABLE}", headers=auth("reader"), timeout=60)
        )
    )
    # liveness says nothing about the database: ECS must not replace the task for an outage
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200

    proxy.restore()
    _wait_ready(server)

    assert server.process.poll() is None, "the service must resume without a restart"
    assert _rows(mariadb_session_url) == [("ingest-before", before.json()["lease_id"])]
    after = _commit(server, "ingest-during", request_id="r-1")
    assert after.status_code == 201, after.text
    renewed = httpx.post(
        f"{server.url}/v1/leases/{before.json()['lease_id']}/renew",
        json={"holder": "ingest-before"},
        headers=auth("job"),
        timeout=10,
    )
    assert renewed.status_code == 200, renewed.text


def test_a_pending_long_poll_answers_503_when_the_database_goes(server, proxy: TcpProxy):
    maintenance = httpx.post(
        f"{server.url}/v1/tables/{TABLE}/maintenance-lease",
        json={"holder": "compactor-1", "ttl_s": 120},
        headers=auth("job"),
        timeout=10,
    )
    assert maintenance.status_code == 201, maintenance.text
    box: dict[str, httpx.Response] = {}
    waiting = threading.Thread(
        target=lambda: box.setdefault("r", _commit(server, "ingest-1", wait_s=50)), daemon=True
    )
    waiting.start()
    with httpx.Client(base_url=server.url, headers=auth("reader"), timeout=10) as client:
        wait_parked(client, 1)
    assert waiting.is_alive(), "the commit request should be waiting"

    cut_at = time.monotonic()
    proxy.cut()
    waiting.join(PROMPT_S + 5)
    assert "r" in box, "the long-poll did not answer during the outage"
    _assert_unavailable(box["r"], time.monotonic() - cut_at)

    proxy.restore()
    _wait_ready(server)
    state = httpx.get(f"{server.url}/v1/tables/{TABLE}", headers=auth("reader"), timeout=10)
    assert state.json()["maintenance_lease"]["holder"] == "compactor-1"
    assert state.json()["commit_leases"] == []


def test_the_logs_of_an_outage_do_not_show_the_database_password(server, proxy: TcpProxy):
    proxy.cut()
    assert httpx.get(server.url + "/readyz", timeout=60).status_code == 503
    assert _commit(server, "ingest-1").status_code == 503
    # a sweep tick fails too, and logs it
    wait_until(lambda: "sweep skipped" in server.log(), "a sweep tick during the outage")
    proxy.restore()
    _wait_ready(server)
    password = make_url(server.db_url).password
    assert password
    log = server.log()
    assert "database unavailable" in log
    assert password not in log


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"db_pool_size": 1, "db_timeout_s": 1.0}


def test_every_pooled_connection_busy_answers_503_not_a_hang(api, db_url):
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite serialises in the file, not in a connection pool")
    engine = api.app.state.runtime.engine
    held = [engine.connect() for _ in range(2)]  # pool_size 1 + overflow 1: all of them
    try:
        response = api.post(
            "/v1/tables/lake.db.events/commit-leases", json={"holder": "h", "ttl_s": 30}
        )
        assert response.status_code == 503
        assert response.json()["type"] == "urn:lakelock:unavailable"
        assert "Retry-After" in response.headers
    finally:
        for conn in held:
            conn.close()
    assert api.get("/v1/tables").status_code == 200
