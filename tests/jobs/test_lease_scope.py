"""Which scope the ingest job's commit leases take, decided without Spark (the spec, the
batch's partition values and the gate are stand-ins); tests/spark/test_ingest_scope.py runs it
on real tables against the service."""

from __future__ import annotations

import logging
from datetime import date
from typing import Any

import pytest

from ingest_gate.job import run as job
from ingest_gate.job.config import ConfigError, load_config
from ingest_gate.job.gating import Ungated
from ingest_gate.job.run import BatchWriter
from jobkit.partition import PartitionField, PartitionScope, PartitionSpec

DT_HR = PartitionSpec(
    spec_id=0,
    fields=(
        PartitionField("dt", "date", "identity", "dt"),
        PartitionField("hr", "int", "identity", "hr"),
    ),
)
VALUES = [(date(2024, 6, 20), 13), (date(2024, 6, 20), 14)]


@pytest.fixture
def scope_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """partition_scope and batch_partition_counts replaced; the list collects scope reads."""
    reads: list[str] = []

    def fake_scope(spark: Any, table: str, *, key_columns: Any) -> PartitionScope:
        reads.append(table)
        reason = None if "hr" in key_columns else "merge key (event_id, dt) lacks hr"
        return PartitionScope(DT_HR, reason)

    monkeypatch.setattr(job, "partition_scope", fake_scope)
    monkeypatch.setattr(job, "batch_partition_counts", lambda *a, **k: dict.fromkeys(VALUES, 3))
    return reads


class Batch:
    """A stand-in for the deduplicated micro-batch: 6 rows."""

    def count(self) -> int:
        return 6


def writer(**overrides: Any) -> BatchWriter:
    values = {"key_columns": ["event_id", "dt", "hr"], **overrides}
    return BatchWriter(load_config(overrides=values), gate=Ungated(), query_id="q")


def scope_of(w: BatchWriter, batch_id: int = 0) -> tuple[list[str] | None, str | None]:
    """What the writer leases and filters for a batch, as a merge computes it."""
    rows, values = w._count(None, Batch())
    assert rows == 6  # counted by partition or as a whole, the batch is the same size
    names, merge_filter = w._batch_scope(values, batch_id)
    return names, merge_filter.predicate


def test_usable_scope_leases_the_batch_partitions_and_filters_the_merge(scope_reads):
    names, merge_filter = scope_of(writer())
    assert names == ["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"]
    assert merge_filter == (
        "(t.`dt` = DATE'2024-06-20' AND t.`hr` = 13) OR (t.`dt` = DATE'2024-06-20' AND t.`hr` = 14)"
    )


def test_key_without_a_partition_column_leases_the_table_and_says_why_once(
    scope_reads, caplog: pytest.LogCaptureFixture
):
    w = writer(key_columns=["event_id", "dt"])
    with caplog.at_level(logging.INFO, logger="ingest_gate.job.run"):
        scopes = [scope_of(w, batch_id) for batch_id in range(3)]
    assert scopes == [(None, None)] * 3
    assert scope_reads == ["local.db.events"]  # decided once per run
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "commit leases on local.db.events cover the whole table, not partitions: "
        "merge key (event_id, dt) lacks hr"
    ]


def test_lease_scope_table_keeps_leases_and_merge_as_without_scopes(scope_reads):
    assert scope_of(writer(lease_scope="table")) == (None, None)
    assert scope_reads == []  # the spec is not even read


def test_a_batch_in_more_partitions_than_allowed_leases_the_table_keeps_the_filter(
    scope_reads, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="ingest_gate.job.run"):
        names, merge_filter = scope_of(writer(max_lease_partitions=1), 4)
    assert names is None and merge_filter is not None
    assert "batch 4 touches 2 partitions" in caplog.text


def test_a_batch_wider_than_the_exact_filter_leases_its_partitions_and_filters_by_field(
    scope_reads,
):
    w = writer(exact_filter_max_partitions=1)
    names, merge_filter = w._batch_scope(w._count(None, Batch())[1], 0)
    assert names == ["dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"]  # still exactly its own
    assert merge_filter.kind == "superset"
    assert merge_filter.predicate == "t.`dt` IN (DATE'2024-06-20') AND t.`hr` IN (13, 14)"
    at_the_limit = writer(exact_filter_max_partitions=2)
    assert at_the_limit._batch_scope(VALUES, 0)[1].kind == "exact"


def test_ungated_pass_reports_its_scope():
    with Ungated().commit("local.db.events", partitions=["dt=2024-06-20/hr=13"]) as gate_pass:
        assert gate_pass.as_dict()["scope"] == ["dt=2024-06-20/hr=13"]
    with Ungated().commit("local.db.events") as gate_pass:
        assert gate_pass.as_dict()["scope"] == "table"


def test_lease_scope_config_is_checked():
    assert load_config().lease_scope == "partitions"
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"lease_scope": "rows", "max_lease_partitions": 0})
    assert "lease_scope: must be one of partitions, table" in str(exc.value)
    assert "max_lease_partitions: must be >= 1" in str(exc.value)
    assert load_config().exact_filter_max_partitions == 100
    with pytest.raises(ConfigError, match="exact_filter_max_partitions"):
        load_config(overrides={"exact_filter_max_partitions": -1})
