"""The ingest job on a real Kafka broker (bin/kafka-local's, on loopback): every format through
a topic of four partitions with keys and tombstones; the installed job killed with SIGKILL
mid-batch and started again, exact; records deleted under a stopped job (retention) stop it
with the ranges named, or are skipped and recorded as `ingest.gap` events; lag per
topic-partition on the service; a MySQL binlog's changes through a topic equal the MySQL table.
Tables are read back with pyiceberg where exactness is the point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from demo.binlog import BinlogReader
from demo.generate import KEY_FIELDS, ChangeGenerator, EventGenerator, create_events_table
from demo.kafka import LocalKafka, as_messages
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
from ingest_gate.job.kafka import RetentionLoss
from ingest_gate.job.run import run
from service.client import LeaseClient
from tests.spark.conftest import table_rows
from tests.support.helpers import installed, unactivated_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WAIT_S = 300.0  # a bound on each wait, so that a stuck step fails instead of hanging
PARTITIONS = 4


def _values(tmp_path: Path, kafka: LocalKafka, server, table: str, topic: str, **more) -> dict:
    return {
        "table": table,
        "source": "kafka",
        "kafka": {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, **more},
        "dead_letter_path": str(tmp_path / "dead-letter"),
        "checkpoint_path": str(tmp_path / "checkpoint"),
        "key_columns": list(KEY_FIELDS),
        "lakelock_url": server.url,
        "lakelock_token": server.token("job"),
        "holder": f"ingest-{topic}",
        "lease_ttl_s": 10.0,
        "poll_s": 0.5,
        "trigger_interval_s": 0.5,
    }


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def _generator(fmt: str, seed: int) -> EventGenerator:
    if fmt == "json":
        return EventGenerator(seed=seed, update_ratio=0.3, duplicate_ratio=0.1, bad_ratio=0.03)
    return ChangeGenerator(
        seed=seed, format=fmt, delete_ratio=0.15, key_change_ratio=0.1, bad_ratio=0.03
    )


# Debezium through a topic of four partitions is the killed job's and the binlog's below
@pytest.mark.parametrize("fmt", ["json", "canal"])
def test_every_format_through_a_topic_of_four_partitions_ends_exact(
    spark, tmp_path, kafka, lakelock_server, fmt
):
    topic = f"events-{fmt}"
    table = f"local.db.kafka_{fmt}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    create_events_table(spark, table)
    gen = _generator(fmt, seed=11)
    messages = as_messages(gen.records(400), fmt, KEY_FIELDS)
    messages.append((b'{"event_id": "gone"}', None))  # a compacted topic's tombstone
    kafka.produce(topic, messages)
    assert all(n > 0 for n in kafka.end_offsets(topic).values())  # every partition has some

    config = load_config(
        overrides={
            **_values(tmp_path, kafka, lakelock_server, table, topic, maxOffsetsPerTrigger="150"),
            "format": fmt,
            "available_now": True,
        }
    )
    handle = run(config, spark=spark)
    records = handle.wait(timeout=WAIT_S)

    assert table_rows(spark, table) == gen.expected_rows()
    assert len(records) >= 3  # maxOffsetsPerTrigger passed through: 150 of ~450 per batch
    assert all(r.outcome == "committed" for r in records), [r.as_dict() for r in records]
    summary = handle.summary()
    assert summary["records"] == len(messages)
    assert summary["bad_records"] == gen.by_kind["bad"]
    tombstones = sum(value is None for _, value in messages)
    assert summary["skipped"].get("tombstone", 0) == tombstones
    # lag after the last batch: nothing left in any partition, as the service shows it
    assert records[-1].lag == {f"{topic}:{p}": 0 for p in range(PARTITIONS)}
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("reader")) as reader:
        lag = reader.state(table)["ingest_lag"]
    assert lag["records"] == 0 and lag["batch_id"] == records[-1].batch_id
    assert sorted(lag["partitions"]) == [f"{topic}:{p}" for p in range(PARTITIONS)]


def test_the_installed_job_killed_mid_batch_replays_exactly_once(
    spark, spark_warehouse, tmp_path, kafka, lakelock_server
):
    """The job as its own process, the way a user runs it: the venv's `lakelock-ingest` by its
    path, the venv not activated (its `python3` is not on PATH: the local Python workers that
    decode the records must still find lakelock), from a folder outside the checkout, with the
    Kafka source the job fetched itself; SIGKILL while a batch holds its commit lease (between
    its read and its commit), then a second run drains the topic: the table is exact and no
    batch committed twice."""
    topic, table = "events-killed", "local.db.kafka_killed"
    kafka.create_topic(topic, partitions=PARTITIONS)
    create_events_table(spark, table)
    gen = _generator("debezium", seed=12)
    kafka.produce(topic, as_messages(gen.records(320), "debezium", KEY_FIELDS))

    values = _values(tmp_path, kafka, lakelock_server, table, topic)
    values.update(format="debezium", spark_master="local[1]")

    def config_file(name: str, per_batch: int) -> Path:
        path = tmp_path / name
        top = "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items() if k != "kafka")
        options = {**values["kafka"], "maxOffsetsPerTrigger": str(per_batch)}
        kafka_table = "\n".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in options.items())
        path.write_text(
            f'{top}\n[catalog]\nwarehouse = "{spark_warehouse}"\n[kafka]\n{kafka_table}\n'
        )
        return path

    log = tmp_path / "ingest.log"
    reader = LeaseClient(lakelock_server.url, token=lakelock_server.token("reader"))

    def committed() -> int:
        return log.read_text(errors="replace").count('"outcome": "committed"')

    def commit_in_flight() -> bool:
        try:
            return bool(reader.state(table)["commit_leases"])
        except Exception:  # the table is unknown to the service until the first lease
            return False

    with open(log, "wb") as out:
        process = subprocess.Popen(
            [installed("lakelock-ingest"), "--config", str(config_file("small.toml", 40))],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=unactivated_env(),
        )
    try:
        _wait(lambda: committed() >= 2 or process.poll() is not None, "two committed batches")
        assert process.poll() is None, log.read_text()[-3000:]
        _wait(lambda: commit_in_flight() or process.poll() is not None, "a batch in its gate")
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
    before = committed()
    assert before < 8  # killed with most of the topic still to read

    # the batch in flight is replayed as it was planned (its offsets are in the checkpoint),
    # then the rest drains in larger batches
    drain = config_file("large.toml", 1000)
    again = subprocess.run(
        [installed("lakelock-ingest"), "--config", str(drain), "--available-now"],
        cwd=tmp_path,
        env=unactivated_env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert table_rows(spark, table) == gen.expected_rows()
    # read by pyiceberg too: the keys, and each batch's snapshot once
    keys = sorted(
        (r["event_id"], str(r["dt"]), r["hr"]) for r in iceberg_rows(spark_warehouse, table)
    )
    assert keys == sorted((r["event_id"], r["dt"], r["hr"]) for r in gen.expected_rows())
    batches = [
        (s.summary.get("lakelock.query-id"), s.summary.get("lakelock.batch-id"))
        for s in _snapshots(spark_warehouse, table)
        if "lakelock.batch-id" in s.summary
    ]
    assert len(batches) == len(set(batches)) >= before  # each batch committed once
    reader.close()


def _snapshots(warehouse: Path, table: str) -> list[Any]:
    from pyiceberg.table import StaticTable

    from service.ops.iceberg_audit import metadata_file

    return StaticTable.from_metadata(str(metadata_file(warehouse, table))).metadata.snapshots


def test_records_retention_took_stop_the_job_naming_them_then_skip_records_each_gap(
    spark, tmp_path, kafka, lakelock_server
):
    topic, table = "events-retained", "local.db.kafka_retained"
    kafka.create_topic(topic, partitions=2)
    create_events_table(spark, table)
    gen = EventGenerator(seed=13)
    kafka.produce(topic, as_messages(gen.records(100), "json", KEY_FIELDS))
    values = {**_values(tmp_path, kafka, lakelock_server, table, topic), "available_now": True}
    run(load_config(overrides=values), spark=spark).wait(timeout=WAIT_S)
    read_to = kafka.end_offsets(topic)

    # the job is stopped; more arrives, and retention takes some of it before the job is back
    late = EventGenerator(seed=14, update_ratio=0.0)  # 100 new keys
    kafka.produce(topic, as_messages(late.records(100), "json", KEY_FIELDS))
    lost_to = {p: read_to[p] + 10 for p in read_to}
    kafka.delete_records(topic, lost_to)

    with pytest.raises(RetentionLoss) as stopped:
        run(load_config(overrides=values), spark=spark)
    message = str(stopped.value)
    for p in read_to:
        assert f"{topic}:{p} offsets {read_to[p]}..{lost_to[p] - 1} (10 records)" in message
    assert 'on_data_loss = "skip"' in message and "backfill" in message
    assert table_rows(spark, table) == gen.expected_rows()  # nothing skipped silently

    skipping = load_config(overrides={**values, "on_data_loss": "skip"})
    run(skipping, spark=spark).wait(timeout=WAIT_S)
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("reader")) as reader:
        gaps = [e for e in reader.events(table=table, limit=100) if e["event"] == "ingest.gap"]
    assert sorted(
        (e["detail"]["partition"], e["detail"]["start"], e["detail"]["end"]) for e in gaps
    ) == [(p, read_to[p], lost_to[p]) for p in sorted(read_to)]
    # the rows after the gap are in: 100 new events, 20 of them lost
    assert len(table_rows(spark, table)) == len(gen.expected_rows()) + 100 - 20


@pytest.mark.timeout(900)
def test_a_mysql_binlog_through_a_topic_equals_the_mysql_table(
    spark, spark_warehouse, tmp_path, kafka, lakelock_server
):
    """The binlog test's change stream (a private MariaDB's row binlog as Debezium lines, with
    its schema wrapper), produced into a topic of four partitions keyed by each row's primary
    key, as Debezium's MySQL connector does."""
    with PrivateMariaDB.start(tmp_path / "mariadb") as mariadb:
        conn = mariadb.connect()
        create_source(conn)
        workload = Workload(conn, seed=21)
        reader = BinlogReader(
            mariadb.settings(),
            landing=tmp_path / "landing",
            state=tmp_path / "binlog-position.json",
            schema="shop",
            flush_every=100,
        )
        stop = threading.Event()
        thread = threading.Thread(target=reader.follow, args=(stop,), daemon=True)
        thread.start()
        workload.run(120)
        target = mariadb.position()
        _wait(lambda: reader.caught_up(target), "the binlog reader to catch up")
        stop.set()
        thread.join(30)
        assert {"update", "key_change", "delete"} <= set(workload.counts)
        source = source_rows(conn, "orders")

    tables = create_targets(spark, "local.db", suffix="_kafka")
    lines = [
        line
        for path in sorted((tmp_path / "landing" / "debezium" / "orders").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    topic = "shop.orders"
    kafka.create_topic(topic, partitions=PARTITIONS)
    kafka.produce(topic, as_messages(lines, "debezium", ("order_id",)))
    values = _values(tmp_path, kafka, lakelock_server, tables["orders"], topic)
    values.update(format="debezium", key_columns=list(TABLES["orders"].key), available_now=True)
    records = run(load_config(overrides=values), spark=spark).wait(timeout=WAIT_S)

    assert sum(r.bad_rows for r in records) == 0
    assert len(source) > 20
    assert (
        differences(source, iceberg_rows(spark_warehouse, tables["orders"]), TABLES["orders"]) == []
    )


def test_bin_kafka_local_serves_in_the_foreground_until_sigterm(tmp_path):
    """The broker as a user starts it: `bin/kafka-local --port PORT --dir DIR`; topics made
    through it survive a restart on the same folder."""
    from testkit import free_port

    port = free_port()
    root = Path(__file__).resolve().parents[2]

    def start() -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [str(root / "bin" / "kafka-local"), "--port", str(port), "--dir", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        said = []  # bin/bootstrap's lines when it installs something first, then the broker's
        for line in process.stdout:
            said.append(line)
            if f"kafka on 127.0.0.1:{port}" in line:
                return process
        raise AssertionError(f"bin/kafka-local exited {process.wait()}: {''.join(said)[-2000:]}")

    process = start()
    broker = LocalKafka(tmp_path, port, process, open(os.devnull, "wb"))  # noqa: SIM115
    broker.create_topic("kept", partitions=2)
    broker.produce("kept", [(b"k", b"v")])
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    process = start()
    try:
        assert sum(broker.end_offsets("kept").values()) == 1
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
