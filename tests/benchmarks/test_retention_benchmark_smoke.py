"""benchmarks.retention runs end to end at a tiny setting (SQLite) and prints every figure it
promises. No figure is judged: timing on a shared machine says nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.helpers import run_module

pytestmark = pytest.mark.slow


def test_retention_benchmark_prunes_everything_past_the_retention(tmp_path: Path) -> None:
    out = tmp_path / "retention.json"
    run_module(
        "benchmarks.retention",
        *["--database", "sqlite", "--rows", "3000", "--tables", "20", "--repeats", "2"],
        *["--json", str(out)],
    )
    figures = json.loads(out.read_text())
    assert figures["sweep"]["due_tables"] == 5
    assert figures["state_gauges"]["live"] == 50
    # every old lease goes; events too, except the newest of the 10 tables with no recent one
    assert figures["prune"]["commit_leases_deleted"] == 3000
    assert figures["prune"]["events_deleted"] == 3000 - 10
    for key in ("at_0002_median_ms", "at_0003_median_ms", "migration_0003_s"):
        assert figures["sweep"][key] >= 0
    assert figures["prune"]["longest_batch_ms"] > 0
    assert figures["probe_while_pruning"]["writes"] > 0
