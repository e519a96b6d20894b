"""A database connection that dies inside a transaction: never a 500, never half a change.

The connection is killed from inside the transaction (`KILL CONNECTION_ID()` on MariaDB), the
way a failover or a dropped network cuts it; `run_transaction` must report the database as
unavailable (a 503 to the caller) or, when nothing had been committed yet, retry on a fresh
connection.
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from service.lock.db import is_unavailable, make_engine, run_transaction

pytestmark = pytest.mark.mariadb


@pytest.fixture
def engine(mariadb_session_url: str):
    engine = make_engine(mariadb_session_url, pool_size=2, timeout_s=2.0)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS fault_probe"))
        conn.execute(text("CREATE TABLE fault_probe (n INT PRIMARY KEY)"))
    yield engine
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS fault_probe"))
    engine.dispose()


def _kill_self(conn) -> None:
    conn.execute(text("INSERT INTO fault_probe VALUES (1)"))
    conn.exec_driver_sql("KILL CONNECTION_ID()")


def _count(url: str) -> int:
    other = create_engine(url)
    with other.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM fault_probe")).scalar_one()
    other.dispose()
    return n


def test_a_connection_killed_mid_transaction_is_reported_unavailable(engine, mariadb_session_url):
    with pytest.raises(DBAPIError) as caught:
        run_transaction(engine, _kill_self, attempts=2)
    assert is_unavailable(caught.value), caught.value
    assert _count(mariadb_session_url) == 0, "nothing of the killed transaction may remain"


def test_a_connection_found_dead_before_the_commit_is_retried_on_a_fresh_one(
    engine, mariadb_session_url
):
    calls = []

    def once_killed(conn) -> int:
        calls.append(1)
        if len(calls) == 1:
            _kill_self(conn)
        conn.execute(text("INSERT INTO fault_probe VALUES (2)"))
        return 2

    assert run_transaction(engine, once_killed) == 2
    assert len(calls) == 2
    assert _count(mariadb_session_url) == 1
