"""A checker of the invariants of docs/design.md §3.1 over a recorded history, with scopes (§4)
and claims (§5).

Every lease and intent covers the whole table (`partitions` null) or a set of partitions. Two
conflict when their kinds do and their partition sets intersect, the whole table intersecting
everything; the checker has its own `_overlap` for that, apart from the service's code:

- inv1: never two live maintenance leases with intersecting scopes on one table;
- inv2: never a live commit and a live maintenance lease with intersecting scopes;
- inv3: maintenance tokens strictly increase per table, whatever their scopes;
- inv4: no renew revives a lease past its TTL;
- inv5: no commit granted while ingest is paused or a drain intent on an intersecting scope is
  open (a backpressure intent is inv8's; a turn of the head holds no commit lease);
- inv6: never two live claims on one table (a claim covers the whole table; it is checked
  against claims only, and commit and maintenance leases never against claims);
- inv7: no maintenance commit through the catalog front (docs/catalog-front.md) without a live
  maintenance lease of its table, named with its token, whose scope covers the partitions the
  commit touched, at the instant of the commit; a commit that only removes snapshots may name
  the table's live claim instead;
- inv8: no commit granted while a compactor's backpressure (docs/jobs.md §3) holds an
  intersecting partition, unless the table's backpressure or maintenance switch is off; and
  no writer held back without a live claim: each backpressure intent opens and ends within
  the life of the claim it was opened under (by replay, and on database-time intervals, so a
  claim that expired before any sweep said so counts as ended at its expiry);
- inv9: a lease is released, an intent withdrawn and a maintenance commit made under a lease
  only by the token that took it (docs/design.md §6), or by an operator (`operators`); what
  the service ends by itself is its own (`lakelock`);
- inv10: no foreign data commit through the catalog front that can conflict with a rewrite
  (docs/catalog-front.md §3: it removes files, or adds position deletes against files it did
  not add) lands inside the scope of a live maintenance lease of its table.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, text

from service.wire import EventName


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
    # the names of the operator tokens of the run: they may end what others took
    operators: frozenset[str] = frozenset({"operator-client"})


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


@dataclass
class _Table:
    """The model of one table's lock while its events are replayed: what is live, and the
    violations found at each grant."""

    name: str
    violations: list[str]
    commits: dict[str, Scope] = field(default_factory=dict)
    maintenance: dict[str, Scope] = field(default_factory=dict)
    claims: set[str] = field(default_factory=set)
    intents: dict[str, Scope] = field(default_factory=dict)  # by request id
    # a compactor's backpressure, one partition each, by request id; and its switch
    held_back: dict[str, Scope] = field(default_factory=dict)
    backpressure_off: bool = False
    maintenance_off: bool = False
    paused: bool = False
    last_token: int = 0

    def flag(self, found: bool, what: str, e: dict[str, Any]) -> None:
        if found:
            where = f"{self.name} event {e['id']} ({e['event']} {e['lease_id']})"
            self.violations.append(f"{what}: {where}")

    def commit(self, e: dict[str, Any], scope: Scope) -> None:
        held = any(_overlap(scope, x) for x in self.maintenance.values())
        self.flag(held, "inv2: commit granted while maintenance live", e)
        draining = any(_overlap(scope, x) for x in self.intents.values())
        self.flag(draining, "inv5: commit granted while intent open", e)
        held_back = any(_overlap(scope, x) for x in self.held_back.values())
        holds = not (self.backpressure_off or self.maintenance_off)
        self.flag(held_back and holds, "inv8: commit granted under backpressure", e)
        self.flag(self.paused, "inv5: commit granted while paused", e)
        self.commits[e["lease_id"]] = scope

    def maintain(self, e: dict[str, Any], scope: Scope) -> None:
        held = any(_overlap(scope, x) for x in self.maintenance.values())
        self.flag(held, "inv1: intersecting maintenance leases", e)
        live = sum(_overlap(scope, x) for x in self.commits.values())
        self.flag(bool(live), f"inv2: maintenance granted over {live} commits", e)
        token = e["token"]
        self.flag(token <= self.last_token, f"inv3: token {token} after {self.last_token}", e)
        self.last_token = token
        self.maintenance[e["lease_id"]] = scope
        self.intents.pop(e["detail"].get("request_id"), None)

    def hold_back(self, e: dict[str, Any], _scope: Scope) -> None:
        self.flag(e["lease_id"] not in self.claims, "inv8: backpressure without a live claim", e)
        for request_id, name in zip(
            e["detail"]["request_ids"], e["detail"]["partitions"], strict=True
        ):
            self.held_back[request_id] = frozenset((name,))

    def claim(self, e: dict[str, Any], _scope: Scope) -> None:
        self.flag(bool(self.claims), f"inv6: claim granted while {sorted(self.claims)} live", e)
        self.claims.add(e["lease_id"])

    def end(self, e: dict[str, Any], _scope: Scope) -> None:
        self.commits.pop(e["lease_id"], None)
        self.maintenance.pop(e["lease_id"], None)
        self.claims.discard(e["lease_id"])

    def open_intent(self, e: dict[str, Any], scope: Scope) -> None:
        # a drain holds commit grants (inv5); a turn of the head holds foreign commits at the
        # catalog front only (docs/catalog-front.md §4), never a commit lease
        if e["detail"].get("cause", "drain") == "drain":
            self.intents[e["detail"]["request_id"]] = scope

    def close_intent(self, e: dict[str, Any], _scope: Scope) -> None:
        self.intents.pop(e["detail"]["request_id"], None)
        self.held_back.pop(e["detail"]["request_id"], None)

    def switch(self, e: dict[str, Any], _scope: Scope) -> None:
        self.paused = e["detail"]["after"]["ingest"] == "paused"
        self.backpressure_off = e["detail"]["after"].get("backpressure") == "disabled"
        self.maintenance_off = e["detail"]["after"].get("maintenance") == "disabled"

    def apply(self, e: dict[str, Any]) -> None:
        name = e["event"]
        if name == EventName.LEASE_ACQUIRED:
            step = {"commit": self.commit, "claim": self.claim}.get(e["kind"], self.maintain)
        else:
            step = {
                EventName.LEASE_RELEASED: self.end,
                EventName.LEASE_EXPIRED: self.end,
                EventName.LEASE_REVOKED: self.end,
                EventName.INTENT_OPENED: self.open_intent,
                EventName.BACKPRESSURE_ON: self.hold_back,
                EventName.INTENT_EXPIRED: self.close_intent,
                EventName.INTENT_WITHDRAWN: self.close_intent,
                EventName.INTENT_FULFILLED: self.close_intent,
                EventName.SWITCH_SET: self.switch,
            }.get(name, lambda _e, _s: None)
        step(e, _scope(e["detail"].get("partitions")))


def replay(history: History) -> list[str]:
    """Invariants 1, 2, 3, 5, 6 and 8 by replaying each table's events in commit order."""
    violations: list[str] = []
    tables: dict[str, _Table] = {}
    for event in history.events:
        name = event["table_name"]
        model = tables.setdefault(name, _Table(name, violations))
        model.apply(event)
    return violations


