"""An idle keep-alive connection stays open past uvicorn's default 5 s (LAKELOCK_KEEP_ALIVE_S),
so a load balancer (docs/deployment.md: an idle timeout of 75 s) closes it first and never
sends a request on a connection the service has just closed: a real service process."""

from __future__ import annotations

import http.client
import time
from pathlib import Path

from tests.conftest import start_server


def _ask(conn: http.client.HTTPConnection) -> int:
    """One whole request and answer on the connection (read to its end, so the next request
    starts on a clean stream)."""
    conn.request("GET", "/healthz")
    answer = conn.getresponse()
    answer.read()
    return answer.status


def test_an_idle_connection_outlives_a_short_keep_alive(tmp_path: Path) -> None:
    server = start_server(f"sqlite:///{tmp_path / 'lakelock.db'}", tmp_path)
    try:
        host, port = server.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            assert _ask(conn) == 200
            sock = conn.sock
            time.sleep(6.5)  # past uvicorn's own 5 s
            assert _ask(conn) == 200  # the server closing it would be RemoteDisconnected here
            assert conn.sock is sock  # the same connection, not a new one
        finally:
            conn.close()
    finally:
        server.stop()
