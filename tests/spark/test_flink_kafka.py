"""Kafka -> Flink -> Iceberg through the catalog front: the Flink writer (`lakelock-flink-writer
--source kafka`) reads a topic of three partitions on the project's broker with Flink's own
Kafka connector, in each change format the seeds write (upsert-kafka with tombstones,
Debezium JSON with and without its schema envelope, canal-json), into an upsert table at the
front. The table is read by Iceberg's reader in Spark from its metadata file (it holds equality
deletes, which pyiceberg cannot apply) and must equal the topic's last value per key.

A bounded run (`--bounded`) reads up to the offsets the topic had when the job started and
finishes, its last checkpoint committed; restarted from that checkpoint over a longer topic it
commits only what came after; started anew (the offsets reset to the earliest) it converges to
the same table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.exceptions import NoSuchTableError

from compactor.report import Outcome
from demo.flink import COLUMNS, KEY, Compactor, rows_of, wait_until
from demo.kafka import LocalKafka
from jobkit.flink import FlinkWriter
from testkit.change_topic import ChangeStream
from tests.spark.test_catalog_front import CATALOG, direct
from tests.spark.test_flink_writer import (
    compactor_config,
    flink_fixtures,
    latest_checkpoint,
)

pytestmark = [pytest.mark.spark, pytest.mark.flink]

front, lakelock_server, spark = flink_fixtures("flink-kafka")

WAIT_S = 300  # a guard against a hang only
PARTITIONS = 3


def topic_of(kafka: LocalKafka, name: str, stream: ChangeStream, fmt: str, **how: Any) -> str:
    kafka.create_topic(name, partitions=PARTITIONS)
    kafka.produce(name, stream.messages(fmt, **how))
    return name


def start_writer(
    started: list[FlinkWriter],
    front: Any,
    kafka: LocalKafka,
    tmp: Path,
    *,
    table: str,
    topic: str,
    fmt: str,
    extra: tuple[str, ...] = ("--bounded",),
) -> FlinkWriter:
    """The writer on `topic` into `table`, its checkpoints and log in `tmp`."""
    tmp.mkdir(parents=True, exist_ok=True)
    args = [
        *("--catalog-uri", f"{front.url}/iceberg"),
        *("--table", table),
        *("--columns", COLUMNS),
        *("--key", ",".join(KEY)),
        *("--partitioned-by", "dt,hr"),
        *("--source", "kafka"),
        *("--kafka-bootstrap", kafka.bootstrap),
        *("--kafka-topic", topic),
        *("--format", fmt),
        *("--checkpoints", (tmp / "checkpoints").as_uri()),
        *("--checkpoint-every-s", "1"),
        *extra,
    ]
    writer = FlinkWriter.start(args=args, token=front.token("job"), log_path=tmp / "flink.log")
    started.append(writer)
    return writer


def table_rows(front: Any, spark: Any, table: str) -> dict[Any, int] | None:
    """The table's rows by key, read by Iceberg's reader in Spark (None: no table yet)."""
    try:
        metadata = direct(front, f"{CATALOG}.db.{table}").metadata_location
    except NoSuchTableError:
        return None
    return rows_of(spark, metadata)


def until_rows(front: Any, spark: Any, table: str, expected: dict[Any, int], **how: Any) -> None:
    """Wait until the running writer made `table` hold `expected`."""
    deadline = time.monotonic() + WAIT_S
    wait_until(
        f"{table} = the topic",
        lambda: table_rows(front, spark, table) == expected,
        deadline=deadline,
        **how,
    )


def flink_commits(front: Any, table: str) -> list[dict[str, str]]:
    """The summaries of the writer's snapshots, oldest first."""
    history = direct(front, f"{CATALOG}.db.{table}").metadata.snapshots
    summaries = [s.summary.additional_properties for s in history if s.summary is not None]
    return [summary for summary in summaries if "flink.job-id" in summary]


# canal-json is the console script's format below, read and checked the same way
@pytest.mark.parametrize(
    ("fmt", "schema"),
    [
        ("upsert-kafka", False),
        ("debezium-json", False),
        ("debezium-json", True),
    ],
    ids=["upsert-kafka", "debezium-json", "debezium-json-with-schema"],
)
def test_a_topic_in_each_change_format_ends_as_its_last_value_per_key(
    front, spark, kafka, tmp_path, writers, fmt, schema
):
    stream = ChangeStream(seed=11, keys=40)
    stream.advance(400)
    name = f"{fmt.replace('-', '_')}{'_schema' if schema else ''}"
    extra = ("--debezium-schema",) if schema else ()
    topic = topic_of(kafka, f"changes.{name}", stream, fmt, schema=schema)

    writer = start_writer(
        writers,
        front,
        kafka,
        tmp_path,
        table=f"db.{name}",
        topic=topic,
        fmt=fmt,
        extra=("--bounded", *extra),
    )
    report = writer.wait(timeout_s=WAIT_S)

    assert report["status"] == "FINISHED" and report["restarts"] == 0, report
    expected = stream.expected()
    assert 0 < len(expected) < 40  # some keys deleted, some live
    assert table_rows(front, spark, name) == expected


