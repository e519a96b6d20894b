"""SIGTERM (ECS stopping a task) on a real `python -m service` process with long-polls pending."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import ServerProcess, auth, start_server
from tests.support.helpers import wait_parked

pytestmark = pytest.mark.slow

HELD = "lake.db.held"  # a maintenance lease is live: commit requests wait
DRAINING = "lake.db.draining"  # a commit lease is live: a maintenance request waits (intent)
# longer than any answer takes, so answering within half of it tells "at once" from "at the
# grace" on the busiest machine
GRACE_S = 60.0


class Pending:
    """One request sent on its own thread; remembers the response and when it came."""

    def __init__(self, send: Callable[[httpx.Client], httpx.Response]) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self.answered_at: float | None = None
        self._send = send
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with httpx.Client(timeout=90) as client:
                self.response = self._send(client)
        except BaseException as exc:  # reported by the test, not swallowed
            self.error = exc
        self.answered_at = time.monotonic()

    def join(self, timeout: float) -> httpx.Response:
        self._thread.join(timeout)
        assert self.error is None, f"the request failed: {self.error!r}"
        assert self.response is not None, "no answer in time"
        return self.response

    def is_waiting(self) -> bool:
        return self._thread.is_alive()


def _acquire(server: ServerProcess, kind: str, table: str, holder: str, wait_s: float = 0):
    path = "commit-leases" if kind == "commit" else "maintenance-lease"

    def send(client: httpx.Client) -> httpx.Response:
        return client.post(
            f"{server.url}/v1/tables/{table}/{path}",
            json={"holder": holder, "ttl_s": 120, "wait_s": wait_s},
            headers=auth("job"),
        )

    return send


def _state(server: ServerProcess, table: str) -> dict:
    response = httpx.get(f"{server.url}/v1/tables/{table}", headers=auth("reader"), timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_answers_pending_long_polls_at_once_and_exits_cleanly(
    db_url: str, tmp_path: Path, workers: int
):
    server = start_server(
        db_url, tmp_path, LAKELOCK_SHUTDOWN_GRACE_S=str(GRACE_S), LAKELOCK_WORKERS=str(workers)
    )
    try:
        with httpx.Client(timeout=10) as client:
            held = _acquire(server, "maintenance", HELD, "compactor-1")(client)
            assert held.status_code == 201, held.text
            live = _acquire(server, "commit", DRAINING, "ingest-9")(client)
            assert live.status_code == 201, live.text
        version = _state(server, HELD)["version"]

        commits = [
            Pending(_acquire(server, "commit", HELD, f"ingest-{n}", wait_s=50)) for n in range(3)
        ]
        draining = Pending(_acquire(server, "maintenance", DRAINING, "compactor-2", wait_s=50))
        watcher = Pending(
            lambda client: client.get(
                f"{server.url}/v1/tables/{HELD}",
                params={"wait": 50, "since": version},
                headers=auth("reader"),
            )
        )
        pending = [*commits, draining, watcher]
        with httpx.Client(base_url=server.url, headers=auth("reader"), timeout=10) as client:
            wait_parked(client, len(pending))
        assert all(p.is_waiting() for p in pending), "every long-poll should still be waiting"

        signalled_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)

        for request in commits:
            response = request.join(30)
            assert response.status_code == 423, response.text
            assert response.json()["reason"] == "maintenance"
            assert "Retry-After" in response.headers
        response = draining.join(30)
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "draining"
        response = watcher.join(30)
        assert response.status_code == 200, response.text
        assert response.json()["version"] == version
        assert response.json()["maintenance_lease"]["holder"] == "compactor-1"
        for request in pending:
            assert request.answered_at is not None
            assert request.answered_at - signalled_at < GRACE_S / 2, "answered at the grace"

        # exits as soon as nothing is in flight, not at the end of the grace
        assert server.process.wait(GRACE_S / 2) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/healthz", timeout=2)
    finally:
        server.stop()


def test_sigterm_on_an_idle_server_exits_zero_and_logs_the_stop(db_url: str, tmp_path: Path):
    server = start_server(db_url, tmp_path, LAKELOCK_LOG_LEVEL="info")
    try:
        with httpx.Client(timeout=10) as client:
            # a kept-alive idle connection must not hold the shutdown up
            assert client.get(server.url + "/healthz").status_code == 200
            signalled_at = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(GRACE_S + 10) == 0
        assert time.monotonic() - signalled_at < GRACE_S / 2, "held up until the grace"
        assert "lakelock service stopped" in server.log()
    finally:
        server.stop()
