"""Claims under concurrency (docs/design.md §5): 10 compactor processes claim, renew, release and
abandon claims on three tables through two service processes sharing one database, holding
writers back under them (backpressure), with an operator revoking some and flipping the
backpressure switch, and ingest writers and maintenance leases working the same tables. The
checker in `invariants.py` reads the recorded history afterwards: never two live claims on one
table (inv6), no commit granted under backpressure nor backpressure without a claim (inv8), and
the five invariants of the other kinds untouched by the claims."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta

import pytest

from tests.lock.test_invariants_concurrency import Workload, run_on_two_services
from tests.support.invariants import History, check, commit_span, lease_spans

pytestmark = [pytest.mark.slow, pytest.mark.dialect]

TABLES = ["lake.db.a", "lake.db.b", "lake.db.c"]
OWN_TABLE = "lake.db.d"  # ClaimWorkload.every_ending's, which nothing else touches
CLAIMERS = 10
INGEST_CLIENTS = 3
ROUNDS = 40  # per claimer; each round is 1-4 calls


class ClaimWorkload(Workload):
    def claimer(self, seed: int) -> None:
        """A compactor process: claims a table, works under it or moves on when it is held."""
        rng = random.Random(seed)
        with self.client("job") as http:
            for _ in range(ROUNDS):
                table, ttl = rng.choice(TABLES), rng.choice([0.3, 0.5])
                body = {"holder": f"compactor-{seed}", "ttl_s": ttl, "request_id": uuid.uuid4().hex}
                response = self.call(http, rng, "POST", f"/v1/tables/{table}/claim", json=body)
                if response.status_code == 409:
                    assert response.json()["type"] == "urn:lakelock:claim-held", response.text
                    continue
                assert response.status_code == 201, response.text
                lease = response.json()
                if rng.random() < 0.2:
                    # a retry after a lost answer: the same claim, never a second one
                    again = self.call(http, rng, "POST", f"/v1/tables/{table}/claim", json=body)
                    assert again.status_code in (201, 410), again.text  # 410: revoked meanwhile
                    if again.status_code == 201:
                        assert again.json()["lease_id"] == lease["lease_id"]
                if rng.random() < 0.4:
                    self.hold_back(http, rng, table, lease)
                if rng.random() < 0.3:
                    self.maintain(http, rng, table, f"compactor-{seed}")
                self.hold(http, rng, lease, ttl, time.monotonic())

    def every_ending(self, seed: int) -> None:
        """A compactor whose backpressure ends each way in turn, on a table of its own beside
        the chaos (so every run shows all three to the checker): fulfilled by its maintenance
        grant, withdrawn with its claim's release, expired with its claim."""
        rng = random.Random(seed)
        table, holder = OWN_TABLE, f"compactor-{seed}"
        with self.client("job") as http:
            for ending in ("fulfilled", "withdrawn", "expired"):
                # long enough for the hold-back to come back on a busy machine; the expired
                # one is left to run out
                ttl = 3.0 if ending == "expired" else 30.0
                body = {"holder": holder, "ttl_s": ttl, "request_id": uuid.uuid4().hex}
                response = self.call(http, rng, "POST", f"/v1/tables/{table}/claim", json=body)
                assert response.status_code == 201, response.text
                lease = response.json()
                assert self.hold_back(http, rng, table, lease)
                if ending == "fulfilled":
                    grant = {"holder": holder, "ttl_s": 30, "request_id": uuid.uuid4().hex}
                    path = f"/v1/tables/{table}/maintenance-lease"
                    response = self.call(http, rng, "POST", path, json=grant)
                    assert response.status_code == 201, response.text
                    self.release(http, rng, response.json())
                if ending == "expired":
                    # the compactor died: the sweep, or the next call that writes the table, ends
                    # both (a GET only reads)
                    time.sleep(ttl + 0.2)
                    self.call(http, rng, "GET", f"/v1/tables/{table}")
                else:
                    self.release(http, rng, lease)

    def ingest(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("job") as http:
            while not self.stop.is_set():
                table, ttl = rng.choice(TABLES), rng.choice([0.2, 0.4])
                response = self.call(
                    http,
                    rng,
                    "POST",
                    f"/v1/tables/{table}/commit-leases",
                    json={"holder": f"ingest-{seed}", "ttl_s": ttl, "wait_s": 0.2},
                )
                if response.status_code == 201:
                    self.hold(http, rng, response.json(), ttl, time.monotonic())
                else:
                    assert response.status_code == 423, response.text

    def operator(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("operator") as http:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.05, 0.2))
                table = rng.choice(TABLES)
                response = self.call(http, rng, "GET", f"/v1/tables/{table}")
                if response.status_code == 404:
                    continue
                claims = response.json()["claims"]
                assert len(claims) <= 1, claims  # what status shows, too
                if rng.random() < 0.1:
                    # the switch turns backpressure, or maintenance, off and on: inv8 reads both
                    field = rng.choice(["backpressure", "maintenance"])
                    body = {field: rng.choice(["enabled", "disabled"]), "reason": "chaos"}
                    self.call(http, rng, "PUT", f"/v1/tables/{table}/switch", json=body)
                if claims and rng.random() < 0.3:
                    path = f"/v1/leases/{claims[0]['lease_id']}/revoke"
                    self.call(http, rng, "POST", path, json={"reason": "chaos"})

    def hold_back(self, http, rng, table: str, claim: dict) -> bool:
        """Backpressure under the claim (docs/jobs.md §3) on a partition or two: it holds
        every whole-table commit lease until the claim's maintenance lease or its end."""
        parts = rng.sample(["p=1", "p=2", "p=3"], rng.choice([1, 2]))
        body = {
            "claim_id": claim["lease_id"],
            "holder": claim["holder"],
            "partitions": parts,
            "reason": "chaos",
        }
        response = self.call(http, rng, "POST", f"/v1/tables/{table}/backpressure", json=body)
        # 410: the claim expired or was revoked meanwhile
        assert response.status_code in (200, 410), response.text
        return response.status_code == 200 and bool(response.json()["partitions"])

    def maintain(self, http, rng, table: str, holder: str) -> None:
        """A one-off maintenance step under the claim: granted, draining or refused alike."""
        response = self.call(
            http,
            rng,
            "POST",
            f"/v1/tables/{table}/maintenance-lease",
            json={"holder": holder, "ttl_s": 0.3, "request_id": uuid.uuid4().hex},
        )
        if response.status_code == 201:
            self.release(http, rng, response.json())
        elif response.status_code == 202:
            request_id = response.json()["intent"]["request_id"]
            if rng.random() < 0.5:
                # wait out the drain: the grant fulfils the claim's backpressure it covers
                again = self.call(
                    http,
                    rng,
                    "POST",
                    f"/v1/tables/{table}/maintenance-lease",
                    json={"holder": holder, "ttl_s": 0.3, "request_id": request_id, "wait_s": 1},
                )
                if again.status_code == 201:
                    self.release(http, rng, again.json())
                    return
            path = f"/v1/tables/{table}/intents/{request_id}"
            self.call(http, rng, "DELETE", path, params={"holder": holder})
        else:
            assert response.status_code in (409, 423), response.text

    def run(self) -> None:
        background = [self.guarded(self.ingest, 300 + n) for n in range(INGEST_CLIENTS)]
        background.append(self.guarded(self.operator, 200))
        claimers = [self.guarded(self.claimer, n) for n in range(CLAIMERS)]
        claimers.append(self.guarded(self.every_ending, CLAIMERS))
        self.run_until_done(claimers, background)


