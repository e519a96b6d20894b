"""The commits the catalog front parks now, per token and in all, in this service process
(LAKELOCK_CATALOG_MAX_PARKED, LAKELOCK_CATALOG_MAX_PARKED_PER_TOKEN): a commit held past them
is answered 429 at once instead of parked (docs/catalog-front.md §4).

    parking = Parking(most=256, per_token=32)
    full = parking.full("ingest")          # the setting that has no room, or None
    with parking.parked("ingest"): ...     # one place taken while the commit waits
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Parking"]


class Parking:
    """Places for parked commits; one event loop takes and frees them, so no lock."""

    def __init__(self, *, most: int, per_token: int) -> None:
        self.most, self.per_token = most, per_token
        self._by_token: Counter[str] = Counter()

    @property
    def count(self) -> int:
        return self._by_token.total()

    def full(self, principal: str) -> str | None:
        """The setting a new parked commit of `principal` would exceed, or None."""
        if self.count >= self.most:
            return "LAKELOCK_CATALOG_MAX_PARKED"
        if self._by_token[principal] >= self.per_token:
            return "LAKELOCK_CATALOG_MAX_PARKED_PER_TOKEN"
        return None

    @contextmanager
    def parked(self, principal: str) -> Iterator[None]:
        self._by_token[principal] += 1
        try:
            yield
        finally:
            self._by_token[principal] -= 1
            if not self._by_token[principal]:
                del self._by_token[principal]
