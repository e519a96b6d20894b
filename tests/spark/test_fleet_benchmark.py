"""The fleet benchmarks at a small setting: the lake is built, both rounds run beside a real
ingest job, the two processes share the debt tables without overlap, the plan-time curve and the
debt picture are made; both scheduler modes compact everything. No
timings are asserted; the figures come from `python -m benchmarks.fleet` and
`python -m benchmarks.fleet_scheduler`."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_small_fleet_benchmark_shares_the_lake_between_two_processes(tmp_path):
    out = tmp_path / "fleet"
    args = ["--tables", "8", "--debt", "2", "--big", "1", "--big-files", "20", "--ticks", "2"]
    args += ["--ingest", "1", "--ingest-batches", "3", "--ingest-rows", "20", "--curve", "30,60"]
    run_module("benchmarks.fleet", *args, "--out", str(out), timeout=900)
    results = json.loads((out / "results.json").read_text())

    assert results["checks"] == {
        "tables_with_overlapping_claims_of_two_processes": 0,
        "tables_with_overlapping_maintenance_leases_of_two_processes": 0,
        "debt_tables": 2,
        "debt_tables_compacted_once_in_round_two": 2,
        "compactions_in_round_two_per_table": [1],
        "compactions_reported_per_debt_table_both_rounds": [2],
    }
    (first, second) = results["one"]["ticks"][0]
    debt = [[t for t in tick["queued"] if ".debt_" in t] for tick in (first, second)]
    assert (first["tables"], len(debt[0]), debt[1]) == (8, 2, [])
    for name in ("one", "two"):
        ((table, batches),) = results[name]["ingest"].items()
        assert ".stream_" in table
        # a batch the job finds already committed (its checkpoint lagging the commit) is
        # replayed as a no-op, never failed
        assert (batches["exit"], batches["committed"]) == (0, 3), batches
        assert set(batches) <= {"exit", "committed", "replayed"}, batches
        assert results[name]["debt_over_time"], "the sampler read the tables at least once"
    assert [c["files"] for c in results["plan_curve"]] == [30, 60]
    assert all(c["spark_jobs_per_read"] > 0 for c in results["plan_curve"])
    assert (out / "fleet.png").stat().st_size > 0
    assert all(t["rank_spark_jobs"] == 0 for p in results["two"]["ticks"] for t in p)
    assert results["big_table_costs"]["summary"]["spark_jobs_per_read"] == 0
    assert results["big_table_costs"]["full_plan_read"]["spark_jobs_per_read"] > 0
    assert "| two | 1 | 2 |" in (out / "report.md").read_text()


def test_small_scheduler_benchmark_runs_both_modes(tmp_path):
    out = tmp_path / "scheduler"
    args = ["--trials", "1", "--small", "1", "--big-partitions", "2", "--big-files", "3"]
    run_module("benchmarks.fleet_scheduler", *args, "--out", str(out), timeout=900)
    results = json.loads((out / "results.json").read_text())

    assert set(results) == {"fifo", "fair"}
    for (trial,) in results.values():
        assert trial["last_small_done_s"] <= trial["all_done_s"]
