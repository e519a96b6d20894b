"""Compactions while the streaming job upserts continuously, both through one lakelock service."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.procedure_config import DEFAULT_REWRITE_OPTIONS, RewriteDataFilesConfig
from compactor.report import Outcome
from compactor.run import run_table
from demo.generate import EventGenerator
from ingest_gate.job.run import run
from ingest_gate.job.table import read_rows
from service.client import LeaseClient
from tests.spark.conftest import ingest_config

pytestmark = [pytest.mark.spark, pytest.mark.slow]

COMPACTIONS = 2
WAIT_S = 800.0  # a bound on the whole scenario, so a stuck run fails instead of hanging


@pytest.mark.timeout(900)
def test_compactions_under_continuous_ingest_fail_no_batch_and_lose_no_row(
    spark, tmp_path, lakelock_server
):
    table = "local.db.soak"
    landing = tmp_path / "landing"
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
    gen.write_file(landing, 40)
    handle = run(ingest, spark=spark)
    stop = threading.Event()

    def feed() -> None:
        # a new file whenever the stream is at most one file behind: ingest never stops and
        # never falls behind, however fast this machine runs it (one file per batch)
        while not stop.wait(0.1):
            if len(gen.files) - len(handle.records) < 2:
                gen.write_file(landing, 40)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    reports = []
    deadline = time.monotonic() + WAIT_S
    try:
        with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as client:
            while sum(r.outcome == Outcome.COMPACTED for r in reports) < COMPACTIONS:
                assert time.monotonic() < deadline, [r.as_dict() for r in reports]
                assert handle.query.isActive, handle.query.exception()
                # let a few batches add small files and position deletes between compactions
                batches = len(handle.records)
                while len(handle.records) < batches + 2 and time.monotonic() < deadline:
                    time.sleep(0.2)
                report = run_table(spark, client=client, config=compaction)
                assert report.outcome in (Outcome.COMPACTED, Outcome.SKIPPED), report.as_dict()
                reports.append(report)
    finally:
        stop.set()
        feeder.join(WAIT_S)
    files = len(gen.files)
    while len(handle.records) < files and time.monotonic() < deadline:
        assert handle.query.isActive, handle.query.exception()
        time.sleep(0.2)
    handle.stop()

    records = handle.records
    assert len(records) == files
    assert {r.outcome for r in records} == {"committed"}, [
        r.as_dict() for r in records if r.outcome != "committed"
    ]
    compacted = [r for r in reports if r.outcome == Outcome.COMPACTED]
    assert sum(r.totals().get("rewritten_data_files", 0) for r in compacted) > 0
    tokens = [r.token for r in compacted]
    assert tokens == sorted(tokens) and len(set(tokens)) == COMPACTIONS
    assert read_rows(spark, table) == gen.expected_rows()
