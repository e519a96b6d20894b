"""`lakelock`: the operators' command, beside curl (see README, "Operating it").

    lakelock status [TABLE] [--json]
    lakelock pause TABLE --reason "backfill, INC-123"     lakelock resume TABLE --reason ...
    lakelock maintenance disable TABLE --reason ...       lakelock maintenance enable TABLE ...
    lakelock revoke LEASE_ID --reason "compactor host lost"   # or 8+ first chars of the id
    lakelock events [--table T] [--follow]                lakelock runs TABLE
    lakelock audit TABLE --warehouse var/warehouse        # exit 1 when a commit broke the rules
    lakelock audit lake.db.events -p type=sql -p uri=mysql+pymysql://...   # through a catalog

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

from service.client import DEFAULT_URL, LeaseClient
from service.extras import needs_extras
from service.wire.errors import LakelockError, OutcomeUnknown
from service.wire.text import sample

with needs_extras("lakelock"):
    import typer
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text

    from service.ops.layout import Column, rows_view

__all__ = ["app", "client_factory", "main"]

app = typer.Typer(
    help="Operate lakelock: see and steer the leases on Iceberg tables.",
    no_args_is_help=True,
    add_completion=False,
    # docstrings are wrapped at 100 columns in the source: let the terminal's width wrap them
    rich_markup_mode="markdown",
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


LEASE_COLUMNS = (
    Column("kind"),
    Column("lease id", whole=True),
    Column("holder", whole=True),
    Column("token"),
    Column("scope"),
    Column("time left"),
    Column("held"),
)
INTENT_COLUMNS = (
    Column("cause"),
    Column("holder", whole=True),
    Column("scope"),
    Column("open"),
    Column("expires in"),
)


def live_leases(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every live lease of a table state: maintenance, claims (if the service has them), commit."""
    return (
        maintenance_leases(state)
        + list(state.get("claims") or [])
        + list(state.get("commit_leases") or [])
    )


DEBT_COLUMNS = (
    Column("table", whole=True),
    Column("small files"),
    Column("delete files"),
    Column("partitions over target"),
    Column("data files"),
)


def debt_weight(state: dict[str, Any]) -> int:
    """What tables are ranked by: small files plus delete files of the last debt reported."""
    debt = state.get("debt") or {}
    return int(debt.get("small_files") or 0) + int(debt.get("delete_files") or 0)


