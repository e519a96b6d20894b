"""`bin/run --writer flink --source kafka|binlog` (demo.flink): the demo's Flink upsert job
through the catalog front beside the compactor, from a Kafka topic or a private MariaDB table's
binlog, with the same end check. Every JVM runs in the demo's own processes, so the module is a
unit of its own beside the JVM modules (tests/conftest.py, JVM_APART).

The default source, a landing folder, differs from these by the feed alone (demo.flink's
UpsertFeed and the writer's `--landing`), which the Flink writer's own tests run
(tests/spark/test_flink_writer.py), so the demo runs from the two sources that need more of it:
a broker or a MariaDB it starts, and the feed that writes into them."""

from __future__ import annotations

import json

import pytest

from tests.spark.test_flink_writer import WAIT_S
from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.flink]


@pytest.mark.parametrize("source", ["kafka", "binlog"])
def test_bin_run_writer_flink_runs_the_demo_and_its_check(tmp_path, source):
    """`bin/run --writer flink --source kafka|binlog`: the demo from a topic of three
    partitions on a broker it starts, or a private MariaDB table's binlog, beside the
    compactor, with the same end check."""
    summary = tmp_path / "summary.json"
    run_module(
        "demo",
        *("--writer", "flink", "--files", "3", "--rows-per-file", "100", "--keys", "200"),
        *("--checkpoint-every-s", "1"),  # each file committed sooner than at the default 2 s
        *("--source", source),
        *("--compactions", "1", "--workdir", str(tmp_path / "run"), "--summary", str(summary)),
        timeout=WAIT_S * 2,
    )
    result = json.loads(summary.read_text())
    assert result["checks"] == {"passed": True, "problems": []}
    assert result["flink_job"]["restarts"] == 0
    assert set(result["compactions"]) == {"compacted"}
    assert result["rows_in_table"] == result["distinct_keys_written"] > 0