def test_never_two_live_claims_on_a_table_across_two_service_processes(db_url, tmp_path):
    workload, history = run_on_two_services(
        db_url, tmp_path, lambda urls: ClaimWorkload(urls, seed=11)
    )
    # the run exercised what it claims: contention, and every way a claim ends
    seen = Counter((e["event"], e["kind"]) for e in history.events)
    for needed in ("lease.acquired", "lease.released", "lease.expired", "lease.revoked"):
        assert seen[(needed, "claim")] > 0, f"the workload never produced {needed}: {seen}"
    assert seen[("lease.acquired", "commit")] > 0 and seen[("lease.acquired", "maintenance")] > 0
    assert workload.calls["POST 409"] > 0, workload.calls
    # backpressure was opened, held writers, and ended every way
    assert seen[("backpressure.on", "intent")] > 0, seen
    causes = Counter(
        e["event"] for e in history.events if e["detail"].get("cause") == "backpressure"
    )
    for ended in ("intent.fulfilled", "intent.withdrawn", "intent.expired"):
        assert causes[ended] > 0, f"no backpressure intent ended by {ended}: {causes}"
    # and claims held nothing else: commit leases were live inside claims
    assert _commits_inside_claims(history) > 0


def _commits_inside_claims(history: History) -> int:
    claims = lease_spans(history, "claim")
    return sum(
        1
        for lease in history.commit_leases
        for start, end, _, _ in claims.get(lease["table_name"], [])
        if commit_span(lease)[0] < end and start < commit_span(lease)[1]
    )


# -- the checker finds what it must --------------------------------------------------------------

T0 = datetime(2026, 1, 1)


def _event(id_, event, lease_id, kind, at, table="db.t", **detail):
    return {
        "id": id_,
        "table_name": table,
        "event": event,
        "lease_id": lease_id,
        "kind": kind,
        "token": 1 if kind == "maintenance" else None,
        "holder": "h",
        "at": T0 + timedelta(seconds=at),
        "detail": detail,
    }


def test_checker_flags_two_live_claims_on_one_table():
    history = History(
        events=[
            _event(1, "lease.acquired", "k1", "claim", 0),
            _event(2, "lease.acquired", "k2", "claim", 1),
            _event(3, "lease.released", "k1", "claim", 2, held_s=2),
            _event(4, "lease.released", "k2", "claim", 3, held_s=2),
        ],
        commit_leases=[],
    )
    found = check(history)
    assert sum("inv6" in v for v in found) == 2, found  # replay and intervals


def test_checker_flags_a_claim_granted_before_the_expired_one_ended():
    # k1 expired at 1 s by its held_s, but the trail ends it after k2's grant: replay sees two
    history = History(
        events=[
            _event(1, "lease.acquired", "k1", "claim", 0),
            _event(2, "lease.acquired", "k2", "claim", 2),
            _event(3, "lease.expired", "k1", "claim", 3, held_s=1),
        ],
        commit_leases=[],
    )
    found = check(history)
    assert [v for v in found if "inv6" in v] and all("k1" in v for v in found), found


def test_checker_allows_claims_in_turn_on_other_tables_and_over_other_kinds():
    history = History(
        events=[
            _event(1, "lease.acquired", "k1", "claim", 0),
            _event(2, "lease.acquired", "k2", "claim", 0, table="db.u"),
            _event(3, "lease.acquired", "m1", "maintenance", 1),
            _event(4, "lease.expired", "k1", "claim", 3, held_s=2),
            _event(5, "lease.acquired", "k3", "claim", 3),
            _event(6, "lease.released", "m1", "maintenance", 4, held_s=3),
        ],
        commit_leases=[
            {
                "id": "c1",
                "table_name": "db.t",
                "partitions": None,
                "acquired_at": T0 + timedelta(seconds=5),
                "expires_at": T0 + timedelta(seconds=9),
                "ended_at": None,
            }
        ],
    )
    assert check(history) == []
