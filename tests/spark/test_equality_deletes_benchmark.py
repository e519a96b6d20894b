"""The equality-deletes benchmark at a tiny setting: both copies keep their rows, the
conversion reads less than the rewrite and leaves no equality delete. No timings are asserted;
the figures come from `python -m benchmarks.equality_deletes`."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_a_tiny_run_converts_one_copy_and_compacts_the_other(tmp_path):
    out = tmp_path / "eq.json"
    args = ["--rows", "20000", "--deletes", "2", "--keys", "10", "--reads", "1"]
    stdout = run_module("benchmarks.equality_deletes", *args, "--json", str(out), timeout=900)
    figures = json.loads(out.read_text())
    assert figures["rows_equal"] and figures["rows_after"] == 20000 - 20
    convert, rewrite = figures["steps"]
    assert convert["output"]["converted_equality_delete_files"] == 2
    assert convert["output"]["deleted_positions"] == 20
    assert rewrite["output"]["rewritten_data_files"] == 1
    # the conversion reads the key column only; the rewrite every column
    assert 0 < convert["read_bytes"] < rewrite["read_bytes"]
    assert set(figures["readers"]) == {"equality deletes", "converted", "compacted"}
    assert "| convert_equality_deletes |" in stdout
