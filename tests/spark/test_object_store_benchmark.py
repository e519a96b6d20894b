"""benchmarks.object_store at its smallest: one round of each operation in each catalog, both
on the project's S3 server; the requests are counted and the front's own commits timed. No
figure is judged, but what the front reads per commit is: no HEAD, no LIST, and an append
costs no request more through the front than straight to the JdbcCatalog."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench]


def test_the_object_store_benchmark_counts_each_commits_requests(tmp_path):
    out = tmp_path / "object-store.json"
    run_module(
        "benchmarks.object_store",
        *("--rounds", "1", "--warmup", "1", "--json", str(out)),
        timeout=900,
    )
    figures = json.loads(out.read_text())
    ops = {(r["catalog"], r["operation"]): r for r in figures["results"]}
    assert set(ops) == {
        (catalog, operation)
        for catalog in ("front", "jdbc")
        for operation in ("append", "upsert", "compaction")
    }
    assert [ops[(c, "append")]["count"] for c in ("front", "jdbc")] == [4, 4]
    for op in ops.values():
        assert op["requests"]["PUT"] > 0 and op["requests"]["LIST"] == 0, op
    front, jdbc = ops[("front", "append")]["requests"], ops[("jdbc", "append")]["requests"]
    assert sum(front.values()) == sum(jdbc.values()), (front, jdbc)
    assert len(figures["front_commit_ms"]) == 6  # four appends, an upsert, a compaction
