"""The project's testing support: what the tests and benchmarks share to start the real parts on
loopback. It lives in the checkout only; no wheel ships it (tests/project/test_install.py).

testkit.database   fresh_database: a lock database at the migration head, dropped afterwards
demo.service       LocalService, free_port: the service as a child process (the demo runs it too)
testkit.spark_cds  the class-data archive of the tests' Spark drivers (bin/test makes it)
"""

from demo.service import LocalService, free_port
from testkit.database import fresh_database

__all__ = ["LocalService", "free_port", "fresh_database"]
