"""`python -m flink_writer ...`: run the writer (flink_writer.job)."""

import sys

from flink_writer.job import main

sys.exit(main())
