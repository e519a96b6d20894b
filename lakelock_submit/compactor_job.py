"""spark-submit's entry script for the compactor; arguments as `lakelock-compactor`."""

import sys

from compactor.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
