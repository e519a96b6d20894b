"""benchmarks.flink at a tiny setting: the Flink job through the front and straight to the
JdbcCatalog on MariaDB, without the compactor, from a Kafka topic; every row lands and no job
restarts (no figure is judged). Its other source, landed files, is the one `bin/run --writer
flink` reads (tests/spark/test_flink_demo.py)."""

import json

import pytest

from tests.support.helpers import run_module

pytestmark = [
    pytest.mark.spark,
    pytest.mark.flink,
    pytest.mark.slow,
    pytest.mark.bench,
    pytest.mark.mariadb,
]


def test_flink_benchmark_lands_every_row_on_both_paths(tmp_path, mariadb_session_url):
    url = mariadb_session_url  # the server the benchmark makes its databases on
    out = tmp_path / "flink.json"
    run_module(
        "benchmarks.flink",
        *("--files", "3", "--rows-per-file", "100", "--keys", "200", "--source", "kafka"),
        *("--compactor", "off", "--mariadb-url", url, "--json", str(out)),
    )
    cells = json.loads(out.read_text())["results"]
    assert [c["catalog"] for c in cells] == ["front", "jdbc"]
    assert all(c["rows"] == 303 and c["restarts"] == 0 and c["commits"] >= 1 for c in cells)
    assert cells[0]["refusals"] == {}
