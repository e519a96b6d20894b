"""The hot-partition benchmark at a tiny setting: the partition is due after its batches, each
rewrite leaves it one data file and no delete file, and each step's time is split. No timings
are asserted; the figures come from `python -m benchmarks.hot_partition`."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_a_tiny_hot_partition_run_rewrites_the_partition_and_splits_its_time(tmp_path):
    out = tmp_path / "hot.json"
    args = ["--rewrites", "2", "--batches", "4", "--rows", "40", "--cold", "1"]
    stdout = run_module("benchmarks.hot_partition", *args, "--json", str(out), timeout=900)
    figures = json.loads(out.read_text())
    rewrites = figures["rewrites"]
    assert len(rewrites) == 2  # the warm-up left out
    for r in rewrites:
        assert r["outcome"] == "compacted" and r["compacted"] == ["dt=2024-06-20/hr=13"]
        # the partition held the last rewrite's file and 4 batches' files, and then one file
        assert r["files_before"] == [5, 4] and r["files_after"] == [1, 0]
        steps = {s["procedure"]: s for s in r["steps"]}
        assert list(steps) == [
            "rewrite_data_files",
            "remove_dangling_deletes",
            "rewrite_position_delete_files",
        ]
        # the ingest job writes no equality delete: the dangling step spends no Spark job
        assert steps.pop("remove_dangling_deletes")["jobs"] == 0
        for s in steps.values():
            parts = s["planning_s"] + s["spark_s"] + s["commit_s"]
            assert s["jobs"] >= 1 and parts == pytest.approx(s["seconds"], abs=0.01)
    assert figures["summary"]["rewrites"] == 2
    assert "rewrite_data_files: p50" in stdout
