"""Table names and shell-style patterns in a compactor config: pure functions, no Spark.

    is_pattern("lake.db.*")                         # True: `*`, `?` or `[...]` in a part
    matches("lake.db.*", "lake.db.events")          # True; `*` never crosses a dot
    matches("lake.*.events", "lake.raw.events")     # True
    check_name("lake.db.*")                         # raises ValueError: what to write instead
    expand(["lake.db.*", "lake.db.kept"], candidates)   # every name, sorted, each once
    applying(patterns, "lake.db.events")            # the patterns that match, in file order

A name is `namespace.table` or `catalog.namespace.table`. A pattern has the same shape, with
fnmatch wildcards in the namespace or the table part (the catalog is a Spark catalog name the
session was built with, never a pattern). Each part is matched on its own (`fnmatch.fnmatchcase`),
so `lake.db.*` never reaches `lake.db.events.files` nor a nested namespace. Names and patterns
are compared as written: write a table's exact entry in the same form as the pattern it falls
under (both with the catalog, or both without).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Protocol, TypeVar

__all__ = ["WILDCARDS", "applying", "check_name", "expand", "is_pattern", "matches"]

WILDCARDS = frozenset("*?[")


def is_pattern(name: str) -> bool:
    """Whether `name` holds a wildcard (then it stands for the tables it matches)."""
    return any(c in WILDCARDS for c in name)


def matches(pattern: str, name: str) -> bool:
    """Whether table `name` falls under `pattern`, part by part (an exact name matches itself)."""
    want, have = pattern.split("."), name.split(".")
    if len(want) != len(have):
        return False
    return all(fnmatchcase(h, w) for w, h in zip(want, have, strict=True))


def check_name(name: str) -> str:
    """`name` when it is a table name or a pattern the compactor can expand.

    Raises:
        ValueError: not two or three dotted parts, an empty part, or a wildcard in the catalog.
    """
    parts = name.split(".")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError("must be namespace.table or catalog.namespace.table")
    if len(parts) == 3 and is_pattern(parts[0]):
        raise ValueError(
            "the catalog cannot be a pattern (only namespace and table: lake.db.*, lake.*.events)"
        )
    return name


def expand(selection: Sequence[str], candidates: Callable[[str], Iterable[str]]) -> list[str]:
    """Every table `selection` names: exact names as given, each pattern replaced by the
    `candidates(pattern)` it matches (the catalog's tables in the pattern's namespaces);
    sorted, each once. An exact name is kept even when the catalog does not list it, so that a
    missing table is reported, not silently dropped."""
    names: set[str] = set()
    for item in selection:
        if is_pattern(item):
            names.update(n for n in candidates(item) if matches(item, n))
        else:
            names.add(item)
    return sorted(names)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def applying(patterns: Iterable[N], name: str) -> list[N]:
    """The entries of `patterns` whose pattern matches `name`, in the order given (the file's:
    a later one's overrides win over an earlier one's)."""
    return [p for p in patterns if matches(p.name, name)]
