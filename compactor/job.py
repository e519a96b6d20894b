"""Compact Iceberg tables under lakelock's maintenance lease, or show what a run would do.

    python -m compactor plan --table local.db.events            # reads metadata, touches nothing
    python -m compactor plan --table local.db.events --warehouse var/demo/warehouse
    python -m compactor rank --config compactor.toml            # what a tick would plan, and why
    python -m compactor run --table local.db.events --once
    python -m compactor run --config compactor.toml --every 10m
    python -m compactor run --table 'local.db.*' --once         # every table of local.db
    python -m compactor run --config compactor.toml --follow    # follow the stream (below)
    python -m compactor run --config compactor.toml --follow --every 10m --poll 20

`plan` lists the partitions in scope (hot or cold, and why), the groups a run would lease one
after another and the steps run without a lease; it does not ask the service, so only the hot
window makes a partition hot there (a run also counts live commit leases). `rank` reads each
table's current snapshot summary (no Spark job) and says which tables a tick would plan, in
which order, and why; it does not ask the service either.

`run` works through every table named (`--table` or `[[tables]]`, exact names or shell-style
patterns expanded through the catalog at each tick; compactor.fleet): it ranks them by their
summaries, claims each table with debt before planning it (a table another compactor holds is
left to it, and the output names the holder), runs up to `[fleet] max_concurrent` tables at
once, and releases each claim after the table's housekeeping. `--no-claim` (with `--once` only)
skips the claims, and says so.

`run --follow` follows the stream (compactor.follow): with a warm Spark session it long-polls
the service (`--poll` seconds a wait, 30 by default) for the partitions of the named tables that
commits made due, and compacts those partitions at once, most debt first, each table under its
claim (so several followers share the tables); the full plan above still runs on a slower grid,
`--every` (5m by default in this mode), for what the counts cannot see. SIGTERM or SIGINT stops
it within a few seconds, after the steps in flight: a run waiting for its lease stops waiting,
its groups left for the next run (docs/jobs.md §5).

The table is looked up in the catalog of --config, else in the local Hadoop catalog `local`
with its warehouse in var/warehouse; --catalog and --warehouse point elsewhere. `run` sends the
bearer token from LAKELOCK_TOKEN (or the variable `[service] token_env` of --config) to the
lakelock service at http://127.0.0.1:8737 (or --service-url).

Exit status: 0 done (compacted, nothing worth doing, or left to another compactor); 1 a run
failed, lost its lease, could not reach the service, or a table could not be read (`plan`: no
such table); 2 a retention floor refused the config, or the command line or config is wrong.
The scheduled mode (--every) logs a failed run and goes on with the next tick; SIGTERM or
SIGINT stops it after the steps in flight, as --follow. `--follow` exits 0 when stopped, 1 when
the service refuses its long-poll (a token that may not, a table name it refuses).
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
from datetime import timedelta
from typing import TYPE_CHECKING, TextIO

from compactor.catalog import candidates
from compactor.config import (
    TITLE,
    CompactorConfig,
    ConfigError,
    TableConfig,
    load_config,
    parse_duration,
)
from compactor.fleet import Fleet
from compactor.follow import MAX_POLL_S, Follower
from compactor.patterns import check_name, expand
from compactor.plan import plan
from compactor.procedure_config import RetentionRefused
from compactor.run import default_holder, utcnow
from compactor.stats import collect_stats
from jobkit.spark import CatalogConfig, catalog_place
from jobkit.token import TOKEN_ENV
from service.client import LeaseClient
from service.wire.errors import LakelockError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "FOLLOW_EVERY",
    "main",
    "parse_args",
    "print_plans",
    "print_rank",
    "resolve",
    "run_once",
    "run_scheduled",
]

log = logging.getLogger("compactor")

# Spark's error classes for a table (or its namespace) the catalog does not have
_NOT_FOUND = frozenset(("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND"))

# the full plan's grid of a follower when neither --every nor the config's `every` says
FOLLOW_EVERY = timedelta(minutes=5)


def run_once(
    spark: SparkSession,
    *,
    client: LeaseClient,
    tables: Sequence[TableConfig],
    holder: str | None = None,
    token_env: str = TOKEN_ENV,
    claims: bool = True,
) -> int:
    """One tick over `tables` (compactor.fleet); the worst exit code of their outcomes."""
    fleet = Fleet(
        spark,
        client=client,
        config=CompactorConfig(tables=tuple(tables)),
        holder=holder,
        claims=claims,
        token_env=token_env,
    )
    return fleet.tick().exit_code


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
    ticks: int | None = None,
) -> int:
    """A tick over `tables` every `every_s` seconds until `stop` is set (or `ticks` ran); the
    number of ticks run. A failed table is logged and reported; the next ones still run."""
    fleet = Fleet(
        spark,
        client=client,
        config=CompactorConfig(tables=tuple(tables)),
        holder=holder,
        token_env=token_env,
        clock=clock,
    )
    return fleet.run(every_s=every_s, stop=stop, ticks=ticks)


def not_found_line(table: str, catalog: CatalogConfig) -> str:
    """One line for a table the catalog does not have: where it looked, how to look elsewhere."""
    return (
        f"{table}: no such table in {catalog_place(catalog)}; point elsewhere with --warehouse "
        "DIR, --catalog NAME or --config FILE (bin/run's table: --warehouse var/demo/warehouse)"
    )


def print_plans(
    spark: SparkSession,
    *,
    config: CompactorConfig,
    selection: Sequence[str],
    as_json: bool,
    out: TextIO,
) -> int:
    """Print what a run would do to each table `selection` names (patterns expanded through
    the catalog) and why: 0, or 1 when a table does not exist (one line says where it was
    looked for), or 2 when a floor refuses a config.

    Raises:
        pyspark.errors.AnalysisException, py4j.protocol.Py4JJavaError: a table cannot be read.
    """
    from pyspark.errors import AnalysisException

    status = 0
    for name in expand(selection, lambda pattern: candidates(spark, pattern)):
        try:
            table = config.table(name)
            stats = collect_stats(spark, table=name, small_file_bytes=table.small_file_bytes)
            the_plan = plan(stats, table, utcnow())
        except AnalysisException as exc:
            if exc.getErrorClass() not in _NOT_FOUND:
                raise
            print(not_found_line(name, config.catalog), file=out)
            status = max(status, 1)
            continue
        except (RetentionRefused, ConfigError) as exc:
            print(str(exc), file=out)
            status = max(status, 2)
            continue
        print(json.dumps(the_plan.as_dict()) if as_json else the_plan.describe(), file=out)
    return status


def print_rank(
    spark: SparkSession,
    *,
    config: CompactorConfig,
    selection: Sequence[str],
    as_json: bool,
    out: TextIO,
) -> int:
    """Print what a tick would plan, in its order, and why each other table is left alone
    (no Spark job, no service): 0, or the exit code of a table that could not be read."""
    fleet = Fleet(spark, client=None, config=config, selection=selection)
    report, ranked = fleet.rank()
    for a in ranked:
        if as_json:
            print(json.dumps(a.as_dict(), sort_keys=True), file=out)
        elif a.debt:
            print(f"{a.table}: plan (score {a.score:.1f}): {'; '.join(a.debt)}", file=out)
        else:
            print(f"{a.table}: leave: {a.healthy}", file=out)
    for name, why in report.failed.items():
        print(f"{name}: {why}", file=out)
    return report.exit_code


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
        ("rank", "print which tables a tick would plan, in order, and why; no Spark job"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        _common_args(p)
        if name == "run":
            when = p.add_mutually_exclusive_group()
            when.add_argument("--once", action="store_true", help="one run per table, then exit")
            when.add_argument("--every", help="run every DURATION (e.g. 10m) until stopped")
            p.add_argument(
                "--service-url", help="the lakelock service (default http://127.0.0.1:8737)"
            )
            p.add_argument(
                "--ticks",
                type=int,
                help="with --every: stop after this many ticks (default: run until stopped)",
            )
            p.add_argument(
                "--no-claim",
                action="store_true",
                help="with --once: plan without claiming tables (another compactor may "
                "compact the same tables; the output says claims are off)",
            )
            p.add_argument(
                "--follow",
                action="store_true",
                help="follow the stream: long-poll the service for due partitions and compact "
                "them at once; the full plan runs every --every (default 5m)",
            )
            p.add_argument(
                "--poll",
                type=float,
                help=f"with --follow: seconds each long-poll waits (default 30, at most "
                f"{MAX_POLL_S:g})",
            )
        else:
            p.add_argument("--json", action="store_true", help="one JSON object per table")
    args = parser.parse_args(argv)
    if getattr(args, "no_claim", False) and not args.once:
        parser.error("--no-claim is for one-off runs: use it with --once")
    if getattr(args, "ticks", None) is not None and (args.once or args.follow or args.ticks < 1):
        parser.error("--ticks N (N >= 1) goes with --every")
    if getattr(args, "follow", False) and args.once:
        parser.error("--follow runs until stopped: not with --once")
    poll = getattr(args, "poll", None)
    if poll is not None and not getattr(args, "follow", False):
        parser.error("--poll goes with --follow")
    if poll is not None and not 0 < poll <= MAX_POLL_S:
        parser.error(f"--poll must be more than 0 and at most {MAX_POLL_S:g} seconds")
    return args


def _common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        help="TOML file of tables, thresholds, catalog (format: compactor/config.py)",
    )
    p.add_argument(
        "--table",
        action="append",
        default=[],
        help="catalog.namespace.table, e.g. local.db.events, or a pattern, e.g. 'local.db.*' "
        "(repeat for more)",
    )
    p.add_argument(
        "--warehouse", help="the catalog's warehouse folder or URI (default var/warehouse)"
    )
    p.add_argument("--catalog", help="the Spark catalog name (default local)")
    p.add_argument("--master", help="Spark master, e.g. local[2] (default local[*])")


def resolve(args: argparse.Namespace) -> tuple[CompactorConfig, list[str]]:
    """The config the arguments describe, and the tables to work on: names or patterns.

    Raises:
        ConfigError: no table named anywhere, a malformed --table, or a config file that is
            missing, unreadable or malformed.
    """
    # flags over the file over the defaults, in the file's own shape
    flags = {
        "catalog": {"warehouse": args.warehouse, "name": args.catalog},
        "spark": {"master": args.master},
        "service": {"url": getattr(args, "service_url", None)},
    }
    overrides = {
        section: {k: v for k, v in values.items() if v}
        for section, values in flags.items()
        if any(values.values())
    }
    config = load_config(args.config, overrides=overrides)
    problems = []
    for name in args.table:
        try:
            check_name(name)
        except ValueError as exc:
            problems.append((f"--table {name}", str(exc)))
    if problems:
        raise ConfigError(problems, title=TITLE)
    selection = list(args.table) or list(config.selection)
    if not selection:
        raise ConfigError(
            [("table", "no table: pass --table or list [[tables]] in --config")],
            title=TITLE,
        )
    return config, selection


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("LAKELOCK_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    args = parse_args(argv)
    try:
        config, selection = resolve(args)
        every = parse_duration(args.every) if getattr(args, "every", None) else None
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    from jobkit.spark import build_session

    fair = {"spark.scheduler.mode": "FAIR"} if config.fleet.scheduler == "fair" else {}
    spark = build_session(
        config.catalog,
        app_name="lakelock-compactor",
        master=config.spark_master,
        extra_conf=fair,
    )
    try:
        if args.command in ("plan", "rank"):
            show = print_plans if args.command == "plan" else print_rank
            return show(
                spark, config=config, selection=selection, as_json=args.json, out=sys.stdout
            )
        return _run(spark, args, config, selection, every)
    finally:
        spark.stop()


def _run(
    spark: SparkSession,
    args: argparse.Namespace,
    config: CompactorConfig,
    selection: Sequence[str],
    every: timedelta | None,
) -> int:
    token = os.environ.get(config.token_env)
    if not token:
        log.warning(
            "%s is not set: sending no token, which only a service with LAKELOCK_AUTH=off accepts",
            config.token_env,
        )
    with LeaseClient(config.service_url, token=token) as client:
        fleet = Fleet(
            spark,
            client=client,
            config=config,
            selection=selection,
            holder=default_holder(),
            claims=not args.no_claim,
            token_env=config.token_env,
        )
        every = None if args.once else every or config.every
        if every is None and not args.follow:
            return fleet.tick().exit_code
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        if args.follow:
            return _follow(fleet, every or FOLLOW_EVERY, args.poll, stop)
        assert every is not None
        fleet.run(every_s=every.total_seconds(), stop=stop, ticks=args.ticks)
        return 0


def _follow(fleet: Fleet, every: timedelta, poll: float | None, stop: threading.Event) -> int:
    follower = Follower(fleet, every_s=every.total_seconds(), poll_s=poll or 30.0)
    try:
        follower.run(stop)
    except LakelockError as exc:
        log.error("the service refused the follower's long-poll, stopping: %s", exc)
        fleet._explain(exc.slug)
        stop.set()
        return 1
    return 0
