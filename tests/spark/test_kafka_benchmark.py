"""benchmarks.kafka at a tiny setting: a broker, two drains per partition count (gate and
compactor, and neither) and the lag phase; each drain leaves one row per distinct key (the
script exits 1 otherwise); no figure is judged."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_kafka_benchmark_drains_exactly_and_measures_lag(tmp_path):
    out = tmp_path / "kafka"
    run_module(
        "benchmarks.kafka",
        "--events",
        "300",
        "--partitions",
        "1",
        "2",
        "--per-batch",
        "200",
        "--lag-seconds",
        "5",
        "--rate",
        "50",
        "--compact-every-s",
        "3",
        "--out",
        str(out),
        timeout=900,
    )
    results = json.loads((out / "results.json").read_text())
    modes = [(t["partitions"], t["mode"]) for t in results["throughput"]]
    assert modes == [
        (1, "gate + compactor"),
        (1, "neither (the limit)"),
        (2, "gate + compactor"),
        (2, "neither (the limit)"),
    ]
    assert all(t["rows_equal_distinct_keys"] and t["batches"] >= 2 for t in results["throughput"])
    assert results["lag"]["batches"] >= 1 and results["lag"]["events"] > 0
