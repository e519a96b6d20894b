"""Listing the tables: GET /v1/tables over many known tables, one page and every page.

    python -m benchmarks.table_list --tables 300 --repeat 20 --databases sqlite,mariadb

For each database it makes a fresh, migrated database, starts `python -m service` on a free
loopback port (auth off), makes `--tables` tables known (a switch set on each), then times, per
call, `--repeat` times each (the median, and the slowest):

    default page   GET /v1/tables: the first page (100 tables)
    one page       GET /v1/tables?limit=1000: every table in one answer while they fit, what a
                   service before paging answered to GET /v1/tables
    every page     LeaseClient.tables(): every page, following `next`

`--service-root PATH` serves another checkout (an older version) on the same databases and
client. `--json out.json` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from service.client import LeaseClient
from testkit import LocalService, fresh_database

ROOT = Path(__file__).resolve().parent.parent


def _timed(call: Callable[[], object], repeat: int) -> dict[str, float]:
    call()  # warm: connections, caches
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        took.append(time.perf_counter() - started)
    return {"median_s": statistics.median(took), "max_s": max(took)}


def measure(db_url: str, workdir: Path, *, tables: int, repeat: int, root: Path) -> dict:
    service = LocalService.start(
        db_url=db_url, log_path=workdir / "service.log", cwd=root, LAKELOCK_AUTH="off"
    )
    try:
        with httpx.Client(base_url=service.url, timeout=120) as http:
            for index in range(tables):
                http.put(
                    f"/v1/tables/bench.db.t{index:05d}/switch",
                    json={"reason": "benchmark", "ingest": "running"},
                ).raise_for_status()
            client = LeaseClient(http=http)
            figures = {
                "default page": _timed(lambda: http.get("/v1/tables").raise_for_status(), repeat),
                "one page": _timed(
                    lambda: http.get("/v1/tables", params={"limit": 1000}).raise_for_status(),
                    repeat,
                ),
                "every page": _timed(client.tables, repeat),
            }
            figures["default page"]["tables"] = len(http.get("/v1/tables").json()["tables"])
            figures["every page"]["tables"] = len(client.tables())
    finally:
        service.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--databases", default="sqlite", help="sqlite, mariadb or both")
    parser.add_argument("--mariadb-url", default="mysql+pymysql://root@127.0.0.1:3306/test")
    parser.add_argument("--service-root", type=Path, default=ROOT)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="lakelock-table-list-") as folder:
        for kind in args.databases.split(","):
            workdir = Path(folder) / kind
            workdir.mkdir()
            with fresh_database(kind, mariadb_url=args.mariadb_url, workdir=workdir) as url:
                results[kind] = measure(
                    url, workdir, tables=args.tables, repeat=args.repeat, root=args.service_root
                )
            for name, row in results[kind].items():
                listed = f"  ({row['tables']} tables)" if "tables" in row else ""
                print(
                    f"{kind:8} {name:13} median {row['median_s'] * 1000:8.1f} ms"
                    f"  max {row['max_s'] * 1000:8.1f} ms{listed}"
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
