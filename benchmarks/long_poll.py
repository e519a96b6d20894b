"""Long-poll latency: how soon a waiting commit-lease request is answered after the maintenance
lease blocking it is released.

    python -m benchmarks.long_poll --trials 50 --databases sqlite,mariadb

Each trial: a compactor takes the maintenance lease on a table; `--clients` ingest clients then
ask for commit leases with `wait_s` and are left waiting; after a short, randomised pause the
compactor releases. The delay is from the release's response arriving at the compactor to each
waiting request's 201 arriving at its client (all in this process, one clock), so it can be
slightly negative when the waiter is told before the releaser is. Two paths:

    same-process   waiters and releaser on one service process: woken by its in-process notifier
    two-processes  waiters on a second service process sharing the database: it learns of the
                   release by polling the table's version (`LAKELOCK_POLL_INTERVAL_S`)

It prints p50/p90/max per database and path; `--json` writes every delay.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.lease_throughput import (
    DEFAULT_MARIADB_URL,
    comma_list,
    percentile,
    running_service,
    write_figures,
)
from testkit import fresh_database

__all__ = ["Result", "main", "trial"]

PATHS = ("same-process", "two-processes")
TABLE = "bench.db.events"
WAIT_S = 30.0


@dataclass
class Result:
    """Delays in milliseconds, one per waiting request over all trials."""

    database: str
    path: str
    trials: int
    waiters: int
    failures: int
    p50_ms: float
    p90_ms: float
    max_ms: float
    delays_ms: list[float]
    first_failure: str | None = None


def _call(url: str, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S + 30)
    try:
        payload = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def _expect(status: int, data: Any, wanted: int, what: str) -> Any:
    if status != wanted:
        raise RuntimeError(f"{what}: expected {wanted}, got {status}: {data}")
    return data


def trial(releaser_url: str, waiter_url: str, waiters: int) -> tuple[list[float], list[str]]:
    """One maintenance grant, `waiters` waiting commit requests, one release. Returns each
    waiter's delay in seconds after the release's response, and the failures."""
    lease = _expect(
        *_call(
            releaser_url,
            "POST",
            f"/v1/tables/{TABLE}/maintenance-lease",
            {"holder": "bench-compactor", "ttl_s": 60, "request_id": uuid.uuid4().hex},
        ),
        201,
        "maintenance lease",
    )
    answered: list[tuple[float, int, Any]] = []
    lock = threading.Lock()

    def wait_for_commit(n: int) -> None:
        body = {"holder": f"bench-ingest-{n}", "ttl_s": 60, "wait_s": WAIT_S}
        status, data = _call(waiter_url, "POST", f"/v1/tables/{TABLE}/commit-leases", body)
        with lock:
            answered.append((time.perf_counter(), status, data))

    threads = [threading.Thread(target=wait_for_commit, args=(n,)) for n in range(waiters)]
    for thread in threads:
        thread.start()
    # long enough for every request to be waiting; random, so the release does not always fall
    # at the same phase of the second process's poll
    time.sleep(0.25 + random.uniform(0, 0.1))
    if len(answered) != 0:
        raise RuntimeError(f"a commit request was answered before the release: {answered[0]}")
    path = f"/v1/leases/{lease['lease_id']}?token={lease['token']}"
    _expect(*_call(releaser_url, "DELETE", path), 200, "release")
    released = time.perf_counter()
    for thread in threads:
        thread.join()
    delays, failures = [], []
    for at, status, data in answered:
        if status != 201:
            failures.append(f"{status}: {data}")
            continue
        delays.append(at - released)
        _expect(*_call(waiter_url, "DELETE", f"/v1/leases/{data['lease_id']}"), 200, "release")
    return delays, failures


def measure(args: argparse.Namespace, workdir: Path) -> list[Result]:
    env = {}
    if args.poll_interval is not None:
        env["LAKELOCK_POLL_INTERVAL_S"] = str(args.poll_interval)
    results = []
    for database in args.databases:
        for path in args.paths:
            with ExitStack() as stack:
                url = stack.enter_context(
                    fresh_database(database, mariadb_url=args.mariadb_url, workdir=workdir)
                )
                log_path = workdir / f"service-{database}-{path}.log"
                releaser = stack.enter_context(running_service(url, log_path=log_path, **env))
                waiter = releaser
                if path == "two-processes":
                    waiter = stack.enter_context(running_service(url, log_path=log_path, **env))
                delays: list[float] = []
                failures: list[str] = []
                trials = 0
                budget_ends = time.monotonic() + args.seconds
                while trials < args.trials and (trials == 0 or time.monotonic() < budget_ends):
                    got, failed = trial(releaser, waiter, args.clients)
                    delays += got
                    failures += failed
                    trials += 1
            ms = [d * 1000 for d in delays]
            result = Result(
                database=database,
                path=path,
                trials=trials,
                waiters=args.clients,
                failures=len(failures),
                p50_ms=percentile(ms, 0.5),
                p90_ms=percentile(ms, 0.9),
                max_ms=max(ms, default=float("nan")),
                delays_ms=ms,
                first_failure=failures[0] if failures else None,
            )
            results.append(result)
            print(_row(result), flush=True)
    return results


_HEADER = (
    f"{'database':<9} {'path':<14} {'trials':>6} {'waiters':>7} {'p50 ms':>8} {'p90 ms':>8} "
    f"{'max ms':>8} {'failures':>8}"
)


def _row(r: Result) -> str:
    return (
        f"{r.database:<9} {r.path:<14} {r.trials:>6} {r.waiters:>7} {r.p50_ms:>8.1f} "
        f"{r.p90_ms:>8.1f} {r.max_ms:>8.1f} {r.failures:>8}"
        + (f"  first failure: {r.first_failure}" if r.first_failure else "")
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.long_poll", description=__doc__.split("\n")[0]
    )
    p.add_argument("--clients", type=int, default=1, help="waiting commit requests per trial")
    p.add_argument("--trials", type=int, default=50, help="trials per database and path")
    p.add_argument(
        "--seconds", type=float, default=120.0, help="stop a row's trials after this long"
    )
    p.add_argument(
        "--databases", type=comma_list, default=["sqlite", "mariadb"], help="sqlite,mariadb"
    )
    p.add_argument("--paths", type=comma_list, default=list(PATHS), help=",".join(PATHS))
    p.add_argument(
        "--mariadb-url",
        default=DEFAULT_MARIADB_URL,
        help="server to use; a fresh database is created on it per row and dropped after",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        help="LAKELOCK_POLL_INTERVAL_S for the services (default: the service's own)",
    )
    p.add_argument("--json", type=Path, help="write every figure to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in args.paths:
        if name not in PATHS:
            raise SystemExit(f"unknown path {name!r}; use {','.join(PATHS)}")
    print(_HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="lakelock-bench-") as tmp:
        results = measure(args, Path(tmp))
    if args.json:
        write_figures(args.json, argv, results)
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
