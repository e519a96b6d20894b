"""Every command shows what it found through `service.ops.output.Output`, console or --json."""

from __future__ import annotations

import inspect
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from service.client import LeaseClient
from service.ops import cli, iceberg_audit
from service.ops.output import ConsoleOutput, JsonOutput, Output, output

TABLE = "lake.db.events"


def _shown() -> set[str]:
    return {name for name, _ in inspect.getmembers(Output, inspect.isfunction)}


@pytest.mark.parametrize("kind", [ConsoleOutput, JsonOutput], ids=lambda k: k.__name__)
def test_each_output_shows_every_kind_of_thing(kind):
    assert not inspect.isabstract(kind)
    assert Output.__abstractmethods__ == _shown()
    for name in _shown():
        mine, declared = getattr(kind, name), getattr(Output, name)
        assert mine is not declared, f"{kind.__name__}.{name} is not its own"
        assert inspect.signature(mine) == inspect.signature(declared), name


def test_json_picks_the_output():
    assert isinstance(output(True), JsonOutput)
    assert isinstance(output(False), ConsoleOutput)


def recorder(calls: list[str]) -> Output:
    """An Output that writes nothing and notes which of its methods a command called."""

    def noting(name: str):
        return lambda self, *args, **kwargs: calls.append(name)

    return type("Recorder", (Output,), {name: noting(name) for name in _shown()})()


@pytest.fixture
def lakelock(api, monkeypatch):
    """Run `lakelock ARGS...`; returns the result and the Output methods called, with --json."""
    monkeypatch.setattr(cli, "client_factory", lambda url, token: LeaseClient(http=api, retries=0))
    monkeypatch.setattr(iceberg_audit, "read_snapshots", lambda location: [])
    picked: list[tuple[bool, list[str]]] = []

    def recorded(as_json: bool) -> Output:
        picked.append((as_json, []))
        return recorder(picked[-1][1])

    monkeypatch.setattr(cli, "output", recorded)

    def run(*args: str):
        result = CliRunner().invoke(cli.app, list(args))
        assert result.exit_code == 0, result.output
        return result, picked.pop() if picked else None

    return run


SHOWN = [
    (["status", TABLE], ["table_state"]),
    (["status"], ["tables"]),
    (["pause", TABLE, "--reason", "r"], ["switch"]),
    (["resume", TABLE, "--reason", "r"], ["switch"]),
    (["maintenance", "disable", TABLE, "--reason", "r"], ["switch"]),
    (["maintenance", "enable", TABLE, "--reason", "r"], ["switch"]),
    (["revoke", "LEASE", "--reason", "r"], ["revoked"]),
    (["events", "--table", TABLE], ["events"]),
    (["runs", TABLE], ["runs"]),
    (["audit", TABLE, "--metadata", "v1.metadata.json"], ["audit"]),
]


@pytest.mark.parametrize(("args", "shown"), SHOWN, ids=[" ".join(a[:2]) for a, _ in SHOWN])
@pytest.mark.parametrize("as_json", [False, True], ids=["console", "json"])
def test_each_command_prints_only_through_its_output(api, lakelock, args, shown, as_json):
    lease = LeaseClient(http=api).acquire_commit(TABLE, holder="ingest-1", ttl_s=60)
    args = [lease.lease_id if a == "LEASE" else a for a in args]
    result, picked = lakelock(*args, *(["--json"] if as_json else []))
    assert picked == (as_json, shown)
    assert result.stdout == ""


def test_events_followed_come_as_a_stream(api, lakelock, monkeypatch):
    LeaseClient(http=api).acquire_commit(TABLE, holder="ingest-1", ttl_s=60)

    def between_polls(_seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_between_polls", between_polls)
    _, picked = lakelock("events", "--follow", "--json")
    assert picked == (True, ["event_stream"])


def test_the_console_shows_the_state_json_gives_with_its_last_run(capsys):
    state = {
        "table": TABLE,
        "version": 1,
        "switch": {"ingest": "running", "maintenance": "enabled"},
        "commit_leases": [],
        "next_token": 1,
        "last_run": {"outcome": "compacted", "reported_at": "t0", "holder": "compactor-7"},
    }
    JsonOutput().table_state(state)
    assert json.loads(capsys.readouterr().out) == state
    console = Console(width=120, record=True)
    ConsoleOutput(console).table_state(state)
    text = console.export_text()
    assert "compacted at t0 (holder compactor-7)" in text and "live leases: none" in text


def test_every_command_is_checked_above():
    def named(typer_app, prefix: str = "") -> set[str]:
        return {
            prefix + (c.name or c.callback.__name__.replace("_", "-"))
            for c in typer_app.registered_commands
        }

    commands = named(cli.app) | named(cli.maintenance_app, "maintenance ")
    checked = {" ".join(a[:2]) if a[0] == "maintenance" else a[0] for a, _ in SHOWN}
    assert commands == checked
