"""LeaseClient and Renewer against a scripted transport (no service needed)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from service.client import Draining, Lease, LeaseClient, NotGranted, Renewer, Stopped
from service.client.transport import Backoff
from service.client.waiting import ask_until
from service.wire.errors import (
    PROBLEM_TYPE_PREFIX,
    InvalidRequest,
    LeaseExpired,
    Locked,
    MaintenanceHeld,
    MaintenanceOff,
    OutcomeUnknown,
    ServerError,
    Unavailable,
)
from tests.conftest import auth
from tests.support.helpers import HANG_GUARD_S, wait_parked

TABLE = "cat.db.events"
Handler = Callable[[httpx.Request], httpx.Response]


def lease_json(**overrides: Any) -> dict[str, Any]:
    body = {
        "lease_id": "6f1c2d7e-0000-4000-8000-000000000001",
        "table": TABLE,
        "kind": "commit",
        "holder": "ingest:test",
        "request_id": "r1",
        "token": None,
        "ttl_s": 30.0,
        "remaining_s": 30.0,
        "held_s": 0.0,
    }
    body.update(overrides)
    return body


def problem(status: int, slug: str, **extra: Any) -> httpx.Response:
    body = {"type": PROBLEM_TYPE_PREFIX + slug, "title": slug, "status": status, "detail": slug}
    body.update(extra)
    return httpx.Response(status, json=body, headers={"Content-Type": "application/problem+json"})


class Recorder:
    """A transport that answers from `handler` and keeps every request it saw."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []
        self.at: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.at.append(time.monotonic())
        return self.handler(request)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.content]


def make_client(handler: Handler, **kwargs: Any) -> tuple[LeaseClient, Recorder]:
    recorder = Recorder(handler)
    http = httpx.Client(transport=httpx.MockTransport(recorder), base_url="http://lakelock.test")
    kwargs.setdefault("backoff_s", 0.001)
    kwargs.setdefault("max_backoff_s", 0.01)
    return LeaseClient(http=http, **kwargs), recorder


def scripted(*answers: httpx.Response | Exception) -> Handler:
    """Answer with each of `answers` in turn, then repeat the last one."""
    remaining = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        answer = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handler


def test_acquire_retries_reuse_one_request_id() -> None:
    client, recorder = make_client(
        scripted(
            problem(503, "unavailable"),
            httpx.ReadTimeout("slow"),
            httpx.Response(201, json=lease_json()),
        )
    )
    lease = client.acquire_commit(TABLE, holder="ingest:test", ttl_s=30)
    ids = {body["request_id"] for body in recorder.bodies()}
    assert len(recorder.requests) == 3
    assert len(ids) == 1
    assert lease.lease_id == lease_json()["lease_id"]


def test_each_acquire_call_gets_its_own_request_id() -> None:
    client, recorder = make_client(scripted(httpx.Response(201, json=lease_json())))
    client.acquire_commit(TABLE, holder="h", ttl_s=30)
    client.acquire_commit(TABLE, holder="h", ttl_s=30)
    first, second = (body["request_id"] for body in recorder.bodies())
    assert first != second


def test_client_errors_are_not_retried() -> None:
    client, recorder = make_client(scripted(problem(409, "maintenance-held")))
    with pytest.raises(MaintenanceHeld):
        client.acquire_maintenance(TABLE, holder="compactor", ttl_s=60)
    assert len(recorder.requests) == 1


def test_503_is_retried_then_raises_unavailable() -> None:
    client, recorder = make_client(scripted(problem(503, "unavailable")), retries=3)
    with pytest.raises(Unavailable):
        client.tables()
    assert len(recorder.requests) == 4


def test_500_without_a_problem_body_raises_server_error() -> None:
    client, _ = make_client(scripted(httpx.Response(502, text="bad gateway")), retries=1)
    with pytest.raises(ServerError):
        client.tables()


