"""Fresh lock databases for the tests and benchmarks: SQLite files, or MariaDB databases made
and dropped around a use."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fresh_database"]


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
