"""The Flink writer's process: PyFlink's TableEnvironment, on a local MiniCluster or submitting
to a session cluster (`--jobmanager`), that runs one INSERT from its source (a landing folder,
a Kafka topic, a MySQL table's binlog) into an Iceberg table at lakelock's catalog front,
until the job ends or the process is told to stop (SIGTERM, SIGINT: the job is cancelled, its
last checkpoint kept for a restart).

    lakelock-flink-writer --catalog-uri http://127.0.0.1:8737/iceberg --table db.events \\
        --columns 'event_id STRING, dt STRING, hr INT, v BIGINT' --key event_id,dt,hr \\
        --partitioned-by dt,hr --landing /data/landing --checkpoints file:///data/chk \\
        --report writer.json                     # the token: LAKELOCK_TOKEN
    lakelock-flink-writer ... --source kafka --kafka-bootstrap 127.0.0.1:9092 \\
        --kafka-topic events --format debezium-json --bounded
    lakelock-flink-writer ... --jobmanager 127.0.0.1:8081    # on a session cluster

The report (JSON, written when the process ends) says how the job fared: its id, final
status, how many times Flink restarted it (`numRestarts`, read from the cluster's REST API
while it runs), and its checkpoints completed. Flink's committer catches nothing, so a
commit the catalog refused shows as a restart (docs/catalog-front.md, "Flink writers").

Run it in a Python with PyFlink and the Iceberg Flink runtime on the classpath: `jobkit.flink`
starts it so.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import socket
import threading
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flink_writer import sql

__all__ = ["Report", "main"]

log = logging.getLogger("flink_writer")

TOKEN_ENV = "LAKELOCK_TOKEN"
MYSQL_PASSWORD_ENV = "LAKELOCK_MYSQL_PASSWORD"
"""A mysql-cdc source's password: from the environment, never a command-line option."""
_POLL_S = 0.5
_ENDED = {"FINISHED", "FAILED", "CANCELED"}


@dataclass
class Report:
    job_id: str = ""
    status: str = "NOT_STARTED"
    restarts: int = 0
    checkpoints: int = 0
    error: str = ""
    # why the job restarted, each a first line of Flink's exception history (newest first)
    restart_causes: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


class _Watch:
    """The job's restarts and checkpoints, read from its cluster's REST API (`address`)."""

    def __init__(self, address: str, job_id: str) -> None:
        self.base = f"http://{address}/jobs/{job_id}"

    def read(self, report: Report) -> None:
        try:
            metrics = _get(f"{self.base}/metrics?get=numRestarts")
            for metric in metrics:
                if metric.get("id") == "numRestarts":
                    report.restarts = max(report.restarts, int(metric["value"]))
            counts = _get(f"{self.base}/checkpoints").get("counts", {})
            report.checkpoints = max(report.checkpoints, int(counts.get("completed", 0)))
            if report.restarts and not report.restart_causes:
                history = _get(f"{self.base}/exceptions").get("exceptionHistory", {})
                report.restart_causes = [
                    str(entry.get("stacktrace", entry.get("exceptionName", ""))).split("\n")[0]
                    for entry in history.get("entries", [])
                ][:5]
        except (OSError, ValueError) as exc:  # the cluster is going down, or not up yet
            log.debug("job metrics not read: %s", exc)


def submit_args(args: argparse.Namespace) -> str | None:
    """What PyFlink's gateway launcher is given (`SUBMIT_ARGS`) to start inside Flink's CLI,
    `flink run -m JOBMANAGER [-s RESTORE]`; None: a local MiniCluster."""
    if not args.jobmanager:
        return None
    submit = ["remote", "-m", args.jobmanager]
    if args.restore_from:
        submit += ["-s", args.restore_from]
    return shlex.join(submit)


def _environment(args: argparse.Namespace, port: int) -> Any:
    """A TableEnvironment on a MiniCluster whose REST API listens on `port`; or, with
    `--jobmanager`, one whose jobs go to that session cluster: PyFlink then starts its gateway
    inside Flink's own CLI (`flink run -m ADDRESS [-s RESTORE]`), as `flink run -py` does."""
    submit = submit_args(args)
    if submit is None:  # one inherited from the environment would send the job elsewhere
        os.environ.pop("SUBMIT_ARGS", None)
    else:
        os.environ["SUBMIT_ARGS"] = submit  # read by PyFlink's gateway launcher
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    settings = {
        "parallelism.default": str(args.parallelism),
        "execution.checkpointing.interval": f"{int(args.checkpoint_every_s * 1000)}ms",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": str(args.restarts),
        "restart-strategy.fixed-delay.delay": "1s",
    }
    if not args.jobmanager:
        settings.update(
            {"rest.port": str(port), "rest.bind-address": "127.0.0.1", "rest.address": "127.0.0.1"}
        )
    if args.source == "mysql-cdc" and args.mysql_snapshot == "consistent":
        # Debezium's snapshot holds the checkpoint lock until the table is read: checkpoints
        # fail meanwhile, and must not fail the job (Flink CDC's FAQ)
        settings["execution.checkpointing.tolerable-failed-checkpoints"] = "1000"
    if args.checkpoints:
        settings["state.checkpoints.dir"] = args.checkpoints
    if args.restore_from:
        settings["execution.savepoint.path"] = args.restore_from
    for key, value in settings.items():
        conf.set(key, value)
    return env


