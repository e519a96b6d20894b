"""The sweeper, called directly (its background tick is an hour away here): a table whose sweep
fails is logged and left to the next tick, and the tables after it are still swept."""

import pytest

from service.lock import expiry
from tests.support.helpers import backdate, commit, events

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"sweep_interval_s": 3600}


def test_a_table_whose_sweep_fails_leaves_the_others_swept(api, db_url, monkeypatch, caplog):
    broken, fine = (commit(api, table=t).json() for t in ("lake.db.a", "lake.db.b"))
    backdate(db_url, broken)
    backdate(db_url, fine)
    sweep = expiry.sweep

    def failing_on_a(conn, *, table):
        if table == "lake.db.a":
            raise RuntimeError("a row the sweep cannot read")
        return sweep(conn, table=table)

    monkeypatch.setattr(expiry, "sweep", failing_on_a)
    assert api.app.state.runtime.sweep_once() == 1
    assert "sweep of lake.db.a failed" in caplog.text
    assert [e["lease_id"] for e in events(api, "lake.db.b") if e["event"] == "lease.expired"] == [
        fine["lease_id"]
    ]
    assert not [e for e in events(api, "lake.db.a") if e["event"] == "lease.expired"]
