"""Partition-scoped leases over HTTP (docs/design.md §4), on SQLite and MariaDB: leases conflict
only when their kinds conflict and their partitions intersect; the whole table intersects all."""

from __future__ import annotations

import threading
import time
from itertools import product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.wire.scope import conflicts
from tests.support.helpers import commit, events, maintenance, release, renew, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

HOT = ["dt=2024-06-20/hr=13"]
WARM = ["dt=2024-06-20/hr=12"]
COLD = ["dt=2024-06-19/hr=01", "dt=2024-06-19/hr=02"]


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"max_partitions": 3}


# -- the contract of the bodies ---------------------------------------------------------------


def test_a_lease_answer_carries_its_partitions_and_null_for_the_whole_table(api):
    scoped = commit(api, partitions=HOT)
    whole = commit(api, holder="ingest-2")
    assert scoped.status_code == whole.status_code == 201
    assert scoped.json()["partitions"] == HOT
    assert whole.json()["partitions"] is None
    assert commit(api, holder="ingest-3", partitions=None).json()["partitions"] is None


@pytest.mark.parametrize(
    ("partitions", "says"),
    [
        ([], "leave the field out"),
        (["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=13"], "listed twice"),
        (["dt 2024"], "not a partition name"),
        (["dt=2024/"], "not a partition name"),
        (["hr=13/dt"], "not a partition name"),
        (["=13"], "not a partition name"),
        (["a=1", "b=2", "c=3", "d=4"], "LAKELOCK_MAX_PARTITIONS"),
    ],
)
@pytest.mark.parametrize("route", ["commit-leases", "maintenance-lease"])
def test_bad_partitions_are_a_422_that_says_what_to_send_and_change_nothing(
    api, route, partitions, says
):
    body = {"holder": "job-1", "ttl_s": 30, "partitions": partitions}
    refused = api.post(f"/v1/tables/lake.db.events/{route}", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert says in refused.json()["detail"]
    assert api.get("/v1/tables/lake.db.events").status_code == 404  # nothing was written


def test_partition_names_are_strings(api):
    refused = commit(api, partitions=[13])
    assert refused.status_code == 422
    assert "partitions" in refused.json()["detail"]


def test_openapi_states_the_partition_bounds(api):
    body = api.get("/openapi.json").json()["components"]["schemas"]["AcquireBody"]
    array = next(o for o in body["properties"]["partitions"]["anyOf"] if o.get("type") == "array")
    assert (array["minItems"], array["maxItems"], array["uniqueItems"]) == (1, 3, True)
    assert array["items"]["pattern"].startswith("^")


# -- conflicts ----------------------------------------------------------------------------------


def test_a_commit_is_refused_only_when_a_maintenance_lease_intersects_it(api):
    held = maintenance(api, partitions=COLD).json()
    assert commit(api, partitions=HOT).status_code == 201
    refused = commit(api, holder="ingest-2", partitions=[COLD[1], *HOT])
    assert refused.status_code == 423
    problem = refused.json()
    assert (problem["reason"], problem["blocking_holder"]) == ("maintenance", "compactor-1")
    assert problem["blocking_partitions"] == COLD
    whole = commit(api, holder="ingest-3")
    assert whole.status_code == 423 and whole.json()["reason"] == "maintenance"
    release(api, held)
    assert commit(api, holder="ingest-3").status_code == 201


def test_a_whole_table_maintenance_lease_refuses_every_commit(api):
    maintenance(api)
    refused = commit(api, partitions=HOT)
    assert refused.status_code == 423 and refused.json()["blocking_partitions"] is None


def test_two_maintenance_leases_on_disjoint_partitions_are_both_granted_with_rising_tokens(api):
    first = maintenance(api, partitions=COLD)
    second = maintenance(api, holder="compactor-2", partitions=WARM)
    assert first.status_code == second.status_code == 201
    assert second.json()["token"] > first.json()["token"]
    leases = state(api)["maintenance_leases"]
    assert [(x["holder"], x["partitions"]) for x in leases] == [
        ("compactor-1", COLD),
        ("compactor-2", WARM),
    ]


def test_intersecting_maintenance_is_a_409_naming_the_holder(api):
    maintenance(api, partitions=COLD)
    for partitions in ([COLD[0]], None):
        refused = maintenance(api, holder="compactor-2", partitions=partitions)
        assert refused.status_code == 409
        assert refused.json()["blocking_holder"] == "compactor-1"
    whole = maintenance(api, table="lake.db.other")
    assert whole.status_code == 201
    scoped = maintenance(api, table="lake.db.other", holder="compactor-2", partitions=WARM)
    assert scoped.status_code == 409


def test_draining_counts_only_the_intersecting_commits_and_blocks_only_them(api):
    hot = commit(api, partitions=HOT).json()
    commit(api, holder="ingest-2", partitions=WARM)
    commit(api, holder="ingest-3", partitions=["dt=2024-06-20/hr=11"])
    draining = maintenance(api, partitions=[*HOT, *COLD], request_id="run-1")
    assert draining.status_code == 202
    assert draining.json()["in_flight_commits"] == 1
    assert draining.json()["partitions"] == [*HOT, *COLD]
    # the intent blocks commits on its partitions only
    blocked = commit(api, holder="ingest-4", partitions=[COLD[0]])
    assert blocked.status_code == 423 and blocked.json()["reason"] == "intent"
    assert commit(api, holder="ingest-5", partitions=WARM).status_code == 201
    assert [(i["request_id"], i["partitions"]) for i in state(api)["intents"]] == [
        ("run-1", [*HOT, *COLD])
    ]
    release(api, hot)
    granted = maintenance(api, partitions=[*HOT, *COLD], request_id="run-1")
    assert granted.status_code == 201
    assert state(api)["intents"] == []


def test_a_whole_table_commit_drains_every_scoped_maintenance_request(api):
    commit(api)
    draining = maintenance(api, partitions=COLD)
    assert draining.status_code == 202 and draining.json()["in_flight_commits"] == 1


def test_state_lists_every_lease_and_intent_with_its_scope(api):
    commit(api, partitions=HOT)
    maintenance(api, partitions=COLD)
    maintenance(api, holder="compactor-2", partitions=HOT, request_id="run-2")
    body = state(api)
    assert [x["partitions"] for x in body["commit_leases"]] == [HOT]
    assert [x["partitions"] for x in body["maintenance_leases"]] == [COLD]
    assert [(x["holder"], x["partitions"]) for x in body["intents"]] == [("compactor-2", HOT)]
    # the oldest of each, for clients of the whole-table protocol
    assert body["maintenance_lease"]["partitions"] == COLD
    assert body["intent"]["request_id"] == "run-2"


def test_audit_events_carry_the_scope(api):
    held = maintenance(api, partitions=COLD).json()
    commit(api, partitions=HOT)
    release(api, held)
    trail = {(e["event"], e["kind"]): e["detail"].get("partitions") for e in events(api)}
    assert trail[("lease.acquired", "maintenance")] == COLD
    assert trail[("lease.acquired", "commit")] == HOT
    assert trail[("lease.released", "maintenance")] == COLD


# -- the rest of the protocol, on scoped leases --------------------------------------------------


def test_a_repeated_scoped_acquire_answers_the_same_lease(api):
    first = commit(api, partitions=HOT, request_id="batch-7").json()
    again = commit(api, partitions=HOT, request_id="batch-7").json()
    assert again["lease_id"] == first["lease_id"]
    held = maintenance(api, partitions=COLD, request_id="run-1").json()
    assert maintenance(api, partitions=COLD, request_id="run-1").json()["token"] == held["token"]


def test_renew_release_revoke_and_fencing_work_on_scoped_leases(api):
    old = maintenance(api, partitions=COLD).json()
    renewed = renew(api, old)
    assert renewed.status_code == 200 and renewed.json()["lease"]["partitions"] == COLD
    assert renew(api, old, token=old["token"] + 1).json()["outcome"] == "token_mismatch"
    revoked = api.post(f"/v1/leases/{old['lease_id']}/revoke", json={"reason": "stuck"})
    assert revoked.json()["state"] == "revoked"
    assert renew(api, old).json()["outcome"] == "not_owner"
    new = maintenance(api, holder="compactor-2", partitions=COLD).json()
    assert new["token"] > old["token"]
    assert release(api, new).json()["state"] == "released"
    assert commit(api, partitions=COLD).status_code == 201


def test_a_waiting_commit_is_granted_when_the_intersecting_lease_is_released(api):
    held = maintenance(api, partitions=HOT).json()
    releaser = threading.Timer(0.3, release, args=(api, held))
    releaser.start()
    started = time.monotonic()
    try:
        granted = commit(api, partitions=HOT, wait_s=20)
    finally:
        # the release's call ends before the test's client closes (its answer may come after
        # the grant it caused)
        releaser.join(30)
    assert granted.status_code == 201
    assert time.monotonic() - started < 15  # answered by the release, not by the deadline


def test_the_switch_pauses_scoped_commits_too(api):
    api.put("/v1/tables/lake.db.events/switch", json={"ingest": "paused", "reason": "backfill"})
    refused = commit(api, partitions=HOT)
    assert refused.status_code == 423 and refused.json()["reason"] == "paused"


# -- the rule itself ----------------------------------------------------------------------------

KINDS = ("commit", "maintenance", "intent")
NAMES = st.sampled_from(["a=1", "a=2", "a=3", "b=1/c=2", "b=1/c=3"])
SCOPES = st.none() | st.frozensets(NAMES, min_size=1)


@given(st.sampled_from(KINDS), SCOPES, st.sampled_from(KINDS), SCOPES)
def test_conflicts_is_the_rule_of_design_3b(kind_a, scope_a, kind_b, scope_b):
    # brute force: expand "the whole table" to every partition there is, and look for one
    # partition both cover, where the two kinds exclude each other
    everything = {"a=1", "a=2", "a=3", "b=1/c=2", "b=1/c=3"}
    covered_a = everything if scope_a is None else scope_a
    covered_b = everything if scope_b is None else scope_b
    excluding = {("commit", "maintenance"), ("commit", "intent"), ("maintenance", "maintenance")}
    kinds_conflict = (kind_a, kind_b) in excluding or (kind_b, kind_a) in excluding
    expected = kinds_conflict and bool(covered_a & covered_b)
    assert conflicts(kind_a, scope_a, kind_b, scope_b) == expected
    assert conflicts(kind_b, scope_b, kind_a, scope_a) == expected


def test_commits_never_conflict_and_an_intent_never_excludes_maintenance():
    for scope_a, scope_b in product([None, frozenset({"a=1"})], repeat=2):
        assert not conflicts("commit", scope_a, "commit", scope_b)
        assert not conflicts("intent", scope_a, "maintenance", scope_b)
        assert not conflicts("intent", scope_a, "intent", scope_b)


def test_a_request_id_repeated_for_other_partitions_is_a_409(api):
    commit(api, partitions=HOT, request_id="batch-1")
    other = commit(api, partitions=WARM, request_id="batch-1")
    assert other.status_code == 409 and "different scope" in other.json()["detail"]
    commit(api, holder="ingest-2", partitions=WARM)
    assert maintenance(api, partitions=WARM, request_id="run-1").status_code == 202
    moved = maintenance(api, partitions=COLD, request_id="run-1")
    assert moved.status_code == 409 and "different scope" in moved.json()["detail"]
    # the intent still covers what it was opened for
    assert [i["partitions"] for i in state(api)["intents"]] == [WARM]