def test_timeouts_that_never_end_raise_outcome_unknown() -> None:
    client, recorder = make_client(scripted(httpx.ReadTimeout("no answer")), retries=2)
    with pytest.raises(OutcomeUnknown):
        client.acquire_commit(TABLE, holder="h", ttl_s=30)
    assert len(recorder.requests) == 3


def test_run_report_is_not_resent_after_a_timeout() -> None:
    client, recorder = make_client(scripted(httpx.ReadTimeout("no answer")))
    with pytest.raises(OutcomeUnknown):
        client.report_run(TABLE, {"status": "ok"})
    assert len(recorder.requests) == 1


def test_retry_after_longer_than_the_backoff_is_honoured() -> None:
    busy = problem(503, "unavailable")
    busy.headers["Retry-After"] = "0.3"
    client, _ = make_client(scripted(busy, httpx.Response(200, json={"tables": []})))
    started = time.monotonic()
    assert client.tables() == []
    assert time.monotonic() - started >= 0.25


def test_a_bounded_call_does_not_retry_past_its_bound() -> None:
    busy = problem(503, "unavailable")
    busy.headers["Retry-After"] = "5"
    client, recorder = make_client(scripted(busy), retries=10)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        client.renew(Lease.model_validate(lease_json()), within_s=1.0)
    assert len(recorder.requests) == 1 and time.monotonic() - started < 1.0


def test_the_backoff_is_full_jitter_doubling_up_to_its_cap() -> None:
    backoff = Backoff(first_s=0.2, max_s=1.0)
    for retry, window in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (40, 1.0)]:
        delays = [backoff.delay_s(retry) for _ in range(200)]
        assert all(0.0 <= d <= window for d in delays) and max(delays) > window / 2


@pytest.mark.parametrize(
    ("slug", "expected"), [("locked", Locked), ("maintenance-off", MaintenanceOff)]
)
def test_problems_sharing_423_map_to_their_own_error(slug: str, expected: type) -> None:
    client, _ = make_client(scripted(problem(423, slug, reason="paused", retry_after_s=2.0)))
    with pytest.raises(expected) as caught:
        client.acquire_commit(TABLE, holder="h", ttl_s=30)
    assert type(caught.value) is expected
    assert caught.value.retry_after_s == 2.0


def test_locked_carries_the_reason() -> None:
    client, _ = make_client(scripted(problem(423, "locked", reason="intent")))
    with pytest.raises(Locked) as caught:
        client.acquire_commit(TABLE, holder="h", ttl_s=30)
    assert caught.value.extra["reason"] == "intent"


def test_bearer_token_is_sent() -> None:
    client, recorder = make_client(scripted(httpx.Response(200, json={"tables": []})), token="s3")
    client.tables()
    assert recorder.requests[0].headers["Authorization"] == "Bearer s3"


def test_long_poll_read_timeout_outlasts_the_wait() -> None:
    client, recorder = make_client(scripted(httpx.Response(201, json=lease_json())))
    client.acquire_commit(TABLE, holder="h", ttl_s=30, wait_s=20)
    timeout = recorder.requests[0].extensions["timeout"]
    assert timeout["read"] > 20
    assert recorder.bodies()[0]["wait_s"] == 20


def test_maintenance_request_while_commits_drain_returns_draining_with_its_request_id() -> None:
    body = {
        "status": "draining",
        "table": TABLE,
        "intent": {"holder": "compactor", "request_id": "run-1", "remaining_s": 9.0},
        "in_flight_commits": 2,
        "retry_after_s": 1.5,
    }
    client, recorder = make_client(scripted(httpx.Response(202, json=body)))
    answer = client.acquire_maintenance(TABLE, holder="compactor", ttl_s=60, request_id="run-1")
    assert answer == Draining.model_validate(body)
    assert (answer.table, answer.in_flight_commits, answer.retry_after_s) == (TABLE, 2, 1.5)
    assert answer.request_id == "run-1"
    assert recorder.bodies()[0]["request_id"] == "run-1"


