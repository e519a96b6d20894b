"""A private MariaDB server with a row binlog, in a temporary folder, on a free loopback port.

    with PrivateMariaDB.start(Path("/tmp/x")) as server:
        conn = server.connect(database="shop")        # PyMySQL, root, no password
        server.settings()                             # for pymysqlreplication
        server.position()                             # ("binlog.000001", 1234): SHOW MASTER STATUS

For the binlog demo, its benchmark and its tests (docs/operating.md §1): never the machine's own
server. `mariadb-install-db` makes the data folder, `mariadbd --no-defaults` serves it with
`--binlog-format=ROW --binlog-row-metadata=FULL` (column names in the row events) and the
clock in UTC. Needs Debian's `mariadb-server-core` (`bin/bootstrap` says so when missing).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MariaDBMissing", "PrivateMariaDB", "binaries"]


class MariaDBMissing(RuntimeError):
    """`mariadb-install-db` or `mariadbd` is missing: apt-get install mariadb-server-core."""


def binaries() -> tuple[str, str]:
    """The paths of `mariadb-install-db` and `mariadbd`.

    Raises:
        MariaDBMissing: either is missing.
    """
    install = shutil.which("mariadb-install-db")
    server = shutil.which("mariadbd") or (
        "/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None
    )
    if not install or not server:
        raise MariaDBMissing(
            "mariadb-install-db and mariadbd are needed: apt-get install mariadb-server-core"
        )
    return install, server


@dataclass
class PrivateMariaDB:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Any = None  # the server's output file, closed by stop()

    @classmethod
    def start(cls, folder: Path, *, timeout_s: float = 60.0) -> PrivateMariaDB:
        """Install a data folder under `folder` and start a server on it.

        Raises:
            MariaDBMissing: the binaries are not installed.
            RuntimeError: the server did not answer within `timeout_s` (its log is named).
        """
        from demo.service import free_port

        install, server = binaries()
        folder.mkdir(parents=True, exist_ok=True)
        data = folder / "data"
        root = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(
            [
                install,
                "--no-defaults",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *root,
            ],
            check=True,
            capture_output=True,
        )
        port = free_port()
        # the server writes it while it runs; stop() closes it
        log = open(folder / "server.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [
                server,
                "--no-defaults",
                f"--datadir={data}",
                f"--port={port}",
                f"--socket={folder / 'mariadb.sock'}",
                f"--pid-file={folder / 'mariadb.pid'}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                f"--log-bin={data / 'binlog'}",
                "--binlog-format=ROW",
                "--binlog-row-metadata=FULL",
                "--server-id=1",
                "--default-time-zone=+00:00",
                "--innodb-buffer-pool-size=32M",
                "--skip-log-error",
                *root,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        server_ = cls(folder, port, process, log)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                server_.connect().close()
                return server_
            except Exception:
                if process.poll() is not None or time.monotonic() > deadline:
                    server_.stop()
                    raise RuntimeError(
                        f"private MariaDB did not start: see {folder / 'server.log'}"
                    ) from None
                time.sleep(0.2)

    def settings(self) -> dict[str, Any]:
        """Connection settings for PyMySQL and pymysqlreplication."""
        return {"host": "127.0.0.1", "port": self.port, "user": "root", "password": ""}

    def connect(self, database: str | None = None, **kw: Any) -> Any:
        import pymysql

        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", database=database, autocommit=True, **kw
        )

    def position(self) -> tuple[str, int]:
        """The binlog file and position after the last commit (SHOW MASTER STATUS)."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
            return str(file), int(pos)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()

    def __enter__(self) -> PrivateMariaDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
