"""The ingest gate against a small in-memory lakelock service (no Spark, no database)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from functools import partial
from typing import Any

import httpx
import pytest

from ingest_gate.gate import Gate, GateTimeout, LeaseLost
from service.client import LeaseClient, Stopped
from service.wire.errors import PROBLEM_TYPE_PREFIX
from tests.conftest import auth
from tests.support.helpers import HANG_GUARD_S, metric, wait_until

TABLE = "cat.db.events"


def problem(status: int, slug: str, **extra: Any) -> httpx.Response:
    body = {"type": PROBLEM_TYPE_PREFIX + slug, "title": slug, "status": status, "detail": slug}
    body.update(extra)
    return httpx.Response(status, json=body)


class FakeLakelock:
    """Commit leases on one table: a switch, a blocking reason, revocation, long-poll.

    `blocked_by` is None (grant), "paused", "maintenance" or "intent". A long-polling acquire
    waits on a condition until the state changes or its wait_s passes, as the service does.
    `refuse_in_turn(*reasons)` refuses the next asks one reason each, then grants: a test
    driven by the asks the gate makes, not by the time a timer fires.
    `down` makes every call fail to connect; `release_fails` answers DELETE with 503.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.blocked_by: str | None = None
        self.then: list[str | None] = []  # what blocks after each refusal, in turn
        self.version = 0
        self.down = False
        self.release_fails = False
        self.leases: dict[str, dict[str, Any]] = {}  # lease_id -> {state, request_id, ...}
        self.by_request: dict[str, str] = {}
        self.acquire_ids: list[str] = []
        self.acquire_bodies: list[dict[str, Any]] = []
        self.renews = 0
        self.calls = 0
        self.released: list[str] = []
        # the bodies of releases that carried what the lease did (POST .../release)
        self.release_bodies: list[dict[str, Any]] = []
        self.refuse_counts = False  # answer such a release 422, as for a partition out of scope

    # operator side
    def block(self, reason: str | None) -> None:
        self._set(reason, then=[])

    def refuse_in_turn(self, first: str, *rest: str) -> None:
        self._set(first, then=[*rest, None])

    def _set(self, reason: str | None, *, then: list[str | None]) -> None:
        with self.cond:
            self.blocked_by, self.then = reason, then
            self.version += 1
            self.cond.notify_all()

    def revoke(self, lease_id: str) -> None:
        with self.cond:
            self.leases[lease_id]["state"] = "revoked"

    def live(self) -> list[str]:
        with self.cond:
            return [k for k, v in self.leases.items() if v["state"] == "live"]

    # the HTTP side
    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if request.method == "POST" and path.endswith("/commit-leases"):
            return self._acquire(json.loads(request.content))
        match = re.fullmatch(r"/v1/leases/([^/]+)(/renew|/release)?", path)
        assert match, path
        lease = self.leases[match.group(1)]
        if match.group(2) == "/renew":
            return self._renew(lease)
        if match.group(2) == "/release":
            assert request.method == "POST"
            if self.refuse_counts:
                return problem(422, "invalid-request")
            self.release_bodies.append(json.loads(request.content))
        else:
            assert request.method == "DELETE"
        if self.release_fails:
            return problem(503, "unavailable")
        with self.cond:
            self.released.append(lease["lease_id"])
            if lease["state"] == "live":
                lease["state"] = "released"
        return httpx.Response(200, json={"lease_id": lease["lease_id"], "released": True})

    def _acquire(self, body: dict[str, Any]) -> httpx.Response:
        with self.cond:
            self.acquire_ids.append(body["request_id"])
            self.acquire_bodies.append(body)
            # like the service: answer as soon as the state changes, else at the deadline
            seen = self.version
            self.cond.wait_for(
                lambda: self.blocked_by is None or self.version != seen, timeout=body["wait_s"]
            )
            if self.blocked_by is not None:
                refused = problem(423, "locked", reason=self.blocked_by, retry_after_s=0.05)
                if self.then:
                    self.blocked_by = self.then.pop(0)
                return refused
            lease_id = self.by_request.get(body["request_id"]) or str(uuid.uuid4())
            self.by_request[body["request_id"]] = lease_id
            lease = self.leases.setdefault(
                lease_id,
                {
                    "lease_id": lease_id,
                    "table": TABLE,
                    "kind": "commit",
                    "holder": body["holder"],
                    "request_id": body["request_id"],
                    "token": None,
                    "ttl_s": body["ttl_s"],
                    "remaining_s": body["ttl_s"],
                    "state": "live",
                },
            )
            return httpx.Response(201, json=lease)

    def _renew(self, lease: dict[str, Any]) -> httpx.Response:
        with self.cond:
            self.renews += 1
            if lease["state"] == "revoked":
                return problem(409, "not-owner")
            if lease["state"] != "live":
                return problem(410, "expired")
            return httpx.Response(200, json={"outcome": "ok", "lease": lease})