PORT_TRIES = 3  # local runs: REST ports tried, each free when picked


def _started(args: argparse.Namespace, options: sql.Options, token: str) -> tuple[Any, int]:
    """The job submitted (its TableResult) and the local cluster's REST port. A local run picks
    a free port for its cluster's REST endpoint, which another process may bind before the
    cluster does (Flink's BindException): then the job is set up again on another port."""
    for attempt in range(1, PORT_TRIES + 1):
        port = _free_port()
        env = _environment(args, port)
        env.execute_sql(sql.catalog(options, token=token))
        env.execute_sql(
            f"CREATE DATABASE IF NOT EXISTS {sql.quote(options.catalog_name)}."
            f"{sql.quote(options.table.split('.')[0])}"
        )
        if options.columns:
            env.execute_sql(sql.target(options))
        described = env.execute_sql(f"DESCRIBE {options.qualified}").collect()
        with described as rows:
            columns = [(str(row[0]), str(row[1])) for row in rows]
        password = os.environ.get(MYSQL_PASSWORD_ENV, "")
        env.execute_sql(sql.source(options, columns, password=password))
        statement = sql.insert(options)
        log.info("running %s", statement)
        try:
            return env.execute_sql(statement), port
        except Exception as exc:  # Py4J's error, Flink's cause in its text
            taken = "Could not start rest endpoint on any port" in str(exc)
            if args.jobmanager or not taken or attempt == PORT_TRIES:
                raise
            log.warning("the local cluster's REST port %d was taken meanwhile; another", port)
    raise AssertionError("unreachable")  # the last try returned or raised


def run(
    args: argparse.Namespace, options: sql.Options, token: str, stop: threading.Event
) -> Report:
    report = Report()
    result, port = _started(args, options, token)
    client = result.get_job_client()
    report.job_id = str(client.get_job_id())
    watch = _Watch(args.jobmanager or f"127.0.0.1:{port}", report.job_id)
    print(json.dumps({"job_id": report.job_id}), flush=True)
    while True:
        try:
            status = client.get_job_status().result()
        except Exception as exc:
            if not args.jobmanager:  # the MiniCluster is gone: the job ended, as `wait` says
                report.status = _outcome(result, report)
                break
            # a session cluster that does not answer (failing over, unreachable) may still run
            # the job: ask again until told to stop, and then say so
            log.warning("the cluster did not answer for the job's status: %s", exc)
            if stop.is_set():
                report.status = "UNKNOWN"
                report.error = f"the cluster did not answer; the job may still run: {exc}"[:2000]
                break
            stop.wait(_POLL_S)
            continue
        report.status = str(status).rsplit(".", 1)[-1]
        if report.status in _ENDED:
            if report.status == "FAILED":
                _outcome(result, report)
            break
        watch.read(report)
        if stop.is_set():
            watch.read(report)
            client.cancel().result()
            report.status = "CANCELED"
            break
        stop.wait(_POLL_S)
    return report


def _outcome(result: Any, report: Report) -> str:
    """How an ended job ended: FINISHED, or FAILED with its error in the report."""
    try:
        result.wait()
    except Exception as exc:  # the job's failure: reported as the job's outcome
        report.error = _root_cause(exc)[:2000]
        return "FAILED"
    return "FINISHED"


