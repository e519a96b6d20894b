"""Iceberg 1.11's Java client resends a commit whose answer it lost, and it commits once: Spark
on Iceberg 1.11's runtime (jobkit.maven's `spark-iceberg-1.11`, in a process of its own)
writes through a proxy that answers the first data commit 503 with `Retry-After` after the
front applied it, as a load balancer that gave up on its backend does. The client, told by
`/v1/config` that the front keeps keyed answers, sent an `Idempotency-Key`, resends with the
same key, and the front answers with the kept commit (docs/catalog-front.md §4). The table
is read back with pyiceberg's SqlCatalog straight from the database: one append, three rows."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from testkit.lossy_proxy import LossyProxy
from tests.conftest import start_front
from tests.helpers import HANG_GUARD_S

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", params=["sqlite"])
def front(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    server = start_front(request, tmp_path_factory, "resend")
    yield server
    server.stop()


def is_data_commit(method: str, path: str, body: bytes) -> bool:
    """A commit to a table that adds a snapshot (the INSERT's, not the CREATE's)."""
    return method == "POST" and "/tables/" in path and b'"add-snapshot"' in body


def test_a_1_11_client_resends_a_commit_whose_answer_was_lost_and_it_lands_once(front):
    with LossyProxy(front.url, picks=is_data_commit, lose=1) as proxy:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "testkit.spark_1_11",
                *("--uri", f"{proxy.url}/iceberg"),
                *("--token", front.token("job")),
                *("--table", "resent"),
            ],
            capture_output=True,
            text=True,
            timeout=3 * HANG_GUARD_S,
        )
    assert done.returncode == 0, done.stderr[-5000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed == {"iceberg": "1.11.0", "ids": [1, 2, 3]}
    commits = [s for s in proxy.seen if is_data_commit(s.method, s.path, s.body)]
    # the first applied and lost, the resend answered with the kept commit
    assert [(c.answered, c.lost) for c in commits] == [(200, True), (200, False)]
    keys = {c.headers.get("Idempotency-Key") for c in commits}
    assert len(keys) == 1 and None not in keys, [c.headers for c in commits]
    catalog = SqlCatalog("lakelock", uri=front.db_url, warehouse=front.store.uri)
    table = catalog.load_table(("db", "resent"))
    assert [s.summary.operation.value for s in table.metadata.snapshots] == ["append"]
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
