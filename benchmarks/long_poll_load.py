"""Long-polls under load: is the service still quick while many requests wait, and how long
does a compactor that died while draining hold ingest?

    python -m benchmarks.long_poll_load --parked 500 --calls 200 --databases sqlite,mariadb

Per database, one service process (`python -m service`, auth off) over a fresh database:

    parked   a maintenance lease is held on one table; `--parked` requests then wait on it, half
             `POST .../commit-leases` with `wait_s`, half `GET /v1/tables/T?wait=..&since=<its
             version>`; while they wait, `--calls` sequential `GET /healthz` and as many commit
             acquires (each released after) on another table are timed, p50/p99 in ms. The
             maintenance lease is then released and every parked request must be answered
             (201 / 200): a request lost or refused counts as a failure.
    drain    a commit lease is held (an in-flight micro-batch); a compactor asks for the
             maintenance lease with `wait_s` 30 and waits (draining: its intent is open); an
             ingest client asks for a commit lease with `wait_s` 30 and is held by the intent.
             The compactor's connection is then closed, as when its process dies; the figure
             is the time from that close to the commit lease's 201. Repeated `--drain-trials`
             times on fresh tables.

Parked requests are raw HTTP/1.1 on asyncio sockets, so this process holds no thread per
request either. `--json` writes every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
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

__all__ = ["Result", "main", "measure"]

WAIT_S = 30.0
BLOCKED = "bench.db.blocked"
FREE = "bench.db.free"


@dataclass
class Result:
    """One database's figures; latencies in milliseconds, drain holds in seconds."""

    database: str
    parked: int
    calls: int
    healthz_p50_ms: float
    healthz_p99_ms: float
    acquire_p50_ms: float
    acquire_p99_ms: float
    drain_hold_s: list[float]
    intent_ttl_s: float
    failures: int
    first_failure: str | None = None
    healthz_ms: list[float] = field(default_factory=list)
    acquire_ms: list[float] = field(default_factory=list)


class Api:
    """One keep-alive connection for the timed, sequential calls."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S + 30)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload else {}
        self.conn.request(method, path, body=payload, headers=headers)
        answer = self.conn.getresponse()
        return answer.status, json.loads(answer.read())

    def expect(self, wanted: int, method: str, path: str, body: dict | None = None) -> Any:
        status, data = self.call(method, path, body)
        if status != wanted:
            raise RuntimeError(f"{method} {path}: expected {wanted}, got {status}: {data}")
        return data

    def timed(self, method: str, path: str, body: dict | None = None) -> tuple[float, int, Any]:
        started = time.perf_counter()
        status, data = self.call(method, path, body)
        return (time.perf_counter() - started) * 1000, status, data

    def close(self) -> None:
        self.conn.close()


class Parked:
    """One request sent on its own socket, its answer read whenever it comes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def send(cls, url: str, method: str, path: str, body: dict | None = None) -> Parked:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
        if payload:
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        return cls(reader, writer)

    async def status(self) -> int:
        """The answer's status (the server closes the connection after it)."""
        line = await self.reader.readline()
        await self.reader.read()
        self.close()
        return int(line.split()[1]) if line else 0

    def close(self) -> None:
        self.writer.close()


def _commit_body(holder: str, wait_s: float = 0.0) -> dict[str, Any]:
    return {"holder": holder, "ttl_s": 60, "request_id": uuid.uuid4().hex, "wait_s": wait_s}


async def _parked_phase(url: str, args: argparse.Namespace) -> tuple[list, list, list[str]]:
    api = Api(url)
    failures: list[str] = []
    try:
        maintenance = api.expect(
            201, "POST", f"/v1/tables/{BLOCKED}/maintenance-lease", _commit_body("bench-compactor")
        )
        version = api.expect(200, "GET", f"/v1/tables/{BLOCKED}")["version"]
        parked = []
        for n in range(args.parked):
            if n % 2:
                path = f"/v1/tables/{BLOCKED}?wait={WAIT_S:g}&since={version}"
                parked.append(await Parked.send(url, "GET", path))
            else:
                body = _commit_body(f"bench-ingest-{n}", WAIT_S)
                path = f"/v1/tables/{BLOCKED}/commit-leases"
                parked.append(await Parked.send(url, "POST", path, body))
        answers = [asyncio.ensure_future(p.status()) for p in parked]
        # every request has reached its wait once the service answers a call sent after them
        await asyncio.sleep(args.settle)
        await asyncio.to_thread(api.expect, 200, "GET", "/healthz")
        early = [a.result() for a in answers if a.done()]
        if early:
            failures.append(f"{len(early)} parked requests were answered early: {early[:5]}")

        def timed_calls() -> tuple[list[float], list[float]]:
            healthz, acquire = [], []
            for n in range(args.calls):
                ms, status, data = api.timed("GET", "/healthz")
                healthz.append(ms)
                ms, status, data = api.timed(
                    "POST", f"/v1/tables/{FREE}/commit-leases", _commit_body(f"bench-free-{n}")
                )
                acquire.append(ms)
                if status != 201:
                    failures.append(f"commit acquire on the free table: {status}: {data}")
                    continue
                api.expect(200, "DELETE", f"/v1/leases/{data['lease_id']}?holder=bench-free-{n}")
            return healthz, acquire

        healthz, acquire = await asyncio.to_thread(timed_calls)
        if any(a.done() for a in answers):
            failures.append("parked requests were answered before the release")
        token = maintenance["token"]
        path = f"/v1/leases/{maintenance['lease_id']}?holder=bench-compactor&token={token}"
        await asyncio.to_thread(api.expect, 200, "DELETE", path)
        statuses = await asyncio.wait_for(asyncio.gather(*answers), WAIT_S)
        wanted = [200 if n % 2 else 201 for n in range(args.parked)]
        wrong = [(n, s) for n, (s, w) in enumerate(zip(statuses, wanted, strict=True)) if s != w]
        if wrong:
            failures.append(f"{len(wrong)} parked requests answered wrongly: {wrong[:5]}")
        return healthz, acquire, failures
    finally:
        api.close()


