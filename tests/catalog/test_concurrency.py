"""Writers and compactors through the catalog front of two service processes on one MariaDB,
an operator revoking leases meanwhile, and the invariants of docs/design.md §3.1 checked over
the audit trail afterwards, inv7 among them: no maintenance commit without a live lease (its
token, a scope covering what it touched) at the instant of its commit; and inv10: no foreign
commit that can conflict with a rewrite (a delete here) inside a live lease's scope, while
foreign appends pass, unless a rewrite that lost the head has the next turn of it.

The compactors here are what a paused or careless compactor looks like: each takes a short
lease, sometimes sleeps past its TTL or is revoked meanwhile, sometimes sends a stale token or
rewrites a partition its lease does not cover, and always commits anyway. Their rewrites are
real: a partition's data files read and written again as one (tests/support/iceberg_commits.py).

The run is driven by counts (commits that passed and were refused of each kind), with a time
limit only against a hang.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import date, timedelta
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, RESTError, ValidationException
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType

from tests.conftest import TOKENS, _empty_mariadb, auth, start_server
from tests.lock.test_invariants_concurrency import _event
from tests.support.iceberg_commits import rewrite_body, rewrite_files
from tests.support.invariants import History, check, fenced, held, load_history

pytestmark = pytest.mark.mariadb
BUDGET_S = 120  # tests/support/budget.py: a concurrent workload until its counts are reached

DAYS = [date(2024, 6, 20) + timedelta(days=n) for n in range(4)]
TABLE = "lakelock.db.t"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "dt", DateType(), required=False),
    NestedField(3, "v", StringType(), required=False),
)
REWRITE_TRIES = 10  # a compactor's commit retries on a moved head (Iceberg's default is 4)
PAUSE_S = (0.1, 0.5)  # between an actor's commits: a stream's batches, a compactor's ticks
# what the run must have seen before it stops (counts, not seconds)
ENOUGH = {
    "replace.passed": 4,
    "replace.refused": 4,
    "append.passed": 10,
    "delete.passed": 2,
    "delete.held": 1,
}
# only against a hang; under the suite's 600 s timeout, so that the counts reached show
WORKLOAD_GUARD_S = 420.0


def partition(day: date) -> str:
    return f"dt={day.isoformat()}"


def rows(n: int, day: date) -> pa.Table:
    start = random.randrange(10**9)
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "dt": pa.array([day] * n),
            "v": ["x"] * n,
        }
    )


class Workload:
    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.errors: list[BaseException] = []

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1
            if all(self.counts[k] >= n for k, n in ENOUGH.items()):
                self.done.set()

    def catalog(self, rng: random.Random) -> RestCatalog:
        return RestCatalog("lakelock", uri=f"{rng.choice(self.urls)}/iceberg", token=TOKENS["job"])

    def service(self, rng: random.Random, role: str = "job") -> httpx.Client:
        return httpx.Client(base_url=rng.choice(self.urls), headers=auth(role), timeout=30)

    # -- the actors ------------------------------------------------------------------------

    def writer(self, seed: int) -> None:
        """A foreign writer, which never asks lakelock: appends, which cannot conflict with a
        rewrite and pass every hold, and now and then a delete of a day's rows, which removes
        data files and is held where a maintenance lease is live or draining. Like every actor
        here it pauses between commits (PAUSE_S), as a stream between batches: a delete reads
        the table's manifests before it commits, and actors in a tight loop of appends and
        rewrites leave it no window to commit in, however often pyiceberg retries."""
        rng = random.Random(seed)
        while not self.done.wait(rng.uniform(*PAUSE_S)):
            table = self.catalog(rng).load_table("db.t")
            day = rng.choice(DAYS)
            deleting = rng.random() < 0.3
            what = "delete" if deleting else "append"
            try:
                if deleting:
                    table.delete(EqualTo("dt", day.isoformat()))
                else:
                    table.append(rows(rng.randint(1, 3), day))
                self.count(f"{what}.passed")
            except RESTError as exc:
                assert "TooManyRequestsException" in str(exc), exc
                # an append passes a maintenance lease, but not a rewrite's turn of the head
                # (docs/catalog-front.md §4): checked on the trail below
                self.count(f"{what}.held")
            except (CommitFailedException, ValidationException):
                # another writer's commit came first, past pyiceberg's retries: Iceberg's own
                # conflict, not lakelock's
                self.count(f"{what}.conflict")

    def ingest(self, seed: int) -> None:
        """The protocol's own writer: a commit lease, then an append naming it."""
        rng = random.Random(seed)
        with self.service(rng) as api:
            while not self.done.wait(rng.uniform(*PAUSE_S)):
                day = rng.choice(DAYS)
                # a TTL well past an append's retries on a busy machine: a lease that expired
                # mid-append would let a compactor in and have the append refused, rightly
                granted = api.post(
                    f"/v1/tables/{TABLE}/commit-leases",
                    json={"holder": f"ingest-{seed}", "ttl_s": 30, "partitions": [partition(day)]},
                )
                if granted.status_code != 201:
                    time.sleep(0.05)
                    continue
                lease = granted.json()
                table = self.catalog(rng).load_table("db.t")
                try:
                    table.append(
                        rows(2, day), snapshot_properties={"lakelock.lease-id": lease["lease_id"]}
                    )
                    self.count("ingest.passed")
                except CommitFailedException:
                    self.count("ingest.conflict")
                api.delete(f"/v1/leases/{lease['lease_id']}", params={"holder": f"ingest-{seed}"})

    def compactor(self, seed: int) -> None:
        rng = random.Random(seed)
        holder = f"compactor-{seed}"
        with self.service(rng) as api:
            while not self.done.wait(rng.uniform(*PAUSE_S)):
                day = rng.choice(DAYS)
                scope = None if rng.random() < 0.3 else [partition(day)]
                mischief = rng.random()
                paused = mischief < 0.25
                # a lease outlives any rewrite here, however slow the machine, unless the
                # attempt is the one paused past (or near) its 1 s TTL
                granted = api.post(
                    f"/v1/tables/{TABLE}/maintenance-lease",
                    json={"holder": holder, "ttl_s": 1.0 if paused else 30.0, "partitions": scope},
                )
                if granted.status_code != 201:
                    time.sleep(0.05)
                    continue
                lease = granted.json()
                token = lease["token"]
                if paused:
                    time.sleep(rng.uniform(0.9, 1.4))
                elif mischief < 0.35:
                    token -= 1  # a stale token
                elif mischief < 0.45 and scope is not None:
                    day = rng.choice([d for d in DAYS if d != day])  # outside its scope
                status = self.rewrite(rng, day, lease["lease_id"], token)
                if status is None:
                    self.count("replace.none")  # the day's files were gone: nothing to commit
                elif status == 200:
                    self.count("replace.passed")
                elif status == 403:
                    self.count("replace.refused")
                else:
                    assert status in (409, 429), status
                    self.count(f"replace.{status}")
                api.delete(
                    f"/v1/leases/{lease['lease_id']}",
                    params={"holder": holder, "token": lease["token"]},
                )

    def operator(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.service(rng, "operator") as api:
            while not self.done.is_set():
                time.sleep(rng.uniform(0.1, 0.4))
                live = [
                    x
                    for x in api.get(f"/v1/tables/{TABLE}").json().get("leases", [])
                    if x["kind"] == "maintenance"
                ]
                if live and rng.random() < 0.3:
                    api.post(
                        f"/v1/leases/{rng.choice(live)['lease_id']}/revoke", json={"reason": "test"}
                    )

    def rewrite(self, rng: random.Random, day: date, lease_id: str, token: int) -> int | None:
        """One partition's data files rewritten as one file, committed as a `replace` (None:
        no files to rewrite, or they were gone when it committed again); on a
        409 (a foreign append passed the lease meanwhile, as appends may) the same files
        committed again on the new head, as Iceberg's clients retry a commit."""
        properties = {"lakelock.lease-id": lease_id, "lakelock.token": str(token)}
        rewritten = rewrite_files(self.catalog(rng).load_table("db.t"), day)
        if rewritten is None:
            return None
        status = None
        for _ in range(REWRITE_TRIES):
            table = self.catalog(rng).load_table("db.t")
            try:
                body = rewrite_body(table, day, properties, rewritten=rewritten)
            except ValidationException:
                return None  # its inputs are gone: a compactor after an expired lease's rewrote
            assert body is not None
            with self.service(rng) as api:
                status = api.post("/iceberg/v1/namespaces/db/tables/t", json=body).status_code
            if status != 409:
                return status
        return status

    def run(self) -> None:
        actors = [
            *(lambda s=s: self.writer(s) for s in range(2)),
            lambda: self.ingest(10),
            *(lambda s=s: self.compactor(s) for s in (20, 21)),
            lambda: self.operator(30),
        ]
        threads = [threading.Thread(target=self.guarded(a), daemon=True) for a in actors]
        for t in threads:
            t.start()
        finished = self.done.wait(timeout=WORKLOAD_GUARD_S)
        self.done.set()
        for t in threads:
            t.join(timeout=60)
        if self.errors:
            raise self.errors[0]
        assert finished, f"the workload did not reach {ENOUGH}: {dict(self.counts)}"

    def guarded(self, actor: Any) -> Any:
        def target() -> None:
            try:
                actor()
            except BaseException as exc:  # surfaced by run()
                self.errors.append(exc)
                self.done.set()

        return target


@pytest.fixture
def two_fronts(mariadb_session_url, tmp_path):
    _empty_mariadb(mariadb_session_url)
    warehouse = (tmp_path / "warehouse").as_uri()
    servers = [
        start_server(
            mariadb_session_url,
            tmp_path,
            LAKELOCK_CATALOG_WAREHOUSE=warehouse,
            LAKELOCK_CATALOG_HOLD_WAIT_S="0",  # every hold a 429 the run counts
        )
        for _ in range(2)
    ]
    yield servers, warehouse
    for server in servers:
        server.stop()


def test_no_maintenance_commit_lands_without_a_live_lease_under_concurrency(
    two_fronts, mariadb_session_url
):
    servers, warehouse = two_fronts
    catalog = RestCatalog("lakelock", uri=f"{servers[0].url}/iceberg", token=TOKENS["job"])
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
    table = catalog.create_table("db.t", SCHEMA, partition_spec=spec)
    for day in DAYS:
        table.append(rows(3, day))

    workload = Workload([s.url for s in servers])
    workload.run()

    history = load_history(mariadb_session_url, [])
    assert check(history) == []
    # and nothing bypassed the front: every replace snapshot of the table is an audited commit
    committed = {
        e["detail"]["snapshot_id"]
        for e in history.events
        if e["event"] == "catalog.commit" and e["kind"] == "maintenance"
    }
    read = SqlCatalog("lakelock", uri=mariadb_session_url, warehouse=warehouse).load_table("db.t")
    replaced = {s.snapshot_id for s in read.snapshots() if s.summary.operation == Operation.REPLACE}
    assert replaced == committed
    assert len(replaced) == workload.counts["replace.passed"]
    refused = [e for e in history.events if e["event"] == "catalog.refused"]
    reasons = Counter(e["detail"]["reason"] for e in refused)
    held_back = workload.counts["delete.held"] + workload.counts["append.held"]
    assert reasons["held"] + reasons["draining"] == held_back
    # an append is held only by a turn of the head, which the refusal names
    appends = [e for e in refused if e["detail"]["operations"] == ["append"]]
    assert len(appends) == workload.counts["append.held"]
    assert all("turn" in e["detail"] for e in appends), appends
    # appends passed maintenance holds: foreign, unable to conflict, inside a live lease's scope
    assert any(
        e["detail"].get("can_conflict") is False
        for e in history.events
        if e["event"] == "catalog.commit" and e["kind"] == "data"
    )
    careless = {"expired", "revoked", "stale-token", "out-of-scope"}
    assert set(reasons) - {"held", "draining"} <= careless, reasons
    # the scope once more, from what Iceberg holds (read here, not by the service): each
    # replace snapshot's own manifests touch only partitions its lease covered
    scopes = {
        e["lease_id"]: e["detail"]["partitions"]
        for e in history.events
        if e["event"] == "lease.acquired" and e["kind"] == "maintenance"
    }
    leases = {
        e["detail"]["snapshot_id"]: e["lease_id"]
        for e in history.events
        if e["event"] == "catalog.commit" and e["kind"] == "maintenance"
    }
    for snapshot in read.snapshots():
        if snapshot.summary.operation != Operation.REPLACE:
            continue
        scope = scopes[leases[snapshot.snapshot_id]]
        touched = {
            f"dt={entry.data_file.partition[0].isoformat()}"
            if hasattr(entry.data_file.partition[0], "isoformat")
            else f"dt={date(1970, 1, 1) + timedelta(days=entry.data_file.partition[0])}"
            for manifest in snapshot.manifests(read.io)
            if manifest.added_snapshot_id == snapshot.snapshot_id
            for entry in manifest.fetch_manifest_entry(read.io, discard_deleted=False)
        }
        assert touched and (scope is None or touched <= set(scope)), (snapshot, touched, scope)


def test_the_checker_flags_a_maintenance_commit_under_an_ended_expired_or_narrower_lease():
    def commit(id_, lease_id, token, at, partitions=("dt=a",), operations=("replace",)):
        return _event(
            id_,
            "catalog.commit",
            lease_id,
            "maintenance",
            token,
            at=at,
            operations=list(operations),
            partitions=list(partitions),
        )

    events = [
        _event(1, "lease.acquired", "m1", "maintenance", 1, at=0, ttl_s=10, partitions=["dt=a"]),
        commit(2, "m1", 1, at=1),  # fine
        commit(3, "m1", 2, at=2),  # stale token
        commit(4, "m1", 1, at=3, partitions=("dt=b",)),  # outside its scope
        commit(5, "m1", 1, at=11),  # past its TTL, not yet swept
        _event(6, "lease.revoked", "m1", "maintenance", at=12, held_s=12),
        commit(7, "m1", 1, at=12.5),  # after its revoke
        _event(8, "lease.acquired", "c1", "claim", at=13, ttl_s=10, partitions=None),
        commit(9, "c1", None, at=14, partitions=(), operations=("remove-snapshots",)),  # fine
        commit(10, "c1", None, at=15),  # a rewrite under a claim
        commit(11, None, None, at=16),  # no lease at all
    ]
    found = fenced(History(events=events, commit_leases=[]))
    assert [v.split(":")[1].split()[-1] for v in found] == ["3", "4", "5", "7", "10", "11"]


def test_the_checker_flags_a_foreign_commit_that_can_conflict_inside_a_live_lease():
    def data(id_, at, can_conflict, partitions=("dt=a",), foreign=True):
        return _event(
            id_,
            "catalog.commit",
            None,
            "data",
            at=at,
            operations=["overwrite" if can_conflict else "append"],
            partitions=list(partitions),
            foreign=foreign,
            can_conflict=can_conflict,
        )

    events = [
        _event(1, "lease.acquired", "m1", "maintenance", 1, at=0, ttl_s=10, partitions=["dt=a"]),
        data(2, 1, can_conflict=False),  # an append passes a hold
        data(3, 2, can_conflict=True),  # an overwrite inside the lease
        data(4, 3, can_conflict=True, partitions=("dt=b",)),  # outside its scope: fine
        data(5, 4, can_conflict=True, foreign=False),  # the lease holder's own: fine
        data(6, 11, can_conflict=True),  # past its TTL, not yet swept: fine
        _event(7, "lease.acquired", "m2", "maintenance", 2, at=12, ttl_s=10, partitions=None),
        _event(8, "lease.released", "m2", "maintenance", at=13),
        data(9, 14, can_conflict=True),  # after its release: fine
    ]
    found = held(History(events=events, commit_leases=[]))
    assert [v.split(":")[1].split()[-1] for v in found] == ["3"]
