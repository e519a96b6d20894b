"""A lease belongs to the token that took it (docs/design.md §6), against a real service on
SQLite and on MariaDB with two job tokens, A and B, as a hostile B would try them.

Lease ids and fencing tokens are not secrets: a reader sees them (`GET /v1/tables/{t}`), and
snapshot summaries carry them. So B is handed A's ids, holders and tokens, and each call that
would act under A's lease, intent, claim, backpressure or reader hold is refused with a
problem+json that says why, and changes nothing; A itself, and an operator ending A's lease,
still pass. Every event on the trail names its actor.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import date
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import RESTError
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType

from tests.conftest import BOTH_DATABASES, TWO_JOBS_ENV, start_front
from tests.conftest import SECRETS as TWO_JOB_SECRETS
from tests.support.iceberg_commits import rewrite_body

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

NARROW = "job-c-secret-00000006"  # a job token narrowed to lake.narrow.* (LAKELOCK_TOKEN_TABLES)
TOKENS_ENV = f"{TWO_JOBS_ENV},job-c:job:{NARROW}"
SECRETS = {**TWO_JOB_SECRETS, "c": NARROW}
TABLE = "lake.db.events"
CATALOG = "lakelock"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "dt", DateType(), required=False),
    NestedField(3, "v", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
DAY = date(2024, 6, 20)


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    process = start_front(
        request,
        tmp_path_factory,
        "ownership",
        LAKELOCK_TOKENS=TOKENS_ENV,
        LAKELOCK_TOKEN_TABLES="job-c=lake.narrow.*",
    )
    yield process
    process.stop()


def client(server: Any, who: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {SECRETS[who]}"}, timeout=30
    )


@pytest.fixture
def a(server: Any) -> Iterator[httpx.Client]:
    with client(server, "a") as c:
        yield c


@pytest.fixture
def b(server: Any) -> Iterator[httpx.Client]:
    with client(server, "b") as c:
        yield c


@pytest.fixture
def operator(server: Any) -> Iterator[httpx.Client]:
    with client(server, "operator") as c:
        yield c


def unique(name: str) -> str:
    """A table of its own per test: the module's service is shared."""
    return f"lake.db.{name}_{random.randrange(10**9)}"


def refused_as_another_principals(answer: httpx.Response) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["type"] == "urn:lakelock:not-owner" and problem["reason"] == "other-principal"
    assert "not by token job-b" in problem["detail"]


def lease(api: httpx.Client, lease_id: str) -> dict[str, Any]:
    return api.get(f"/v1/leases/{lease_id}").raise_for_status().json()


def trail(api: httpx.Client, table: str) -> list[dict[str, Any]]:
    found = api.get("/v1/events", params={"table": table, "limit": 1000}).raise_for_status()
    return found.json()["events"]


def test_another_token_cannot_renew_or_release_a_maintenance_lease(a, b, operator):
    table = unique("maint")
    taken = a.post(f"/v1/tables/{table}/maintenance-lease", json={"holder": "c1", "ttl_s": 30})
    assert taken.status_code == 201 and taken.json()["principal"] == "job-client"
    # what a reader sees is all B needs to name the lease: its id, holder and token
    seen = b.get(f"/v1/tables/{table}").json()["maintenance_leases"][0]
    lease_id, token = seen["lease_id"], seen["token"]
    before = lease(operator, lease_id)

    renew = {"holder": "c1", "token": token, "ttl_s": 3600}
    refused_as_another_principals(b.post(f"/v1/leases/{lease_id}/renew", json=renew))
    release = {"holder": "c1", "token": token}
    refused_as_another_principals(b.delete(f"/v1/leases/{lease_id}", params=release))

    after = lease(operator, lease_id)
    assert after["state"] == "live" and after["ttl_s"] == before["ttl_s"] == 30
    assert after["renewals"] == 0
    # its taker renews (counted) and releases it; the end event carries the count
    assert a.post(f"/v1/leases/{lease_id}/renew", json=renew).status_code == 200
    assert a.post(f"/v1/leases/{lease_id}/renew", json=renew).status_code == 200
    assert lease(operator, lease_id)["renewals"] == 2
    assert a.delete(f"/v1/leases/{lease_id}", params=release).json()["state"] == "released"
    ended = trail(operator, table)[0]
    assert ended["event"] == "lease.released" and ended["actor"] == "job-client"
    assert ended["detail"]["renewals"] == 2 and ended["detail"]["principal"] == "job-client"
    failed = [e for e in trail(operator, table) if e["event"] == "lease.renew_failed"]
    assert [(e["actor"], e["detail"]["reason"]) for e in failed] == [("job-b", "other-principal")]


