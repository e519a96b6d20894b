"""A real MySQL change stream end to end: a private MariaDB with a row binlog, a random workload
on two tables, the binlog read into Debezium and canal-json lines (restarted midway, resuming
from its saved position), the ingest job applying them through the gate (once killed with
SIGKILL mid-stream) while the compactor works one of the tables; each Iceberg table then equals
SELECT * of its MySQL table, row by row, read with pyiceberg."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.procedure_config import DEFAULT_REWRITE_OPTIONS, RewriteDataFilesConfig
from compactor.report import Outcome
from compactor.run import run_table
from demo.binlog import BinlogReader
from demo.mariadb import PrivateMariaDB
from demo.shop import (
    TABLES,
    Workload,
    create_source,
    create_targets,
    differences,
    iceberg_rows,
    source_rows,
)
from ingest_gate.job.config import load_config
from ingest_gate.job.record import BatchHooks
from ingest_gate.job.run import run
from service.client import LeaseClient
from tests.support.helpers import installed, unactivated_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WAIT_S = 300.0  # a bound on each wait, so that a stuck step fails instead of hanging
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    with PrivateMariaDB.start(tmp_path_factory.mktemp("mariadb")) as server:
        with server.connect() as conn:
            create_source(conn)
        yield server


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def _follow(reader: BinlogReader) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=reader.follow, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def _values(tmp_path: Path, warehouse: Path, server, table: str, fmt: str, name: str) -> dict:
    shop = TABLES[name]
    return {
        "table": table,
        "catalog": {"warehouse": str(warehouse)},
        "format": fmt,
        "landing_path": str(tmp_path / "landing" / fmt / name),
        "dead_letter_path": str(tmp_path / "dead-letter" / fmt / name),
        "checkpoint_path": str(tmp_path / "checkpoint" / fmt / name),
        "key_columns": [] if shop.identifier else list(shop.key),
        "max_files_per_trigger": 1,
        "trigger_interval_s": 0.5,
        "lakelock_url": server.url,
        "lakelock_token": server.token("job"),
        "holder": f"ingest-{fmt}-{name}",
        "lease_ttl_s": 10.0,
        "poll_s": 0.5,
        "max_hold_s": 120.0,
        "spark_master": "local[1]",
    }


def _kill_mid_stream(values: dict, tmp_path: Path) -> int:
    """Run the ingest job as its own process until it committed two batches, then SIGKILL it;
    return how many it committed."""
    config = tmp_path / f"{values['holder']}.toml"
    config.write_text(
        "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items() if not isinstance(v, dict))
        + f"\n[catalog]\nwarehouse = {json.dumps(values['catalog']['warehouse'])}\n"
    )
    log = tmp_path / f"{values['holder']}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [installed("lakelock-ingest"), "--config", str(config)],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=unactivated_env(SPARK_LOCAL_IP="127.0.0.1"),
        )
    try:

        def committed() -> int:
            text = log.read_text(errors="replace")
            return text.count('"outcome": "committed"')

        _wait(lambda: committed() >= 2 or process.poll() is not None, "two committed batches")
        assert process.poll() is None, log.read_text()[-3000:]
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        return committed()
    finally:
        if process.poll() is None:
            process.kill()


def _compaction(table: str) -> TableConfig:
    return TableConfig(
        table,
        lease=LeaseConfig(ttl=timedelta(seconds=15), max_wait=timedelta(seconds=60)),
        plan=PlanConfig(min_small_files=2, min_delete_files=1),
        rewrite_data_files=RewriteDataFilesConfig(
            options={**DEFAULT_REWRITE_OPTIONS, "min-input-files": "2"}
        ),
    )


@pytest.mark.timeout(1200)
def test_each_iceberg_table_equals_its_mysql_table_after_kills_and_restarts(
    spark, spark_warehouse, tmp_path, mariadb, lakelock_server
):
    landing = tmp_path / "landing"
    state = tmp_path / "binlog-position.json"
    conn = mariadb.connect()
    workload = Workload(conn, seed=5)

    # the binlog reader follows phase 1, is stopped, misses phase 2, resumes from its position
    # a flush every 150 lines: several files per table, so a kill lands mid-stream
    reader = BinlogReader(
        mariadb.settings(), landing=landing, state=state, schema="shop", flush_every=150
    )
    stop, thread = _follow(reader)
    workload.run(60)
    target = mariadb.position()
    _wait(lambda: reader.caught_up(target), "the reader to catch up")
    stop.set()
    thread.join(30)
    workload.run(60)
    resumed = BinlogReader(
        mariadb.settings(), landing=landing, state=state, schema="shop", flush_every=150
    )
    assert resumed.position == target
    stop, thread = _follow(resumed)
    workload.run(60)
    target = mariadb.position()
    _wait(lambda: resumed.caught_up(target), "the restarted reader to catch up")
    stop.set()
    thread.join(30)
    assert set(workload.counts) == {"insert", "update", "key_change", "delete"}

    debezium = create_targets(spark, "local.db", suffix="_dbz")
    canal = create_targets(spark, "local.db", suffix="_canal")

    # debezium, user_member: its own process, killed with SIGKILL after two commits
    values = _values(
        tmp_path,
        spark_warehouse,
        lakelock_server,
        debezium["user_member"],
        "debezium",
        "user_member",
    )
    assert _kill_mid_stream(values, tmp_path) >= 2

    # then every stream drains in this process; the compactor works the debezium orders table
    # alongside its stream, one file per batch (the other streams drain in a few batches)
    compacted: list = []
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as client:
        for fmt, tables in (("debezium", debezium), ("canal", canal)):
            for name, table in tables.items():
                values = _values(tmp_path, spark_warehouse, lakelock_server, table, fmt, name)
                values["available_now"] = True
                alongside = table == debezium["orders"]
                values["max_files_per_trigger"] = 1 if alongside else 5
                compact = threading.Event()

                def every_second(batch_id: int, _pass, compact=compact) -> None:
                    if batch_id % 2 == 1:
                        compact.set()

                handle = run(
                    load_config(overrides=values),
                    spark=spark,
                    hooks=BatchHooks(after_merge=every_second) if alongside else BatchHooks(),
                )
                while handle.query.isActive:
                    if compact.wait(0.2):
                        compact.clear()
                        report = run_table(
                            spark, client=client, config=_compaction(table), holder="compactor"
                        )
                        compacted.append((table, report.outcome))
                records = handle.wait(timeout=WAIT_S)
                assert all(r.outcome in ("committed", "empty", "replayed") for r in records), [
                    r.as_dict() for r in records
                ]
                assert sum(r.bad_rows for r in records) == 0

    assert ("local.db.orders_dbz", Outcome.COMPACTED) in compacted, compacted
    assert not [c for c in compacted if c[1] in (Outcome.FAILED, Outcome.LEASE_LOST)], compacted
    for tables in (debezium, canal):
        for name, table in tables.items():
            source = source_rows(conn, name)
            assert len(source) > 20
            assert differences(source, iceberg_rows(spark_warehouse, table), TABLES[name]) == []
