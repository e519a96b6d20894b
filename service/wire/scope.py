"""Scopes: what part of a table a lease or intent covers, and which of them conflict
(docs/design.md §4).

    scope = None                                   # the whole table
    scope = frozenset({"dt=2024-06-20/hr=13"})     # a set of partitions, by Iceberg path
    conflicts("commit", scope_a, "maintenance", scope_b)   # kinds conflict and scopes intersect

A partition is named by its Iceberg partition path (`PartitionSpec.partitionToPath`): one or
more `<field>=<value>` joined by `/`, field and value URL-encoded, so neither holds `/` or `=`
(`jobkit.partition.partition_name` builds them for the jobs). The service compares names as
exact strings: two names for one partition would only make two writers not wait for each other,
and Iceberg still rejects the conflicting commit.

Kinds: `commit` (ingest, shared), `maintenance` (compaction, exclusive) and `intent` (a
maintenance request draining the commits it conflicts with), and `claim` (a compactor's hold
on a table, always the whole table). Commits never conflict with each other; maintenance
conflicts with commits and with maintenance; an intent stands for its maintenance request
towards commits only (it blocks new commit leases, and does not keep another maintenance
request from being granted or from draining); a claim conflicts with claims only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Literal

__all__ = [
    "MAX_NAME_CHARS",
    "PARTITION_PATTERN",
    "Scope",
    "ScopeKind",
    "conflicts",
    "covers",
    "decode",
    "encode",
    "intersects",
    "is_name",
    "label",
    "scope_of",
]

Scope = frozenset[str] | None
"""None is the whole table; otherwise a non-empty set of partition names."""

ScopeKind = Literal["commit", "maintenance", "intent", "claim"]

MAX_NAME_CHARS = 512
# <field>=<value>(/<field>=<value>)*: a field name is not empty, a value may be ("" is a value).
# Both are URL-encoded (java.net.URLEncoder), so they hold only these characters: letters,
# digits, . - * _, + for a space and %XX for everything else.
_TEXT = r"[A-Za-z0-9.*_%+-]"
_SEGMENT = rf"{_TEXT}+={_TEXT}*"
PARTITION_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*$"
_NAME = re.compile(PARTITION_PATTERN)


def scope_of(partitions: Iterable[str] | None) -> Scope:
    """The scope of a lease asked for `partitions` (None: the whole table)."""
    return None if partitions is None else frozenset(partitions)


def intersects(a: Scope, b: Scope) -> bool:
    """True when the two scopes share a partition; the whole table intersects everything."""
    return a is None or b is None or not a.isdisjoint(b)


def covers(a: Scope, b: Scope) -> bool:
    """True when scope `a` holds every partition of `b`: the whole table covers everything, a
    set of partitions never covers the whole table."""
    return a is None or (b is not None and b <= a)


_CONFLICTING_KINDS = {
    frozenset({"commit", "maintenance"}),
    frozenset({"commit", "intent"}),
    frozenset({"maintenance"}),
    frozenset({"claim"}),
}


def conflicts(kind_a: ScopeKind, scope_a: Scope, kind_b: ScopeKind, scope_b: Scope) -> bool:
    """Whether a lease (or intent) of `kind_a` on `scope_a` excludes one of `kind_b` on
    `scope_b`: their kinds conflict and their scopes intersect. Symmetric."""
    return frozenset({kind_a, kind_b}) in _CONFLICTING_KINDS and intersects(scope_a, scope_b)


def is_name(text: str) -> bool:
    return len(text) <= MAX_NAME_CHARS and _NAME.fullmatch(text) is not None


def encode(partitions: list[str] | None) -> str | None:
    """The stored form of a lease's partitions: a JSON array as the client sent it, or NULL."""
    return None if partitions is None else json.dumps(partitions, separators=(",", ":"))


def decode(stored: str | None) -> list[str] | None:
    return None if stored is None else list(json.loads(stored))


def label(partitions: list[str] | None) -> str:
    """The metrics label of a scope: `table` or `partitions` (never the names: bounded series)."""
    return "table" if partitions is None else "partitions"
