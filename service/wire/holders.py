"""Holders and the runs under them: a compactor claims a table as `<holder>` and each of its
runs acts as `<holder>/<run>` (docs/jobs.md §3), one rule for the service and the compactor.

    run_holder("compactor@host:42", "9f2c")                    # 'compactor@host:42/9f2c'
    is_run_under("compactor@host:42/9f2c", "compactor@host:42")  # True
    is_run_under("compactor@host:42/", "compactor@host:42")      # False: no run
    acts_under("compactor@host:42", "compactor@host:42")         # True: the holder itself
"""

from __future__ import annotations

__all__ = ["acts_under", "is_run_under", "run_holder"]


def run_holder(holder: str, run: str) -> str:
    """The holder a run `run` of `holder` acts as: `<holder>/<run>`."""
    if not run:
        raise ValueError(f"a run under {holder!r} needs a name")
    return f"{holder}/{run}"


def is_run_under(holder: str, claimant: str) -> bool:
    """Whether `holder` is a run under `claimant`: exactly `<claimant>/<run>`, `<run>` not
    empty (it may hold `/` itself)."""
    return len(holder) > len(claimant) + 1 and holder.startswith(claimant + "/")


def acts_under(holder: str, claimant: str) -> bool:
    """Whether `holder` acts under what `claimant` holds: it is `claimant` or a run under it."""
    return holder == claimant or is_run_under(holder, claimant)
