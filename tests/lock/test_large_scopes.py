"""The largest scope there is, LAKELOCK_MAX_PARTITIONS (1,000) names of 512 characters, on SQLite
and MariaDB: granted, audited, revoked and expired like a small one. MySQL's 64 KiB TEXT once
refused the audit events of scopes near that size, so a grant or revoke answered 500, and an
expired intent of such a scope left its whole table unwritable."""

from __future__ import annotations

import pytest

from service.wire.scope import MAX_NAME_CHARS
from tests.support.helpers import backdate_intent, commit, events, maintenance, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

LARGEST = [f"p{n:04d}=".ljust(MAX_NAME_CHARS, "x") for n in range(1000)]


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    # a body with the largest scope is about 520 KB: a deployer who sends such scopes raises
    # LAKELOCK_MAX_BODY_BYTES (64 KiB by default)
    return {"max_body_bytes": 1 << 20}


def test_the_largest_scope_is_granted_audited_and_revoked(api):
    granted = commit(api, partitions=LARGEST)
    assert granted.status_code == 201, granted.text
    lease = granted.json()
    revoked = api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "r" * 1024})
    assert revoked.status_code == 200, revoked.text
    trail = {e["event"]: e for e in events(api)}
    assert trail["lease.acquired"]["detail"]["partitions"] == LARGEST
    assert trail["lease.revoked"]["detail"]["partitions"] == LARGEST
    assert state(api)["commit_leases"] == []


def test_an_expired_intent_of_the_largest_scope_leaves_the_table_writable(api, db_url):
    assert commit(api, partitions=LARGEST[:1]).status_code == 201
    draining = maintenance(api, partitions=LARGEST, request_id="r1")
    assert draining.status_code == 202, draining.text
    backdate_intent(db_url, "lake.db.events")
    # the next write on the table ends the intent and writes its `intent.expired` event
    elsewhere = commit(api, holder="ingest-2", partitions=["zz=1"])
    assert elsewhere.status_code == 201, elsewhere.text
    assert state(api)["intents"] == []
    expired = [e for e in events(api) if e["event"] == "intent.expired"]
    assert [e["detail"]["partitions"] for e in expired] == [LARGEST]
