"""The five invariants of DESIGN.md under concurrency: 16 ingest clients, 3 compactors and an
operator, over two service processes sharing one database, with short TTLs, abandoned leases
(expiry), revokes and pauses mixed in. The checker in `invariants.py` reads the recorded
history afterwards and fails on any violation."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta

import httpx
import pytest

from tests.conftest import auth, start_server
from tests.invariants import History, RenewObservation, check, load_history

pytestmark = pytest.mark.slow

TABLES = ["lake.db.hot", "lake.db.hot", "lake.db.hot", "lake.db.warm"]
INGEST_CLIENTS = 16
COMPACTORS = 3
ROUNDS = 70  # per ingest client; each round is 1-4 calls


class Workload:
    def __init__(self, urls: list[str], seed: int) -> None:
        self.urls = urls
        self.rng = random.Random(seed)
        self.renews: list[RenewObservation] = []
        self.calls: Counter[str] = Counter()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def client(self, role: str) -> httpx.Client:
        return httpx.Client(headers=auth(role), timeout=30)

    def call(self, http: httpx.Client, rng: random.Random, method: str, path: str, **kw):
        response = http.request(method, rng.choice(self.urls) + path, **kw)
        with self.lock:
            self.calls[f"{method} {response.status_code}"] += 1
        if response.status_code >= 500:
            with self.lock:
                self.errors.append(f"{method} {path} -> {response.status_code} {response.text}")
        return response

    def renew(self, http, rng, lease, *, last_ok: float, ttl: float) -> tuple[bool, float]:
        body = {"holder": lease["holder"], "ttl_s": ttl}
        if lease.get("token"):
            body["token"] = lease["token"]
        sent = time.monotonic()
        response = self.call(http, rng, "POST", f"/v1/leases/{lease['lease_id']}/renew", json=body)
        outcome = response.json().get("outcome", str(response.status_code))
        with self.lock:
            self.renews.append(RenewObservation(lease["lease_id"], sent, last_ok, ttl, outcome))
        return outcome == "ok", time.monotonic()

    def release(self, http, rng, lease) -> None:
        params = {"holder": lease["holder"]}
        if lease.get("token"):
            params["token"] = lease["token"]
        response = self.call(http, rng, "DELETE", f"/v1/leases/{lease['lease_id']}", params=params)
        assert response.status_code == 200, response.text

    def hold(self, http, rng, lease, ttl: float, received: float) -> None:
        """Hold the lease a little, renew it, then release it or abandon it to expiry."""
        time.sleep(rng.uniform(0, ttl / 3))
        ok, received = self.renew(http, rng, lease, last_ok=received, ttl=ttl)
        if rng.random() < 0.15:
            # abandoned: its TTL runs out; a renew after that must never succeed
            time.sleep(ttl + rng.uniform(0.02, 0.1))
            if ok:
                self.renew(http, rng, lease, last_ok=received, ttl=ttl)
            return
        time.sleep(rng.uniform(0, ttl / 4))
        self.release(http, rng, lease)

    def ingest(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("job") as http:
            for _ in range(ROUNDS):
                table, ttl = rng.choice(TABLES), rng.choice([0.3, 0.5, 0.8])
                response = self.call(
                    http,
                    rng,
                    "POST",
                    f"/v1/tables/{table}/commit-leases",
                    json={"holder": f"ingest-{seed}", "ttl_s": ttl, "wait_s": rng.uniform(0, 0.3)},
                )
                if response.status_code == 201:
                    self.hold(http, rng, response.json(), ttl, time.monotonic())
                else:
                    assert response.status_code == 423, response.text

    def compactor(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("job") as http:
            while not self.stop.is_set():
                table, ttl = rng.choice(TABLES), rng.choice([0.4, 0.8])
                request_id = uuid.uuid4().hex
                for _ in range(6):
                    response = self.call(
                        http,
                        rng,
                        "POST",
                        f"/v1/tables/{table}/maintenance-lease",
                        json={
                            "holder": f"compactor-{seed}",
                            "ttl_s": ttl,
                            "wait_s": 0.3,
                            "request_id": request_id,
                        },
                    )
                    if response.status_code != 202:
                        break
                if response.status_code == 201:
                    self.hold(http, rng, response.json(), ttl, time.monotonic())
                else:
                    assert response.status_code in (202, 409, 410), response.text
                    time.sleep(rng.uniform(0.05, 0.2))

    def operator(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("operator") as http:
            while not self.stop.is_set():
                time.sleep(rng.uniform(0.1, 0.3))
                table = rng.choice(TABLES)
                state = self.call(http, rng, "GET", f"/v1/tables/{table}").json()
                live = state["commit_leases"] + [state["maintenance_lease"]] * bool(
                    state["maintenance_lease"]
                )
                if live and rng.random() < 0.6:
                    lease = rng.choice(live)
                    self.call(
                        http,
                        rng,
                        "POST",
                        f"/v1/leases/{lease['lease_id']}/revoke",
                        json={"reason": "chaos"},
                    )
                elif rng.random() < 0.3:
                    path = f"/v1/tables/{table}/switch"
                    self.call(http, rng, "PUT", path, json={"ingest": "paused", "reason": "chaos"})
                    time.sleep(rng.uniform(0.05, 0.15))
                    self.call(http, rng, "PUT", path, json={"ingest": "running", "reason": "ok"})

    def run(self) -> None:
        background = [
            threading.Thread(target=self.compactor, args=(100 + n,)) for n in range(COMPACTORS)
        ] + [threading.Thread(target=self.operator, args=(200,))]
        ingest = [threading.Thread(target=self.ingest, args=(n,)) for n in range(INGEST_CLIENTS)]
        for thread in background + ingest:
            thread.start()
        for thread in ingest:
            thread.join(600)
        self.stop.set()
        for thread in background:
            thread.join(60)


def test_invariants_hold_under_concurrency_across_two_service_processes(db_url, tmp_path):
    env = {"LAKELOCK_MIN_TTL_S": "0.1", "LAKELOCK_SWEEP_INTERVAL_S": "0.2"}
    servers = [start_server(db_url, tmp_path, **env) for _ in range(2)]
    try:
        workload = Workload([s.url for s in servers], seed=7)
        workload.run()
    finally:
        for server in servers:
            server.stop()
    assert workload.errors == []
    history = load_history(db_url, workload.renews)
    assert check(history) == []
    # the run exercised what it claims: thousands of calls, and every kind of transition
    assert sum(workload.calls.values()) >= 2000, workload.calls
    seen = Counter(
        (e["event"], e["kind"]) for e in history.events if e["event"] != "switch.set"
    ) + Counter(e["event"] for e in history.events if e["event"] == "switch.set")
    for needed in [
        ("lease.acquired", "commit"),
        ("lease.acquired", "maintenance"),
        ("lease.expired", "commit"),
        ("lease.revoked", "commit"),
        ("intent.opened", "maintenance"),
        "switch.set",
    ]:
        assert seen[needed] > 0, f"the workload never produced {needed}: {seen}"
    assert workload.calls["POST 423"] > 0


# -- the checker finds what it must --------------------------------------------------------------

T0 = datetime(2026, 1, 1)


def _event(id_, event, lease_id=None, kind=None, token=None, at=0.0, **detail):
    return {
        "id": id_,
        "table_name": "db.t",
        "event": event,
        "lease_id": lease_id,
        "kind": kind,
        "token": token,
        "holder": "h",
        "at": T0 + timedelta(seconds=at),
        "detail": detail,
    }


def test_checker_flags_overlapping_maintenance_and_a_token_going_back():
    history = History(
        events=[
            _event(1, "lease.acquired", "m1", "maintenance", 2, at=0),
            _event(2, "lease.acquired", "m2", "maintenance", 1, at=1),
            _event(3, "lease.released", "m1", "maintenance", at=2, held_s=2),
        ],
        commit_leases=[],
    )
    found = " ".join(check(history))
    assert "inv1" in found and "inv3" in found


def test_checker_flags_a_commit_inside_maintenance_or_intent_or_pause():
    history = History(
        events=[
            _event(1, "lease.acquired", "m1", "maintenance", 1, at=0),
            _event(2, "lease.acquired", "c1", "commit", at=1),
            _event(3, "lease.released", "m1", "maintenance", at=2, held_s=2),
            _event(4, "intent.opened", kind="maintenance", at=3),
            _event(5, "lease.acquired", "c2", "commit", at=4),
            _event(6, "intent.expired", at=5),
            _event(7, "switch.set", at=6, after={"ingest": "paused"}),
            _event(8, "lease.acquired", "c3", "commit", at=7),
        ],
        commit_leases=[
            {
                "id": "c1",
                "table_name": "db.t",
                "acquired_at": T0 + timedelta(seconds=1),
                "expires_at": T0 + timedelta(seconds=9),
                "ended_at": None,
            }
        ],
    )
    found = check(history)
    assert sum("inv2" in v for v in found) == 2  # replay and intervals both see c1
    assert sum("inv5" in v for v in found) == 2  # c2 under the intent, c3 while paused


def test_checker_flags_a_renew_that_resurrected_an_expired_lease():
    late = RenewObservation("c1", sent_at=10.0, last_ok_received_at=8.0, ttl_s=1.0, outcome="ok")
    timely = RenewObservation("c2", sent_at=8.5, last_ok_received_at=8.0, ttl_s=1.0, outcome="ok")
    refused = RenewObservation(
        "c3", sent_at=10.0, last_ok_received_at=8.0, ttl_s=1.0, outcome="expired"
    )
    found = check(History(events=[], commit_leases=[], renews=[late, timely, refused]))
    assert len(found) == 1 and "inv4" in found[0] and "c1" in found[0]
