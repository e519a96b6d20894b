"""The five invariants of docs/design.md §3.1 under concurrency: 16 ingest clients, 3 compactors,
an operator and an intruder (a job token of its own that tries to renew, release and withdraw
what the others took, with their ids, holders and tokens: docs/design.md §6), over two service
processes sharing one database, with short TTLs, abandoned leases (expiry), revokes and pauses
mixed in. The checker in `invariants.py` reads the recorded
history afterwards and fails on any violation."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta

import httpx
import pytest

from tests.conftest import TOKENS, auth, start_server
from tests.support.invariants import (
    History,
    RenewObservation,
    check,
    commit_span,
    load_history,
    maintenance_spans,
)

pytestmark = [pytest.mark.slow, pytest.mark.dialect]

TABLES = ["lake.db.hot", "lake.db.hot", "lake.db.hot", "lake.db.warm"]
PARTITIONS = [f"dt=2024-06-20/hr={hour:02d}" for hour in range(8)]
INGEST_CLIENTS = 16
COMPACTORS = 3
ROUNDS = 70  # per ingest client; each round is 1-4 calls
INTRUDER = "intruder-secret-00000009"
TOKENS_ENV = ",".join(
    [f"{role}-client:{role}:{secret}" for role, secret in TOKENS.items()]
    + [f"intruder:job:{INTRUDER}"]
)


class Workload:
    def __init__(self, urls: list[str], seed: int) -> None:
        self.urls = urls
        self.rng = random.Random(seed)
        self.renews: list[RenewObservation] = []
        self.calls: Counter[str] = Counter()
        self.rounds = 0  # ingest rounds run to their end, whatever the answer
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    @staticmethod
    def scope(rng: random.Random, *, whole: float) -> dict[str, list[str]]:
        """Most requests name one or two partitions; a share `whole` the whole table."""
        if rng.random() < whole:
            return {}
        return {"partitions": rng.sample(PARTITIONS, rng.choice([1, 1, 2]))}

    def client(self, role: str) -> httpx.Client:
        if role == "intruder":
            return httpx.Client(headers={"Authorization": f"Bearer {INTRUDER}"}, timeout=30)
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
                    json={
                        "holder": f"ingest-{seed}",
                        "ttl_s": ttl,
                        "wait_s": rng.uniform(0, 0.3),
                        **self.scope(rng, whole=0.2),
                    },
                )
                if response.status_code == 201:
                    self.hold(http, rng, response.json(), ttl, time.monotonic())
                else:
                    assert response.status_code == 423, response.text
                with self.lock:
                    self.rounds += 1

    def compactor(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("job") as http:
            while not self.stop.is_set():
                table, ttl = rng.choice(TABLES), rng.choice([0.4, 0.8])
                request_id, scope = uuid.uuid4().hex, self.scope(rng, whole=0.1)
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
                            **scope,
                        },
                    )
                    if response.status_code != 202:
                        break
                if response.status_code == 201:
                    self.hold(http, rng, response.json(), ttl, time.monotonic())
                    continue
                assert response.status_code in (202, 409, 410), response.text
                if response.status_code == 202:
                    # gives up draining, as the compactor does: its intent goes at once
                    path = f"/v1/tables/{table}/intents/{request_id}"
                    params = {"holder": f"compactor-{seed}"}
                    self.call(http, rng, "DELETE", path, params=params)
                time.sleep(rng.uniform(0.05, 0.2))

    def operator(self, seed: int) -> None:
        rng = random.Random(seed)
        with self.client("operator") as http:
            while not self.stop.is_set():
                time.sleep(rng.uniform(0.1, 0.3))
                table = rng.choice(TABLES)
                response = self.call(http, rng, "GET", f"/v1/tables/{table}")
                if response.status_code == 404:
                    continue  # no client has used this table yet
                assert response.status_code == 200, response.text
                state = response.json()
                live = state["commit_leases"] + state["maintenance_leases"]
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

    def intruder(self, seed: int) -> None:
        """Another job token, handed what any reader sees: each call must be refused as
        another principal's (or find the lease already ended), never pass."""
        rng = random.Random(seed)
        with self.client("intruder") as http:
            while not self.stop.is_set():
                time.sleep(rng.uniform(0.02, 0.1))
                response = self.call(http, rng, "GET", f"/v1/tables/{rng.choice(TABLES)}")
                if response.status_code != 200:
                    continue
                state = response.json()
                theirs = state["commit_leases"] + state["maintenance_leases"]
                if theirs:
                    lease = rng.choice(theirs)
                    key = {"holder": lease["holder"], "token": lease["token"]}
                    key = {k: v for k, v in key.items() if v is not None}
                    path = f"/v1/leases/{lease['lease_id']}"
                    answer = (
                        self.call(http, rng, "POST", path + "/renew", json=key)
                        if rng.random() < 0.5
                        else self.call(http, rng, "DELETE", path, params=key)
                    )
                    self.refused(answer)
                for intent in state["intents"]:
                    path = f"/v1/tables/{state['table']}/intents/{intent['request_id']}"
                    answer = self.call(
                        http, rng, "DELETE", path, params={"holder": intent["holder"]}
                    )
                    if answer.status_code != 200 or answer.json()["withdrawn"]:
                        self.refused(answer)

    def refused(self, answer: httpx.Response) -> None:
        """An intruder's call answered as it must: another principal's (409), or about a
        lease that ended meanwhile (410 expired; 409 revoked)."""
        problem = answer.json() if answer.status_code >= 400 else {}
        mine = problem.get("reason") == "other-principal"
        with self.lock:
            self.calls["intruder refused"] += mine
            if not mine and answer.status_code not in (409, 410):
                self.errors.append(f"the intruder got {answer.status_code}: {answer.text}")

    def guarded(self, role, seed: int) -> threading.Thread:
        """A thread whose failure is recorded: a role that dies early would leave the run
        without the transitions it was there to cause."""

        def target() -> None:
            try:
                role(seed)
            except BaseException as exc:
                with self.lock:
                    self.errors.append(f"{role.__name__}({seed}) died: {exc!r}")
                raise

        return threading.Thread(target=target)

    def run(self) -> None:
        background = [self.guarded(self.compactor, 100 + n) for n in range(COMPACTORS)] + [
            self.guarded(self.operator, 200),
            self.guarded(self.intruder, 300),
        ]
        self.run_until_done(
            [self.guarded(self.ingest, n) for n in range(INGEST_CLIENTS)], background
        )

    def run_until_done(
        self, drivers: list[threading.Thread], background: list[threading.Thread]
    ) -> None:
        """Start every thread; once the drivers are done, stop the background ones."""
        for thread in background + drivers:
            thread.start()
        for thread in drivers:
            thread.join(600)
        self.stop.set()
        for thread in background:
            thread.join(60)


