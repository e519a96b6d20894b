"""The `lakelock` command against the service in-process, on SQLite and MariaDB."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from service import cli
from service.client import Lease, LeaseClient
from tests.conftest import auth
from tests.helpers import commit

TABLE = "lake.db.events"


@pytest.fixture
def lakelock(api, monkeypatch):
    """Run `lakelock ARGS...` against `api`; returns the click Result."""
    monkeypatch.setattr(cli, "client_factory", lambda url, token: LeaseClient(http=api, retries=0))
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(cli.app, list(args), env={"COLUMNS": "240"})

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
