"""benchmarks.batch_count at a tiny setting: every way counts the batch and finds its partitions
(the script asserts both); no figure is judged."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_batch_count_benchmark_measures_each_way(tmp_path):
    out = tmp_path / "batch_count.json"
    stdout = run_module(
        "benchmarks.batch_count", "--rows", "60", "--hours", "3", "--runs", "1", "--json", str(out)
    )
    figures = json.loads(out.read_text())
    assert list(figures) == ["count only", "count + distinct", "one groupBy"]
    assert all(row["median_ms"] > 0 for row in figures.values())
    assert "60 rows over 3 hour partitions" in stdout
