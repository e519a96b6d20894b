"""`python -m lakelock_submit ingest|compactor|jars|py-files`: print a path for spark-submit
(see lakelock_submit)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lakelock_submit import SCRIPTS, jars, py_files, script
from service.extras import needs_extras


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakelock_submit",
        description="Print what spark-submit needs: a job's entry script, the jars "
        "(comma-separated, for --jars), or the zip of the executors' Python (for --py-files).",
    )
    parser.add_argument("what", choices=[*SCRIPTS, "jars", "py-files"])
    args = parser.parse_args(argv)
    if args.what == "jars":
        with needs_extras("python -m lakelock_submit jars"):
            from jobkit.maven import MavenMissing
            from jobkit.spark import IcebergMissing

            try:
                found = jars()
            except (IcebergMissing, MavenMissing) as exc:  # a bad LAKELOCK_ICEBERG_VERSION, no mvn
                print(f"python -m lakelock_submit jars: {exc}", file=sys.stderr)
                return 2
            print(",".join(str(path) for path in found))
    elif args.what == "py-files":
        print(py_files())
    else:
        print(script(args.what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
