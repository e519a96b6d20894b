"""The `lakelock` command against the service in-process, on SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from typer.testing import CliRunner

from service.client import Lease, LeaseClient
from service.ops import cli
from tests.conftest import auth
from tests.support.helpers import commit

TABLE = "lake.db.events"


@pytest.fixture
def lakelock(api, monkeypatch):
    """Run `lakelock ARGS...` against `api`; returns the click Result."""
    monkeypatch.setattr(cli, "client_factory", lambda url, token: LeaseClient(http=api, retries=0))
    runner = CliRunner()

    def run(*args: str, columns: int = 240):
        return runner.invoke(cli.app, list(args), env={"COLUMNS": str(columns)})

    return run


def _commit(api, holder: str = "ingest-1") -> Lease:
    return LeaseClient(http=api).acquire_commit(TABLE, holder=holder, ttl_s=60)


def test_status_lists_the_switch_and_live_leases(api, lakelock):
    lease = _commit(api)
    result = lakelock("status", TABLE)
    assert result.exit_code == 0, result.output
    assert "running" in result.stdout and "enabled" in result.stdout
    assert lease.lease_id in result.stdout and "ingest-1" in result.stdout
    assert "whole table" in result.stdout

    as_json = json.loads(lakelock("status", TABLE, "--json").stdout)
    assert [c["lease_id"] for c in as_json["commit_leases"]] == [lease.lease_id]
    assert as_json["last_run"] is None


def test_status_of_all_tables_shows_the_maintenance_holder_and_token(api, lakelock):
    held = LeaseClient(http=api).acquire_maintenance(TABLE, holder="compactor-7", ttl_s=60)
    result = lakelock("status")
    assert result.exit_code == 0, result.output
    assert "compactor-7" in result.stdout and held.lease_id in result.stdout
    tables = json.loads(lakelock("status", "--json").stdout)
    assert [t["table"] for t in tables] == [TABLE]
    assert cli.maintenance_leases(tables[0])[0]["token"] == held.token


def test_status_shows_the_claim_and_revoke_ends_it_by_prefix(api, lakelock):
    client = LeaseClient(http=api)
    held = client.claim(TABLE, holder="compactor-fleet-3", ttl_s=60)
    _commit(api)
    result = lakelock("status", TABLE, columns=80)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if held.lease_id in line)
    assert row.split()[0] == "claim"
    assert "compactor-fleet-3" in result.stdout
    assert [c["holder"] for c in json.loads(lakelock("status", "--json").stdout)[0]["claims"]] == [
        "compactor-fleet-3"
    ]
    revoked = lakelock("revoke", held.lease_id[:8], "--reason", "compactor host lost")
    assert revoked.exit_code == 0, revoked.output
    assert "claim" in revoked.stdout and "revoked" in revoked.stdout
    assert client.state(TABLE)["claims"] == []


def _debt(small: int, deletes: int) -> dict:
    return {
        "snapshot_id": 7,
        "data_files": 100,
        "small_files": small,
        "delete_files": deletes,
        "partitions_over_target": 2,
        "records": None,
    }


def test_status_ranks_tables_by_debt_in_80_columns(api, lakelock):
    client = LeaseClient(http=api)
    client.report_debt("lake.db.few_small_files", _debt(3, 0))
    client.report_debt("lake.db.many_deletes", _debt(1, 40))  # 41: deletes count as much
    client.report_debt("lake.db.many_small_files", _debt(30, 2))
    _commit(api)  # lake.db.events: no debt reported, last
    result = lakelock("status", columns=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    ranking = lines[: next(n for n, line in enumerate(lines) if "(version" in line)]
    ranked = [line.split()[0] for line in ranking if line.strip().startswith("lake.db.")]
    assert ranked == [
        "lake.db.many_deletes",
        "lake.db.many_small_files",
        "lake.db.few_small_files",
        "lake.db.events",
    ]
    top = next(line for line in ranking if line.strip().startswith("lake.db.many_deletes"))
    assert top.split()[1:] == ["1", "40", "2", "100"]  # small, delete, over target, data files
    # each table's own view follows in the same order, with its debt
    views = [line.split()[0] for line in lines if "(version" in line]
    assert views == ranked
    assert "1 small files, 40 delete files, 2 partitions over target" in result.stdout
    as_json = json.loads(lakelock("status", "--json").stdout)
    assert [t["table"] for t in as_json] == ranked


def test_pause_and_resume_set_the_switch_with_the_reason(api, lakelock):
    result = lakelock("pause", TABLE, "--reason", "backfill, INC-123")
    assert result.exit_code == 0, result.output
    assert "ingest paused" in result.stdout
    state = api.get(f"/v1/tables/{TABLE}").json()
    assert state["switch"]["ingest"] == "paused"
    assert state["switch"]["reason"] == "backfill, INC-123"

    assert lakelock("resume", TABLE, "--reason", "done").exit_code == 0
    assert api.get(f"/v1/tables/{TABLE}").json()["switch"]["ingest"] == "running"


def test_maintenance_disable_and_enable(api, lakelock):
    assert lakelock("maintenance", "disable", TABLE, "--reason", "quarter close").exit_code == 0
    assert api.get(f"/v1/tables/{TABLE}").json()["switch"]["maintenance"] == "disabled"
    result = lakelock("maintenance", "enable", TABLE, "--reason", "closed", "--json")
    assert json.loads(result.stdout)["switch"]["maintenance"] == "enabled"


def test_revoke_ends_the_lease(api, lakelock):
    lease = _commit(api)
    result = lakelock("revoke", lease.lease_id, "--reason", "host lost")
    assert result.exit_code == 0, result.output
    assert "revoked" in result.stdout
    assert api.get(f"/v1/tables/{TABLE}").json()["commit_leases"] == []


def test_a_refusal_is_one_line_with_the_services_detail_and_exit_1(api, lakelock):
    result = lakelock("revoke", "00000000-0000-0000-0000-000000000000", "--reason", "x")
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lakelock: ")
    assert "Traceback" not in result.output


def test_a_reader_token_may_look_but_not_pause(api, lakelock, monkeypatch):
    api.headers.update(auth("reader"))
    assert lakelock("status").exit_code == 0
    result = lakelock("pause", TABLE, "--reason", "x")
    assert result.exit_code == 1
    assert "operator role" in result.stderr


def test_events_show_the_trail_oldest_first(api, lakelock):
    lease = _commit(api)
    LeaseClient(http=api).revoke(lease.lease_id, reason="host lost")
    result = lakelock("events", "--table", TABLE, "--json")
    assert result.exit_code == 0, result.output
    assert [e["event"] for e in json.loads(result.stdout)] == ["lease.acquired", "lease.revoked"]
    text = lakelock("events", "--table", TABLE).stdout
    assert text.index("lease.acquired") < text.index("lease.revoked")
    assert "host lost" in text


def test_runs_show_files_before_and_after(api, lakelock):
    assert commit(api).status_code == 201  # the table is known once it had a lease
    LeaseClient(http=api).report_run(
        TABLE,
        {
            "outcome": "compacted",
            "holder": "compactor-7",
            "before": {"data_files": 40},
            "after": {"data_files": 3},
        },
    )
    result = lakelock("runs", TABLE)
    assert result.exit_code == 0, result.output
    assert "compacted" in result.stdout and "40 -> 3" in result.stdout
    last = json.loads(lakelock("status", TABLE, "--json").stdout)["last_run"]
    assert last["outcome"] == "compacted"


def test_status_reads_scoped_leases_and_intents_when_present():
    state = {
        "table": TABLE,
        "version": 3,
        "switch": {"ingest": "running", "maintenance": "enabled"},
        "maintenance_lease": None,
        "maintenance_leases": [
            {
                "kind": "maintenance",
                "lease_id": "m1",
                "holder": "c",
                "token": 4,
                "partitions": ["dt=2024-06-20/hr=13"],
                "remaining_s": 9.0,
                "held_s": 1.0,
            }
        ],
        "intent": None,
        "intents": [{"holder": "c2", "partitions": None, "remaining_s": 5, "open_s": 1}],
        "commit_leases": [],
        "next_token": 5,
    }
    from rich.console import Console

    console = Console(width=200, record=True)
    for part in cli._state_tables(state, None):
        console.print(part)
    text = console.export_text()
    assert "dt=2024-06-20/hr=13" in text and "m1" in text
    assert "c2" in text and "whole table" in text


def test_events_follow_prints_new_events_as_they_come(api, lakelock, monkeypatch):
    lease = _commit(api)
    polls = []

    def between_polls(_seconds: float) -> None:
        polls.append(_seconds)
        if len(polls) == 1:
            LeaseClient(http=api).revoke(lease.lease_id, reason="host lost")
        else:
            raise KeyboardInterrupt  # the operator's Ctrl-C

    monkeypatch.setattr(cli, "_between_polls", between_polls)
    result = lakelock("events", "--follow", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in lines] == ["lease.acquired", "lease.revoked"]


# -- an 80-column terminal, a pipe, and short lease ids ------------------------------------------

LONG_HOLDERS = (
    "compactor@ip-10-0-3-17.eu-west-1.compute.internal:4242/ab12cd34ef56",
    "ingest@worker-3.example:4242",
    "ingest@worker-4.example:4343",
)


def _leases_with_long_holders(api) -> list[str]:
    client = LeaseClient(http=api)
    maintenance_table = "lake.db.other"
    ids = [client.acquire_maintenance(maintenance_table, holder=LONG_HOLDERS[0], ttl_s=60).lease_id]
    for holder in LONG_HOLDERS[1:]:
        ids.append(client.acquire_commit(TABLE, holder=holder, ttl_s=60).lease_id)
    return ids


def _whole_on_a_line(text: str, values) -> list[str]:
    """The values that do not appear unbroken on some line of `text`."""
    lines = text.splitlines()
    return [v for v in values if not any(v in line for line in lines)]


@pytest.mark.parametrize("command", [["status"], ["events"]], ids=["status", "events"])
def test_at_80_columns_lease_ids_and_holders_stay_whole_on_one_line(api, lakelock, command):
    ids = _leases_with_long_holders(api)
    result = lakelock(*command, columns=80)
    assert result.exit_code == 0, result.output
    assert _whole_on_a_line(result.stdout, [*ids, *LONG_HOLDERS]) == []
    assert max(len(line.rstrip()) for line in result.stdout.splitlines()) <= 80


def test_status_piped_without_columns_keeps_ids_whole(lakelock_server):
    """A real `lakelock` process writing into a pipe, as `lakelock status | less` would."""
    client = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    with client:
        lease = client.acquire_commit(TABLE, holder=LONG_HOLDERS[1], ttl_s=60)
    env = {
        "PATH": "/usr/bin:/bin",
        "LAKELOCK_URL": lakelock_server.url,
        "LAKELOCK_TOKEN": lakelock_server.token("reader"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "service.ops.cli", "status", TABLE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert _whole_on_a_line(done.stdout, [lease.lease_id, LONG_HOLDERS[1]]) == []


def test_revoke_takes_a_unique_prefix_of_the_lease_id(api, lakelock):
    lease = _commit(api)
    result = lakelock("revoke", lease.lease_id[:8], "--reason", "host lost", columns=80)
    assert result.exit_code == 0, result.output
    assert lease.lease_id in result.stdout and "revoked" in result.stdout
    assert api.get(f"/v1/tables/{TABLE}").json()["commit_leases"] == []


def test_an_ambiguous_prefix_is_one_line_listing_the_matches(api, lakelock, monkeypatch):
    # lease ids that share their first 15 characters
    numbers = iter(range(1, 1000))
    monkeypatch.setattr(
        uuid, "uuid4", lambda: uuid.UUID(f"21001664-112e-4000-8000-{next(numbers):012x}")
    )
    first, second = _commit(api, "ingest-1"), _commit(api, "ingest-2")
    assert first.lease_id[:15] == second.lease_id[:15]
    result = lakelock("revoke", first.lease_id[:12], "--reason", "x", columns=80)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ambiguous" in lines[0]
    assert first.lease_id in lines[0] and second.lease_id in lines[0]
    assert len(api.get(f"/v1/tables/{TABLE}").json()["commit_leases"]) == 2  # nothing revoked


@pytest.mark.parametrize(
    ("prefix", "code", "says"),
    [("2100166", 2, "at least 8"), ("ffffffff", 1, "no live lease")],
    ids=["too-short", "no-match"],
)
def test_a_prefix_too_short_or_matching_nothing_is_refused(api, lakelock, prefix, code, says):
    _commit(api)
    result = lakelock("revoke", prefix, "--reason", "x")
    assert result.exit_code == code
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_status_shows_the_ingest_lag_and_each_reader_of_a_table(api, lakelock):
    client = LeaseClient(http=api)
    client.report_ingest_lag(TABLE, query_id="q", batch_id=4, partitions={"t:0": 7, "t:1": 5})
    client.hold_reader(TABLE, "summary@h1", snapshot_id=3051729675574597004, ttl_s=60)
    result = lakelock("status", TABLE, columns=120)
    assert result.exit_code == 0, result.output
    assert "12 records behind (t:0 7, t:1 5), after batch 4" in result.stdout
    assert "summary@h1 at snapshot 3051729675574597004" in result.stdout


def test_status_shows_the_due_partitions_and_how_soon_compaction_followed(api, lakelock, db_url):
    from tests.lock.due_rows import due_since, forget_counts

    forget_counts(db_url)
    client = LeaseClient(http=api)
    hot, cold = "dt=2024-06-20/hr=13", "dt=2024-06-20/hr=12"
    lease = client.acquire_commit(TABLE, holder="ingest-1", ttl_s=30, partitions=[hot, cold])
    client.release(lease, written={hot: (4, 0), cold: (1, 2)})
    due_since(db_url, hot, 20)
    held = client.acquire_maintenance(TABLE, holder="compactor-1", ttl_s=60, partitions=[hot])
    assert isinstance(held, Lease)
    client.release(held, compacted=[hot])
    client.due([TABLE], holder="compactor-1", wait_s=0)
    result = lakelock("status", TABLE, columns=240)
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "0 partitions due, 1 data and 2 delete files counted in 1 partitions" in said
    assert "over the last hour (1 compacted); 1 followers (0 waiting)" in said
    p95 = json.loads(lakelock("status", TABLE, "--json").stdout)["due"]["due_to_compacted_p95_s"]
    assert p95 >= 20
    forget_counts(db_url)
