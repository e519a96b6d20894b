"""Parked commits cost about one commit (docs/catalog-front.md §4), on a real service process:
while a hold refuses a foreign commit, the front judges it again from the lock's state each
time the table's state moves (its own token can move it, taking and releasing commit leases),
and tries it whole only when the hold ends or the table's pointer moves; past
LAKELOCK_CATALOG_MAX_PARKED_PER_TOKEN or LAKELOCK_CATALOG_MAX_PARKED a held commit is a 429 at
once; under hundreds of parked commits, manifest bombs and counts past their bounds, another
token's lease renews on time."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField

from testkit.avro import bomb
from testkit.commits import (
    data_file,
    entry,
    manifest_list,
    new_manifest,
    rest_body,
    snapshot_commit,
)
from tests.conftest import SECRETS, TWO_JOBS_ENV, front_fixture
from tests.support.helpers import HANG_GUARD_S, metric, wait_until

BUDGET_S = 45  # tests/support/budget.py: commits parked until their holds end
RENEW_TTL_S = 9.0  # a well-behaved lease's TTL under the hostile load, renewed at a third

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "dt", DateType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
DAY, OTHER_DAY = date(2024, 6, 20), date(2024, 6, 21)
PER_TOKEN, IN_ALL = 150, 160


front = front_fixture(
    "parked",
    ["sqlite"],
    LAKELOCK_TOKENS=TWO_JOBS_ENV,
    LAKELOCK_CATALOG_HOLD_WAIT_S="90",  # a bound against a hang: the holds end sooner
    LAKELOCK_CATALOG_MAX_PARKED_PER_TOKEN=str(PER_TOKEN),
    LAKELOCK_CATALOG_MAX_PARKED=str(IN_ALL),
)


def api(front: Any, who: str) -> httpx.Client:
    return httpx.Client(
        base_url=front.url, headers={"Authorization": f"Bearer {SECRETS[who]}"}, timeout=120
    )


def new_table(front: Any, name: str) -> Any:
    catalog = RestCatalog("lakelock", uri=f"{front.url}/iceberg", token=SECRETS["a"])
    catalog.create_namespace(name)
    table = catalog.create_table(f"{name}.t", SCHEMA, partition_spec=SPEC)
    for day in (DAY, OTHER_DAY):
        table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "dt": pa.array([day] * 2)}))
    return catalog.load_table(f"{name}.t")


def lakelock_name(table: Any) -> str:
    return ".".join(("lakelock", *table.name()))


def hold(front: Any, table: Any) -> dict[str, Any]:
    """A maintenance lease on DAY's partition: a foreign delete there is held."""
    with api(front, "a") as c:
        granted = c.post(
            f"/v1/tables/{lakelock_name(table)}/maintenance-lease",
            json={"holder": "compactor-1", "ttl_s": 120, "partitions": [f"dt={DAY}"]},
        )
    assert granted.status_code == 201, granted.text
    return granted.json()


def let_go(front: Any, lease: dict[str, Any]) -> None:
    with api(front, "a") as c:
        c.delete(
            f"/v1/leases/{lease['lease_id']}",
            params={"holder": lease["holder"], "token": lease["token"]},
        ).raise_for_status()


def delete_body(table: Any) -> dict[str, Any]:
    """The REST body of a delete of DAY's rows, as pyiceberg sends it."""
    tx = table.transaction()
    tx.delete(EqualTo("dt", DAY.isoformat()))
    return rest_body(tx)


def post(front: Any, who: str, table: Any, body: dict[str, Any]) -> httpx.Response:
    namespace, name = table.name()
    with api(front, who) as c:
        return c.post(f"/iceberg/v1/namespaces/{namespace}/tables/{name}", json=body)


def parked(front: Any) -> float:
    with api(front, "reader") as c:
        return metric(c, "lakelock_catalog_parked_commits")


def judged(front: Any, how: str) -> float:
    with api(front, "reader") as c:
        return metric(c, "lakelock_catalog_parked_judged_total", how=how)


def move_the_table(front: Any, table: Any, times: int) -> None:
    """The committer's own token moves the table's lock state: a commit lease on the other
    partition, taken and released."""
    with api(front, "a") as c:
        for _ in range(times):
            lease = c.post(
                f"/v1/tables/{lakelock_name(table)}/commit-leases",
                json={"holder": "ingest-1", "ttl_s": 30, "partitions": [f"dt={OTHER_DAY}"]},
            )
            assert lease.status_code == 201, lease.text
            c.delete(
                f"/v1/leases/{lease.json()['lease_id']}", params={"holder": "ingest-1"}
            ).raise_for_status()


def test_a_parked_commit_is_judged_from_the_lock_not_tried_again_at_each_change(front):
    table = new_table(front, "judged")
    lease = hold(front, table)
    body = delete_body(table)
    looks, tries = judged(front, "look"), judged(front, "try")
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(post, front, "a", table, body)
        wait_until(lambda: parked(front) == 1, "the delete parked")
        move_the_table(front, table, 20)
        wait_until(lambda: judged(front, "look") > looks, "a look at the parked commit")
        assert judged(front, "try") == tries  # no whole try while the hold stands
        let_go(front, lease)
        done = answer.result(HANG_GUARD_S)
    assert done.status_code == 200, done.text
    assert judged(front, "try") == tries + 1  # the one whole try once the hold ended
    assert parked(front) == 0


