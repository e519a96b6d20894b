"""`lakelock`: the operators' command, beside curl (see README, "Operating it").

    lakelock status [TABLE] [--json]
    lakelock pause TABLE --reason "backfill, INC-123"     lakelock resume TABLE --reason ...
    lakelock maintenance disable TABLE --reason ...       lakelock maintenance enable TABLE ...
    lakelock revoke LEASE_ID --reason "compactor host lost"
    lakelock events [--table T] [--follow]                lakelock runs TABLE
    lakelock audit TABLE --warehouse var/warehouse        # exit 1 when a commit broke the rules

Reads the service's address from LAKELOCK_URL and the bearer token from LAKELOCK_TOKEN (or
--url / --token). A refusal is one line on stderr, the service's `detail`, and exit status 1;
a usage mistake exits 2. Every command but `audit` talks to the service through
`service.client.LeaseClient` only.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from service.client import DEFAULT_URL, LeaseClient
from service.errors import LakelockError, OutcomeUnknown

__all__ = ["app", "main", "client_factory"]

app = typer.Typer(
    help="Operate lakelock: see and steer the leases on Iceberg tables.",
    no_args_is_help=True,
    add_completion=False,
    # a traceback's locals would print the bearer token
    pretty_exceptions_show_locals=False,
)
maintenance_app = typer.Typer(help="Allow or forbid maintenance (compaction) on a table.")
app.add_typer(maintenance_app, name="maintenance")


def _new_client(url: str, token: str | None) -> LeaseClient:
    # an operator at a terminal wants the answer (or the failure) at once, and may run it again
    return LeaseClient(url, token=token, retries=0)


client_factory: Callable[[str, str | None], LeaseClient] = _new_client
"""How commands get their client; tests swap in one over the app in-process."""


class _Options:
    url: str = DEFAULT_URL
    token: str | None = None


_options = _Options()


@app.callback()
def _global(
    url: Annotated[
        str, typer.Option(envvar="LAKELOCK_URL", help="The lakelock service.")
    ] = DEFAULT_URL,
    token: Annotated[
        str | None,
        typer.Option(envvar="LAKELOCK_TOKEN", help="Bearer token.", show_default=False),
    ] = None,
) -> None:
    _options.url, _options.token = url, token


def _fail(message: str, code: int = 1) -> typer.Exit:
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"lakelock: {message}", markup=False
    )
    return typer.Exit(code)


@contextmanager
def _client() -> Iterator[LeaseClient]:
    """The client, and refusals turned into one line and exit status 1."""
    try:
        with client_factory(_options.url, _options.token) as client:
            yield client
    except OutcomeUnknown as exc:
        if isinstance(exc.__cause__, httpx.ConnectError | httpx.ConnectTimeout):
            raise _fail(
                f"cannot reach the lakelock service at {_options.url} ({exc.__cause__}); "
                "check LAKELOCK_URL and that the service runs"
            ) from None
        raise _fail(
            f"no answer from {_options.url} in time; a change may have taken effect: "
            "check with `lakelock status` before repeating it"
        ) from None
    except LakelockError as exc:
        raise _fail(exc.detail or exc.title) from None


def _console() -> Console:
    return Console(highlight=False)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _seconds(value: Any) -> str:
    return "" if value is None else f"{float(value):.1f}s"


def _scope(item: dict[str, Any]) -> str:
    partitions = item.get("partitions")
    return "whole table" if partitions is None else ", ".join(partitions) or "(none)"


def maintenance_leases(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The live maintenance leases of a table state, with or without partition scopes."""
    if state.get("maintenance_leases") is not None:
        return list(state["maintenance_leases"])
    return [state["maintenance_lease"]] if state.get("maintenance_lease") else []


