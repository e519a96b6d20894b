"""An HTTP proxy on loopback that loses answers: it forwards each request to the service and,
for the first `lose` requests a rule picks, answers the client 503 with `Retry-After: 1`
instead of the service's answer, as a load balancer does whose backend answered after the
balancer gave up. What the service did stands; the client cannot know it. Each request it saw
is kept (method, path, headers) for the test to read.

    with LossyProxy("http://127.0.0.1:8737", picks=is_commit, lose=1) as proxy:
        ... point the client at proxy.url ...
    proxy.seen, proxy.lost
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["LossyProxy", "Seen"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int  # the service's status
    lost: bool  # the client got a 503 instead


@dataclass
class LossyProxy:
    upstream: str
    picks: Callable[[str, str, bytes], bool]
    lose: int = 1
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._left = self.lose
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                with httpx.Client(timeout=120) as client:
                    answer = client.request(
                        self.command, proxy.upstream + self.path, headers=headers, content=body
                    )
                lost = proxy._take(self.command, self.path, body)
                with proxy._lock:
                    proxy.seen.append(
                        Seen(self.command, self.path, headers, body, answer.status_code, lost)
                    )
                if lost:
                    self._send(503, {"Retry-After": "1", "Content-Type": "text/plain"}, b"lost")
                    return
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
                kept.pop("content-encoding", None)  # httpx decoded the body
                self._send(answer.status_code, kept, answer.content)

            def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _forward

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the test reads `seen`

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, method: str, path: str, body: bytes) -> bool:
        with self._lock:
            if self._left > 0 and self.picks(method, path, body):
                self._left -= 1
                return True
        return False

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
