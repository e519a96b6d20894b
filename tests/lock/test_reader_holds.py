"""Reader holds: a job streaming out of a table keeps snapshot expiry back from its position;
started, advanced, released and lapsed, each as operators see it (state, audit trail); on
SQLite and MariaDB."""

from __future__ import annotations

import time

import pytest

from service.client import LeaseClient, ReaderLease
from service.wire.errors import InvalidRequest
from tests.conftest import auth
from tests.support.helpers import backdate_reader, events, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.orders"
S1, S2 = 3051729675574597004, 7051729675574597005  # snapshot ids past 2**53


def put(api, reader: str = "summary@h1", role: str = "job", **body: object):
    values = {"snapshot_id": S1, "ttl_s": 60, **body}
    return api.put(f"/v1/tables/{TABLE}/readers/{reader}", json=values, headers=auth(role))


def readers(api) -> list[dict]:
    return state(api, TABLE)["readers"]


def reader_events(api) -> list[str]:
    return [e["event"] for e in reversed(events(api, TABLE)) if e["event"].startswith("reader.")]


def test_a_hold_is_shown_with_the_table_and_advancing_moves_it_without_an_event(api):
    assert put(api).status_code == 200
    assert put(api, snapshot_id=S2, snapshots_behind=3).status_code == 200
    (shown,) = readers(api)
    assert (shown["reader"], shown["snapshot_id"], shown["snapshots_behind"]) == (
        "summary@h1",
        S2,
        3,
    )
    assert 0 < shown["remaining_s"] <= 60
    assert reader_events(api) == ["reader.held"]  # a renewal is not an event


def test_a_release_ends_the_hold_once(api):
    put(api)
    client = LeaseClient(http=api, retries=0)
    assert client.release_reader(TABLE, "summary@h1") is True
    assert client.release_reader(TABLE, "summary@h1") is False
    assert readers(api) == []
    assert reader_events(api) == ["reader.held", "reader.released"]


def test_a_hold_past_its_ttl_stops_holding_and_the_sweep_audits_it(api, db_url):
    put(api, reader="stopped")
    put(api, reader="live")
    backdate_reader(db_url, TABLE, "stopped")
    assert [r["reader"] for r in readers(api)] == ["live"]  # not live any more, at once
    assert api.app.state.runtime.sweep_once() == 1
    expired = [e for e in events(api, TABLE) if e["event"] == "reader.expired"]
    assert [(e["holder"], e["detail"]["snapshot_id"]) for e in expired] == [("stopped", S1)]
    put(api, reader="stopped", snapshot_id=S2)  # a lapsed reader may hold again
    assert reader_events(api).count("reader.held") == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"snapshot_id": "1"}, "snapshot_id"),
        ({"snapshot_id": 2**63}, "snapshot_id"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"ttl_s": 86401}, "ttl_s"),
        ({"snapshots_behind": -1}, "snapshots_behind"),
        ({"position": 1}, "position"),
    ],
)
def test_a_bad_hold_is_refused_naming_the_field_and_changes_nothing(api, body, field):
    refused = put(api, **body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == field
    assert api.get(f"/v1/tables/{TABLE}").status_code == 404


def test_a_reader_name_outside_its_pattern_is_refused(api):
    assert put(api, reader="has space").status_code == 422


def test_a_reader_role_may_not_hold(api):
    assert put(api, role="reader").status_code == 403


def test_the_reader_lease_helper_holds_advances_and_releases(api):
    client = LeaseClient(http=api, retries=0)
    with ReaderLease(client, TABLE, "helper", ttl_s=3) as hold:
        hold.advance(S1)
        assert readers(api)[0]["snapshot_id"] == S1
        hold.advance(S2, snapshots_behind=0)
        # the thread puts it again every third of the TTL: it outlives its TTL, still at S2
        deadline = time.monotonic() + 60  # guards a hang only
        while (shown := readers(api)) and shown[0]["held_s"] <= 3 * 2:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert [(r["reader"], r["snapshot_id"]) for r in shown] == [("helper", S2)]
    assert readers(api) == []
    with pytest.raises(InvalidRequest):
        ReaderLease(client, TABLE, "helper", ttl_s=0).advance(S1)