def test_past_the_caps_a_held_commit_is_a_429_at_once_naming_the_setting(front):
    table = new_table(front, "capped")
    lease = hold(front, table)
    body = delete_body(table)
    with ThreadPoolExecutor(IN_ALL) as pool:
        waiting = [pool.submit(post, front, "a", table, body) for _ in range(PER_TOKEN)]
        wait_until(lambda: parked(front) == PER_TOKEN, f"{PER_TOKEN} commits parked")
        started = time.monotonic()
        refused = post(front, "a", table, body)
        assert refused.status_code == 429, refused.text
        assert refused.json()["reason"] == "too-many-parked"
        assert refused.json()["setting"] == "LAKELOCK_CATALOG_MAX_PARKED_PER_TOKEN"
        assert float(refused.headers["retry-after"]) > 0
        assert time.monotonic() - started < 30  # answered, not parked (a guard, not a figure)
        # another token still parks, up to the cap in all
        waiting += [pool.submit(post, front, "b", table, body) for _ in range(IN_ALL - PER_TOKEN)]
        wait_until(lambda: parked(front) == IN_ALL, f"{IN_ALL} commits parked")
        refused = post(front, "b", table, body)
        assert refused.status_code == 429, refused.text
        assert refused.json()["setting"] == "LAKELOCK_CATALOG_MAX_PARKED"
        let_go(front, lease)
        statuses = sorted(f.result(HANG_GUARD_S).status_code for f in waiting)
    # one of the parked deletes lands; the others find the table moved and reload (409)
    assert statuses == [200] + [409] * (IN_ALL - 1)
    with api(front, "a") as c:
        trail = c.get("/v1/events", params={"table": lakelock_name(table), "limit": 1000})
    reasons = [
        e["detail"]["reason"] for e in trail.json()["events"] if e["event"] == "catalog.refused"
    ]
    assert reasons.count("too-many-parked") == 2  # each refusal on the trail once


def bomb_body(front: Any, table: Any) -> dict[str, Any]:
    """A commit naming a manifest of a few kilobytes that deflates to 300,000 entries."""
    head = table.current_snapshot()
    snapshot_id = random.randrange(1, 2**62)
    day = (DAY - date(1970, 1, 1)).days  # the partition value of a date: days since 1970
    added = entry(snapshot_id, data_file(table, day, "bomb"), ManifestEntryStatus.ADDED)
    manifest = new_manifest(table, snapshot_id, [added], compression="deflate")
    with table.io.new_input(manifest.manifest_path).open() as stream:
        exploded = bomb(stream.read(), 300_000)
    with table.io.new_output(manifest.manifest_path).create(overwrite=True) as out:
        out.write(exploded)
    listed = manifest_list(
        table, snapshot_id, head.snapshot_id, 9, [*head.manifests(table.io), manifest]
    )
    return snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")


def test_no_well_behaved_lease_expires_while_hostile_clients_park_bomb_and_count(front):
    """The review's load and more, from token a: hundreds of parked commits while it keeps
    moving their table, manifest bombs, and releases and debt reports with counts past every
    bound. Token b's commit lease, with a short TTL renewed at a third of it as the gate renews
    (a 30 s lease at 10 s), never expires, and every hostile call gets its 4xx. (The TTL leaves
    a renewal RENEW_TTL_S * 2/3 to be answered: on a busy 2-core machine, a hostile load makes
    one wait a few seconds; a wait past that is a starved lease.)"""
    table = new_table(front, "loaded")
    lease = hold(front, table)
    body, bombed = delete_body(table), bomb_body(front, table)
    stop = threading.Event()
    renewals: list[int] = []
    hostile: list[int] = []

    def renew() -> None:
        with api(front, "b") as c:
            mine = c.post(
                "/v1/tables/lakelock.other.events/commit-leases",
                json={"holder": "ingest-b", "ttl_s": RENEW_TTL_S},
            ).json()
            while not stop.wait(RENEW_TTL_S / 3):
                renewed = c.post(
                    f"/v1/leases/{mine['lease_id']}/renew",
                    json={"holder": "ingest-b", "ttl_s": RENEW_TTL_S},
                )
                renewals.append(renewed.status_code)

    def bomb_and_count() -> None:
        name = lakelock_name(table)
        with api(front, "a") as c:
            while not stop.is_set():
                hostile.append(post(front, "a", table, bombed).status_code)
                counted = {f"dt={DAY}": {"data_files": 2**53, "delete_files": 0}}
                report = {
                    "data_files": 1,
                    "small_files": 1,
                    "delete_files": 0,
                    "partitions_over_target": 0,
                    "snapshot_id": None,
                    "measured_at": "2024-06-20T12:00:00Z",
                    "partitions": counted,
                }
                hostile.append(c.put(f"/v1/tables/{name}/debt", json=report).status_code)

    with ThreadPoolExecutor(PER_TOKEN + 3) as pool:
        renewer = pool.submit(renew)
        bomber = pool.submit(bomb_and_count)
        waiting = [pool.submit(post, front, "a", table, body) for _ in range(PER_TOKEN)]
        wait_until(lambda: parked(front) == PER_TOKEN, f"{PER_TOKEN} commits parked")
        move_the_table(front, table, 30)
        wait_until(lambda: len(renewals) >= 4, "four renewals under the load")
        let_go(front, lease)
        statuses = [f.result(HANG_GUARD_S).status_code for f in waiting]
        stop.set()
        renewer.result(HANG_GUARD_S)
        bomber.result(HANG_GUARD_S)
    assert set(renewals) == {200}, renewals
    assert sorted(statuses) == [200] + [409] * (PER_TOKEN - 1)
    # bombs refused (400) until the table moved under them (409); counts past the bound (422)
    assert {400, 422} <= set(hostile) <= {400, 409, 422}, sorted(set(hostile))