def run_on_two_services(db_url: str, tmp_path, workload_of) -> tuple[Workload, History]:
    """`workload_of(urls)`'s run against two service processes on one database; its history
    once both stopped, after the checker found nothing and no client thread died."""
    env = {
        "LAKELOCK_MIN_TTL_S": "0.1",
        "LAKELOCK_SWEEP_INTERVAL_S": "0.2",
        "LAKELOCK_TOKENS": TOKENS_ENV,
    }
    servers = [start_server(db_url, tmp_path, **env) for _ in range(2)]
    try:
        workload = workload_of([s.url for s in servers])
        workload.run()
    finally:
        for server in servers:
            server.stop()
    # a 500 is logged by the service that answered it: its traceback goes with the failure
    logs = "\n".join(text for text in (s.log() for s in servers) if "Traceback" in text)
    assert workload.errors == [], logs
    history = load_history(db_url, workload.renews)
    assert check(history) == []
    return workload, history


def test_invariants_hold_under_concurrency_across_two_service_processes(db_url, tmp_path):
    workload, history = run_on_two_services(db_url, tmp_path, lambda urls: Workload(urls, seed=7))
    # the run exercised what it claims: every ingest round (over a thousand commit-lease
    # requests, however many the contention refused), and every kind of transition
    assert workload.rounds == INGEST_CLIENTS * ROUNDS, workload.calls
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
    assert workload.calls["intruder refused"] > 0, workload.calls
    # and scopes let through what they must: leases on disjoint partitions live at once
    together = _disjoint_overlaps(history)
    assert together["maintenance"] > 0 and together["commit"] > 0, together