def test_maintenance_lease_renew_and_release_carry_its_token() -> None:
    granted = lease_json(kind="maintenance", token=7, holder="compactor")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(200, json={"lease_id": granted["lease_id"], "released": True})
        if request.url.path.endswith("/renew"):
            return httpx.Response(200, json={"outcome": "ok", "lease": granted})
        return httpx.Response(201, json=granted)

    client, recorder = make_client(handler)
    lease = client.acquire_maintenance(TABLE, holder="compactor", ttl_s=60)
    assert isinstance(lease, Lease) and lease.token == 7
    client.renew(lease)
    client.release(lease)
    renew, release = recorder.requests[1:]
    assert json.loads(renew.content) == {"holder": "compactor", "token": 7}
    assert release.url.params["token"] == "7"


# -- Renewer ------------------------------------------------------------------------------------


def renewing(answer: Callable[[], httpx.Response]) -> tuple[LeaseClient, Recorder]:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/renew")
        return answer()

    return make_client(handler, retries=0)


def short_lease(ttl_s: float = 0.3) -> Lease:
    return Lease.model_validate(lease_json(ttl_s=ttl_s, remaining_s=ttl_s))


class FakeTime:
    """Time for a renewer's thread: each wait moves the clock on at once, and past `until`
    seconds tells the thread to stop. `renews` are the instants the service was asked."""

    def __init__(self, until: float) -> None:
        self.t = 1000.0
        self.until = self.t + until
        self.renews: list[float] = []

    def now(self) -> float:
        return self.t

    def wait(self, seconds: float) -> bool:
        self.t += seconds
        return self.t > self.until

    def answering(self, *answers: httpx.Response) -> Callable[[], httpx.Response]:
        """Each of `answers` in turn at each renew, then the last one again."""
        remaining = list(answers)

        def answer() -> httpx.Response:
            self.renews.append(self.t)
            return remaining.pop(0) if len(remaining) > 1 else remaining[0]

        return answer


def renewed(ttl_s: float) -> httpx.Response:
    lease = lease_json(ttl_s=ttl_s, remaining_s=ttl_s)
    return httpx.Response(200, json={"outcome": "ok", "lease": lease})


def test_renewer_renews_at_a_third_of_the_ttl() -> None:
    fake = FakeTime(until=95)
    client, _ = renewing(fake.answering(renewed(30.0)))
    renewer = Renewer(client, short_lease(30.0), clock=fake.now, wait=fake.wait)
    renewer.stop()  # waits for the thread, which runs until fake time passes `until`
    assert fake.renews == [1000.0 + 10 * n for n in range(1, 10)]
    assert renewer.renewals == 9 and renewer.safe_to_commit()
    assert not renewer.lost.is_set()


def test_renewer_loses_the_lease_when_the_service_says_expired() -> None:
    calls: list[str] = []
    client, recorder = renewing(lambda: problem(410, "expired"))
    renewer = Renewer(client, short_lease(), on_lost=calls.append)
    assert renewer.lost.wait(2.0)
    renewer.stop()
    assert calls == [renewer.lost_reason]
    assert renewer.lost_reason is not None and renewer.lost_reason.startswith("expired")
    assert not renewer.safe_to_commit()
    assert len(recorder.requests) == 1  # a definitive refusal is not asked again


def test_renewer_loses_the_lease_at_the_deadline_while_the_service_answers_503() -> None:
    calls: list[str] = []
    fake = FakeTime(until=600)
    client, _ = renewing(fake.answering(problem(503, "unavailable")))
    # TTL 36 s: a renew every 12 s, a retry every 4 s while failing, lost at 24 s of silence
    renewer = Renewer(
        client, short_lease(36.0), on_lost=calls.append, clock=fake.now, wait=fake.wait
    )
    assert renewer.lost.wait(5.0)
    renewer.stop()
    # retried before the deadline, but not in a busy loop; the thread stopped at the loss
    assert fake.renews == [1012.0, 1016.0, 1020.0]
    assert len(calls) == 1 and "renew-deadline" in calls[0]
    assert fake.t == 1024.0
    assert not renewer.safe_to_commit()


