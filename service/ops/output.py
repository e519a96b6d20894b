"""What `lakelock` shows, behind one interface (as pyiceberg's `pyiceberg/cli/output.py`):

    Output.table_state(state)           one table: switch, leases, intents, debt, due, lag, last run
    Output.tables(states)               every table: the ranking by debt, then each table's view
    Output.switch(table, state)         the switch after pause, resume, maintenance disable/enable
    Output.revoked(lease)               the lease `revoke` ended
    Output.events(events)               the audit trail, oldest first
    Output.event_stream(events, first)  events as they come (`events --follow`)
    Output.runs(table, reports)         a table's maintenance runs, newest first
    Output.audit(report)                the audit's verdict, with its violations

`ConsoleOutput` prints the tables and lines a reader wants (`service.ops.layout` keeps ids whole
at any width); `JsonOutput` prints the service's answers as JSON for scripts (`--json`), one
event a line while following. `output(as_json)` picks one. A table state given to
`table_state` and `tables` carries its last maintenance run as `last_run` (None before any).
Refusals are not shown here: they are one line on stderr, the same in both.
"""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from service.ops.layout import Column, rows_view
from service.wire.text import sample

if TYPE_CHECKING:
    from service.ops.iceberg_audit import AuditReport

__all__ = [
    "ConsoleOutput",
    "JsonOutput",
    "Output",
    "intents",
    "live_leases",
    "maintenance_leases",
    "output",
    "table_view",
]

Json = dict[str, Any]
"""An answer of the service, as its JSON reads."""


class Output(ABC):
    """Shows what a command found; one method per kind of thing the CLI shows."""

    @abstractmethod
    def table_state(self, state: Json) -> None:
        """One table (`status TABLE`)."""

    @abstractmethod
    def tables(self, states: list[Json]) -> None:
        """Every table, ranked by debt (`status`)."""

    @abstractmethod
    def switch(self, table: str, state: Json) -> None:
        """A table's state after its switch changed (`pause`, `resume`, `maintenance ...`)."""

    @abstractmethod
    def revoked(self, lease: Json) -> None:
        """The lease `revoke` ended."""

    @abstractmethod
    def events(self, events: list[Json]) -> None:
        """The audit trail, oldest first (`events`)."""

    @abstractmethod
    def event_stream(self, events: list[Json], *, first: bool) -> None:
        """The events so far (`first`), then each batch of new ones (`events --follow`)."""

    @abstractmethod
    def runs(self, table: str, reports: list[Json]) -> None:
        """A table's last maintenance runs, newest first (`runs`)."""

    @abstractmethod
    def audit(self, report: AuditReport) -> None:
        """The audit of a table's commits against its leases (`audit`)."""


def output(as_json: bool) -> Output:
    """The output `--json` asks for."""
    return JsonOutput() if as_json else ConsoleOutput()


class JsonOutput(Output):
    """The service's answers as JSON, indented; while following, one event a line."""

    def table_state(self, state: Json) -> None:
        self._write(state)

    def tables(self, states: list[Json]) -> None:
        self._write(states)

    def switch(self, table: str, state: Json) -> None:
        self._write(state)

    def revoked(self, lease: Json) -> None:
        self._write(lease)

    def events(self, events: list[Json]) -> None:
        self._write(events)

    def event_stream(self, events: list[Json], *, first: bool) -> None:
        # one object per line, so a script can read them as they come
        for event in events:
            sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def runs(self, table: str, reports: list[Json]) -> None:
        self._write(reports)

    def audit(self, report: AuditReport) -> None:
        self._write(report.as_dict())

    @staticmethod
    def _write(data: Any) -> None:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


