"""The follower's loop against a stand-in service (no Spark): what it compacts first, how it
leaves a table another compactor holds, that it never asks in a loop, that a stop ends it
while a long-poll waits; and the command line of `run --follow`."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from compactor import follow as follow_module
from compactor.config import CompactorConfig, FleetConfig
from compactor.fleet import Fleet
from compactor.follow import Follower
from compactor.job import parse_args
from compactor.report import Outcome, RunReport
from service.client import Lease
from service.wire import DuePartition
from service.wire.errors import ClaimHeld, Unavailable
from tests.support.helpers import HANG_GUARD_S


def Due(table: str, partition: str, data_files: int, delete_files: int) -> DuePartition:
    """A due partition as the service answers it."""
    return DuePartition(
        table=table,
        partition=partition,
        data_files=data_files,
        delete_files=delete_files,
        due_s=0.0,
    )


class Service:
    """Answers the follower's long-polls from a script: each `due` call takes the next answer,
    or, with none left, parks until `stop` (as the service parks a poll with nothing due)."""

    def __init__(self, *answers: list[Due], held: dict[str, str] | None = None) -> None:
        self.answers = list(answers)
        self.held = dict(held or {})
        self.asks: list[dict[str, Any]] = []
        # what is due now, as the follower's ask once it claimed a table sees it: the last
        # answer, less the tables another follower compacted meanwhile
        self.now: list[Due] = []
        self.gone: set[str] = set()
        self.rechecks: list[list[str]] = []
        self.claims: list[str] = []
        self.released: list[str] = []
        self.parked = threading.Event()
        self.stop = threading.Event()

    def due(
        self,
        tables: list[str],
        *,
        holder: str,
        wait_s: float,
        limit: int,
        stop: threading.Event | None = None,
    ) -> list[Due]:
        if wait_s == 0:
            self.rechecks.append(tables)
            return [d for d in self.now if d.table in tables and d.table not in self.gone]
        self.asks.append({"tables": tables, "holder": holder, "wait_s": wait_s, "limit": limit})
        if self.answers:
            self.now = self.answers.pop(0)
            return self.now
        self.parked.set()
        # the client's contract: a stop ends the poll (within STOP_SLICE_S), with nothing
        ends = time.monotonic() + HANG_GUARD_S
        while not (self.stop.is_set() or (stop is not None and stop.is_set())):
            if time.monotonic() > ends:
                break
            time.sleep(0.05)
        return []

    def claim(self, table: str, *, holder: str, ttl_s: float, request_id: str) -> Lease:
        if table in self.held:
            raise ClaimHeld(f"{table} is claimed", holder=self.held[table])
        self.claims.append(table)
        return Lease(
            lease_id=f"claim-{len(self.claims)}",
            table=table,
            kind="claim",
            holder=holder,
            request_id=request_id,
            token=None,
            ttl_s=ttl_s,
            remaining_s=ttl_s,
        )

    def renew(self, lease: Lease, **_: Any) -> Lease:
        return lease

    def release(self, lease: Lease, **_: Any) -> None:
        self.released.append(lease.table)

    def report_run(self, table: str, report: dict[str, Any]) -> int:
        return 1


@pytest.fixture
def runs(monkeypatch) -> list[tuple[str, dict[str, tuple[int, int]]]]:
    """follow_table replaced: each call recorded, every run compacting its partitions."""
    calls: list[tuple[str, dict[str, tuple[int, int]]]] = []

    def follow_table(session: Any, *, config: Any, due: Any, holder: str, **_: Any) -> RunReport:
        calls.append((config.name, dict(due)))
        return RunReport(
            table=config.name,
            run_uid="r",
            holder=f"{holder}/r",
            outcome=Outcome.COMPACTED,
            compacted=sorted(due),
        )

    monkeypatch.setattr(follow_module, "follow_table", follow_table)
    return calls


def follower(service: Service, **values: Any) -> Follower:
    config = CompactorConfig(fleet=FleetConfig(scheduler="fifo", max_concurrent=1))
    fleet = Fleet(
        None,  # type: ignore[arg-type]  # the runs are replaced: no Spark here
        client=service,  # type: ignore[arg-type]
        config=config,
        selection=["local.db.*"],
        holder="compactor@test:1",
    )
    values.setdefault("every_s", None)
    return Follower(fleet, session=object(), **values)  # type: ignore[arg-type]


def test_a_round_compacts_the_due_partitions_of_each_table_most_debt_first(runs):
    service = Service(
        [
            Due("local.db.a", "dt=2024-06-20/hr=13", 4, 0),
            Due("local.db.b", "dt=2024-06-20/hr=13", 5, 4),
            Due("local.db.a", "dt=2024-06-20/hr=14", 0, 4),
        ]
    )
    f = follower(service, poll_s=7)

    reports = f.round(threading.Event())

    assert [table for table, _ in runs] == ["local.db.b", "local.db.a"]
    assert runs[1][1] == {"dt=2024-06-20/hr=13": (4, 0, 0), "dt=2024-06-20/hr=14": (0, 4, 0)}
    assert [r.outcome for r in reports] == [Outcome.COMPACTED, Outcome.COMPACTED]
    # each table under its claim, released after its run
    assert service.claims == service.released == ["local.db.b", "local.db.a"]
    # the long-poll named the selection, as the fleet's holder, with its wait
    assert service.asks == [
        {"tables": ["local.db.*"], "holder": "compactor@test:1", "wait_s": 7, "limit": 100}
    ]
    assert f.stats.compacted == 3 and f.stats.woken == 1


def test_a_table_another_follower_compacted_meanwhile_is_not_rewritten(runs):
    service = Service(
        [Due("local.db.a", "dt=2024-06-20/hr=13", 4, 0), Due("local.db.b", "dt=2024-06-20", 6, 0)]
    )
    f = follower(service)
    # by the time the table is claimed, another follower has compacted it: not due any more
    service.gone = {"local.db.a"}

    f.round(threading.Event())

    assert [table for table, _ in runs] == ["local.db.b"]
    assert service.rechecks == [["local.db.b"], ["local.db.a"]]
    assert service.claims == service.released == ["local.db.b", "local.db.a"]
    assert f.stats.settled == 1


def test_a_table_claimed_elsewhere_is_left_and_not_asked_for_again_at_once(runs):
    due = [Due("local.db.a", "dt=2024-06-20/hr=13", 4, 0)]
    # the service answers the same due partition again and again, as it would while the
    # table's holder has not compacted it yet
    service = Service(*([due] * 50), held={"local.db.a": "compactor@other:2"})
    f = follower(service, max_cool_s=60)
    stop = threading.Event()

    started = time.monotonic()
    f.round(stop)  # claimed elsewhere: cools down for 1 s
    f.round(stop)  # asks, finds it cooling: waits for it instead of asking at once
    waited = time.monotonic() - started

    assert runs == [] and service.claims == []
    assert f.stats.left_to_others == 1
    assert len(service.asks) == 2
    assert waited >= 0.9


def test_no_busy_loop_while_every_due_table_cools_down(runs):
    due = [Due("local.db.a", "dt=2024-06-20/hr=13", 4, 0)]
    service = Service(*([due] * 1000), held={"local.db.a": "compactor@other:2"})
    f = follower(service, max_cool_s=60)
    stop = threading.Event()
    timer = threading.Timer(2.0, stop.set)
    timer.start()
    try:
        f.run(stop)
    finally:
        timer.cancel()
    # 2 s of a table left to another compactor: cool-downs of 1 s then 2 s, a few asks
    assert len(service.asks) <= 4, len(service.asks)


def test_a_stop_ends_the_follower_while_its_long_poll_waits(runs):
    service = Service()  # nothing due: the poll parks
    f = follower(service, poll_s=60)
    stop = threading.Event()
    done = threading.Event()

    def follow() -> None:
        f.run(stop)
        done.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert service.parked.wait(HANG_GUARD_S)
    stop.set()
    try:
        assert done.wait(2.0), "the follower did not stop while its long-poll waited"
    finally:
        service.stop.set()
    assert runs == []


class FailingService(Service):
    """A service that fails every poll past the client's retries (the stop set with the
    `stop_with` failure, as a stop ends the client's retries)."""

    def __init__(self, stop_with: int | None = None) -> None:
        super().__init__()
        self.stop_with = stop_with
        self.failed = 0

    def due(self, tables: list[str], **asked: Any) -> list[Due]:  # type: ignore[override]
        self.failed += 1
        if self.failed == self.stop_with:
            asked["stop"].set()
        raise Unavailable("the service is down")