def test_renewer_survives_a_transient_failure_before_the_deadline() -> None:
    fake = FakeTime(until=45)
    client, _ = renewing(fake.answering(problem(503, "unavailable"), renewed(36.0)))
    renewer = Renewer(client, short_lease(36.0), clock=fake.now, wait=fake.wait)
    renewer.stop()
    # the retry 4 s after the failure succeeds; from it, a renew every 12 s again
    assert fake.renews == [1012.0, 1016.0, 1028.0, 1040.0]
    assert not renewer.lost.is_set() and renewer.renewals == 3


def test_safe_to_commit_is_judged_by_the_clock_not_only_by_the_thread() -> None:
    now = [100.0]
    client, _ = renewing(lambda: problem(503, "unavailable"))
    renewer = Renewer(client, short_lease(30.0), clock=lambda: now[0], start=False)
    assert renewer.safe_to_commit()
    now[0] += 21.0  # past the default deadline of 20 s, before any thread noticed
    assert not renewer.safe_to_commit()
    assert not renewer.lost.is_set()


def test_a_refusal_arriving_after_stop_is_not_reported_as_a_loss() -> None:
    """A renew in flight when the gate stops the renewer and releases is answered 410."""
    calls: list[str] = []
    answer_now = threading.Event()
    in_flight = threading.Event()

    def slow_expired() -> httpx.Response:
        in_flight.set()
        answer_now.wait(2.0)
        return problem(410, "expired")

    client, _ = renewing(slow_expired)
    renewer = Renewer(client, short_lease(), on_lost=calls.append)
    assert in_flight.wait(2.0)
    stopper = threading.Thread(target=renewer.stop)
    stopper.start()
    time.sleep(0.05)
    answer_now.set()
    stopper.join(2.0)
    assert calls == []
    assert not renewer.lost.is_set()


def test_client_against_the_service_maps_drain_and_refusals(lakelock_server: Any) -> None:
    job = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    table = "cat.db.client_it"
    commit = job.acquire_commit(table, holder="ingest:it", ttl_s=30)
    first = job.acquire_maintenance(table, holder="compactor:it", ttl_s=30)
    assert isinstance(first, Draining) and first.in_flight_commits == 1
    with pytest.raises(Locked) as caught:
        job.acquire_commit(table, holder="ingest:it", ttl_s=30)
    assert caught.value.extra["reason"] == "intent"
    job.release(commit)
    job.release(commit)  # idempotent
    maintenance = job.acquire_maintenance(
        table, holder="compactor:it", ttl_s=30, request_id=first.request_id
    )
    assert isinstance(maintenance, Lease) and maintenance.token is not None
    assert job.renew(maintenance).token == maintenance.token
    job.release(maintenance)
    with pytest.raises(LeaseExpired):
        job.renew(maintenance)
    job.close()


def test_a_compactor_that_gives_up_draining_withdraws_its_intent(lakelock_server: Any) -> None:
    from compactor.lease import DrainTimeout, acquire_maintenance

    table = "lake.db.gives_up"
    job = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    in_flight = job.acquire_commit(table, holder="ingest-slow", ttl_s=60)
    with pytest.raises(DrainTimeout):
        acquire_maintenance(
            job, table=table, holder="compactor-1", ttl_s=30, max_wait_s=0.5, request_id="run-9"
        )
    # ingest is not held by an intent nobody asks for any more
    assert job.acquire_commit(table, holder="ingest-next", ttl_s=30).holder == "ingest-next"
    trail = [e["event"] for e in job.events(table=table)]
    assert "intent.withdrawn" in trail and "intent.expired" not in trail
    job.release(in_flight)


# -- acquire until a deadline ------------------------------------------------------------------


class FakeWall:
    """A clock for acquire_until: each call takes `call_s`, each sleep moves time on."""

    def __init__(self, call_s: float = 0.0) -> None:
        self.t = 0.0
        self.call_s = call_s
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.t += seconds


