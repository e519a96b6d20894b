"""spark-submit's entry script for the streaming ingest job; arguments as `lakelock-ingest`."""

import sys

from ingest_gate.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