Span = tuple[datetime, datetime, str, Scope]


def maintenance_spans(history: History) -> dict[str, list[Span]]:
    """Each maintenance lease's live interval in database time, per table."""
    return lease_spans(history, "maintenance")


def lease_spans(history: History, kind: str) -> dict[str, list[Span]]:
    """Each `kind` lease's live interval in database time, per table, from the audit trail."""
    spans: dict[str, list[Span]] = defaultdict(list)
    granted: dict[str, dict[str, Any]] = {}
    for e in history.events:
        if e["kind"] != kind or not e["lease_id"]:
            continue
        if e["event"] == EventName.LEASE_ACQUIRED:
            granted[e["lease_id"]] = e
            continue
        if e["event"] in (EventName.LEASE_RELEASED, EventName.LEASE_REVOKED):
            start = granted.pop(e["lease_id"])
            end = e["at"]
        elif e["event"] == EventName.LEASE_EXPIRED:
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


def _overlapping(spans: list[Span]) -> list[tuple[str, str]]:
    """Pairs of spans live at the same instant with intersecting scopes."""
    return [
        (id1, id2)
        for n, (s1, e1, id1, scope1) in enumerate(spans)
        for s2, e2, id2, scope2 in spans[n + 1 :]
        if s2 < e1 and s1 < e2 and _overlap(scope1, scope2)
    ]