def test_another_token_cannot_reuse_a_request_id_to_be_handed_the_lease(a, b):
    table = unique("repeat")
    body = {"holder": "ingest-1", "ttl_s": 30, "request_id": "batch-7"}
    granted = a.post(f"/v1/tables/{table}/commit-leases", json=body)
    assert granted.status_code == 201
    again = b.post(f"/v1/tables/{table}/commit-leases", json=body)
    assert again.status_code == 409 and "lease_id" not in again.json()
    assert a.post(f"/v1/tables/{table}/commit-leases", json=body).json() == {
        **granted.json(),
        "remaining_s": pytest.approx(granted.json()["remaining_s"], abs=5),
        "held_s": pytest.approx(granted.json()["held_s"], abs=5),
    }


def test_another_token_cannot_withdraw_an_intent_and_ingest_stays_drained(a, b, operator):
    table = unique("drain")
    a.post(f"/v1/tables/{table}/commit-leases", json={"holder": "ingest-1", "ttl_s": 30})
    draining = a.post(
        f"/v1/tables/{table}/maintenance-lease",
        json={"holder": "c1", "ttl_s": 30, "request_id": "run-1"},
    )
    assert draining.status_code == 202
    withdraw = f"/v1/tables/{table}/intents/run-1"
    refused_as_another_principals(b.delete(withdraw, params={"holder": "c1"}))
    assert [x["request_id"] for x in operator.get(f"/v1/tables/{table}").json()["intents"]] == [
        "run-1"
    ]
    # an operator may withdraw it, audited as the operator
    assert operator.delete(withdraw, params={"holder": "c1"}).json()["withdrawn"] is True
    event = trail(operator, table)[0]
    assert (event["event"], event["actor"]) == ("intent.withdrawn", "operator-client")


def test_another_token_cannot_hold_back_writers_under_a_claim_nor_let_them_go(a, b, operator):
    table = unique("pressed")
    claim = a.post(f"/v1/tables/{table}/claim", json={"holder": "compactor-1", "ttl_s": 30})
    body = {
        "claim_id": claim.json()["lease_id"],
        "holder": "compactor-1",
        "partitions": ["dt=2024-06-20"],
        "reason": "30 small files",
    }
    refused_as_another_principals(b.post(f"/v1/tables/{table}/backpressure", json=body))
    assert operator.get(f"/v1/tables/{table}").json()["intents"] == []
    assert a.post(f"/v1/tables/{table}/backpressure", json=body).status_code == 200
    let_go = {"holder": "compactor-1", "partition": "dt=2024-06-20"}
    refused_as_another_principals(b.delete(f"/v1/tables/{table}/backpressure", params=let_go))
    held = operator.get(f"/v1/tables/{table}").json()["intents"]
    assert [(x["cause"], x["principal"]) for x in held] == [("backpressure", "job-client")]
    assert a.delete(f"/v1/tables/{table}/backpressure", params=let_go).json()["partitions"] == [
        "dt=2024-06-20"
    ]


def test_another_token_cannot_report_the_debt_of_a_table_claimed_by_another(a, b, operator):
    """A report's partitions replace the counts the claimant's follower waits on: while a
    claim is live, only its token (or an operator) reports."""
    table = unique("debt")
    a.post(f"/v1/tables/{table}/claim", json={"holder": "compactor-1", "ttl_s": 30})
    counted = {"dt=2024-06-20": {"data_files": 9, "delete_files": 0}}
    report = {
        "data_files": 9,
        "small_files": 9,
        "delete_files": 0,
        "partitions_over_target": 1,
        "snapshot_id": None,
        "measured_at": "2024-06-20T12:00:00Z",
    }
    assert a.put(f"/v1/tables/{table}/debt", json=report | {"partitions": counted}).is_success
    refused_as_another_principals(
        b.put(f"/v1/tables/{table}/debt", json=report | {"partitions": {}})
    )
    due = operator.get(f"/v1/tables/{table}").json()["due"]
    assert due["partitions_counted"] == 1 and due["data_files"] == 9  # not erased
    assert operator.put(f"/v1/tables/{table}/debt", json=report).is_success