def _disjoint_overlaps(history: History) -> Counter[str]:
    """How often a maintenance lease was live at once with another maintenance lease, or with a
    commit lease, on disjoint partitions of the same table."""
    found: Counter[str] = Counter()
    spans = maintenance_spans(history)
    for leases in spans.values():
        for n, (s1, e1, _, scope1) in enumerate(leases):
            for s2, e2, _, scope2 in leases[n + 1 :]:
                if s2 < e1 and s1 < e2 and scope1 and scope2 and not scope1 & scope2:
                    found["maintenance"] += 1
    for lease in history.commit_leases:
        start, end = commit_span(lease)
        scope = frozenset(json.loads(lease["partitions"])) if lease["partitions"] else None
        for s, e, _, held in spans.get(lease["table_name"], []):
            if start < e and s < end and scope and held and not scope & held:
                found["commit"] += 1
    return found


# -- the checker finds what it must --------------------------------------------------------------

T0 = datetime(2026, 1, 1)


def _event(id_, event, lease_id=None, kind=None, token=None, at=0.0, actor="job-client", **detail):
    return {
        "id": id_,
        "table_name": "db.t",
        "event": event,
        "lease_id": lease_id,
        "kind": kind,
        "token": token,
        "holder": "h",
        "actor": actor,
        "at": T0 + timedelta(seconds=at),
        "detail": detail,
    }


def test_checker_flags_what_another_token_ended_and_lets_operators_and_expiry_be():
    history = History(
        events=[
            _event(1, "lease.acquired", "m1", "maintenance", 1, at=0, ttl_s=30),
            _event(2, "lease.released", "m1", "maintenance", at=1, actor="intruder"),
            _event(3, "lease.acquired", "m2", "maintenance", 2, at=2, ttl_s=30),
            _event(4, "lease.revoked", "m2", "maintenance", at=3, actor="operator-client"),
            _event(5, "intent.opened", kind="maintenance", at=4, request_id="r1"),
            _event(
                6, "intent.withdrawn", kind="maintenance", at=5, actor="intruder", request_id="r1"
            ),
            _event(7, "intent.opened", kind="maintenance", at=6, request_id="r2"),
            _event(8, "intent.expired", at=7, actor="lakelock", request_id="r2"),
        ],
        commit_leases=[],
    )
    found = [v for v in check(history) if v.startswith("inv9")]
    assert len(found) == 2, found
    assert "lease.released by intruder" in found[0] and "intent.withdrawn" in found[1]


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
            _event(4, "intent.opened", kind="maintenance", at=3, request_id="r1"),
            _event(5, "lease.acquired", "c2", "commit", at=4),
            _event(6, "intent.expired", at=5, request_id="r1"),
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


def _commit_row(lease_id, start, end, partitions=None):
    return {
        "id": lease_id,
        "table_name": "db.t",
        "partitions": json.dumps(partitions) if partitions is not None else None,
        "acquired_at": T0 + timedelta(seconds=start),
        "expires_at": T0 + timedelta(seconds=end),
        "ended_at": None,
    }


def test_checker_allows_disjoint_scopes_and_flags_intersecting_ones():
    hr13, hr14, hr15 = (["dt=2024-06-20/hr=13"], ["dt=2024-06-20/hr=14"], ["dt=2024-06-20/hr=15"])
    disjoint = History(
        events=[
            _event(1, "lease.acquired", "m1", "maintenance", 1, at=0, partitions=hr13),
            _event(2, "lease.acquired", "m2", "maintenance", 2, at=1, partitions=hr14),
            _event(3, "intent.opened", kind="maintenance", at=2, request_id="r", partitions=hr13),
            _event(4, "lease.acquired", "c1", "commit", at=3, partitions=hr15),
        ],
        commit_leases=[_commit_row("c1", 3, 9, hr15)],
    )
    assert check(disjoint) == []
    intersecting = History(
        events=[
            _event(1, "lease.acquired", "m1", "maintenance", 1, at=0, partitions=hr13),
            _event(2, "lease.acquired", "m2", "maintenance", 2, at=1, partitions=hr13 + hr14),
            _event(3, "intent.opened", kind="maintenance", at=2, request_id="r", partitions=hr14),
            _event(4, "lease.acquired", "c1", "commit", at=3, partitions=hr14),
            _event(5, "lease.acquired", "c2", "commit", at=4),  # the whole table
        ],
        commit_leases=[_commit_row("c1", 3, 9, hr14), _commit_row("c2", 4, 9)],
    )
    found = " ".join(check(intersecting))
    assert found.count("inv1") == 2  # replay and intervals: m2 intersects m1
    # replay: c1 and c2 granted under maintenance; intervals: c1 with m2, c2 with m1 and m2
    assert found.count("inv2") == 5
    assert found.count("inv5") == 2  # c1 and c2 under the intent on hr14