def acquiring(fake: FakeWall, *answers: httpx.Response | Exception) -> tuple[LeaseClient, Recorder]:
    """A client whose acquires get `answers` in turn (each taking the fake call time), and
    whose intent withdrawals are answered `withdrawn: true`."""
    acquire = scripted(*answers)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(200, json={"table": TABLE, "request_id": "r", "withdrawn": True})
        fake.t += fake.call_s
        return acquire(request)

    return make_client(handler, retries=0)


def draining(in_flight: int = 1, retry_after_s: float = 2.0) -> httpx.Response:
    intent = {"holder": "compactor", "request_id": "run-1", "remaining_s": 5.0}
    body = {
        "status": "draining",
        "table": TABLE,
        "intent": intent,
        "in_flight_commits": in_flight,
        "retry_after_s": retry_after_s,
    }
    return httpx.Response(202, json=body)


def asks(recorder: Recorder) -> list[tuple[str, float]]:
    return [(b["request_id"], b["wait_s"]) for b in recorder.bodies() if "wait_s" in b]


def deletes(recorder: Recorder) -> list[str]:
    return [r.url.path for r in recorder.requests if r.method == "DELETE"]


def test_acquire_until_asks_at_once_then_long_polls_with_one_request_id() -> None:
    fake = FakeWall(call_s=3.0)
    locked = problem(423, "locked", reason="maintenance", retry_after_s=30)
    client, recorder = acquiring(fake, locked, locked, httpx.Response(201, json=lease_json()))
    waits: list[str] = []
    got = client.acquire_until(
        "commit",
        TABLE,
        holder="ingest:test",
        ttl_s=30,
        within_s=60,
        poll_s=10,
        request_id="batch-7",
        on_wait=lambda w: waits.append(w.reason),
        clock=fake.now,
        sleep=fake.sleep,
    )
    assert asks(recorder) == [("batch-7", 0.0), ("batch-7", 10.0), ("batch-7", 10.0)]
    assert waits == ["maintenance", "maintenance"]
    # the second ask was answered early (3 s of a 10 s poll): Retry-After spaces the next one
    assert fake.slept == [7.0]
    assert (got.lease.lease_id, got.waited_s, got.calls_s) == (lease_json()["lease_id"], 16.0, 9.0)


def test_acquire_until_gives_up_at_the_deadline_saying_what_held_it() -> None:
    fake = FakeWall(call_s=1.0)
    client, recorder = acquiring(fake, problem(423, "locked", reason="intent"))
    with pytest.raises(NotGranted) as caught:
        client.acquire_until(
            "commit", TABLE, holder="h", ttl_s=30, within_s=5, clock=fake.now, sleep=fake.sleep
        )
    assert caught.value.reasons == ("intent",)
    assert isinstance(caught.value.last, Locked)
    assert caught.value.waited_s >= 5 and len(recorder.requests) <= 6
    assert asks(recorder)[1][1] == 4.0  # the long poll never outlasts the deadline


def test_acquire_until_retries_a_failing_service_only_when_asked_to() -> None:
    fake = FakeWall()
    answers = (problem(503, "unavailable"), httpx.Response(201, json=lease_json()))
    client, _ = acquiring(fake, *answers)
    got = client.acquire_until(
        "commit",
        TABLE,
        holder="h",
        ttl_s=30,
        within_s=60,
        retry_unavailable=True,
        clock=fake.now,
        sleep=fake.sleep,
    )
    assert got.lease.kind == "commit" and len(fake.slept) == 1 and fake.slept[0] <= 0.5
    client, _ = acquiring(FakeWall(), *answers)
    with pytest.raises(Unavailable):
        client.acquire_until("commit", TABLE, holder="h", ttl_s=30, within_s=60)