class FakeJobGroups:
    def __init__(self) -> None:
        self.current: str | None = None
        self.cancelled: list[str] = []
        self.cancelled_event = threading.Event()

    def set(self, group: str) -> None:
        self.current = group

    def clear(self) -> None:
        self.current = None

    def cancel(self, group: str) -> None:
        self.cancelled.append(group)
        self.cancelled_event.set()


@pytest.fixture
def service() -> FakeLakelock:
    return FakeLakelock()


@pytest.fixture
def client(service: FakeLakelock) -> LeaseClient:
    http = httpx.Client(transport=httpx.MockTransport(service), base_url="http://lakelock.test")
    return LeaseClient(http=http, retries=1, backoff_s=0.01, max_backoff_s=0.02)


def make_gate(client: LeaseClient, **kwargs: Any) -> Gate:
    kwargs.setdefault("holder", "ingest:test")
    kwargs.setdefault("ttl_s", 30.0)
    kwargs.setdefault("poll_s", 0.2)
    kwargs.setdefault("max_hold_s", 5.0)
    return Gate(client, **kwargs)


def test_gate_waits_while_paused_and_commits_after_resume(
    service: FakeLakelock, client: LeaseClient
) -> None:
    service.block("paused")
    threading.Timer(0.4, service.block, args=(None,)).start()
    with make_gate(client, poll_s=5.0).commit(TABLE) as gate_pass:
        assert gate_pass.lease is not None
        assert service.live() == [gate_pass.lease.lease_id]
    assert gate_pass.waited_s >= 0.3
    assert gate_pass.wait_reasons == ["paused"]
    assert gate_pass.outcome == "committed"
    assert service.live() == []
    # the long poll, not a busy loop, carried the wait
    assert len(service.acquire_ids) <= 3


def test_every_distinct_wait_reason_is_recorded_once(
    service: FakeLakelock, client: LeaseClient
) -> None:
    service.refuse_in_turn("paused", "paused", "intent", "maintenance", "maintenance")
    with make_gate(client).commit(TABLE) as gate_pass:
        pass
    assert gate_pass.wait_reasons == ["paused", "intent", "maintenance"]
    assert len(service.acquire_ids) == 6  # five refusals, then the grant
    assert len(set(service.acquire_ids)) == 1  # one request id for the whole pass
    assert gate_pass.as_dict()["wait_reasons"] == ["paused", "intent", "maintenance"]


def test_max_hold_with_policy_fail_raises_gate_timeout_naming_the_reason(
    service: FakeLakelock, client: LeaseClient
) -> None:
    service.block("maintenance")
    body_ran = False
    with (
        pytest.raises(GateTimeout, match=r"maintenance") as caught,
        make_gate(client, max_hold_s=0.5, policy="fail").commit(TABLE),
    ):
        body_ran = True
    assert not body_ran
    assert "max_hold_s=0.5" in str(caught.value)
    assert caught.value.gate_pass.outcome == "timed_out"
    assert 0.4 <= caught.value.gate_pass.waited_s < 3.0


