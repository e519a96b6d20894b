"""`python -m compactor` and the `lakelock-compactor` console script (see compactor.job)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jobkit.maven import MavenMissing
from jobkit.spark import ConnectorMissing
from service.extras import needs_extras

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    with needs_extras("lakelock-compactor"):
        from compactor.job import main as job_main

        try:
            return job_main(argv)
        except (ConnectorMissing, MavenMissing) as exc:  # a jar not submitted or not fetched
            print(f"lakelock-compactor: {exc}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
