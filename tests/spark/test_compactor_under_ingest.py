"""Compactions while the streaming job upserts continuously, both through one lakelock service."""

from __future__ import annotations

from datetime import timedelta

import pytest

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.procedure_config import DEFAULT_REWRITE_OPTIONS, RewriteDataFilesConfig
from compactor.report import Outcome
from demo.generate import EventGenerator
from ingest_gate.job.table import read_rows
from service.client import LeaseClient
from tests.spark.conftest import compactions_under_ingest, ingest_config

pytestmark = [pytest.mark.spark, pytest.mark.slow]

COMPACTIONS = 2
WAIT_S = 800.0  # a bound on the whole scenario, so a stuck run fails instead of hanging


@pytest.mark.timeout(900)
def test_compactions_under_continuous_ingest_fail_no_batch_and_lose_no_row(
    spark, tmp_path, lakelock_server
):
    table = "local.db.soak"
    ingest = ingest_config(
        spark,
        tmp_path,
        lakelock_server,
        "soak",
        trigger_interval_s=0.5,
        holder="ingest-soak",
        lease_ttl_s=10.0,
        poll_s=0.5,
        max_hold_s=120.0,
        policy="fail",
    )
    compaction = TableConfig(
        table,
        lease=LeaseConfig(ttl=timedelta(seconds=10), max_wait=timedelta(seconds=60)),
        plan=PlanConfig(min_small_files=2, min_delete_files=1),
        rewrite_data_files=RewriteDataFilesConfig(
            options={**DEFAULT_REWRITE_OPTIONS, "min-input-files": "2"}
        ),
    )
    gen = EventGenerator(seed=11, update_ratio=0.4, duplicate_ratio=0.1, late_update_ratio=0.1)
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as client:
        records, reports = compactions_under_ingest(
            spark, client, ingest, compaction, gen, compactions=COMPACTIONS, wait_s=WAIT_S
        )

    assert len(records) == len(gen.files)
    assert {r.outcome for r in records} == {"committed"}, [
        r.as_dict() for r in records if r.outcome != "committed"
    ]
    compacted = [r for r in reports if r.outcome == Outcome.COMPACTED]
    assert sum(r.totals().get("rewritten_data_files", 0) for r in compacted) > 0
    tokens = [r.token for r in compacted]
    assert tokens == sorted(tokens) and len(set(tokens)) == COMPACTIONS
    assert read_rows(spark, table) == gen.expected_rows()