def test_max_hold_with_policy_proceed_runs_the_body_without_a_lease(
    service: FakeLakelock, client: LeaseClient, caplog: pytest.LogCaptureFixture
) -> None:
    service.block("paused")
    with (
        caplog.at_level(logging.WARNING, logger="ingest_gate.gate"),
        make_gate(client, max_hold_s=0.4, policy="proceed").commit(TABLE) as gate_pass,
    ):
        assert gate_pass.lease is None
        gate_pass.check()  # nothing to lose
    assert gate_pass.outcome == "proceeded_without_lease"
    assert any("without a lease" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("policy", ["fail", "proceed"])
def test_unreachable_service_is_retried_until_max_hold_then_the_policy_applies(
    service: FakeLakelock, client: LeaseClient, policy: str
) -> None:
    service.down = True
    started = time.monotonic()
    if policy == "fail":
        with (
            pytest.raises(GateTimeout, match="unavailable"),
            make_gate(client, max_hold_s=0.8, policy=policy).commit(TABLE),
        ):
            pass
    else:
        with make_gate(client, max_hold_s=0.8, policy=policy).commit(TABLE) as gate_pass:
            assert gate_pass.lease is None
        assert gate_pass.wait_reasons == ["unavailable"]
    assert time.monotonic() - started >= 0.7
    assert 4 <= service.calls <= 100  # retried, with backoff rather than in a busy loop


def test_max_hold_zero_still_asks_once(service: FakeLakelock, client: LeaseClient) -> None:
    with make_gate(client, max_hold_s=0.0).commit(TABLE) as gate_pass:
        assert gate_pass.lease is not None
    assert service.acquire_ids == [gate_pass.request_id]


def test_service_back_before_max_hold_grants_the_lease_under_the_same_request_id(
    service: FakeLakelock, client: LeaseClient
) -> None:
    service.down = True
    threading.Timer(0.4, setattr, args=(service, "down", False)).start()
    with make_gate(client, max_hold_s=5.0).commit(TABLE) as gate_pass:
        assert gate_pass.lease is not None
    assert gate_pass.wait_reasons == ["unavailable"]
    assert service.acquire_ids == [gate_pass.request_id]


def test_lease_revoked_mid_body_cancels_the_job_group_and_raises_lease_lost(
    service: FakeLakelock, client: LeaseClient
) -> None:
    groups = FakeJobGroups()
    # renewed every second, lost by the deadline only after 2 s without one: the revoke,
    # seen at the next renew, is what ends it, however busy the machine
    gate = make_gate(client, ttl_s=3.0, job_groups=groups)
    with pytest.raises(LeaseLost, match="not-owner") as caught, gate.commit(TABLE) as gate_pass:
        group = groups.current
        assert gate_pass.lease is not None
        service.revoke(gate_pass.lease.lease_id)
        assert groups.cancelled_event.wait(HANG_GUARD_S)
        with pytest.raises(LeaseLost):
            gate_pass.check()
            # the body returns as if its MERGE had finished: the gate must still fail it
    assert group is not None and groups.cancelled == [group]
    assert caught.value.gate_pass.outcome == "lease_lost"
    assert service.released == [gate_pass.lease.lease_id]
    assert groups.current is None


def test_body_failing_after_the_lease_was_lost_raises_lease_lost_from_its_error(
    service: FakeLakelock, client: LeaseClient
) -> None:
    groups = FakeJobGroups()
    with (
        pytest.raises(LeaseLost) as caught,
        make_gate(client, ttl_s=3.0, job_groups=groups).commit(TABLE) as gate_pass,
    ):
        assert gate_pass.lease is not None
        service.revoke(gate_pass.lease.lease_id)
        assert groups.cancelled_event.wait(HANG_GUARD_S)
        raise RuntimeError("Job group cancelled")  # what Spark raises in the MERGE
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_policy_proceed_keeps_the_batch_running_when_the_lease_is_lost(
    service: FakeLakelock, client: LeaseClient
) -> None:
    groups = FakeJobGroups()
    gate = make_gate(client, ttl_s=3.0, job_groups=groups, policy="proceed")
    with gate.commit(TABLE) as gate_pass:
        assert gate_pass.lease is not None
        service.revoke(gate_pass.lease.lease_id)
        wait_until(lambda: gate_pass.lost_reason is not None, "the revoke seen at a renew")
        gate_pass.check()
    assert groups.cancelled == []
    assert gate_pass.outcome == "lease_lost"


def test_lease_is_renewed_while_a_body_outlasts_its_ttl(
    service: FakeLakelock, client: LeaseClient
) -> None:
    # renewed every 0.5 s; lost only after 1 s without a renew
    with make_gate(client, ttl_s=1.5).commit(TABLE) as gate_pass:
        entered = time.monotonic()
        # a body that outlasts two TTLs, renewed at least three times meanwhile
        wait_until(lambda: service.renews >= 3 and time.monotonic() - entered > 3.0, "three renews")
        gate_pass.check()
    assert gate_pass.outcome == "committed"
    assert gate_pass.held_s > 3.0


def test_lease_is_released_when_the_body_raises(service: FakeLakelock, client: LeaseClient) -> None:
    with (
        pytest.raises(ValueError, match="bad batch"),
        make_gate(client).commit(TABLE) as gate_pass,
    ):
        raise ValueError("bad batch")
    assert gate_pass.outcome == "failed"
    assert service.released == [gate_pass.lease.lease_id]
    assert service.live() == []


def test_failed_release_is_logged_not_raised_over_the_body(
    service: FakeLakelock, client: LeaseClient, caplog: pytest.LogCaptureFixture
) -> None:
    service.release_fails = True
    with pytest.raises(ValueError, match="bad batch"), make_gate(client).commit(TABLE):
        raise ValueError("bad batch")
    with make_gate(client).commit(TABLE) as gate_pass:
        pass
    assert gate_pass.outcome == "committed"
    assert sum("release of commit lease" in r.getMessage() for r in caplog.records) == 2


def test_gate_pass_reports_what_the_job_logs(service: FakeLakelock, client: LeaseClient) -> None:
    with make_gate(client).commit(TABLE) as gate_pass:
        pass
    report = gate_pass.as_dict()
    json.dumps(report)
    assert report["table"] == TABLE
    assert report["lease_id"] == gate_pass.lease.lease_id
    assert report["outcome"] == "committed"
    assert gate_pass.lease_calls_s > 0
    assert set(report) >= {"waited_s", "wait_reasons", "held_s", "lease_calls_s"}


def test_whole_table_pass_asks_without_partitions(
    service: FakeLakelock, client: LeaseClient
) -> None:
    with make_gate(client).commit(TABLE) as gate_pass:
        pass
    assert "partitions" not in service.acquire_bodies[0]  # the request as before scopes
    assert gate_pass.as_dict()["scope"] == "table"


def test_scoped_pass_asks_for_exactly_its_partitions_on_every_try(
    service: FakeLakelock, client: LeaseClient
) -> None:
    names = ["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"]
    service.refuse_in_turn("maintenance", "maintenance")
    with make_gate(client).commit(TABLE, partitions=names) as gate_pass:
        pass
    assert len(service.acquire_bodies) == 3
    assert all(b["partitions"] == names for b in service.acquire_bodies)
    assert gate_pass.partitions == tuple(names)
    report = gate_pass.as_dict()
    assert report["scope"] == names and report["wait_reasons"] == ["maintenance"]
    json.dumps(report)


def test_gate_against_the_service_waits_for_resume_and_releases(lakelock_server: Any) -> None:
    table = "cat.db.gate_it"
    operator = LeaseClient(lakelock_server.url, token=lakelock_server.token("operator"))
    job = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    operator.set_switch(table, ingest="paused", reason="test: hold ingest")
    threading.Timer(
        0.5, operator.set_switch, args=(table,), kwargs={"ingest": "running", "reason": "resume"}
    ).start()
    gate = Gate(job, holder="ingest:it", ttl_s=6.0, max_hold_s=20.0, poll_s=5.0)
    with gate.commit(table) as gate_pass:
        assert gate_pass.lease is not None
        # three renews at ttl/3 (2 s): past the renew deadline (4 s), only they keep it safe
        with httpx.Client(base_url=lakelock_server.url, headers=auth("reader")) as reader:
            renewals = partial(metric, reader, "lakelock_renewals_total", kind="commit")
            before = renewals()
            wait_until(lambda: renewals() >= before + 3, "three renews of the commit lease")
        gate_pass.check()
    assert gate_pass.wait_reasons == ["paused"]
    assert gate_pass.outcome == "committed"
    assert operator.state(table)["commit_leases"] == []
    job.close()
    operator.close()


def test_a_stopping_job_leaves_the_gate_without_a_lease_under_either_policy(
    lakelock_server: Any,
) -> None:
    """A job stopped while its pass waits (ingest paused) ends the wait within the client's
    stop slice, not after max_hold_s, and never runs the body: not even `proceed` commits
    without a lease on the way out."""
    table = "cat.db.gate_stop"
    operator = LeaseClient(lakelock_server.url, token=lakelock_server.token("operator"))
    job = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    operator.set_switch(table, ingest="paused", reason="test: hold ingest")
    for policy in ("fail", "proceed"):
        stop = threading.Event()
        gate = Gate(
            job, holder="ingest:it", max_hold_s=120.0, poll_s=10.0, policy=policy, stop=stop
        )
        threading.Timer(0.5, stop.set).start()
        ran: list[str] = []
        started = time.monotonic()
        with pytest.raises(Stopped), gate.commit(table):
            ran.append(policy)
        assert ran == []
        assert time.monotonic() - started < 120.0
    assert operator.state(table)["commit_leases"] == []
    job.close()
    operator.close()


def test_the_time_backpressure_held_a_pass_is_counted_apart_and_logged_once(
    service: FakeLakelock, client: LeaseClient, caplog: pytest.LogCaptureFixture
) -> None:
    service.refuse_in_turn("paused", "paused", "backpressure", "backpressure", "backpressure")
    with (
        caplog.at_level(logging.WARNING, logger="ingest_gate.gate"),
        make_gate(client, poll_s=0.1).commit(TABLE) as gate_pass,
    ):
        pass
    assert gate_pass.wait_reasons == ["paused", "backpressure"]
    assert 0 < gate_pass.backpressure_s < gate_pass.waited_s
    assert gate_pass.as_dict()["backpressure_s"] == round(gate_pass.backpressure_s, 3)
    held = [r for r in caplog.records if "held back" in r.getMessage()]
    assert len(held) == 1 and TABLE in held[0].getMessage()


def test_backpressure_seconds_are_the_time_spent_on_asks_it_refused() -> None:
    from ingest_gate.gate import GatePass

    gate_pass = GatePass(TABLE, "ingest:test", "r1", "fail")
    # refusals after 1, 3 and 5 s of waiting in all, then the grant after 9 s: the time from
    # a backpressure refusal to the next answer was spent on backpressure, the rest was not
    for reason, waited in (("paused", 1.0), ("backpressure", 3.0), ("backpressure", 5.0)):
        gate_pass._note(reason, waited)
    gate_pass._note(None, 9.0)
    assert gate_pass.backpressure_s == 6.0
    assert gate_pass.wait_reasons == ["paused", "backpressure"]


# -- what the commit wrote ---------------------------------------------------------------------


def test_a_committed_pass_releases_with_what_its_commit_wrote_in_its_scope(
    service: FakeLakelock, client: LeaseClient
) -> None:
    names = ["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"]
    with make_gate(client).commit(TABLE, partitions=names) as gate_pass:
        # per partition, from the commit's snapshot summary; one outside the lease is not sent
        gate_pass.wrote({names[0]: (2, 1), names[1]: (1, 0), "dt=2024-06-21/hr=0": (1, 0)})
    assert gate_pass.outcome == "committed"
    assert service.live() == []
    (body,) = service.release_bodies
    assert body["written"] == {
        names[0]: {"data_files": 2, "delete_files": 1},
        names[1]: {"data_files": 1, "delete_files": 0},
    }
    assert gate_pass.as_dict()["written_partitions"] == 2


def test_a_pass_that_failed_releases_without_counts(
    service: FakeLakelock, client: LeaseClient
) -> None:
    with pytest.raises(RuntimeError), make_gate(client).commit(TABLE) as gate_pass:
        gate_pass.wrote({"dt=2024-06-20": (1, 0)})
        raise RuntimeError("the MERGE failed after all")
    assert gate_pass.outcome == "failed"
    assert service.release_bodies == []
    assert service.released == [gate_pass.lease.lease_id] and service.live() == []


def test_counts_the_service_refuses_never_keep_the_lease(
    service: FakeLakelock, client: LeaseClient, caplog: pytest.LogCaptureFixture
) -> None:
    service.refuse_counts = True
    with make_gate(client).commit(TABLE) as gate_pass:
        gate_pass.wrote({"dt=2024-06-20": (1, 0)})
    assert gate_pass.outcome == "committed"
    # released all the same, without them
    assert service.released == [gate_pass.lease.lease_id] and service.live() == []
    assert "releasing without them" in caplog.text


def test_a_pass_told_nothing_releases_as_before(service: FakeLakelock, client: LeaseClient) -> None:
    with make_gate(client).commit(TABLE) as gate_pass:
        pass
    assert gate_pass.written is None and service.release_bodies == []
    assert service.released == [gate_pass.lease.lease_id]
