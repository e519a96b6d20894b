"""The streaming-health benchmark at a small setting, on S3 with Trino (the table in the catalog
front on the project's S3 server): the default mode runs (the baseline, no compactor, is the
same run without one, and costs the suite a second run of every JVM), the table sampled, the
readers' queries run by Spark and by Trino, report and chart written. No timings or goals are
asserted; the figures come from `python -m benchmarks.streaming_health`."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench, pytest.mark.s3]


def test_small_streaming_health_run_samples_the_table_and_times_readers(tmp_path):
    out = tmp_path / "health"
    # by counts: the run lasts until its 800 events are in the table, however busy the machine;
    # the readers come at shares of --duration-s, the first ones once the table has a snapshot
    args = ["--events", "800", "--rate", "100", "--compact-every-s", "5", "--duration-s", "40"]
    args += ["--sample-every-s", "2", "--formats", "debezium", "--modes", "partitions"]
    args += ["--storage", "s3", "--trino"]
    run_module("benchmarks.streaming_health", *args, "--out", str(out), timeout=1800)
    runs = json.loads((out / "results.json").read_text())
    assert [(r["format"], r["mode"]) for r in runs] == [("debezium", "partitions")]
    (run,) = runs
    assert run["rows_correct"] is True
    assert run["failed_batches"] == 0
    assert run["samples"] and all(len(s) == 4 for s in run["samples"])
    assert run["query_errors"] == []
    timed = [q for q in run["queries"] if q.get("snapshot_id")]
    assert timed, run["queries"]  # the reader ran at least once on a table with a snapshot
    spark = ["count", "scan", "lookup", "count_read"]
    trino = ["trino_count", "trino_scan", "trino_lookup"]  # the Spark job's table, read
    for query in spark + trino:
        assert all(q[f"{query}_copy_s"] > 0 for q in timed), query
    assert run["storage"] == "s3"
    assert run["partition_samples"] and run["partition_samples"][-1][1]
    # the compactor followed the stream (the default): its runs were follow runs
    assert run["compactor"] == "follow" and run["compactor_runs"] >= 1
    assert run["follow_runs"] >= 1 and run["follow_run_p50_s"] > 0
    report = (out / "report.md").read_text()
    assert "## debezium, on S3" in report
    assert "| Trino: count, x compacted copy |" in report
    assert "| partition data files, worst mean / peak |" in report
    assert "| | partitions (follow) |" in report
    png = (out / "streaming_health.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
