"""The jobs' two Iceberg versions (jobkit.maven.ICEBERG_VERSIONS) through the front, each Spark
job in a process of its own (a process's first session fixes its classpath).

Iceberg 1.11's Java client resends a commit whose answer it lost, and it commits once: Spark
on Iceberg 1.11's runtime
writes through a proxy that answers the first data commit 503 with `Retry-After` after the
front applied it, as a load balancer that gave up on its backend does. The client, told by
`/v1/config` that the front keeps keyed answers, sent an `Idempotency-Key`, resends with the
same key, and the front answers with the kept commit (docs/catalog-front.md §4). The table
is read back with pyiceberg's SqlCatalog straight from the database: one append, three rows.
A job pinned to 1.9.2 (LAKELOCK_ICEBERG_VERSION, for a cluster that pins it) still writes
through the front, sending no key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from testkit.lossy_proxy import LossyProxy
from tests.conftest import front_fixture
from tests.support.helpers import HANG_GUARD_S

pytestmark = pytest.mark.spark


front = front_fixture("resend", ["sqlite"])


def is_data_commit(method: str, path: str, body: bytes) -> bool:
    """A commit to a table that adds a snapshot (the INSERT's, not the CREATE's)."""
    return method == "POST" and "/tables/" in path and b'"add-snapshot"' in body


def insert(url: str, token: str, table: str, iceberg: str) -> dict[str, Any]:
    """testkit.spark_insert on Iceberg `iceberg` through the catalog at `url`: what it printed."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "testkit.spark_insert",
            *("--uri", f"{url}/iceberg"),
            *("--token", token),
            *("--table", table),
        ],
        capture_output=True,
        text=True,
        timeout=3 * HANG_GUARD_S,
        env={**os.environ, "LAKELOCK_ICEBERG_VERSION": iceberg},
    )
    assert done.returncode == 0, done.stderr[-5000:]
    printed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return printed


def appends(front: Any, table: str) -> list[str]:
    """The table's snapshots' operations, read by pyiceberg straight from the database."""
    catalog = SqlCatalog("lakelock", uri=front.db_url, warehouse=front.store.uri)
    loaded = catalog.load_table(("db", table))
    assert sorted(loaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    return [s.summary.operation.value for s in loaded.metadata.snapshots]


def test_a_1_11_client_resends_a_commit_whose_answer_was_lost_and_it_lands_once(front):
    with LossyProxy(front.url, picks=is_data_commit, lose=1) as proxy:
        printed = insert(proxy.url, front.token("job"), "resent", "1.11.0")
    assert printed == {"iceberg": "1.11.0", "ids": [1, 2, 3]}
    commits = [s for s in proxy.seen if is_data_commit(s.method, s.path, s.body)]
    # the first applied and lost, the resend answered with the kept commit
    assert [(c.answered, c.lost) for c in commits] == [(200, True), (200, False)]
    keys = {c.headers.get("Idempotency-Key") for c in commits}
    assert len(keys) == 1 and None not in keys, [c.headers for c in commits]
    assert appends(front, "resent") == ["append"]


def test_a_job_pinned_to_1_9_2_writes_through_the_front_without_keys(front):
    with LossyProxy(front.url, picks=is_data_commit, lose=0) as proxy:
        printed = insert(proxy.url, front.token("job"), "pinned", "1.9.2")
    assert printed == {"iceberg": "1.9.2", "ids": [1, 2, 3]}
    commits = [s for s in proxy.seen if is_data_commit(s.method, s.path, s.body)]
    assert [c.answered for c in commits] == [200]
    assert commits[0].headers.get("Idempotency-Key") is None
    assert appends(front, "pinned") == ["append"]
