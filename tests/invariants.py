"""A checker of DESIGN.md's five invariants over a recorded history.

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


def replay(history: History) -> list[str]:
    """Invariants 1, 2, 3 and 5 by replaying each table's events in commit order."""
    violations: list[str] = []
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in history.events:
        by_table[event["table_name"]].append(event)
    for table, events in by_table.items():
        commits: set[str] = set()
        maintenance: str | None = None
        intent: str | None = None
        paused = False
        last_token = 0
        for e in events:
            name, lease_id = e["event"], e["lease_id"]
            where = f"{table} event {e['id']} ({name} {lease_id})"
            if name == "lease.acquired" and e["kind"] == "commit":
                if maintenance:
                    violations.append(f"inv2: commit granted while maintenance live: {where}")
                if intent:
                    violations.append(f"inv5: commit granted while intent open: {where}")
                if paused:
                    violations.append(f"inv5: commit granted while paused: {where}")
                commits.add(lease_id)
            elif name == "lease.acquired":
                if maintenance:
                    violations.append(f"inv1: second maintenance lease: {where}")
                if commits:
                    violations.append(
                        f"inv2: maintenance granted over {len(commits)} commits: {where}"
                    )
                if e["token"] <= last_token:
                    violations.append(f"inv3: token {e['token']} after {last_token}: {where}")
                last_token = e["token"]
                maintenance, intent = lease_id, None
            elif name in ("lease.released", "lease.expired", "lease.revoked"):
                commits.discard(lease_id)
                if maintenance == lease_id:
                    maintenance = None
            elif name == "intent.opened":
                intent = e["holder"]
            elif name in ("intent.expired", "intent.withdrawn"):
                intent = None
            elif name == "switch.set":
                paused = e["detail"]["after"]["ingest"] == "paused"
    return violations


def intervals(history: History) -> list[str]:
    """Invariants 1 and 2 again, on live intervals in database time."""
    violations: list[str] = []
    maint: dict[str, list[tuple[datetime, datetime, str, int]]] = defaultdict(list)
    granted: dict[str, dict[str, Any]] = {}
    for e in history.events:
        if e["kind"] != "maintenance" or not e["lease_id"]:
            continue
        if e["event"] == "lease.acquired":
            granted[e["lease_id"]] = e
        elif e["event"] in ("lease.released", "lease.revoked"):
            start = granted.pop(e["lease_id"])
            maint[e["table_name"]].append((start["at"], e["at"], e["lease_id"], start["token"]))
        elif e["event"] == "lease.expired":
            start = granted.pop(e["lease_id"])
            end = start["at"] + timedelta(seconds=e["detail"]["held_s"])
            maint[e["table_name"]].append((start["at"], end, e["lease_id"], start["token"]))
    for lease_id, start in granted.items():  # still live at the end: open-ended
        maint[start["table_name"]].append((start["at"], datetime.max, lease_id, start["token"]))
    for table, spans in maint.items():
        spans.sort()
        for (_, e1, id1, t1), (s2, _, id2, t2) in zip(spans, spans[1:], strict=False):
            if s2 < e1:
                violations.append(f"inv1: {table} maintenance {id1} and {id2} overlap")
            if t2 <= t1:
                violations.append(f"inv3: {table} token {t2} granted after {t1}")
    for lease in history.commit_leases:
        start = lease["acquired_at"]
        end = lease["ended_at"] or lease["expires_at"]
        end = min(end, lease["expires_at"])
        for s, e, lease_id, _ in maint.get(lease["table_name"], []):
            if start < e and s < end:
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
