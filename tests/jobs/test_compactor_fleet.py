"""A compactor tick over many tables, its Spark and service sides replaced by fakes: what it
runs, how many at once, what it leaves to other compactors, and what it prints. The same
with Spark and a real service: tests/spark/test_fleet.py."""

from __future__ import annotations

import io
import logging
import threading
from datetime import UTC, datetime
from typing import ClassVar

import pytest

import compactor.fleet
from compactor.claim import Held
from compactor.config import CompactorConfig, FleetConfig, config_from_dict
from compactor.fleet import Fleet
from compactor.job import print_rank
from compactor.rank import Summary
from compactor.report import Outcome, RunReport
from tests.support.helpers import HANG_GUARD_S

NOW = datetime(2024, 6, 20, 14, 0, tzinfo=UTC)
MIB = 1 << 20


def _summary(table: str, snapshot_id: int, data_files: int, delete_files: int) -> Summary:
    files_bytes = (data_files + delete_files) * MIB  # small files: under 96 MiB each
    return Summary(table, snapshot_id, NOW, data_files, delete_files, 100, files_bytes, 2)


LAKE = {
    "lake.db.a": _summary("lake.db.a", 1, data_files=4, delete_files=0),  # healthy
    "lake.db.b": _summary("lake.db.b", 2, data_files=40, delete_files=3),  # score 44
    "lake.db.c": _summary("lake.db.c", 3, data_files=12, delete_files=1),  # 14
    "lake.db.d": _summary("lake.db.d", 4, data_files=20, delete_files=2),  # 23
    "lake.db.e": _summary("lake.db.e", 5, data_files=14, delete_files=9),  # 24
}
ORDER = ["lake.db.b", "lake.db.e", "lake.db.d", "lake.db.c"]


class FakeSpark:
    """What a tick asks of the session itself: its scheduler pool, per thread."""

    class sparkContext:
        @staticmethod
        def setLocalProperty(key: str, value: str | None) -> None:
            pass


class FakeClaim:
    def __init__(self, table: str) -> None:
        self.table = table
        self.released = False
        self.lease = f"the lease of the claim on {table}"  # what the run is given

    def check(self, step) -> None:
        pass

    def __enter__(self) -> FakeClaim:
        return self

    def __exit__(self, *exc) -> None:
        self.released = True


@pytest.fixture
def lake(monkeypatch):
    """The fleet's view of a catalog holding LAKE (no Spark), every claim granted, and runs
    that compact; `lake.runs` lists the tables run, `lake.claims` the claims taken."""

    class Lake:
        runs: ClassVar[list[str]] = []
        claims: ClassVar[list[FakeClaim]] = []

    def take(client, table, **_):
        claim = FakeClaim(table)
        Lake.claims.append(claim)
        return claim

    def run_table(spark, *, client, config, claim=None, **_):
        Lake.runs.append(config.name)
        # the table's claim goes with its run (a catalog front fences snapshot removal by it)
        assert claim == f"the lease of the claim on {config.name}"
        return RunReport(config.name, "r1", "h", outcome=Outcome.COMPACTED)

    monkeypatch.setattr(compactor.fleet, "spark_jobs", lambda spark: 0)
    monkeypatch.setattr(compactor.fleet, "candidates", lambda spark, pattern: sorted(LAKE))
    monkeypatch.setattr(compactor.fleet, "read_summary", lambda spark, table: LAKE[table])
    monkeypatch.setattr(compactor.fleet, "take", take)
    monkeypatch.setattr(compactor.fleet, "run_table", run_table)
    monkeypatch.setattr(compactor.fleet, "publish", lambda report, client: None)
    return Lake


def fleet(**fleet_values) -> Fleet:
    config = CompactorConfig(fleet=FleetConfig(**fleet_values))
    return Fleet(FakeSpark(), client=None, config=config, selection=["lake.db.*"], now=lambda: NOW)