def test_another_token_cannot_overwrite_a_follower_nor_a_narrowed_one_follow_every_table(
    a, b, server, operator
):
    """A follower row is its token's own: another token polling under the same holder name
    does not replace it (which silenced the due alert of the tables it follows), and a token
    narrowed by LAKELOCK_TOKEN_TABLES that follows `*` follows its own tables only."""
    table = unique("followed")

    def followers() -> int:
        return operator.get(f"/v1/tables/{table}").json()["due"]["followers"]

    counted = {"dt=2024-06-20": {"data_files": 1, "delete_files": 0}}
    report = {
        "data_files": 1,
        "small_files": 1,
        "delete_files": 0,
        "partitions_over_target": 0,
        "snapshot_id": None,
        "measured_at": "2024-06-20T12:00:00Z",
        "partitions": counted,
    }
    assert a.put(f"/v1/tables/{table}/debt", json=report).is_success
    poll = {"holder": "compactor-1", "wait_s": 0}
    assert a.get("/v1/due", params={**poll, "table": table}).is_success
    assert followers() == 1
    assert b.get("/v1/due", params={**poll, "table": "lake.elsewhere.*"}).is_success
    assert followers() == 1  # a's row stands beside b's
    with client(server, "c") as c:
        assert c.get("/v1/due", params={"holder": "narrow-1", "wait_s": 0, "table": "*"}).is_success
    assert followers() == 1  # c follows lake.narrow.* only


def test_another_token_cannot_renew_or_release_a_claim(a, b, operator):
    table = unique("claimed")
    claim = a.post(f"/v1/tables/{table}/claim", json={"holder": "compactor-1", "ttl_s": 30})
    lease_id = claim.json()["lease_id"]
    renew = {"holder": "compactor-1", "ttl_s": 3600}
    refused_as_another_principals(b.post(f"/v1/leases/{lease_id}/renew", json=renew))
    refused_as_another_principals(
        b.delete(f"/v1/leases/{lease_id}", params={"holder": "compactor-1"})
    )
    assert lease(operator, lease_id)["state"] == "live"


def test_an_operator_revokes_any_lease_and_is_its_actor(a, operator):
    table = unique("revoked")
    taken = a.post(f"/v1/tables/{table}/commit-leases", json={"holder": "ingest-1", "ttl_s": 30})
    lease_id = taken.json()["lease_id"]
    assert operator.delete(f"/v1/leases/{lease_id}").json()["state"] == "revoked"
    event = trail(operator, table)[0]
    assert (event["event"], event["actor"]) == ("lease.revoked", "operator-client")


def test_another_token_cannot_move_or_release_a_readers_hold(a, b, operator):
    table = unique("read")
    path = f"/v1/tables/{table}/readers/summary"
    assert a.put(path, json={"snapshot_id": 1, "ttl_s": 30}).status_code == 200
    refused_as_another_principals(b.put(path, json={"snapshot_id": 99, "ttl_s": 30}))
    refused_as_another_principals(b.delete(path))
    held = operator.get(f"/v1/tables/{table}").json()["readers"]
    assert [(x["reader"], x["snapshot_id"]) for x in held] == [("summary", 1)]
    assert operator.delete(path).json()["released"] is True


def test_every_event_names_its_actor(a, operator):
    table = unique("actors")
    commit = a.post(f"/v1/tables/{table}/commit-leases", json={"holder": "i", "ttl_s": 1})
    a.post(f"/v1/tables/{table}/maintenance-lease", json={"holder": "c", "ttl_s": 30})
    time.sleep(1.2)  # the commit lease's TTL passes: its expiry is the service's own doing
    granted = a.post(
        f"/v1/tables/{table}/maintenance-lease", json={"holder": "c", "ttl_s": 30, "wait_s": 5}
    )
    assert granted.status_code == 201, granted.text
    operator.put(f"/v1/tables/{table}/switch", json={"ingest": "paused", "reason": "test"})
    events = trail(operator, table)
    assert {e["event"] for e in events} >= {
        "lease.acquired",
        "intent.opened",
        "lease.expired",
        "intent.fulfilled",
        "switch.set",
    }
    assert all(e["actor"] for e in events), [e for e in events if not e["actor"]]
    expired = next(e for e in events if e["event"] == "lease.expired")
    assert expired["actor"] == "lakelock" and expired["lease_id"] == commit.json()["lease_id"]


# -- at the commit: the catalog front --------------------------------------------------------


def rest(server: Any, who: str) -> RestCatalog:
    return RestCatalog(CATALOG, uri=f"{server.url}/iceberg", token=SECRETS[who])