def test_a_restart_from_the_checkpoint_commits_only_what_came_after_and_a_reset_converges(
    front, spark, kafka, tmp_path, writers, job_client
):
    """The job runs beside lakelock's compactor following its table. Stopped (its last
    checkpoint kept) and restarted from that checkpoint over a topic that grew, it reads from
    the checkpoint's offsets: the rows it adds are the new messages' alone (an upsert adds one
    row per value message), so nothing is committed twice. Started anew, with no checkpoint, it
    reads the topic from the earliest offset again, and the table converges to the same rows."""
    stream = ChangeStream(seed=5, keys=30)
    stream.advance(200)
    fmt, name = "upsert-kafka", "restarted"
    table = f"db.{name}"
    topic = topic_of(kafka, "changes.restarted", stream, fmt)
    compactor = Compactor(spark, job_client, compactor_config(f"{CATALOG}.{table}"), print)
    running = start_writer(
        writers, front, kafka, tmp_path, table=table, topic=topic, fmt=fmt, extra=()
    )
    until_rows(front, spark, name, stream.expected(), writer=running)
    compactor.start()
    try:
        first = running.stop()
        assert first["status"] == "CANCELED" and first["restarts"] == 0, first
        seen = len(stream.changes)
        stream.advance(200)
        kafka.produce(topic, stream.messages(fmt, start=seen))
        restart = ("--restore-from", latest_checkpoint(tmp_path / "checkpoints"))
        running = start_writer(
            writers, front, kafka, tmp_path, table=table, topic=topic, fmt=fmt, extra=restart
        )
        until_rows(front, spark, name, stream.expected(), writer=running, compactor=compactor)
        second = running.stop()
    finally:
        compactor.stop(WAIT_S)
    assert not compactor.failures, compactor.failures
    outcomes = [(run.outcome, run.error) for run in compactor.runs]
    assert outcomes and all(outcome == Outcome.COMPACTED for outcome, _ in outcomes), outcomes
    assert second["status"] == "CANCELED" and second["restarts"] == 0, second
    added = [int(s.get("added-records", 0)) for s in flink_commits(front, name)]
    values = sum(1 for _, value in stream.messages(fmt) if value is not None)
    assert sum(added) == values  # each value message written once, over both runs

    fresh = start_writer(
        writers, front, kafka, tmp_path / "reset", table=table, topic=topic, fmt=fmt
    )
    reset = fresh.wait(timeout_s=WAIT_S)
    assert reset["status"] == "FINISHED" and reset["restarts"] == 0, reset
    assert table_rows(front, spark, name) == stream.expected()
    # it read the whole topic again: its own commits added every value message once more
    again = [s for s in flink_commits(front, name) if s["flink.job-id"] == reset["job_id"]]
    assert sum(int(s.get("added-records", 0)) for s in again) == values


def test_the_command_runs_a_bounded_job_and_exits_with_its_report(front, spark, kafka, tmp_path):
    """`lakelock-flink-writer`, the console script users run: it checks the options in
    lakelock's Python, then runs the writer in PyFlink's, whose exit status and report are the
    command's."""
    stream = ChangeStream(seed=3, keys=20)
    stream.advance(100)
    topic = topic_of(kafka, "changes.command", stream, "canal-json")
    command = Path(sys.executable).parent / "lakelock-flink-writer"
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            str(command),
            *("--catalog-uri", f"{front.url}/iceberg"),
            *("--table", "db.command"),
            *("--columns", COLUMNS),
            *("--key", ",".join(KEY)),
            *("--source", "kafka"),
            *("--kafka-bootstrap", kafka.bootstrap),
            *("--kafka-topic", topic),
            *("--format", "canal-json"),
            *("--checkpoints", (tmp_path / "checkpoints").as_uri()),
            "--bounded",
            *("--report", str(report)),
        ],
        env={**os.environ, "LAKELOCK_TOKEN": front.token("job")},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(report.read_text())["status"] == "FINISHED"
    expected = stream.expected()
    assert 0 < len(expected) < 20  # some keys deleted, some live
    assert table_rows(front, spark, "command") == expected

    wrong = subprocess.run(
        [str(command), "--catalog-uri", "x", "--table", "db.t", "--key", "k", "--source", "kafka"],
        env={**os.environ, "LAKELOCK_TOKEN": "t"},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert wrong.returncode == 2 and "--kafka-bootstrap" in wrong.stderr, wrong.stderr