@pytest.mark.parametrize(
    ("then", "withdrawn"),
    [
        (httpx.Response(201, json=lease_json(kind="maintenance", token=3)), False),
        (problem(409, "maintenance-held"), True),
        (draining(), True),  # until the deadline
    ],
)
def test_a_maintenance_request_that_ends_without_its_lease_withdraws_its_intent(
    then: httpx.Response, withdrawn: bool
) -> None:
    fake = FakeWall(call_s=1.0)
    client, recorder = acquiring(fake, draining(), then)
    try:
        client.acquire_until(
            "maintenance",
            TABLE,
            holder="compactor",
            ttl_s=60,
            within_s=30,
            request_id="run-1",
            clock=fake.now,
            sleep=fake.sleep,
        )
    except (MaintenanceHeld, NotGranted):
        assert withdrawn
    expected = [f"/v1/tables/{TABLE}/intents/run-1"] if withdrawn else []
    assert deletes(recorder) == expected


def test_no_intent_no_withdrawal() -> None:
    client, recorder = acquiring(FakeWall(), problem(423, "maintenance-off"))
    with pytest.raises(MaintenanceOff):
        client.acquire_until("maintenance", TABLE, holder="c", ttl_s=60, within_s=30)
    assert deletes(recorder) == []


def test_a_release_with_counts_posts_them_and_is_retried_like_any_release() -> None:
    granted = lease_json(kind="maintenance", token=7, holder="compactor")
    released = {"lease_id": granted["lease_id"], "state": "released", "lease": granted}
    client, recorder = make_client(
        scripted(problem(503, "unavailable"), httpx.Response(200, json=released))
    )
    client.release(Lease.model_validate(granted), compacted=["dt=2024-06-20"])
    assert [(r.method, r.url.path) for r in recorder.requests] == [
        ("POST", f"/v1/leases/{granted['lease_id']}/release")
    ] * 2
    assert recorder.bodies()[-1] == {
        "holder": "compactor",
        "token": 7,
        "compacted": ["dt=2024-06-20"],
    }
    commit = Lease.model_validate(lease_json())
    client.release(commit, written={"dt=2024-06-20/hr=13": (2, 1)})
    assert recorder.bodies()[-1] == {
        "holder": "ingest:test",
        "written": {"dt=2024-06-20/hr=13": {"data_files": 2, "delete_files": 1}},
    }


def test_due_long_polls_with_its_tables_and_answers_the_partitions() -> None:
    answer = {
        "due": [
            {
                "table": TABLE,
                "partition": "dt=2024-06-20",
                "data_files": 5,
                "delete_files": 1,
                "commits": 3,
                "due_s": 1.5,
                "added_later": True,
            }
        ],
        "waited_s": 0.2,
    }
    client, recorder = make_client(scripted(httpx.Response(200, json=answer)))
    found = client.due(["cat.db.*", TABLE], holder="compactor:1", wait_s=20, limit=5)
    assert [(d.table, d.partition, d.data_files, d.delete_files) for d in found] == [
        (TABLE, "dt=2024-06-20", 5, 1)
    ]
    params = recorder.requests[0].url.params
    assert params.get_list("table") == ["cat.db.*", TABLE]
    assert (params["holder"], params["wait_s"], params["limit"]) == ("compactor:1", "20", "5")
    assert recorder.requests[0].extensions["timeout"]["read"] >= 20  # outlasts the wait


def test_a_follower_compacts_what_the_stream_made_due(lakelock_server: Any) -> None:
    job = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    table = "cat.db.client_due"
    hot, cold = "dt=2024-06-20/hr=13", "dt=2024-06-20/hr=12"
    for _ in range(2):
        lease = job.acquire_commit(table, holder="ingest:it", ttl_s=30, partitions=[hot, cold])
        job.release(lease, written={hot: (2, 1), cold: (1, 0)})
    found = job.due([table], holder="compactor:it", wait_s=0)
    assert [(d.partition, d.data_files, d.delete_files, d.commits) for d in found] == [
        (hot, 4, 2, 2)
    ]
    held = job.acquire_maintenance(table, holder="compactor:it", ttl_s=30, partitions=[hot])
    assert isinstance(held, Lease)
    with pytest.raises(InvalidRequest):
        job.release(held, written={hot: (1, 0)})  # a maintenance lease writes no commit
    job.release(held, compacted=[hot])
    job.release(held, compacted=[hot])  # idempotent
    assert job.due([table], holder="compactor:it", wait_s=0) == []
    due = job.state(table)["due"]
    assert (due["partitions_counted"], due["compacted_last_hour"]) == (1, 1)
    job.close()


