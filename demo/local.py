"""Run the service as a local child process: for the demo, the benchmarks and the tests.

    with LocalService.start(db_url="sqlite:///var/demo/lakelock.db", log_path=path) as svc:
        client = LeaseClient(svc.url, token=svc.token("job"))

It binds a free loopback port, generates one token per role unless given, waits until /readyz
answers 200, and on `stop()` sends SIGTERM (the graceful path) and kills it after a grace.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

__all__ = ["LocalService", "free_port", "fresh_database"]

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("reader", "job", "operator")


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
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def __enter__(self) -> LocalService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def fresh_database(
    kind: str, *, mariadb_url: str, workdir: Path, prefix: str = "lakelock_bench"
) -> Iterator[str]:
    """A new database at the migration head, yielded as its URL; a MariaDB one is dropped
    afterwards. `kind` is sqlite (a file in `workdir`) or mariadb: `mariadb_url` names the
    server (and a database to connect to while creating ours), `prefix` the new one's name.

    Raises:
        ValueError: an unknown kind.
        sqlalchemy.exc.OperationalError: the MariaDB server cannot be reached.
    """
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from service.lock import migrate

    if kind == "sqlite":
        url = f"sqlite:///{workdir / f'lakelock-{uuid.uuid4().hex[:8]}.db'}"
        migrate.upgrade(url)
        yield url
        return
    if kind != "mariadb":
        raise ValueError(f"unknown database {kind!r}; use sqlite or mariadb")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(mariadb_url)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        url = make_url(mariadb_url).set(database=name).render_as_string(hide_password=False)
        try:
            migrate.upgrade(url)
            yield url
        finally:
            with admin.begin() as conn:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
    finally:
        admin.dispose()
