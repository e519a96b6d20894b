"""The Flink writer on a standalone session cluster (demo.flink_cluster: a JobManager and a
TaskManager, each a process of its own), submitted through Flink's own CLI (`lakelock-flink-writer
--jobmanager`), reading a Kafka topic into an upsert table of an S3 warehouse at the front
beside lakelock's compactor, as its users run it:

- the TaskManager killed mid-run (SIGKILL): the job restarts on a new TaskManager from its last
  checkpoint, and the table ends exact with nothing committed twice;
- stopped with a savepoint (`flink stop --savepointPath`) and resumed from it (`flink run -s`,
  the writer's `--restore-from`) over a topic that grew: likewise.

"Nothing committed twice": an upsert adds one row per value message, so the rows the writer's
commits added, summed over every run, equal the topic's value messages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from compactor.report import Outcome
from demo.flink import Compactor
from demo.kafka import LocalKafka
from testkit.change_topic import ChangeStream
from tests.spark.test_catalog_front import CATALOG, direct
from tests.spark.test_flink_kafka import (
    WAIT_S,
    flink_commits,
    start_writer,
    topic_of,
    until_rows,
)
from tests.spark.test_flink_writer import compactor_config, flink_fixtures

pytestmark = [pytest.mark.spark, pytest.mark.flink]

front, lakelock_server, spark = flink_fixtures("flink-cluster", s3=True)

FORMAT = "upsert-kafka"


def values_written(front: Any, table: str) -> int:
    """The rows the writer's commits added, over all its runs."""
    return sum(int(s.get("added-records", 0)) for s in flink_commits(front, table))


def value_messages(stream: ChangeStream) -> int:
    return sum(1 for _, value in stream.messages(FORMAT) if value is not None)


def grow(kafka: LocalKafka, topic: str, stream: ChangeStream, count: int) -> None:
    seen = len(stream.changes)
    stream.advance(count)
    kafka.produce(topic, stream.messages(FORMAT, start=seen))


def test_a_lost_taskmanager_and_a_savepoint_resume_keep_the_table_exact(
    front, spark, kafka, cluster, tmp_path, writers, job_client
):
    stream = ChangeStream(seed=23, keys=30)
    stream.advance(200)
    name, table = "on_cluster", "db.on_cluster"
    topic = topic_of(kafka, "changes.on_cluster", stream, FORMAT)
    on_cluster = ("--jobmanager", cluster.address)

    def start(tmp: Path, *extra: str) -> Any:
        return start_writer(
            writers, front, kafka, tmp, table=table, topic=topic, fmt=FORMAT, extra=extra
        )

    compactor = Compactor(spark, job_client, compactor_config(f"{CATALOG}.{table}"), print)
    running = start(tmp_path / "first", *on_cluster)
    job_id = running.job_id(timeout_s=WAIT_S)
    until_rows(front, spark, name, stream.expected(), writer=running)
    compactor.start()
    try:
        # a lost host: the job restarts from its last checkpoint on the TaskManager that
        # replaces it, and reads on from the checkpoint's offsets
        cluster.kill_taskmanager()
        grow(kafka, topic, stream, 200)
        cluster.add_taskmanager(timeout_s=WAIT_S)
        until_rows(front, spark, name, stream.expected(), writer=running, compactor=compactor)
        assert values_written(front, name) == value_messages(stream)

        # stop with a savepoint, as an operator upgrading the job would; resume from it
        stopped = cluster.flink("stop", "--savepointPath", (tmp_path / "sp").as_uri(), job_id)
        assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
        savepoint = re.search(r"Savepoint completed\. Path: (\S+)", stopped.stdout)
        assert savepoint, stopped.stdout[-2000:]
        first = running.wait(timeout_s=WAIT_S)
        grow(kafka, topic, stream, 200)
        running = start(tmp_path / "resumed", *on_cluster, "--restore-from", savepoint[1])
        until_rows(front, spark, name, stream.expected(), writer=running, compactor=compactor)
        second = running.stop()
    finally:
        compactor.stop(WAIT_S)
    assert first["status"] == "FINISHED" and first["restarts"] >= 1, first
    assert second["status"] == "CANCELED" and second["restarts"] == 0, second
    assert values_written(front, name) == value_messages(stream)
    assert direct(front, f"{CATALOG}.{table}").metadata_location.startswith("s3://")
    assert not compactor.failures, compactor.failures
    outcomes = [(run.outcome, run.error) for run in compactor.runs]
    assert outcomes and all(outcome == Outcome.COMPACTED for outcome, _ in outcomes), outcomes
