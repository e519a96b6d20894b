"""An idle keep-alive connection stays open past uvicorn's default 5 s (LAKELOCK_KEEP_ALIVE_S),
so a load balancer (docs/deployment.md: an idle timeout of 75 s) closes it first and never
sends a request on a connection the service has just closed: a real service process."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.conftest import start_server


def _ask(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: lakelock\r\n\r\n")
    return sock.recv(4096)


def test_an_idle_connection_outlives_a_short_keep_alive(tmp_path: Path) -> None:
    server = start_server(f"sqlite:///{tmp_path / 'lakelock.db'}", tmp_path)
    try:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            assert _ask(sock).startswith(b"HTTP/1.1 200")
            time.sleep(6.5)  # past uvicorn's own 5 s
            assert _ask(sock).startswith(b"HTTP/1.1 200")
    finally:
        server.stop()
