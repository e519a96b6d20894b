"""`lakelock-compactor` / `python -m compactor`: wiring only; the work is in compactor.run.

    python -m compactor run --table local.db.events --once
    python -m compactor run --config compactor.toml --every 10m
    python -m compactor plan --table local.db.events            # touches nothing

`run --once` exits non-zero when a table's run failed, lost its lease, could not reach the
service (1) or was refused by a retention floor (2). The scheduled mode logs such a run and
goes on with the next tick; SIGTERM or SIGINT stops it after the current run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from compactor.config import (
    CompactorConfig,
    ConfigError,
    RetentionRefused,
    TableConfig,
    load_config,
    parse_duration,
)
from compactor.plan import plan
from compactor.report import EXIT_CODES, Outcome, publish
from compactor.run import default_holder, run_table, utcnow
from compactor.stats import collect_stats
from service.client import LeaseClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["main", "parse_args", "run_once", "run_scheduled", "print_plans", "resolve"]

log = logging.getLogger("compactor")


def run_once(
    spark: SparkSession,
    *,
    client: LeaseClient,
    tables: Sequence[TableConfig],
    holder: str | None = None,
) -> int:
    """Run every table once, in order; the worst exit code of their outcomes."""
    worst = 0
    for table in tables:
        report = run_table(spark, client=client, config=table, holder=holder)
        publish(report, client=client)
        worst = max(worst, EXIT_CODES[Outcome(report.outcome)])
    return worst


def run_scheduled(
    spark: SparkSession,
    *,
    client: LeaseClient,
    tables: Sequence[TableConfig],
    every_s: float,
    stop: threading.Event,
    holder: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run every table at each tick (`every_s` apart, from the first) until `stop` is set.

    A failed table is logged and reported; the next table and the next tick still run.
    Returns the number of ticks run.
    """
    ticks = 0
    next_at = clock()
    while not stop.is_set():
        for table in tables:
            if stop.is_set():
                break
            try:
                report = run_table(spark, client=client, config=table, holder=holder)
                publish(report, client=client)
            except Exception:
                # run_table reports step failures itself; this is a fault around it
                log.exception("run of %s failed; going on with the next", table.name)
        ticks += 1
        # ticks stay on the grid: a long run skips the ticks it overran instead of bunching
        next_at += every_s
        while next_at <= clock():
            next_at += every_s
        stop.wait(next_at - clock())
    return ticks


def print_plans(
    spark: SparkSession, *, tables: Sequence[TableConfig], as_json: bool, out: TextIO
) -> int:
    """Print what a run would do to each table and why; 2 when a floor refuses a config.

    Raises:
        pyspark.errors.AnalysisException, py4j.protocol.Py4JJavaError: a table cannot be read.
    """
    status = 0
    for table in tables:
        stats = collect_stats(spark, table=table.name, small_file_bytes=table.small_file_bytes)
        try:
            the_plan = plan(stats, table, utcnow())
        except RetentionRefused as exc:
            print(str(exc), file=out)
            status = 2
            continue
        print(json.dumps(the_plan.as_dict()) if as_json else the_plan.describe(), file=out)
    return status


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lakelock-compactor", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("run", "compact tables under the maintenance lease"),
        ("plan", "print what a run would do and why; touches nothing"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", help="TOML file (see compactor.config)")
        p.add_argument("--table", action="append", default=[], help="catalog.namespace.table")
        p.add_argument("--warehouse", help="catalog warehouse (overrides the config)")
        p.add_argument("--catalog", help="catalog name (overrides the config)")
        p.add_argument("--master", help="Spark master, e.g. local[2] (overrides the config)")
        if name == "run":
            when = p.add_mutually_exclusive_group()
            when.add_argument("--once", action="store_true", help="one run per table, then exit")
            when.add_argument("--every", help="scheduled mode: run every DURATION (e.g. 10m)")
            p.add_argument("--service-url", help="lakelock service URL (overrides the config)")
        else:
            p.add_argument("--json", action="store_true", help="one JSON object per table")
    return parser.parse_args(argv)


def resolve(args: argparse.Namespace) -> tuple[CompactorConfig, list[TableConfig]]:
    """The config the arguments describe, and the tables to work on.

    Raises:
        ConfigError: no table named anywhere, or a malformed config file.
        OSError: the config file cannot be read.
    """
    config = load_config(args.config) if args.config else CompactorConfig()
    catalog = config.catalog
    if args.warehouse:
        catalog = replace(catalog, warehouse=args.warehouse)
    if args.catalog:
        catalog = replace(catalog, name=args.catalog)
    config = replace(
        config,
        catalog=catalog,
        spark_master=args.master or config.spark_master,
        service_url=getattr(args, "service_url", None) or config.service_url,
    )
    tables = [config.table(name) for name in args.table] or list(config.tables)
    if not tables:
        raise ConfigError("no table: pass --table or list [[tables]] in --config")
    return config, tables


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("LAKELOCK_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    args = parse_args(argv)
    try:
        config, tables = resolve(args)
        every = parse_duration(args.every) if getattr(args, "every", None) else None
    except (ConfigError, OSError) as exc:
        log.error("%s", exc)
        return 2
    from ingest_gate.spark import build_session

    spark = build_session(config.catalog, app_name="lakelock-compactor", master=config.spark_master)
    try:
        if args.command == "plan":
            return print_plans(spark, tables=tables, as_json=args.json, out=sys.stdout)
        client = LeaseClient(config.service_url, token=os.environ.get(config.token_env))
        with client:
            every = None if args.once else every or config.every
            if every is None:
                return run_once(spark, client=client, tables=tables, holder=default_holder())
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            run_scheduled(
                spark,
                client=client,
                tables=tables,
                every_s=every.total_seconds(),
                stop=stop,
                holder=default_holder(),
            )
            return 0
    finally:
        spark.stop()
