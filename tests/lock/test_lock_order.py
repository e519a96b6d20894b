"""Every transition locks a table's row before any lease of it (docs/design.md §3), so two
calls never wait on each other in a cycle: on MariaDB such a cycle is a deadlock, which the
database breaks by rolling one of them back. A rollback is retried a few times, and then it
becomes a 500; a busy service on two processes hit that.

The cycle this pins: a renew or release locks its lease, and a grant on the same table holds
the table's row and ends that lease, which it found expired.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text, update

from service.lock import store
from service.lock.db import commit_leases_t, run_transaction
from tests.support.helpers import commit

pytestmark = pytest.mark.dialect  # on MariaDB: SQLite locks the whole file, rows have no order


def _waiting(engine, connection_id: int) -> bool:
    """True once the connection `connection_id` waits for a row lock."""
    with engine.connect() as conn:
        query = text(
            "SELECT count(*) FROM information_schema.INNODB_TRX "
            "WHERE trx_mysql_thread_id = :id AND trx_state = 'LOCK WAIT'"
        )
        return bool(conn.execute(query, {"id": connection_id}).scalar_one())


def test_a_lease_is_locked_after_its_tables_row_as_a_grant_locks_them(api, db_url, engine):
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite takes the whole database for a transaction: rows have no lock order")
    lease = commit(api).json()
    found: list[object] = []
    who: list[int] = []

    def lock_the_lease(conn) -> store.LockedLease | None:
        who.append(conn.execute(text("SELECT CONNECTION_ID()")).scalar_one())
        return store.lock_lease(conn, lease["lease_id"])

    def renewer() -> None:
        try:
            found.append(run_transaction(engine, lock_the_lease, attempts=1))
        except Exception as exc:  # a deadlock's victim: the test's failure below says so
            found.append(exc)

    with engine.connect() as grant, grant.begin():
        # a grant: the table's row first ...
        assert store.lock_table(grant, "lake.db.events", create=False) is not None
        thread = threading.Thread(target=renewer)
        thread.start()
        deadline = time.monotonic() + 30  # a guard against a hang, not a measure
        while not (who and _waiting(engine, who[0])):
            assert time.monotonic() < deadline, "the renew never waited for a lock"
            time.sleep(0.02)
        # ... then the lease it found expired, while the renew waits for the table's row
        ends = update(commit_leases_t).where(commit_leases_t.c.id == lease["lease_id"])
        grant.execute(ends.values(renewals=commit_leases_t.c.renewals))
    thread.join(30)
    assert len(found) == 1 and isinstance(found[0], store.LockedLease), found
    assert found[0].lease.id == lease["lease_id"]