def by_debt(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tables with the most debt first (small plus delete files), then by name."""
    return sorted(states, key=lambda s: (-debt_weight(s), s["table"]))


def _count(value: Any) -> str:
    return "" if value is None else str(value)


def _debt_row(state: dict[str, Any]) -> list[str]:
    """A table's row of the ranking; records and the report's age are in its own view."""
    debt = state.get("debt") or {}
    return [
        state["table"],
        _count(debt.get("small_files")),
        _count(debt.get("delete_files")),
        _count(debt.get("partitions_over_target")),
        _count(debt.get("data_files")),
    ]


def _debt_line(debt: dict[str, Any]) -> str:
    records = "" if debt.get("records") is None else f", {debt['records']} records"
    return (
        f"{debt.get('small_files')} small files, {debt.get('delete_files')} delete files, "
        f"{debt.get('partitions_over_target')} partitions over target, of "
        f"{debt.get('data_files')} data files{records} (reported "
        f"{_seconds(debt.get('reported_s_ago'))} ago by {debt.get('reported_by')})"
    )


def _lag_line(lag: dict[str, Any]) -> str:
    """`12 records behind (events:0 12, events:1 0), after batch 7, 3 s ago`: the largest
    partitions first, at most five of them named (`..., events:4 0 and 3 more`)."""
    parts = sorted((lag.get("partitions") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    named = sample([f"{name} {behind}" for name, behind in parts], 5)
    return (
        f"{lag.get('records')} records behind ({named}), after batch "
        f"{lag.get('batch_id')}, reported {_seconds(lag.get('reported_s_ago'))} ago"
    )


def _due_line(due: dict[str, Any]) -> str:
    """`2 partitions due (oldest 12.0s), 9 data and 3 delete files counted in 4 partitions;
    due to compacted p50 4.0s, p95 9.0s over the last hour (31 compacted); 2 followers (1
    waiting)` (docs/design.md §5.1)."""
    oldest = due.get("oldest_due_s")
    oldest_text = "" if oldest is None else f" (oldest {_seconds(oldest)})"
    p50, p95 = due.get("due_to_compacted_p50_s"), due.get("due_to_compacted_p95_s")
    figures = (
        "nothing compacted in the last hour"
        if p50 is None
        else f"due to compacted p50 {_seconds(p50)}, p95 {_seconds(p95)} over the last hour "
        f"({due.get('compacted_last_hour')} compacted)"
    )
    return (
        f"{due.get('partitions_due')} partitions due{oldest_text}, {due.get('data_files')} data "
        f"and {due.get('delete_files')} delete files counted in {due.get('partitions_counted')} "
        f"partitions; {figures}; {due.get('followers')} followers "
        f"({due.get('followers_waiting')} waiting)"
    )


def _reader_line(hold: dict[str, Any]) -> str:
    """`summary@h1 at snapshot 305..., 3 snapshots behind, advanced 12 s ago, 40 s left`."""
    behind = hold.get("snapshots_behind")
    behind_text = "" if behind is None else f", {behind} snapshots behind"
    return (
        f"{hold.get('reader')} at snapshot {hold.get('snapshot_id')}{behind_text}, advanced "
        f"{_seconds(hold.get('advanced_s_ago'))} ago, {_seconds(hold.get('remaining_s'))} left "
        "(expiry keeps it and every later snapshot)"
    )


def _state_tables(
    state: dict[str, Any], last_run: dict[str, Any] | None, console: Console | None = None
) -> list[RenderableType]:
    console = console or _console()
    switch = state.get("switch") or {}
    # the title on a line of its own: as a table's title it would wrap to the table's width
    title = Text(f"{state['table']}  (version {state.get('version')})", style="italic")
    head = Table(show_header=False)
    head.add_column("what", style="bold", no_wrap=True)
    head.add_column("value")
    head.add_row("ingest", str(switch.get("ingest")))
    head.add_row("maintenance", str(switch.get("maintenance")))
    if switch.get("backpressure", "enabled") != "enabled":
        head.add_row("backpressure", str(switch["backpressure"]))
    if switch.get("reason"):
        head.add_row("switch reason", Text(f"{switch['reason']} (by {switch.get('by')})"))
    head.add_row("next token", str(state.get("next_token")))
    if state.get("debt"):
        head.add_row("debt", Text(_debt_line(state["debt"])))
    if state.get("due"):
        head.add_row("due", Text(_due_line(state["due"])))
    if state.get("ingest_lag"):
        head.add_row("ingest lag", Text(_lag_line(state["ingest_lag"])))
    for hold in state.get("readers") or ():
        head.add_row("reader", Text(_reader_line(hold)))
    if last_run:
        head.add_row(
            "last run",
            Text(
                f"{last_run.get('outcome')} at {last_run.get('reported_at')} "
                f"(holder {last_run.get('holder')})"
            ),
        )
    rows = [
        [
            str(lease.get("kind") or ""),
            str(lease.get("lease_id") or ""),
            str(lease.get("holder") or ""),
            "" if lease.get("token") is None else str(lease["token"]),
            _scope(lease),
            _seconds(lease.get("remaining_s")),
            _seconds(lease.get("held_s")),
        ]
        for lease in live_leases(state)
    ]
    leases = (
        rows_view(console, LEASE_COLUMNS, rows, title="live leases", head=2)
        if rows
        else Text("live leases: none")
    )
    out = [title, head, leases]
    open_intents = intents(state)
    if open_intents:
        rows = [
            [
                str(intent.get("cause") or "drain"),
                str(intent.get("holder") or ""),
                _scope(intent),
                _seconds(intent.get("open_s")),
                _seconds(intent.get("remaining_s")),
            ]
            for intent in open_intents
        ]
        held_back = "intents (commit leases held back while these drain, or by backpressure)"
        out.append(rows_view(console, INTENT_COLUMNS, rows, title=held_back))
    return out


@app.command()
def status(
    table: Annotated[
        str | None, typer.Argument(help="One table; all known tables if left out.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """The switch, live leases and claims, intents, debt, due partitions and last run of one
    table, or of every table: then first the tables by debt (small plus delete files, most
    first), and each table in that order."""
    with _client() as client:
        states = [client.state(table)] if table else by_debt(client.tables())
        last_runs = {s["table"]: next(iter(client.runs(s["table"], limit=1)), None) for s in states}
    if as_json:
        data = [{**s, "last_run": last_runs[s["table"]]} for s in states]
        _print_json(data[0] if table else data)
        return
    console = _console()
    if not states:
        console.print("no tables yet: a table appears at its first lease, switch or debt report")
    elif not table:
        rows = [_debt_row(state) for state in states]
        title = "tables by debt (small + delete files, most first)"
        console.print(rows_view(console, DEBT_COLUMNS, rows, title=title))
    for state in states:
        for part in _state_tables(state, last_runs[state["table"]], console):
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


MIN_PREFIX = 8
"""Shortest lease id prefix `revoke` takes, as git takes short hashes."""

_FULL_ID_CHARS = 36  # a lease id is a UUID in its usual form


def resolve_lease_id(client: LeaseClient, given: str) -> str:
    """The live lease id that starts with `given` (a whole id is taken as it is).

    Raises:
        typer.Exit: the prefix is too short, matches no live lease, or more than one.
    """
    if len(given) >= _FULL_ID_CHARS:
        return given
    if len(given) < MIN_PREFIX:
        raise _fail(f"give at least {MIN_PREFIX} characters of the lease id, not {given!r}", 2)
    matches = sorted(
        {
            str(lease["lease_id"])
            for state in client.tables()
            for lease in live_leases(state)
            if str(lease.get("lease_id") or "").startswith(given)
        }
    )
    if not matches:
        raise _fail(f"no live lease id starts with {given}; see `lakelock status`")
    if len(matches) > 1:
        raise _fail(f"lease id prefix {given} is ambiguous: {', '.join(matches)}")
    return matches[0]


@app.command()
def revoke(
    lease_id: Annotated[
        str, typer.Argument(help=f"The lease id, or a unique prefix of it ({MIN_PREFIX}+ chars).")
    ],
    reason: Reason,
    as_json: JsonFlag = False,
) -> None:
    """Force-release a lease; its holder learns it at its next renew and stops."""
    with _client() as client:
        lease = client.revoke(resolve_lease_id(client, lease_id), reason=reason)
    if as_json:
        _print_json(lease)
        return
    _console().print(
        f"lease {lease.get('lease_id')} ({lease.get('kind')}, {lease.get('holder')}) on "
        f"{lease.get('table')}: {lease.get('state')}",
        markup=False,
    )


EVENT_COLUMNS = (
    Column("id"),
    Column("at", whole=True),
    Column("event", whole=True),
    Column("table", whole=True),
    Column("kind"),
    Column("lease id", whole=True),
    Column("holder", whole=True),
    Column("token"),
    Column("actor", whole=True),
    Column("detail"),
)


def _events_view(
    console: Console, events: list[dict[str, Any]], *, header: bool = True
) -> RenderableType:
    rows = [
        [
            str(e["id"]),
            e["at"],
            e["event"],
            e.get("table") or "",
            e.get("kind") or "",
            e.get("lease_id") or "",
            e.get("holder") or "",
            "" if e.get("token") is None else str(e["token"]),
            e.get("actor") or "",
            json.dumps(e.get("detail") or {}, sort_keys=True) if e.get("detail") else "",
        ]
        for e in events
    ]
    return rows_view(console, EVENT_COLUMNS, rows, header=header, head=4)


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
        console = _console()
        console.print(_events_view(console, batch, header=header))


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
    rows = []
    for r in reports:
        before, after = r.get("before") or {}, r.get("after") or {}
        rows.append(
            [
                str(r.get("run_id")),
                str(r.get("reported_at") or ""),
                str(r.get("outcome") or ""),
                str(r.get("holder") or ""),
                f"{before.get('data_files', '?')} -> {after.get('data_files', '?')}",
                f"{before.get('delete_files', '?')} -> {after.get('delete_files', '?')}",
            ]
        )
    console = _console()
    title = f"{table}: maintenance runs, newest first"
    console.print(rows_view(console, RUN_COLUMNS, rows, title=title, head=3))


RUN_COLUMNS = (
    Column("run"),
    Column("reported at", whole=True),
    Column("outcome"),
    Column("holder", whole=True),
    Column("data files"),
    Column("delete files"),
)


def _properties(pairs: list[str]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _fail(f"--catalog-property takes KEY=VALUE, not {pair!r}", 2)
        properties[key] = value
    return properties


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
    catalog: Annotated[
        str | None,
        typer.Option(
            help="Read the table through this pyiceberg catalog (~/.pyiceberg.yaml, "
            "PYICEBERG_CATALOG__<NAME>__*); default with --catalog-property: the table's own.",
            show_default=False,
        ),
    ] = None,
    catalog_property: Annotated[
        list[str] | None,
        typer.Option(
            "--catalog-property",
            "-p",
            help="KEY=VALUE for the pyiceberg catalog (repeat; docs/catalogs.md), e.g. "
            "type=sql, uri=mysql+pymysql://..., warehouse=s3://...",
            show_default=False,
        ),
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
    intersecting scope (rules in service.ops.iceberg_audit). The table is read from its catalog
    with --catalog / --catalog-property, else from --metadata, else from the Hadoop --warehouse.
    """
    from service.ops import iceberg_audit

    try:
        if catalog or catalog_property:
            snapshots = iceberg_audit.read_catalog_snapshots(
                table, catalog=catalog, properties=_properties(catalog_property or [])
            )
        else:
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
    rows = [
        [
            str(f.snapshot_id),
            f.as_dict()["committed_at"],
            f.operation,
            f.kind,
            f.lease_id or "",
            "; ".join(f.problems),
        ]
        for f in report.violations
    ]
    console.print(rows_view(console, VIOLATION_COLUMNS, rows, title="violations", head=2))


VIOLATION_COLUMNS = (
    Column("snapshot", whole=True),
    Column("committed at", whole=True),
    Column("operation"),
    Column("kind"),
    Column("lease id", whole=True),
    Column("problem"),
)


def main() -> None:
    with needs_extras("lakelock"):  # audit reads Iceberg metadata with pyiceberg
        app()


if __name__ == "__main__":
    main()
