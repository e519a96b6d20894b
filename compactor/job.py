"""Compact Iceberg tables under lakelock's maintenance lease, or show what a run would do.

    python -m compactor plan --table local.db.events            # reads metadata, touches nothing
    python -m compactor plan --table local.db.events --warehouse var/demo/warehouse
    python -m compactor run --table local.db.events --once
    python -m compactor run --config compactor.toml --every 10m

`plan` lists the partitions in scope (hot or cold, and why), the groups a run would lease one
after another and the steps run without a lease; it does not ask the service, so only the hot
window makes a partition hot there (a run also counts live commit leases).

The table is looked up in the catalog of --config, else in the local Hadoop catalog `local`
with its warehouse in var/warehouse; --catalog and --warehouse point elsewhere. `run` sends the
bearer token from LAKELOCK_TOKEN (or the variable `[service] token_env` of --config) to the
lakelock service at http://127.0.0.1:8737 (or --service-url).

Exit status: 0 done (compacted, or nothing worth doing); 1 a run failed, lost its lease, could
not reach the service, or `plan` found no such table; 2 a retention floor refused the config, or
the command line or config is wrong. The scheduled mode (--every) logs a failed run and goes on
with the next tick; SIGTERM or SIGINT stops it after the current run.
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
from pathlib import Path
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
from compactor.report import EXIT_CODES, Outcome, RunReport, publish
from compactor.run import default_holder, run_table, utcnow
from compactor.stats import collect_stats
from ingest_gate.spark import CatalogConfig
from ingest_gate.token import TOKEN_ENV, refused_token
from service.client import LeaseClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["main", "parse_args", "run_once", "run_scheduled", "print_plans", "resolve"]

log = logging.getLogger("compactor")

# Spark's error classes for a table (or its namespace) the catalog does not have
_NOT_FOUND = frozenset(("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND"))


def _explain_refusal(report: RunReport, token_env: str) -> None:
    """Name the token variable when the service refused the compactor's token (401)."""
    if (report.error or "").startswith("unauthorized"):
        log.error("%s", refused_token(token_env, token=os.environ.get(token_env)))


def run_once(
    spark: SparkSession,
    *,
    client: LeaseClient,
    tables: Sequence[TableConfig],
    holder: str | None = None,
    token_env: str = TOKEN_ENV,
) -> int:
    """Run every table once, in order; the worst exit code of their outcomes."""
    worst = 0
    for table in tables:
        report = run_table(spark, client=client, config=table, holder=holder)
        publish(report, client=client)
        _explain_refusal(report, token_env)
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
    token_env: str = TOKEN_ENV,
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
                _explain_refusal(report, token_env)
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


def not_found_line(table: str, catalog: CatalogConfig) -> str:
    """One line for a table the catalog does not have: where it looked, how to look elsewhere."""
    where = f"catalog {catalog.name!r} ({catalog.type}"
    if catalog.type == "hadoop":
        warehouse = catalog.warehouse
        shown = warehouse if "://" in warehouse else str(Path(warehouse).resolve())
        where += f", warehouse {shown}"
    return (
        f"{table}: no such table in {where}); point elsewhere with --warehouse DIR, "
        "--catalog NAME or --config FILE (bin/run's table: --warehouse var/demo/warehouse)"
    )


def print_plans(
    spark: SparkSession,
    *,
    tables: Sequence[TableConfig],
    as_json: bool,
    out: TextIO,
    catalog: CatalogConfig | None = None,
) -> int:
    """Print what a run would do to each table and why: 0, or 1 when a table does not exist
    (one line says where it was looked for), or 2 when a floor refuses a config.

    Raises:
        pyspark.errors.AnalysisException, py4j.protocol.Py4JJavaError: a table cannot be read.
    """
    from pyspark.errors import AnalysisException

    status = 0
    for table in tables:
        try:
            stats = collect_stats(spark, table=table.name, small_file_bytes=table.small_file_bytes)
        except AnalysisException as exc:
            if exc.getErrorClass() not in _NOT_FOUND:
                raise
            print(not_found_line(table.name, catalog or CatalogConfig()), file=out)
            status = max(status, 1)
            continue
        try:
            the_plan = plan(stats, table, utcnow())
        except RetentionRefused as exc:
            print(str(exc), file=out)
            status = max(status, 2)
            continue
        print(json.dumps(the_plan.as_dict()) if as_json else the_plan.describe(), file=out)
    return status


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    summary, _, rest = __doc__.partition("\n")
    parser = argparse.ArgumentParser(
        prog="python -m compactor",
        description=summary,
        epilog=rest.strip("\n"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("run", "compact tables under lakelock's maintenance lease (token from LAKELOCK_TOKEN)"),
        ("plan", "print what a run would do to a table and why; touches nothing"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument(
            "--config",
            help="TOML file of tables, thresholds, catalog (format: compactor/config.py)",
        )
        p.add_argument(
            "--table",
            action="append",
            default=[],
            help="catalog.namespace.table, e.g. local.db.events (repeat for more)",
        )
        p.add_argument(
            "--warehouse", help="the catalog's warehouse folder or URI (default var/warehouse)"
        )
        p.add_argument("--catalog", help="the Spark catalog name (default local)")
        p.add_argument("--master", help="Spark master, e.g. local[2] (default local[*])")
        if name == "run":
            when = p.add_mutually_exclusive_group()
            when.add_argument("--once", action="store_true", help="one run per table, then exit")
            when.add_argument("--every", help="run every DURATION (e.g. 10m) until stopped")
            p.add_argument(
                "--service-url", help="the lakelock service (default http://127.0.0.1:8737)"
            )
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
            return print_plans(
                spark, tables=tables, as_json=args.json, out=sys.stdout, catalog=config.catalog
            )
        token = os.environ.get(config.token_env)
        if not token:
            log.warning(
                "%s is not set: sending no token, which only a service with LAKELOCK_AUTH=off "
                "accepts",
                config.token_env,
            )
        client = LeaseClient(config.service_url, token=token)
        with client:
            every = None if args.once else every or config.every
            if every is None:
                return run_once(
                    spark,
                    client=client,
                    tables=tables,
                    holder=default_holder(),
                    token_env=config.token_env,
                )
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
                token_env=config.token_env,
            )
            return 0
    finally:
        spark.stop()