class CountedStop(threading.Event):
    """A stop whose waits are counted, and end at once: a round's pause, without the time."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


def test_a_failing_service_is_asked_again_after_a_poll_not_in_a_loop(runs):
    service = FailingService()
    f = follower(service, poll_s=30)
    stop = CountedStop()
    for _ in range(3):
        assert f.round(stop) == []
    # each failed round waited the poll an idle service would have held it for
    assert stop.waits == [30, 30, 30] and service.failed == 3
    assert f.stats.poll_failures == 3 and f.stats.polls == 0


def test_a_stop_that_ends_the_clients_retries_is_not_a_failure(runs):
    service = FailingService(stop_with=1)
    f = follower(service, poll_s=30)
    stop = CountedStop()
    assert f.round(stop) == []
    assert stop.waits == [] and f.stats.poll_failures == 0


def test_a_follower_needs_the_service_and_a_poll_the_service_takes():
    config = CompactorConfig()
    fleet = Fleet(None, client=None, config=config, selection=["local.db.*"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs the service"):
        Follower(fleet, session=object())  # type: ignore[arg-type]
    fleet.client = Service()  # type: ignore[assignment]
    for poll in (0, 61):
        with pytest.raises(ValueError, match="poll_s"):
            Follower(fleet, poll_s=poll, session=object())  # type: ignore[arg-type]


# -- the command line ------------------------------------------------------------------------


def test_run_follow_takes_every_as_the_full_plans_grid_and_a_poll():
    args = parse_args(["run", "--table", "local.db.*", "--follow", "--every", "2m", "--poll", "5"])
    assert args.follow and args.every == "2m" and args.poll == 5.0
    assert parse_args(["run", "--table", "local.db.t", "--follow"]).poll is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--follow", "--once"], "--follow runs until stopped"),
        (["--follow", "--every", "5m", "--ticks", "2"], "--ticks N"),
        (["--every", "5m", "--poll", "5"], "--poll goes with --follow"),
        (["--follow", "--poll", "0"], "--poll must be"),
        (["--follow", "--poll", "61"], "--poll must be"),
        (["--follow", "--no-claim"], "--no-claim is for one-off runs"),
    ],
)
def test_run_follow_refuses_arguments_that_do_not_go_with_it(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["run", "--table", "local.db.t", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_follow_defaults_to_a_five_minute_full_plan():
    from compactor.job import FOLLOW_EVERY

    assert timedelta(minutes=5) == FOLLOW_EVERY