def intents(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The open intents of a table state, with or without partition scopes."""
    if state.get("intents") is not None:
        return list(state["intents"])
    return [state["intent"]] if state.get("intent") else []


def _state_tables(state: dict[str, Any], last_run: dict[str, Any] | None) -> list[Table]:
    switch = state.get("switch") or {}
    head = Table(title=f"{state['table']}  (version {state.get('version')})", show_header=False)
    head.add_column("what", style="bold")
    head.add_column("value", overflow="fold")
    head.add_row("ingest", str(switch.get("ingest")))
    head.add_row("maintenance", str(switch.get("maintenance")))
    if switch.get("reason"):
        head.add_row("switch reason", f"{switch['reason']} (by {switch.get('by')})")
    head.add_row("next token", str(state.get("next_token")))
    if last_run:
        head.add_row(
            "last run",
            f"{last_run.get('outcome')} at {last_run.get('reported_at')} "
            f"(holder {last_run.get('holder')})",
        )
    leases = Table(title="live leases")
    for column in ("kind", "lease id", "holder", "token", "scope", "time left", "held"):
        leases.add_column(column, overflow="fold")
    for lease in maintenance_leases(state) + list(state.get("commit_leases") or []):
        leases.add_row(
            lease.get("kind"),
            lease.get("lease_id"),
            lease.get("holder"),
            "" if lease.get("token") is None else str(lease["token"]),
            _scope(lease),
            _seconds(lease.get("remaining_s")),
            _seconds(lease.get("held_s")),
        )
    out = [head, leases]
    open_intents = intents(state)
    if open_intents:
        table = Table(title="intents (commit leases held back while these drain)")
        for column in ("holder", "scope", "open", "expires in"):
            table.add_column(column, overflow="fold")
        for intent in open_intents:
            table.add_row(
                intent.get("holder"),
                _scope(intent),
                _seconds(intent.get("open_s")),
                _seconds(intent.get("remaining_s")),
            )
        out.append(table)
    return out


@app.command()
def status(
    table: Annotated[
        str | None, typer.Argument(help="One table; all known tables if left out.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """The switch, live leases, intents and last run of one table, or of every table."""
    with _client() as client:
        states = [client.state(table)] if table else client.tables()
        last_runs = {s["table"]: next(iter(client.runs(s["table"], limit=1)), None) for s in states}
    if as_json:
        data = [{**s, "last_run": last_runs[s["table"]]} for s in states]
        _print_json(data[0] if table else data)
        return
    console = _console()
    if not states:
        console.print("no tables yet: a table appears at its first lease or switch")
    for state in states:
        for part in _state_tables(state, last_runs[state["table"]]):
            console.print(part)


def _switch(table: str, reason: str, as_json: bool, **switch: str) -> None:
    with _client() as client:
        state = client.set_switch(table, reason=reason, **switch)
    if as_json:
        _print_json(state)
        return
    s = state.get("switch") or {}
    _console().print(
        f"{table}: ingest {s.get('ingest')}, maintenance {s.get('maintenance')}", markup=False
    )


Reason = Annotated[str, typer.Option("--reason", help="Why; kept in the audit trail.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="JSON for scripts.")]


@app.command()
def pause(table: str, reason: Reason, as_json: JsonFlag = False) -> None:
    """Pause ingest: live commit leases finish, no new ones are granted."""
    _switch(table, reason, as_json, ingest="paused")


@app.command()
def resume(table: str, reason: Reason, as_json: JsonFlag = False) -> None:
    """Resume ingest on a paused table."""
    _switch(table, reason, as_json, ingest="running")


@maintenance_app.command("disable")
def maintenance_disable(table: str, reason: Reason, as_json: JsonFlag = False) -> None:
    """Grant no maintenance lease on the table (a live one is not cut short)."""
    _switch(table, reason, as_json, maintenance="disabled")


@maintenance_app.command("enable")
def maintenance_enable(table: str, reason: Reason, as_json: JsonFlag = False) -> None:
    """Allow maintenance on the table again."""
    _switch(table, reason, as_json, maintenance="enabled")


@app.command()
def revoke(lease_id: str, reason: Reason, as_json: JsonFlag = False) -> None:
    """Force-release a lease; its holder learns it at its next renew and stops."""
    with _client() as client:
        lease = client.revoke(lease_id, reason=reason)
    if as_json:
        _print_json(lease)
        return
    _console().print(
        f"lease {lease.get('lease_id')} ({lease.get('kind')}, {lease.get('holder')}) on "
        f"{lease.get('table')}: {lease.get('state')}",
        markup=False,
    )


_EVENT_COLUMNS = ("id", "at", "table", "event", "kind", "lease id", "holder", "token", "actor")


def _events_table(events: list[dict[str, Any]], *, header: bool = True) -> Table:
    table = Table(show_header=header, box=box.SIMPLE_HEAD if header else None)
    for column in _EVENT_COLUMNS:
        table.add_column(column, overflow="fold")
    table.add_column("detail", overflow="fold")
    for e in events:
        table.add_row(
            str(e["id"]),
            e["at"],
            e.get("table"),
            e["event"],
            e.get("kind") or "",
            e.get("lease_id") or "",
            e.get("holder") or "",
            "" if e.get("token") is None else str(e["token"]),
            e.get("actor") or "",
            json.dumps(e.get("detail") or {}, sort_keys=True) if e.get("detail") else "",
        )
    return table


@app.command()
def events(
    table: Annotated[str | None, typer.Option(help="Only this table's events.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many of the newest.")] = 20,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new ones.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The audit trail, oldest of the newest LIMIT first; --follow keeps printing new events."""
    with _client() as client:
        batch = list(reversed(client.events(table=table, limit=limit)))
        _show_events(batch, as_json=as_json, header=True, follow=follow)
        if not follow:
            return
        last = batch[-1]["id"] if batch else 0
        version = client.state(table)["version"] if table else None
        try:
            while True:
                if table:
                    # long-poll the table's version: every audited change bumps it
                    version = client.state(table, wait_s=25, since=version)["version"]
                else:
                    _between_polls(1.0)
                fresh = [
                    e for e in reversed(client.events(table=table, limit=1000)) if e["id"] > last
                ]
                if fresh:
                    last = fresh[-1]["id"]
                    _show_events(fresh, as_json=as_json, header=False, follow=True)
        except KeyboardInterrupt:
            return


def _between_polls(seconds: float) -> None:
    time.sleep(seconds)


def _show_events(batch: list[dict[str, Any]], *, as_json: bool, header: bool, follow: bool) -> None:
    if as_json:
        if follow:  # one object per line, so a script can read them as they come
            for event in batch:
                sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()
        elif header:
            _print_json(batch)
        return
    if batch or header:
        _console().print(_events_table(batch, header=header))


@app.command()
def runs(
    table: str,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
    as_json: JsonFlag = False,
) -> None:
    """The last maintenance runs of a table: outcome, files before and after."""
    with _client() as client:
        reports = client.runs(table, limit=limit)
    if as_json:
        _print_json(reports)
        return
    out = Table(title=f"{table}: maintenance runs, newest first")
    for column in ("run", "reported at", "holder", "outcome", "data files", "delete files"):
        out.add_column(column, overflow="fold")
    for r in reports:
        before, after = r.get("before") or {}, r.get("after") or {}
        out.add_row(
            str(r.get("run_id")),
            r.get("reported_at"),
            r.get("holder"),
            r.get("outcome"),
            f"{before.get('data_files', '?')} -> {after.get('data_files', '?')}",
            f"{before.get('delete_files', '?')} -> {after.get('delete_files', '?')}",
        )
    _console().print(out)


@app.command()
def audit(
    table: str,
    warehouse: Annotated[
        Path,
        typer.Option(
            envvar="LAKELOCK_WAREHOUSE",
            help="The Hadoop catalog's warehouse folder the jobs write (their catalog.warehouse).",
        ),
    ] = Path("var/warehouse"),
    metadata: Annotated[
        str | None,
        typer.Option(help="A metadata file to read instead (vN.metadata.json, any catalog)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Events to read.")] = 1000,
    clock_skew_s: Annotated[
        float, typer.Option(min=0, help="Allowed skew between the jobs' and the DB's clocks.")
    ] = 0.0,
    as_json: JsonFlag = False,
) -> None:
    """Check every snapshot of TABLE against the leases of the audit trail; exit 1 on a breach.

    Each maintenance commit must carry its lease's token and land inside that lease, each ingest
    commit inside its own commit lease, and no ingest commit inside a maintenance lease over an
    intersecting scope (rules in service.iceberg_audit).
    """
    from service import iceberg_audit

    try:
        location = metadata or iceberg_audit.metadata_file(warehouse, table)
        snapshots = iceberg_audit.read_snapshots(location)
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc), 2) from None
    with _client() as client:
        trail = client.events(table=table, limit=limit)
    report = iceberg_audit.audit(
        snapshots, trail, table=table, limit=limit, skew=timedelta(seconds=clock_skew_s)
    )
    if as_json:
        _print_json(report.as_dict())
    else:
        _print_audit(report)
    if not report.clean:
        raise typer.Exit(1)


def _print_audit(report: Any) -> None:
    console = _console()
    data = report.as_dict()
    console.print(
        f"{report.table}: {data['snapshots_checked']} snapshots checked "
        f"({data['ingest_commits']} ingest, {data['maintenance_commits']} maintenance), "
        f"{len(report.unverified)} older than the events read",
        markup=False,
    )
    if report.clean:
        console.print("clean: every commit landed inside its own lease, none inside maintenance")
        return
    out = Table(title="violations")
    out.add_column("snapshot", no_wrap=True)
    out.add_column("committed at", no_wrap=True)
    for column in ("operation", "kind", "lease id", "problem"):
        out.add_column(column, overflow="fold")
    for f in report.violations:
        out.add_row(
            str(f.snapshot_id),
            f.as_dict()["committed_at"],
            f.operation,
            f.kind,
            f.lease_id or "",
            "; ".join(f.problems),
        )
    console.print(out)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
