"""`python -m compactor` and the `lakelock-compactor` console script (see compactor.job)."""

from __future__ import annotations

import sys

from compactor.job import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
