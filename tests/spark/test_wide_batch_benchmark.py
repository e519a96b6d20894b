"""benchmarks.wide_batch at a tiny setting: every MERGE commits the batch's rows and deletes
(the script asserts both from its snapshot), each filter plans the files it should, and a kept
warehouse is reused; no time is judged."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_wide_batch_benchmark_merges_under_each_filter(tmp_path):
    out, warehouse = tmp_path / "wide.json", tmp_path / "warehouse"
    args = ["--partitions", "40", "--files", "2", "--rows-per-file", "4", "--rows", "60"]
    args += ["--widths", "1,8", "--layouts", "recent,spread", "--warehouse", str(warehouse)]
    run_module("benchmarks.wide_batch", *args, "--json", str(out), timeout=600)
    document = json.loads(out.read_text())
    results = document["results"]
    planned = {(r["layout"], r["width"], r["kind"]): r["files_planned"] for r in results}
    assert all(r["error"] is None and r["seconds"] > 0 for r in results)
    assert all(0 < r["old_gen_peak_mib"] < document["heap_mib"] for r in results)
    layouts = ("recent", "spread")
    assert planned == {
        **{(layout, 1, kind): 2 for layout in layouts for kind in ("exact", "superset")},
        **{(layout, width, "none"): 80 for layout in layouts for width in (1, 8)},
        ("recent", 8, "exact"): 16,  # hours 32-39: hours 8-15 of the second day
        ("recent", 8, "superset"): 16,
        ("spread", 8, "exact"): 16,  # hours 0, 5, ..., 35: 0, 5, 10, 15, 20 and 1, 6, 11
        ("spread", 8, "superset"): 30,  # 8 hours x 2 days, less hours 20 of day 2 (none yet)
    }

    stdout = run_module("benchmarks.wide_batch", *args, "--filters", "exact", timeout=600)
    assert f"reusing the table in {warehouse}" in stdout