class ConsoleOutput(Output):
    """Tables and lines for a reader at a terminal (or a pipe: 80 columns unless COLUMNS)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)

    def table_state(self, state: Json) -> None:
        self._print(*table_view(state, state.get("last_run"), self.console))

    def tables(self, states: list[Json]) -> None:
        if not states:
            self._print("no tables yet: a table appears at its first lease, switch or debt report")
        else:
            rows = [_debt_row(state) for state in states]
            title = "tables by debt (small + delete files, most first)"
            self._print(rows_view(self.console, DEBT_COLUMNS, rows, title=title))
        for state in states:
            self.table_state(state)

    def switch(self, table: str, state: Json) -> None:
        s = state.get("switch") or {}
        self._line(f"{table}: ingest {s.get('ingest')}, maintenance {s.get('maintenance')}")

    def revoked(self, lease: Json) -> None:
        self._line(
            f"lease {lease.get('lease_id')} ({lease.get('kind')}, {lease.get('holder')}) on "
            f"{lease.get('table')}: {lease.get('state')}"
        )

    def events(self, events: list[Json]) -> None:
        self.event_stream(events, first=True)

    def event_stream(self, events: list[Json], *, first: bool) -> None:
        if events or first:  # the header once, then only rows
            self._print(_events_view(self.console, events, header=first))

    def runs(self, table: str, reports: list[Json]) -> None:
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
        title = f"{table}: maintenance runs, newest first"
        self._print(rows_view(self.console, RUN_COLUMNS, rows, title=title, head=3))

    def audit(self, report: AuditReport) -> None:
        data = report.as_dict()
        self._line(
            f"{report.table}: {data['snapshots_checked']} snapshots checked "
            f"({data['ingest_commits']} ingest, {data['maintenance_commits']} maintenance), "
            f"{len(report.unverified)} older than the events read"
        )
        if report.clean:
            self._print("clean: every commit landed inside its own lease, none inside maintenance")
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
        self._print(rows_view(self.console, VIOLATION_COLUMNS, rows, title="violations", head=2))

    def _print(self, *parts: RenderableType) -> None:
        for part in parts:
            self.console.print(part)

    def _line(self, text: str) -> None:
        """A line of values from the service: never read as rich markup."""
        self.console.print(text, markup=False)


# -- what a table state holds, from services with and without partition scopes ------------------


def maintenance_leases(state: Json) -> list[Json]:
    """The live maintenance leases of a table state, with or without partition scopes."""
    if state.get("maintenance_leases") is not None:
        return list(state["maintenance_leases"])
    return [state["maintenance_lease"]] if state.get("maintenance_lease") else []


def intents(state: Json) -> list[Json]:
    """The open intents of a table state, with or without partition scopes."""
    if state.get("intents") is not None:
        return list(state["intents"])
    return [state["intent"]] if state.get("intent") else []


def live_leases(state: Json) -> list[Json]:
    """Every live lease of a table state: maintenance, claims (if the service has them), commit."""
    return (
        maintenance_leases(state)
        + list(state.get("claims") or [])
        + list(state.get("commit_leases") or [])
    )


# -- the console's tables and lines --------------------------------------------------------------

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
DEBT_COLUMNS = (
    Column("table", whole=True),
    Column("small files"),
    Column("delete files"),
    Column("partitions over target"),
    Column("data files"),
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
RUN_COLUMNS = (
    Column("run"),
    Column("reported at", whole=True),
    Column("outcome"),
    Column("holder", whole=True),
    Column("data files"),
    Column("delete files"),
)
VIOLATION_COLUMNS = (
    Column("snapshot", whole=True),
    Column("committed at", whole=True),
    Column("operation"),
    Column("kind"),
    Column("lease id", whole=True),
    Column("problem"),
)


def _seconds(value: Any) -> str:
    return "" if value is None else f"{float(value):.1f}s"


def _scope(item: Json) -> str:
    partitions = item.get("partitions")
    return "whole table" if partitions is None else ", ".join(partitions) or "(none)"


def _count(value: Any) -> str:
    return "" if value is None else str(value)


def _debt_row(state: Json) -> list[str]:
    """A table's row of the ranking; records and the report's age are in its own view."""
    debt = state.get("debt") or {}
    return [
        state["table"],
        _count(debt.get("small_files")),
        _count(debt.get("delete_files")),
        _count(debt.get("partitions_over_target")),
        _count(debt.get("data_files")),
    ]


def _debt_line(debt: Json) -> str:
    records = "" if debt.get("records") is None else f", {debt['records']} records"
    return (
        f"{debt.get('small_files')} small files, {debt.get('delete_files')} delete files, "
        f"{debt.get('partitions_over_target')} partitions over target, of "
        f"{debt.get('data_files')} data files{records} (reported "
        f"{_seconds(debt.get('reported_s_ago'))} ago by {debt.get('reported_by')})"
    )


def _lag_line(lag: Json) -> str:
    """`12 records behind (events:0 12, events:1 0), after batch 7, 3 s ago`: the largest
    partitions first, at most five of them named (`..., events:4 0 and 3 more`)."""
    parts = sorted((lag.get("partitions") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    named = sample([f"{name} {behind}" for name, behind in parts], 5)
    return (
        f"{lag.get('records')} records behind ({named}), after batch "
        f"{lag.get('batch_id')}, reported {_seconds(lag.get('reported_s_ago'))} ago"
    )


def _due_line(due: Json) -> str:
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


def _reader_line(hold: Json) -> str:
    """`summary@h1 at snapshot 305..., 3 snapshots behind, advanced 12 s ago, 40 s left`."""
    behind = hold.get("snapshots_behind")
    behind_text = "" if behind is None else f", {behind} snapshots behind"
    return (
        f"{hold.get('reader')} at snapshot {hold.get('snapshot_id')}{behind_text}, advanced "
        f"{_seconds(hold.get('advanced_s_ago'))} ago, {_seconds(hold.get('remaining_s'))} left "
        "(expiry keeps it and every later snapshot)"
    )


def table_view(
    state: Json, last_run: Json | None, console: Console | None = None
) -> list[RenderableType]:
    """One table's view, part by part: its title, switch and figures, live leases, intents."""
    console = console or Console(highlight=False)
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


def _events_view(console: Console, events: list[Json], *, header: bool) -> RenderableType:
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