def _root_cause(exc: BaseException) -> str:
    """The innermost Java cause of a py4j error (a failed commit inside a job failure), else
    the exception's first line."""
    java = getattr(exc, "java_exception", None)
    while java is not None and java.getCause() is not None:
        java = java.getCause()
    if java is not None:
        return str(java.toString())
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parser(prog: str = "python -m flink_writer") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run a Flink job that writes an Iceberg table through lakelock's catalog "
        "front, from a landing folder, a Kafka topic or a MySQL table's binlog, on a local "
        "MiniCluster or a session cluster (docs/flink.md).",
    )
    p.add_argument("--catalog-uri", required=True, help="lakelock's /iceberg URL")
    p.add_argument("--catalog-name", default="lakelock")
    p.add_argument("--table", required=True, help="namespace.table")
    p.add_argument("--mode", choices=("upsert", "append"), default="upsert")
    p.add_argument("--columns", default="", help="Flink SQL columns, to create the table")
    p.add_argument("--key", default="", help="primary key columns, comma-separated")
    p.add_argument("--partitioned-by", default="", help="partition columns, comma-separated")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="K=V",
        help="a table property when the job creates the table",
    )
    p.add_argument(
        "--catalog-property",
        action="append",
        default=[],
        metavar="K=V",
        help="write to this Iceberg catalog instead of lakelock's front (catalog-impl, uri, ...)",
    )
    p.add_argument("--source", choices=sql.SOURCES, default="files")
    p.add_argument("--landing", default="", help="files: a folder of JSON-lines files, watched")
    p.add_argument("--kafka-bootstrap", default="", metavar="HOST:PORT[,HOST:PORT]")
    p.add_argument("--kafka-topic", default="")
    p.add_argument("--kafka-group", default="lakelock-flink-writer", help="the consumer group")
    p.add_argument(
        "--format",
        choices=sql.FORMATS,
        default="upsert-kafka",
        help="kafka: the topic's change format (docs/flink.md)",
    )
    p.add_argument(
        "--debezium-schema",
        action="store_true",
        help="debezium-json: each event carries Debezium's schema envelope",
    )
    p.add_argument("--mysql", default="", metavar="HOST:PORT", help="mysql-cdc: the database")
    p.add_argument("--mysql-user", default="root")
    p.add_argument("--mysql-database", default="")
    p.add_argument("--mysql-table", default="")
    p.add_argument(
        "--mysql-server-id",
        default="5400-5404",
        metavar="ID[-ID]",
        help="mysql-cdc: the replica ids the readers take, one each, unused by other replicas",
    )
    p.add_argument("--mysql-time-zone", default="UTC", help="mysql-cdc: the server's time zone")
    p.add_argument(
        "--mysql-snapshot",
        choices=sql.MYSQL_SNAPSHOTS,
        default="consistent",
        help="mysql-cdc: one consistent snapshot under a brief lock, or lock-free chunks "
        "(docs/flink.md says when each is safe)",
    )
    p.add_argument(
        "--bounded",
        action="store_true",
        help="read the topic up to its offsets at the start (the folder once), then finish",
    )
    p.add_argument("--checkpoint-every-s", type=float, default=3.0)
    p.add_argument("--checkpoints", default="", help="checkpoint folder URI (kept on cancel)")
    p.add_argument("--restore-from", default="", help="a retained checkpoint to restart from")
    p.add_argument("--restarts", type=int, default=5, help="Flink's fixed-delay attempts")
    p.add_argument("--parallelism", type=int, default=1)
    p.add_argument(
        "--jobmanager",
        default="",
        metavar="HOST:PORT",
        help="submit to this Flink session cluster's REST address (default: a local MiniCluster)",
    )
    p.add_argument("--report", type=Path, help="write the job's report here as JSON")
    return p


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def parse(
    argv: Sequence[str] | None, *, prog: str = "python -m flink_writer"
) -> tuple[argparse.Namespace, sql.Options, str]:
    """The writer's arguments, options and the job's token (LAKELOCK_TOKEN); a bad option
    exits 2 with argparse's message naming it, `--help` exits 0 (standard library only, so
    lakelock's own Python checks a command line before PyFlink's runs it)."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if not token and not args.catalog_property:
        parser.error(f"set {TOKEN_ENV} to the job's lakelock token")
    if args.jobmanager and not sql.is_address(args.jobmanager):
        parser.error(f"--jobmanager {args.jobmanager!r}: the cluster's REST address, HOST:PORT")
    if args.restore_from.startswith("-"):
        parser.error(f"--restore-from {args.restore_from!r}: a checkpoint's or savepoint's URI")
    try:
        options = sql.Options(
            catalog_uri=args.catalog_uri,
            catalog_name=args.catalog_name,
            table=args.table,
            mode=args.mode,
            columns=args.columns,
            key=_names(args.key),
            partitioned_by=_names(args.partitioned_by),
            landing=args.landing,
            properties=dict(p.split("=", 1) for p in args.property),
            catalog_properties=dict(p.split("=", 1) for p in args.catalog_property),
            source=args.source,
            kafka_bootstrap=args.kafka_bootstrap,
            kafka_topic=args.kafka_topic,
            kafka_format=args.format,
            kafka_group=args.kafka_group,
            debezium_schema=args.debezium_schema,
            bounded=args.bounded,
            mysql_address=args.mysql,
            mysql_user=args.mysql_user,
            mysql_database=args.mysql_database,
            mysql_table=args.mysql_table,
            mysql_snapshot=args.mysql_snapshot,
            mysql_server_id=args.mysql_server_id,
            mysql_time_zone=args.mysql_time_zone,
            parallelism=args.parallelism,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return args, options, token


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    args, options, token = parse(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    report = run(args, options, token, stop)
    if args.report:
        args.report.write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(json.dumps(asdict(report)), flush=True)
    return 0 if report.status in ("FINISHED", "CANCELED") else 1