def test_a_tick_runs_the_tables_with_debt_most_first_each_under_its_claim(lake):
    tick = fleet(max_concurrent=1).tick()

    assert (tick.tables, tick.healthy) == (5, 1)
    # most small files and delete files first; lake.db.a is healthy
    assert tick.queued == ORDER
    assert lake.runs == tick.queued
    assert [c.table for c in lake.claims] == tick.queued
    assert all(c.released for c in lake.claims)
    assert tick.outcomes == dict.fromkeys(tick.queued, "compacted")
    assert tick.exit_code == 0


def test_at_most_max_concurrent_runs_at_once_and_they_do_overlap(lake, monkeypatch):
    inside = 0
    most = 0
    guard = threading.Lock()
    both_in = threading.Barrier(2, timeout=HANG_GUARD_S)

    def run_table(spark, *, client, config, **_):
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        # the first two runs wait for each other: with one at a time this would time out
        if config.name in ORDER[:2]:
            both_in.wait()
        with guard:
            inside -= 1
        return RunReport(config.name, "r1", "h", outcome=Outcome.COMPACTED)

    monkeypatch.setattr(compactor.fleet, "run_table", run_table)
    tick = fleet(max_concurrent=2).tick()

    assert most == 2
    assert len(tick.outcomes) == 4


def test_a_table_claimed_elsewhere_is_left_to_its_holder_and_named(lake, monkeypatch, caplog):
    def take(client, table, **_):
        if table == "lake.db.d":
            return Held(table, "compactor@other:77", "claimed")
        return FakeClaim(table)

    monkeypatch.setattr(compactor.fleet, "take", take)
    with caplog.at_level(logging.INFO, logger="compactor.fleet"):
        tick = fleet().tick()

    assert tick.left_to_others == {"lake.db.d": "compactor@other:77"}
    assert "lake.db.d" not in lake.runs and len(lake.runs) == 3
    assert tick.exit_code == 0
    assert "lake.db.d: claimed by compactor@other:77: left to it" in caplog.text
    assert '"left_to_others": {"lake.db.d": "compactor@other:77"}' in caplog.text


def test_without_claims_every_table_runs_and_the_output_says_so(lake, caplog):
    the_fleet = fleet()
    the_fleet.claims = False
    with caplog.at_level(logging.INFO, logger="compactor.fleet"):
        tick = the_fleet.tick()

    assert lake.claims == [] and len(lake.runs) == 4 and tick.claims is False
    assert "claims are off" in caplog.text
    assert '"claims": false' in caplog.text


def test_a_table_whose_layers_break_a_floor_is_refused_and_the_rest_run(lake):
    config = config_from_dict(
        {
            "tables": [
                {"name": "lake.*.*", "remove_orphan_files": {"older_than": "1h"}},
                {"name": "lake.db.[bc]", "remove_orphan_files": {"enabled": True}},
            ]
        }
    )
    the_fleet = Fleet(FakeSpark(), client=None, config=config, now=lambda: NOW)

    tick = the_fleet.tick()

    assert set(tick.failed) == {"lake.db.b", "lake.db.c"}
    assert "below the floor of 24h" in tick.failed["lake.db.b"]
    assert sorted(lake.runs) == ["lake.db.d", "lake.db.e"]
    assert tick.exit_code == 2


def test_the_rank_command_prints_the_order_and_each_reason(lake):
    out = io.StringIO()
    config = CompactorConfig()

    status = print_rank(FakeSpark(), config=config, selection=["lake.db.*"], as_json=False, out=out)

    lines = out.getvalue().splitlines()
    assert status == 0
    assert [line.split(":")[0] for line in lines] == [*ORDER, "lake.db.a"]
    assert lines[0].startswith("lake.db.b: plan (score 44.0): 3 delete files; ~40 small files")
    assert lines[-1].startswith("lake.db.a: leave: no debt in its summary: 4 data files")
    assert lake.runs == [] and lake.claims == []
