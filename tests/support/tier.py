"""The run's tier: `fast` for bin/test --fast (which sets LAKELOCK_TEST_TIER), else `full`.
tests/conftest.py drops what the fast tier does not run; tests/support/budget.py keeps each
tier's figures apart."""

from __future__ import annotations

import os

TIER = "fast" if os.environ.get("LAKELOCK_TEST_TIER") == "fast" else "full"
FAST_MARKS = "not spark and not flink and not slow and not bench"
"""The fast tier's tests (bin/test --fast passes it as -m): no JVM, nothing slow."""