_INTENT_ENDS = {EventName.INTENT_EXPIRED, EventName.INTENT_WITHDRAWN, EventName.INTENT_FULFILLED}


def backpressure_outside_claims(history: History) -> list[str]:
    """inv8 on database-time intervals: each backpressure intent (its `backpressure.on`, then
    its end: withdrawn, fulfilled, or expired at its `expired_at`) lies within the live span of
    the claim it was opened under; one still open at the end of the history needs its claim
    still live."""
    claims = {span[2]: span for spans in lease_spans(history, "claim").values() for span in spans}
    opened: dict[str, tuple[datetime, str, str]] = {}  # by request id: (at, claim, table)
    ends: list[tuple[str, datetime, datetime, str]] = []  # (claim, opened, ended, table)
    for e in history.events:
        detail = e["detail"]
        if e["event"] == EventName.BACKPRESSURE_ON:
            for request_id in detail["request_ids"]:
                opened.setdefault(request_id, (e["at"], e["lease_id"], e["table_name"]))
        elif e["event"] in _INTENT_ENDS and detail.get("cause") == "backpressure":
            start = opened.pop(detail["request_id"], None)
            if start is None:
                continue
            end = e["at"]
            if e["event"] == EventName.INTENT_EXPIRED:
                end = datetime.fromisoformat(detail["expired_at"]).replace(tzinfo=None)
            ends.append((start[1], start[0], end, start[2]))
    ends += [(claim, at, datetime.max, table) for at, claim, table in opened.values()]
    violations = []
    slack = timedelta(milliseconds=1)  # an expired claim's end is rebuilt from float seconds
    for claim_id, start, end, table in ends:
        span = claims.get(claim_id)
        if span is None or start < span[0] or (span[1] < datetime.max and end > span[1] + slack):
            live = "never" if span is None else f"{span[0]} to {span[1]}"
            violations.append(
                f"inv8: {table} backpressure under claim {claim_id} from {start} to {end}, "
                f"the claim live {live}"
            )
    return violations


def intervals(history: History) -> list[str]:
    """Invariants 1, 2 and 6 again, on live intervals in database time."""
    violations: list[str] = []
    for table, claims in lease_spans(history, "claim").items():
        for id1, id2 in _overlapping(claims):
            violations.append(f"inv6: {table} claims {id1} and {id2} overlap")
    spans = maintenance_spans(history)
    for table, leases in spans.items():
        for id1, id2 in _overlapping(leases):
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


def fenced(history: History) -> list[str]:
    """Invariant 7, over the trail in commit order: the lease a `catalog.commit` of kind
    maintenance names was granted before it and not ended by then (released, revoked or swept
    as expired), and, unless a client renewed it, its TTL had not run out at the commit's
    instant (database time)."""
    violations: list[str] = []
    renewed = {r.lease_id for r in history.renews}
    for e, live in _commits(history, ("maintenance", "claim")):
        if e["kind"] == "maintenance":
            problem = _unfenced(e, live.get(e["lease_id"] or ""), renewed)
            if problem:
                violations.append(f"inv7: {e['table_name']} event {e['id']}: {problem}")
    return violations