async def _drain_trial(url: str, table: str) -> float:
    """Seconds from the draining compactor's connection closing to the next commit grant."""
    api = Api(url)
    try:
        api.expect(201, "POST", f"/v1/tables/{table}/commit-leases", _commit_body("bench-batch"))
        compactor = await Parked.send(
            url,
            "POST",
            f"/v1/tables/{table}/maintenance-lease",
            _commit_body("bench-compactor", WAIT_S),
        )
        while (await asyncio.to_thread(api.expect, 200, "GET", f"/v1/tables/{table}"))[
            "intent"
        ] is None:
            await asyncio.sleep(0.01)
        ingest = await Parked.send(
            url, "POST", f"/v1/tables/{table}/commit-leases", _commit_body("bench-ingest", WAIT_S)
        )
        granted = asyncio.ensure_future(ingest.status())
        await asyncio.sleep(0.5)  # the ingest request is waiting on the intent
        if granted.done():
            raise RuntimeError(f"the commit lease was answered despite the intent: {granted}")
        compactor.writer.transport.abort()  # as when its process dies: no goodbye
        died = time.perf_counter()
        status = await asyncio.wait_for(granted, WAIT_S + 5)
        if status != 201:
            raise RuntimeError(f"the commit request behind the dead compactor got {status}")
        return time.perf_counter() - died
    finally:
        api.close()


def measure(args: argparse.Namespace, workdir: Path) -> list[Result]:
    results = []
    for database in args.databases:
        with ExitStack() as stack:
            db_url = stack.enter_context(
                fresh_database(database, mariadb_url=args.mariadb_url, workdir=workdir)
            )
            url = stack.enter_context(
                running_service(
                    db_url,
                    log_path=workdir / f"service-{database}.log",
                    LAKELOCK_MAX_WAIT_S=str(WAIT_S),
                    LAKELOCK_INTENT_TTL_S=str(args.intent_ttl),
                )
            )
            healthz, acquire, failures = asyncio.run(_parked_phase(url, args))
            holds = []
            for n in range(args.drain_trials):
                try:
                    holds.append(asyncio.run(_drain_trial(url, f"bench.db.drain_{n}")))
                except RuntimeError as exc:
                    failures.append(str(exc))
        result = Result(
            database=database,
            parked=args.parked,
            calls=args.calls,
            healthz_p50_ms=percentile(healthz, 0.5),
            healthz_p99_ms=percentile(healthz, 0.99),
            acquire_p50_ms=percentile(acquire, 0.5),
            acquire_p99_ms=percentile(acquire, 0.99),
            drain_hold_s=holds,
            intent_ttl_s=args.intent_ttl,
            failures=len(failures),
            first_failure=failures[0] if failures else None,
            healthz_ms=healthz,
            acquire_ms=acquire,
        )
        results.append(result)
        print(_row(result), flush=True)
    return results


_HEADER = (
    f"{'database':<9} {'parked':>6} {'calls':>5} {'healthz p50':>11} {'p99 ms':>7} "
    f"{'acquire p50':>11} {'p99 ms':>7} {'drain hold s':>14} {'failures':>8}"
)


def _row(r: Result) -> str:
    holds = ",".join(f"{h:.2f}" for h in r.drain_hold_s) or "-"
    failure = f"  first failure: {r.first_failure}" if r.first_failure else ""
    return (
        f"{r.database:<9} {r.parked:>6} {r.calls:>5} {r.healthz_p50_ms:>11.1f} "
        f"{r.healthz_p99_ms:>7.1f} {r.acquire_p50_ms:>11.1f} {r.acquire_p99_ms:>7.1f} "
        f"{holds:>14} {r.failures:>8}{failure}"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.long_poll_load", description=__doc__.split("\n")[0]
    )
    p.add_argument("--parked", type=int, default=500, help="long-polls waiting meanwhile")
    p.add_argument("--calls", type=int, default=200, help="timed calls of each kind")
    p.add_argument(
        "--settle", type=float, default=2.0, help="seconds left for the parked requests to park"
    )
    p.add_argument("--drain-trials", type=int, default=3, help="dead-compactor trials")
    p.add_argument(
        "--intent-ttl", type=float, default=5.0, help="LAKELOCK_INTENT_TTL_S (its default: 5)"
    )
    p.add_argument(
        "--databases", type=comma_list, default=["sqlite", "mariadb"], help="sqlite,mariadb"
    )
    p.add_argument(
        "--mariadb-url",
        default=DEFAULT_MARIADB_URL,
        help="server to use; a fresh database is created on it per row and dropped after",
    )
    p.add_argument("--json", type=Path, help="write every figure to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print(_HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="lakelock-bench-") as tmp:
        results = measure(args, Path(tmp))
    if args.json:
        write_figures(args.json, argv, results)
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
