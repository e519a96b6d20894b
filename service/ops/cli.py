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
`service.client.LeaseClient` only, and hands what it found to `service.ops.output`: tables for
a reader, or with `--json` the service's JSON for scripts.
"""

from __future__ import annotations

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

with needs_extras("lakelock"):
    import typer
    from rich.console import Console

    from service.ops.output import live_leases, maintenance_leases, output, table_view

__all__ = ["app", "client_factory", "main", "maintenance_leases"]

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


def debt_weight(state: dict[str, Any]) -> int:
    """What tables are ranked by: small files plus delete files of the last debt reported."""
    debt = state.get("debt") or {}
    return int(debt.get("small_files") or 0) + int(debt.get("delete_files") or 0)


def by_debt(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tables with the most debt first (small plus delete files), then by name."""
    return sorted(states, key=lambda s: (-debt_weight(s), s["table"]))


_state_tables = table_view  # one table's view, as the tests render it without the service


Reason = Annotated[str, typer.Option("--reason", help="Why; kept in the audit trail.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="JSON for scripts.")]
"""Each command's `--json`: its value picks the command's output (`output(as_json)`)."""


@app.command()
def status(
    table: Annotated[
        str | None, typer.Argument(help="One table; all known tables if left out.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The switch, live leases and claims, intents, debt, due partitions and last run of one
    table, or of every table: then first the tables by debt (small plus delete files, most
    first), and each table in that order."""
    with _client() as client:
        found = [client.state(table)] if table else by_debt(client.tables())
        # each with its last maintenance run, as `--json` shows it
        states = [
            {**s, "last_run": next(iter(client.runs(s["table"], limit=1)), None)} for s in found
        ]
    if table:
        output(as_json).table_state(states[0])
    else:
        output(as_json).tables(states)


def _switch(table: str, reason: str, as_json: bool, **switch: str) -> None:
    with _client() as client:
        state = client.set_switch(table, reason=reason, **switch)
    output(as_json).switch(table, state)


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
    output(as_json).revoked(lease)


@app.command()
def events(
    table: Annotated[str | None, typer.Option(help="Only this table's events.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many of the newest.")] = 20,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new ones.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The audit trail, oldest of the newest LIMIT first; --follow keeps printing new events."""
    out = output(as_json)
    with _client() as client:
        batch = list(reversed(client.events(table=table, limit=limit)))
        if not follow:
            out.events(batch)
            return
        out.event_stream(batch, first=True)
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
                    out.event_stream(fresh, first=False)
        except KeyboardInterrupt:
            return


def _between_polls(seconds: float) -> None:
    time.sleep(seconds)


@app.command()
def runs(
    table: str,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
    as_json: JsonFlag = False,
) -> None:
    """The last maintenance runs of a table: outcome, files before and after."""
    with _client() as client:
        reports = client.runs(table, limit=limit)
    output(as_json).runs(table, reports)


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
    output(as_json).audit(report)
    if not report.clean:
        raise typer.Exit(1)


def main() -> None:
    with needs_extras("lakelock"):  # audit reads Iceberg metadata with pyiceberg
        app()


if __name__ == "__main__":
    main()