def _commits(
    history: History, kinds: tuple[str, ...]
) -> Iterator[tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """Each `catalog.commit` of the trail in commit order, with the leases of `kinds` the trail
    says are live at it (granted, and not yet released, revoked or swept as expired), by id."""
    live: dict[str, dict[str, Any]] = {}
    for e in history.events:
        if e["event"] == EventName.LEASE_ACQUIRED and e["kind"] in kinds:
            live[e["lease_id"]] = e
        elif e["event"] in (
            EventName.LEASE_RELEASED,
            EventName.LEASE_REVOKED,
            EventName.LEASE_EXPIRED,
        ):
            live.pop(e["lease_id"], None)
        elif e["event"] == EventName.CATALOG_COMMIT:
            yield e, live


def _unfenced(e: dict[str, Any], lease: dict[str, Any] | None, renewed: set[str]) -> str | None:
    detail = e["detail"]
    if lease is None or lease["table_name"] != e["table_name"]:
        return (
            f"{detail['operations']} committed under no live lease of the table ({e['lease_id']})"
        )
    if lease["kind"] == "claim":
        removal = set(detail["operations"]) == {"remove-snapshots"}
        return None if removal else f"{detail['operations']} committed under a claim"
    if e["token"] != lease["token"]:
        return f"token {e['token']} is not lease {lease['lease_id']}'s ({lease['token']})"
    touched = _scope(detail.get("partitions"))
    held = _scope(lease["detail"].get("partitions"))
    if held is not None and (touched is None or not touched <= held):
        return (
            f"touched {sorted(touched or ['the whole table'])} outside lease scope {sorted(held)}"
        )
    expiry = lease["at"] + timedelta(seconds=lease["detail"]["ttl_s"])
    if lease["lease_id"] not in renewed and e["at"] >= expiry:
        return f"committed at {e['at']}, after lease {lease['lease_id']} expired at {expiry}"
    return None


def held(history: History) -> list[str]:
    """Invariant 10, over the trail in commit order: each foreign `catalog.commit` of kind data
    that can conflict against the maintenance leases live at its instant (by the trail, and by
    their TTL unless a client renewed them, whose expiry the trail does not say: those count as
    live until they end)."""
    violations: list[str] = []
    renewed = {r.lease_id for r in history.renews}
    for e, live in _commits(history, ("maintenance",)):
        if (
            e["kind"] == "data"
            and e["detail"].get("foreign")
            and e["detail"].get("can_conflict", True)
        ):
            touched = _scope(e["detail"].get("partitions"))
            for lease in live.values():
                expiry = lease["at"] + timedelta(seconds=lease["detail"]["ttl_s"])
                if (
                    lease["table_name"] == e["table_name"]
                    and (lease["lease_id"] in renewed or e["at"] < expiry)
                    and _overlap(touched, _scope(lease["detail"].get("partitions")))
                ):
                    violations.append(
                        f"inv10: {e['table_name']} event {e['id']}: {e['detail']['operations']} "
                        f"that can conflict committed inside lease {lease['lease_id']}"
                    )
    return violations


def owned(history: History) -> list[str]:
    """Invariant 9, over the trail: who took each lease and opened each intent (the `actor`
    of its grant or opening), and who ended it or committed under it."""
    violations: list[str] = []
    taker: dict[str, str] = {}  # lease id, or (table, request id) of an intent: its principal
    allowed = history.operators | {"lakelock"}
    for e in history.events:
        name, actor = e["event"], e.get("actor")
        request = f"{e['table_name']}/{e['detail'].get('request_id')}"
        if name == EventName.LEASE_ACQUIRED:
            taker[e["lease_id"]] = actor
        elif name in (EventName.INTENT_OPENED, EventName.BACKPRESSURE_ON):
            for request_id in e["detail"].get("request_ids") or [e["detail"]["request_id"]]:
                taker[f"{e['table_name']}/{request_id}"] = actor
        ended_by = {
            EventName.LEASE_RELEASED: taker.get(e["lease_id"] or ""),
            EventName.INTENT_WITHDRAWN: taker.get(request),
        }
        if name in ended_by and actor not in allowed and actor != ended_by[name]:
            violations.append(
                f"inv9: {e['table_name']} event {e['id']}: {name} by {actor}, "
                f"taken by {ended_by[name]}"
            )
        if (
            name == EventName.CATALOG_COMMIT
            and e["kind"] == "maintenance"
            and e["lease_id"]
            and actor != taker.get(e["lease_id"])
        ):
            violations.append(
                f"inv9: {e['table_name']} event {e['id']}: committed by {actor} under "
                f"lease {e['lease_id']} of {taker.get(e['lease_id'])}"
            )
    return violations


def check(history: History) -> list[str]:
    return (
        replay(history)
        + intervals(history)
        + backpressure_outside_claims(history)
        + renewals(history)
        + fenced(history)
        + held(history)
        + owned(history)
    )
