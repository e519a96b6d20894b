"""The streaming-health benchmark with the Flink writer at a small setting: a Flink upsert job
through the catalog front for a minute, lakelock's follower compacting the same table. What a
user of the figures relies on is asserted (the table sampled, exact, the job never restarted,
the front refused nothing, the compactor committed, the readers ran, Spark's and Trino's, the
report names the writer); no timing or goal is."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.flink, pytest.mark.slow, pytest.mark.bench]


def test_flink_writer_run_samples_an_exact_table_the_follower_compacts(tmp_path):
    out = tmp_path / "health"
    args = ["--writer", "flink", "--modes", "partitions", "--compactor", "follow", "--trino"]
    args += ["--duration-s", "75", "--rate", "20", "--sample-every-s", "5"]
    run_module("benchmarks.streaming_health", *args, "--out", str(out), timeout=900)
    (run,) = json.loads((out / "results.json").read_text())
    assert (run["writer"], run["mode"], run["compactor"]) == ("flink", "partitions", "follow")
    assert run["samples"] and all(len(s) == 4 for s in run["samples"])
    assert run["partition_samples"] and run["partition_samples"][-1][1]
    # every key holds the last row landed for it, read by Iceberg's reader from the metadata
    assert run["rows_correct"] is True and run["table_problems"] == []
    assert (run["flink_restarts"], run["flink_status"]) == (0, "CANCELED")
    assert run["front_refusals"] == {}
    assert run["front_commits"]["data"] == run["flink_commits"] >= 1
    assert run["compactor_outcomes"].get("compacted", 0) >= 1
    assert run["follow_runs"] >= 1
    # one file a second, each taken by a commit: the lag of each is known
    assert run["files_landed"] >= 30 and run["commit_lag_p50_s"] > 0
    assert run["query_errors"] == []
    timed = [q for q in run["queries"] if q.get("snapshot_id")]
    assert timed, run["queries"]
    queries = ("count", "scan", "lookup")
    assert all(q[f"{k}_copy_s"] > 0 for q in timed for k in queries)
    # Trino read the same snapshot and copy through the two fronts
    assert all(q[f"trino_{k}_s"] > 0 and q[f"trino_{k}_copy_s"] > 0 for q in timed for k in queries)
    report = (out / "report.md").read_text()
    assert "| Trino: lookup of 100 keys, x compacted copy |" in report
    assert "## flink upsert" in report and "Writer: flink," in report
    assert "| | partitions (follow) |" in report
    assert "| Flink job restarts (status) | 0 (CANCELED) |" in report
    png = (out / "streaming_health.png").read_bytes()
    assert png.startswith(b"\x89PNG")
