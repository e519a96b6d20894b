"""Run the service as a local child process: the demo's service (the tests and benchmarks reach
it through `testkit`).

    with LocalService.start(db_url="sqlite:///var/demo/lakelock.db", log_path=path) as svc:
        client = LeaseClient(svc.url, token=svc.token("job"))

It binds a free loopback port, generates one token per role unless given, waits until /readyz
answers 200, and on `stop()` sends SIGTERM (the graceful path) and kills it after a grace.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol, TypeVar

import httpx

__all__ = ["LocalService", "foreground", "free_port", "terminate"]


class _Stoppable(Protocol):
    def stop(self) -> Any: ...


S = TypeVar("S", bound=_Stoppable)

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("reader", "job", "operator")


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    """Stop a child process the way a supervisor would: SIGTERM, then SIGKILL after
    `timeout_s`; its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    return process.returncode


def foreground(
    start: Callable[[], S],
    banner: Callable[[S], str],
    process: Callable[[S], subprocess.Popen[bytes]],
) -> int:
    """A local server's command (bin/kafka-local, bin/s3-local, bin/flink-cluster) in the
    foreground: `start` it with SIGTERM and SIGINT caught first (a Ctrl-C while it starts still
    stops what started), print its `banner`, wait for a signal or for its main `process` to
    end, stop it. Exit status 0 when told to stop, 1 when it ended by itself."""
    stop: list[bool] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    server = start()
    print(banner(server), flush=True)
    try:
        while not stop and process(server).poll() is None:
            time.sleep(0.2)
    finally:
        server.stop()
    return 0 if stop else 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LocalService:
    url: str
    db_url: str
    process: subprocess.Popen
    log_path: Path
    tokens: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        *,
        db_url: str,
        log_path: Path,
        port: int | None = None,
        tokens: dict[str, str] | None = None,
        ready_timeout_s: float = 60.0,
        python: str = sys.executable,
        cwd: Path = ROOT,
        **env: str,
    ) -> LocalService:
        """Start `python -m service` (this interpreter's, from this checkout, unless `python`
        and `cwd` say otherwise) and wait until it is ready.

        Raises:
            RuntimeError: the process exited or did not become ready; the message has its log.
        """
        port = port or free_port()
        tokens = tokens or {role: secrets.token_urlsafe(18) for role in ROLES}
        full_env = {
            **os.environ,
            "LAKELOCK_DATABASE_URL": db_url,
            "LAKELOCK_TOKENS": ",".join(f"{r}-client:{r}:{s}" for r, s in tokens.items()),
            "LAKELOCK_AUTH": "on",
            "LAKELOCK_HOST": "127.0.0.1",
            "LAKELOCK_PORT": str(port),
            "LAKELOCK_LOG_LEVEL": "warning",
            **env,
        }
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file: IO[bytes] = log_path.open("ab")
        process = subprocess.Popen(
            [python, "-m", "service"],
            cwd=cwd,
            env=full_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # its own process group: a Ctrl-C in the terminal reaches the parent only, which
            # then stops the service last, after its jobs have released their leases
            start_new_session=True,
        )
        log_file.close()  # the child has its own descriptor
        service = cls(f"http://127.0.0.1:{port}", db_url, process, log_path, tokens, full_env)
        service._wait_ready(ready_timeout_s)
        return service

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the service exited with {self.process.returncode}:\n{self.log()}"
                )
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the service did not become ready in {timeout_s:g}s:\n{self.log()}")

    def token(self, role: str = "operator") -> str:
        return self.tokens[role]

    def headers(self, role: str = "operator") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        return terminate(self.process, timeout)

    def __enter__(self) -> LocalService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
