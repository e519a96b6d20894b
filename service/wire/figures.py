"""Quantiles of samples, one rule for the service's figures, the demo's and the benchmarks'.

    quantile([3.0, 1.0, 2.0, 4.0], 0.5)         # 2.0: nearest rank, one of the values
    quantile([0.1234, 0.2], 0.95, ndigits=3)    # 0.2
    quantile([], 0.95)                          # None

Nearest rank, not interpolation: a figure is always one of the samples taken, the p95 of two
samples is the larger, and the p50 of two the smaller (tests/lock/test_due.py counts on it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["quantile"]


def quantile(values: Iterable[float], q: float, *, ndigits: int | None = None) -> float | None:
    """The `q` quantile (0 to 1) of `values` by nearest rank: the smallest value that at least
    a `q` share of them are no larger than (one of the values, never between two); None for no
    values. `ndigits` rounds it, as `round` does."""
    ordered = sorted(values)
    if not ordered:
        return None
    found = ordered[max(0, math.ceil(q * len(ordered)) - 1)]
    return found if ndigits is None else round(found, ndigits)