def rows(n: int, start: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "dt": pa.array([DAY] * n),
            "v": [f"v{i}" for i in range(n)],
        }
    )


def front_table(server: Any, name: str) -> Any:
    catalog = rest(server, "a")
    catalog.create_namespace(name)
    table = catalog.create_table(f"{name}.t", SCHEMA, partition_spec=SPEC)
    table.append(rows(2, 0))
    table.append(rows(2, 10))
    return catalog.load_table(f"{name}.t")


def test_a_data_commit_naming_another_tokens_commit_lease_is_held_as_foreign(
    server, a, b, operator
):
    table = front_table(server, f"ns_held_{random.randrange(10**6)}")
    name = f"{CATALOG}.{'.'.join(table.name())}"
    ingest = a.post(
        f"/v1/tables/{name}/commit-leases", json={"holder": "ingest-1", "ttl_s": 60}
    ).json()
    # a compactor starts draining the table: of the commits that can conflict with its rewrite
    # (a delete that rewrites a file here), only the protocol's own writer's pass now
    drain = a.post(f"/v1/tables/{name}/maintenance-lease", json={"holder": "c1", "ttl_s": 60})
    assert drain.status_code == 202
    before = table.current_snapshot().snapshot_id
    theirs = rest(server, "b").load_table(table.name())
    with pytest.raises(RESTError, match="TooManyRequestsException"):
        theirs.delete(
            EqualTo("id", 0), snapshot_properties={"lakelock.lease-id": ingest["lease_id"]}
        )
    assert rest(server, "a").load_table(table.name()).current_snapshot().snapshot_id == before
    refused = trail(operator, name)[0]
    assert (refused["event"], refused["actor"], refused["detail"]["reason"]) == (
        "catalog.refused",
        "job-b",
        "draining",
    )
    # its taker commits under it
    table.append(rows(1, 60), snapshot_properties={"lakelock.lease-id": ingest["lease_id"]})
    passed = trail(operator, name)[0]
    assert (passed["event"], passed["detail"]["foreign"]) == ("catalog.commit", False)


def test_snapshot_removal_naming_another_tokens_maintenance_lease_is_fenced(server, a, b, operator):
    table = front_table(server, f"ns_expire_{random.randrange(10**6)}")
    name = f"{CATALOG}.{'.'.join(table.name())}"
    first = table.metadata.snapshots[0].snapshot_id
    lease = a.post(f"/v1/tables/{name}/maintenance-lease", json={"holder": "c1", "ttl_s": 60})
    named = {
        "X-Lakelock-Lease-Id": lease.json()["lease_id"],
        "X-Lakelock-Token": str(lease.json()["token"]),
    }
    namespace, t = table.name()
    path = f"/iceberg/v1/namespaces/{namespace}/tables/{t}"
    body = {
        "requirements": [],
        "updates": [{"action": "remove-snapshots", "snapshot-ids": [first]}],
    }
    answer = b.post(path, json=body, headers=named)
    assert answer.status_code == 403 and answer.json()["reason"] == "other-principal"
    kept = rest(server, "a").load_table(table.name()).metadata.snapshots
    assert first in [s.snapshot_id for s in kept]
    assert a.post(path, json=body, headers=named).status_code == 200


def test_a_rewrite_carrying_another_tokens_lease_in_its_summary_is_fenced(server, a, b, operator):
    """The lease id and token a snapshot summary carries, copied into B's own rewrite."""
    table = front_table(server, f"ns_copied_{random.randrange(10**6)}")
    name = f"{CATALOG}.{'.'.join(table.name())}"
    lease = a.post(f"/v1/tables/{name}/maintenance-lease", json={"holder": "c1", "ttl_s": 60})
    summary = {
        "lakelock.lease-id": lease.json()["lease_id"],
        "lakelock.token": str(lease.json()["token"]),
    }
    theirs = rest(server, "b").load_table(table.name())
    before = theirs.current_snapshot().snapshot_id
    body = rewrite_body(theirs, DAY, summary)
    namespace, t = table.name()
    answer = b.post(f"/iceberg/v1/namespaces/{namespace}/tables/{t}", json=body)
    assert answer.status_code == 403 and answer.json()["reason"] == "other-principal"
    assert rest(server, "a").load_table(table.name()).current_snapshot().snapshot_id == before
    refused = trail(operator, name)[0]
    assert (refused["event"], refused["actor"]) == ("catalog.refused", "job-b")
