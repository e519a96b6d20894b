"""The conflicts benchmark at its small setting: both modes run, report and timeline written.
No timings are asserted; the figures come from `python -m benchmarks.conflicts`."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_small_conflicts_benchmark_writes_a_consistent_report_and_timeline(tmp_path):
    out = tmp_path / "conflicts"
    # by counts: each mode runs until its 600 events are in the table, however busy the machine
    args = ["--events", "600", "--rate", "100", "--compact-every-s", "4", "--out", str(out)]
    run_module("benchmarks.conflicts", *args, timeout=1800)
    modes = json.loads((out / "results.json").read_text())
    assert [m["mode"] for m in modes] == ["uncoordinated", "coordinated"]
    for mode in modes:
        assert mode["failed_batches"] == len(mode["timeline"]["failed_batches"])
        assert mode["compaction_runs"] == len(mode["timeline"]["compactions"])
        assert mode["failed_compactions"] <= mode["compaction_runs"]
        assert mode["batches"] == len(mode["timeline"]["commits"]) > 0
        assert mode["rows_correct"] is True
    coordinated = modes[1]
    assert coordinated["failed_batches"] == 0 and coordinated["failed_compactions"] == 0
    report = (out / "report.md").read_text()
    assert "| failed streaming batches |" in report and "coordinated" in report
    png = (out / "conflicts.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
