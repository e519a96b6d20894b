"""flink_writer.job's command line, checked in lakelock's own Python before PyFlink runs it:
a bad option exits 2 naming it and nothing starts; `--jobmanager` sends the job to a session
cluster through PyFlink's launcher (SUBMIT_ARGS), and only then (the writer drops one it
inherits)."""

from __future__ import annotations

import argparse
import shlex

import pytest

from flink_writer import job

BASE = ["--catalog-uri", "http://127.0.0.1:1/iceberg", "--table", "db.t", "--key", "k"]
KAFKA = ["--source", "kafka", "--kafka-bootstrap", "b:9092", "--kafka-topic", "t"]


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(job.TOKEN_ENV, "a-job-token")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--jobmanager", "cluster"], "--jobmanager 'cluster'"),
        (["--jobmanager", "a:1 -s /x"], "--jobmanager"),
        (["--restore-from", "-cFoo"], "--restore-from"),  # never an option of `flink run`
        (["--landing", "/data"], "--landing is for a files source"),
        (["--mode", "append"], "writes an upsert table"),
    ],
)
def test_a_bad_option_exits_2_naming_it(capsys, extra, says):
    with pytest.raises(SystemExit) as done:
        job.parse([*BASE, *KAFKA, *extra])
    assert done.value.code == 2
    assert says in capsys.readouterr().err


def test_without_a_token_the_writer_does_not_start(monkeypatch, capsys):
    monkeypatch.delenv(job.TOKEN_ENV)
    with pytest.raises(SystemExit):
        job.parse([*BASE, *KAFKA])
    assert job.TOKEN_ENV in capsys.readouterr().err


def test_jobmanager_submits_through_flink_run_and_restores_with_s():
    savepoint = "file:///sp/savepoint-1 x"
    argv = [*BASE, *KAFKA, "--jobmanager", "jm:8081", "--restore-from", savepoint]
    said = job.submit_args(job.parse(argv)[0])
    assert said is not None and shlex.split(said) == ["remote", "-m", "jm:8081", "-s", savepoint]


def test_without_jobmanager_the_job_runs_on_a_minicluster():
    assert job.submit_args(job.parse([*BASE, *KAFKA])[0]) is None


def test_the_namespace_carries_every_mysql_option():
    args, options, _ = job.parse(
        [
            *BASE,
            *("--source", "mysql-cdc", "--mysql", "db:3306", "--mysql-database", "shop"),
            *("--mysql-table", "m", "--mysql-server-id", "6000", "--mysql-time-zone", "Asia/Tokyo"),
        ]
    )
    assert isinstance(args, argparse.Namespace)
    assert (options.mysql_server_id, options.mysql_time_zone) == ("6000", "Asia/Tokyo")
    assert options.mysql_snapshot == "consistent"
