"""The scopes benchmark at a small setting: both modes run, report and timeline written. No
timings are asserted; the figures come from `python -m benchmarks.scopes`."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_small_scopes_benchmark_compares_both_modes_on_a_correct_table(tmp_path):
    out = tmp_path / "scopes"
    # by counts: each mode runs until its 600 events are in the table, however busy the machine
    args = ["--events", "600", "--rate", "100", "--compact-every-s", "4", "--out", str(out)]
    run_module("benchmarks.scopes", *args, timeout=1800)
    modes = json.loads((out / "results.json").read_text())
    assert [m["mode"] for m in modes] == ["table", "partitions"]
    for mode in modes:
        assert mode["rows_correct"] is True
        assert mode["failed_batches"] == 0
        assert mode["batches"] == len(mode["timeline"]["commits"]) > 0
        assert sum(mode["data_files_per_partition"].values()) == mode["data_files"] > 0
    # the whole-table mode leases the whole table, for ingest and compaction alike
    table = modes[0]["timeline"]
    assert all(lease[3] is None for lease in table["leases"])
    assert all(commit[1] is None for commit in table["commits"])
    # the scoped mode's ingest leases name partitions, as the table's own paths
    scoped = modes[1]
    names = set(scoped["data_files_per_partition"])
    assert all(set(commit[1]) <= names for commit in scoped["timeline"]["commits"])
    report = (out / "report.md").read_text()
    assert "| ingest held by maintenance, total (s) |" in report
    png = (out / "scopes.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
