"""A checker of DESIGN.md's five invariants over a recorded history, with scopes (§3b).

Every lease and intent covers the whole table (`partitions` null) or a set of partitions. Two
conflict when their kinds do and their partition sets intersect, the whole table intersecting
everything; the checker has its own `_overlap` for that, apart from the service's code:

- inv1: never two live maintenance leases with intersecting scopes on one table;
- inv2: never a live commit and a live maintenance lease with intersecting scopes;
- inv3: maintenance tokens strictly increase per table, whatever their scopes;
- inv4: no renew revives a lease past its TTL;
- inv5: no commit granted while ingest is paused or an intent on an intersecting scope is open.

The history is what the service wrote (the audit trail and the commit-lease rows, read straight
from the database) plus what the clients saw (renew answers). Two independent views:

- replay: the audit events of each table in commit order (their ids; every transaction on a
  table holds the table's row lock, so ids follow commit order) through a model of the lock,
  asserting at each grant what must hold;
- intervals: each lease's live interval in database time, [granted, ended or expired), checked
  for overlaps that must not exist.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, text


@dataclass
class RenewObservation:
    """One renew seen by a client: when it was sent, and when the last `ok` before it came back
    (both on the client's monotonic clock), the lease's TTL then, and the answer."""

    lease_id: str
    sent_at: float
    last_ok_received_at: float
    ttl_s: float
    outcome: str


@dataclass
class History:
    events: list[dict[str, Any]]
    commit_leases: list[dict[str, Any]]
    renews: list[RenewObservation] = field(default_factory=list)


def load_history(db_url: str, renews: list[RenewObservation]) -> History:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        events = [
            dict(r._mapping)
            for r in conn.execute(text("SELECT * FROM lakelock_events ORDER BY id"))
        ]
        leases = [
            dict(r._mapping) for r in conn.execute(text("SELECT * FROM lakelock_commit_leases"))
        ]
    engine.dispose()
    for event in events:
        event["detail"] = json.loads(event["detail"]) if event["detail"] else {}
        event["at"] = _instant(event["at"])
    for lease in leases:
        for key in ("acquired_at", "expires_at", "ended_at"):
            lease[key] = _instant(lease[key])
    return History(events, leases, renews)


def _instant(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


Scope = frozenset[str] | None


def _scope(partitions: Any) -> Scope:
    """A scope from an event's detail or a lease row (a JSON array, a list, or null)."""
    if isinstance(partitions, str):
        partitions = json.loads(partitions)
    return None if partitions is None else frozenset(partitions)


def _overlap(a: Scope, b: Scope) -> bool:
    return a is None or b is None or bool(a & b)


def replay(history: History) -> list[str]:
    """Invariants 1, 2, 3 and 5 by replaying each table's events in commit order."""
    violations: list[str] = []
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in history.events:
        by_table[event["table_name"]].append(event)
    for table, events in by_table.items():
        commits: dict[str, Scope] = {}
        maintenance: dict[str, Scope] = {}
        intents: dict[str, Scope] = {}  # by request id
        paused = False
        last_token = 0
        for e in events:
            name, lease_id, detail = e["event"], e["lease_id"], e["detail"]
            scope = _scope(detail.get("partitions"))
            where = f"{table} event {e['id']} ({name} {lease_id})"
            if name == "lease.acquired" and e["kind"] == "commit":
                if any(_overlap(scope, held) for held in maintenance.values()):
                    violations.append(f"inv2: commit granted while maintenance live: {where}")
                if any(_overlap(scope, held) for held in intents.values()):
                    violations.append(f"inv5: commit granted while intent open: {where}")
                if paused:
                    violations.append(f"inv5: commit granted while paused: {where}")
                commits[lease_id] = scope
            elif name == "lease.acquired":
                if any(_overlap(scope, held) for held in maintenance.values()):
                    violations.append(f"inv1: intersecting maintenance leases: {where}")
                live = sum(_overlap(scope, held) for held in commits.values())
                if live:
                    violations.append(f"inv2: maintenance granted over {live} commits: {where}")
                if e["token"] <= last_token:
                    violations.append(f"inv3: token {e['token']} after {last_token}: {where}")
                last_token = e["token"]
                maintenance[lease_id] = scope
                intents.pop(detail.get("request_id"), None)
            elif name in ("lease.released", "lease.expired", "lease.revoked"):
                commits.pop(lease_id, None)
                maintenance.pop(lease_id, None)
            elif name == "intent.opened":
                intents[detail["request_id"]] = scope
            elif name in ("intent.expired", "intent.withdrawn"):
                intents.pop(detail["request_id"], None)
            elif name == "switch.set":
                paused = detail["after"]["ingest"] == "paused"
    return violations


Span = tuple[datetime, datetime, str, Scope]


def maintenance_spans(history: History) -> dict[str, list[Span]]:
    """Each maintenance lease's live interval in database time, per table."""
    spans: dict[str, list[Span]] = defaultdict(list)
    granted: dict[str, dict[str, Any]] = {}
    for e in history.events:
        if e["kind"] != "maintenance" or not e["lease_id"]:
            continue
        if e["event"] == "lease.acquired":
            granted[e["lease_id"]] = e
            continue
        if e["event"] in ("lease.released", "lease.revoked"):
            start = granted.pop(e["lease_id"])
            end = e["at"]
        elif e["event"] == "lease.expired":
            start = granted.pop(e["lease_id"])
            end = start["at"] + timedelta(seconds=e["detail"]["held_s"])
        else:
            continue
        scope = _scope(start["detail"].get("partitions"))
        spans[e["table_name"]].append((start["at"], end, e["lease_id"], scope))
    for lease_id, start in granted.items():  # still live at the end: open-ended
        scope = _scope(start["detail"].get("partitions"))
        spans[start["table_name"]].append((start["at"], datetime.max, lease_id, scope))
    return spans


def commit_span(lease: dict[str, Any]) -> tuple[datetime, datetime]:
    end = min(lease["ended_at"] or lease["expires_at"], lease["expires_at"])
    return lease["acquired_at"], end


def intervals(history: History) -> list[str]:
    """Invariants 1 and 2 again, on live intervals in database time."""
    violations: list[str] = []
    spans = maintenance_spans(history)
    for table, leases in spans.items():
        for n, (s1, e1, id1, scope1) in enumerate(leases):
            for s2, e2, id2, scope2 in leases[n + 1 :]:
                if s2 < e1 and s1 < e2 and _overlap(scope1, scope2):
                    violations.append(f"inv1: {table} maintenance {id1} and {id2} overlap")
    for lease in history.commit_leases:
        start, end = commit_span(lease)
        scope = _scope(lease.get("partitions"))
        for s, e, lease_id, held in spans.get(lease["table_name"], []):
            if start < e and s < end and _overlap(scope, held):
                table = lease["table_name"]
                violations.append(
                    f"inv2: {table} commit {lease['id']} overlaps maintenance {lease_id}"
                )
    return violations


def renewals(history: History, *, slack_s: float = 0.005) -> list[str]:
    """Invariant 4: a renew sent later than TTL after the last `ok` came back must not be `ok`."""
    return [
        f"inv4: lease {r.lease_id} renewed ok {r.sent_at - r.last_ok_received_at:.3f}s after its "
        f"last renew (ttl {r.ttl_s}s)"
        for r in history.renews
        if r.outcome == "ok" and r.sent_at > r.last_ok_received_at + r.ttl_s + slack_s
    ]


def check(history: History) -> list[str]:
    return replay(history) + intervals(history) + renewals(history)
