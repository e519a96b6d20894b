"""Concurrent table runs over one Spark session: FIFO (Spark's default) against FAIR pools.

    python -m benchmarks.fleet_scheduler                      # 2 modes x 2 trials, ~8 min
    python -m benchmarks.fleet_scheduler --trials 1 --small 2 --out var/fleet-scheduler-small

One compactor tick (`compactor run --once`, `fleet.max_concurrent = 2`, local[2]) over a lake
of one big table with debt (`--big-partitions` day partitions of `--big-files` small files
each: as many file groups for `rewrite_data_files`, five at a time) and `--small` small tables
with debt (12 small files, one delete), the big table ranked first. With `fleet.scheduler =
"fifo"` every Spark job of the tick queues in one line, so the small tables' jobs wait behind
the big rewrite's; with "fair" each worker thread has a pool of its own and the executors'
slots alternate between them. Per mode and trial, from the run reports: the big table's run,
and when the last small table was done (seconds from the start of the first run), their
median run. Writes `results.json` into `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.fleet import _create, add_debt
from benchmarks.lake import local_lake
from service.client import LeaseClient
from testkit import LocalService

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
MODES = ("fifo", "fair")


def _lake(spark: Any, namespace: str, *, small: int, big_partitions: int, big_files: int) -> dict:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    big = f"{namespace}.a_big"
    _create(spark, big)
    rows = big_partitions * big_files * 500
    spark.sql(
        f"INSERT INTO {big} SELECT id, date_add(DATE '2024-01-01', CAST(id % {big_partitions} "
        f"AS INT)), sha2(CAST(id AS STRING), 256) FROM range(0, {rows}, 1, {big_files})"
    )
    spark.sql(f"DELETE FROM {big} WHERE id % 1000 = 0")
    smalls = []
    for i in range(small):
        table = f"{namespace}.b_small_{i}"
        _create(spark, table)
        add_debt(spark, table, first_id=0)
        smalls.append(table)
    return {"big": big, "small": smalls}


def _tick(out: Path, service: LocalService, namespace: str, mode: str) -> float:
    config = out / f"compactor-{namespace.split('.')[-1]}.toml"
    config.write_text(
        f"""
[service]
url = "{service.url}"
[catalog]
name = "local"
warehouse = "{(out / "warehouse").resolve()}"
[spark]
master = "local[2]"
[fleet]
max_concurrent = 2
scheduler = "{mode}"
[defaults.lease]
ttl = "60s"
[[tables]]
name = "{namespace}.*"
"""
    )
    env = {**os.environ, "LAKELOCK_TOKEN": service.token("job")}
    log = out / f"{namespace.split('.')[-1]}.log"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "compactor", "run", "--once", "--config", str(config)],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        timeout=3600,
    )
    if done.returncode:
        raise RuntimeError(f"{mode}: exit {done.returncode}\n{log.read_text()[-3000:]}")
    return time.monotonic() - started


def _span(run: dict[str, Any]) -> tuple[float, float]:
    start = datetime.fromisoformat(run["started_at"]).timestamp()
    return start, start + run["duration_s"]


def _figures(client: LeaseClient, lake: dict) -> dict[str, Any]:
    big = client.runs(lake["big"], limit=1)[0]
    smalls = [client.runs(t, limit=1)[0] for t in lake["small"]]
    runs = [big, *smalls]
    assert all(r["outcome"] == "compacted" for r in runs), [r["outcome"] for r in runs]
    first = min(_span(r)[0] for r in runs)
    return {
        "big_run_s": round(big["duration_s"], 1),
        "last_small_done_s": round(max(_span(r)[1] for r in smalls) - first, 1),
        "small_run_median_s": round(statistics.median(r["duration_s"] for r in smalls), 1),
        "all_done_s": round(max(_span(r)[1] for r in runs) - first, 1),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet_scheduler", description=__doc__
    )
    parser.add_argument("--trials", type=int, default=2, help="ticks per mode, alternating")
    parser.add_argument("--small", type=int, default=4, help="small tables with debt")
    parser.add_argument("--big-partitions", type=int, default=12)
    parser.add_argument("--big-files", type=int, default=24, help="small files per partition")
    parser.add_argument("--out", type=Path, default=Path("var/fleet-scheduler"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with local_lake(args.out, app_name="lakelock-fleet-scheduler") as (spark, service):
        with LeaseClient(service.url, token=service.token("operator")) as client:
            for trial in range(args.trials):
                for mode in MODES if trial % 2 == 0 else reversed(MODES):
                    namespace = f"local.{mode}_{trial}"
                    lake = _lake(
                        spark,
                        namespace,
                        small=args.small,
                        big_partitions=args.big_partitions,
                        big_files=args.big_files,
                    )
                    wall = _tick(args.out, service, namespace, mode)
                    figures = {**_figures(client, lake), "process_s": round(wall, 1)}
                    results[mode].append(figures)
                    print(f"{mode} trial {trial + 1}: {figures}", flush=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
        for mode in MODES:
            keys = results[mode][0].keys()
            medians = {k: statistics.median(r[k] for r in results[mode]) for k in keys}
            print(f"{mode} (median of {args.trials}): {medians}", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
