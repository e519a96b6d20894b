"""The seeds of the fuzzers: fixed in the test suite, new ones under `bin/fuzz`.

A run of `bin/test` (and of CI) fuzzes with the same seeds every time, so it fails only where
the code or the contract changed, never because a new seed happened upon an old gap. Exploring
new inputs is `bin/fuzz` (LAKELOCK_FUZZ_SEED=random, or `--seed N` to repeat one); a failure it
finds prints its seed and becomes a fixed case (tests/server/test_contract_cases.py) before it is
fixed.
"""

from __future__ import annotations

import os
import random

__all__ = ["FIXED_SEED", "fuzz_seed", "repeat_hint"]

FIXED_SEED = 20240620


def fuzz_seed() -> int:
    """LAKELOCK_FUZZ_SEED: unset, the fixed seed; `random`, a new one; else that seed."""
    value = os.environ.get("LAKELOCK_FUZZ_SEED", "").strip()
    if value == "random":
        return random.SystemRandom().randrange(2**32)
    if value:
        try:
            return int(value)
        except ValueError:
            raise ValueError(
                f"LAKELOCK_FUZZ_SEED={value!r}: an integer, or `random` for a new seed"
            ) from None
    return FIXED_SEED


def repeat_hint(seed: int) -> str:
    """What to do with a failure found with `seed`."""
    return (
        f"fuzzed with seed {seed}: repeat it with `bin/fuzz --seed {seed}`; add the failing "
        "request as a fixed case (tests/server/test_contract_cases.py), then fix the service"
    )