def test_a_stop_ends_the_retries_of_a_failing_call_and_their_pause() -> None:
    stop = threading.Event()

    def failing(request: httpx.Request) -> httpx.Response:
        stop.set()  # the caller stops while the service fails
        return problem(503, "unavailable")

    client, recorder = make_client(failing, backoff_s=30.0, max_backoff_s=30.0)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        client.due(["cat.db.*"], holder="compactor:1", wait_s=0, stop=stop)
    assert len(recorder.requests) == 1  # no retry once stopped, and no 30 s pause before it
    assert time.monotonic() - started < 30.0


def test_a_long_poll_for_due_partitions_ends_soon_after_its_stop(
    lakelock_server: Any, job_client: LeaseClient
) -> None:
    stop = threading.Event()
    answered: list[list[Any]] = []
    poll = threading.Thread(
        target=lambda: answered.append(
            job_client.due(["cat.db.*"], holder="compactor:1", wait_s=60, stop=stop)
        ),
        daemon=True,
    )
    started = time.monotonic()
    poll.start()
    with httpx.Client(base_url=lakelock_server.url, headers=auth("reader")) as api:
        wait_parked(api, 1)
    stop.set()
    poll.join(HANG_GUARD_S)
    # nothing was due; the poll asked in slices and ended at the first after the stop
    assert answered == [[]]
    assert time.monotonic() - started < 60.0


def test_a_stop_ends_a_wait_for_a_lease_and_withdraws_its_intent(job_client: LeaseClient) -> None:
    table = "cat.db.client_stop"
    commit = job_client.acquire_commit(table, holder="ingest:stop", ttl_s=60)
    stop, waiting = threading.Event(), threading.Event()
    ended: list[BaseException] = []

    def wait_for_maintenance() -> None:
        try:
            job_client.acquire_until(
                "maintenance",
                table,
                holder="compactor:stop",
                ttl_s=30,
                within_s=120,
                poll_s=10,
                on_wait=lambda waited: waiting.set(),
                stop=stop,
            )
        except BaseException as exc:
            ended.append(exc)

    started = time.monotonic()
    waiter = threading.Thread(target=wait_for_maintenance, daemon=True)
    waiter.start()
    assert waiting.wait(HANG_GUARD_S)  # draining: the commit lease is in flight
    stop.set()
    waiter.join(HANG_GUARD_S)
    assert [type(e) for e in ended] == [Stopped]
    assert time.monotonic() - started < 120.0
    # the drain's intent went with the wait: a new commit is granted, not held by it
    other = job_client.acquire_commit(table, holder="ingest:other", ttl_s=30)
    assert isinstance(other, Lease)
    job_client.release(other)
    job_client.release(commit)


def test_a_stop_during_the_last_ask_is_a_stop_not_a_deadline() -> None:
    """The gate's `proceed` commits without a lease after a deadline (NotGranted), never after
    a stop: a stop set while the last ask before the deadline ran ends as Stopped."""
    now = [0.0]
    stop = threading.Event()

    def ask(wait_s: float) -> Lease:
        now[0] += 5.0  # the ask outlasts the deadline
        stop.set()
        raise Locked("ingest is paused", reason="paused")

    with pytest.raises(Stopped):
        ask_until(
            ask,
            what="commit lease on cat.db.t",
            within_s=1.0,
            poll_s=10.0,
            retry_unavailable=True,
            on_wait=None,
            clock=lambda: now[0],
            sleep=lambda s: None,
            withdraw=lambda: None,
            stop=stop,
        )
