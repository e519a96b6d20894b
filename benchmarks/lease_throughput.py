"""Lease throughput: commit-lease acquire→release cycles through the service over HTTP, against
what the database itself needs for two transactions.

    python -m benchmarks.lease_throughput --clients 32 --seconds 10 --databases sqlite,mariadb

For each database and scenario (`uncontended`: one table per client; `contended`: every client
on one table) it makes a fresh, migrated database, then measures, in one run:

    bare         the real limit: `--clients` threads of one process, each cycle two
                 one-statement transactions (INSERT a row, DELETE it) through the service's
                 engine and driver, sent by the DBAPI cursor as the service's hot statements
                 are, on the same database
    transitions  the same threads calling `leases.acquire_commit` and `leases.release` through
                 `db.run_transaction`: the service minus HTTP
    service      `python -m service` started here on a free loopback port; the clients are
                 threads of separate processes (`--client-processes`), one keep-alive
                 connection each, so the client's own CPU is not what is measured

It prints cycles/s, the p50/p99 latency of one cycle (acquire + release) and the acquire p50 per
row, the SQL statements one acquire→release cycle runs (counted over 100 cycles by MariaDB
itself, or by a SQLAlchemy listener on SQLite; not estimated), and the service's ratios to the
bare row. The driver is the one `--mariadb-url` names (`mysql+pymysql://`, `mysql+mysqldb://`).
Latencies are taken per request with `perf_counter` in the clients and merged;
the first `--warmup` seconds are not counted. `--json` writes every figure.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

from service.wire.figures import quantile
from testkit import LocalService, fresh_database

__all__ = [
    "DEFAULT_MARIADB_URL",
    "Result",
    "main",
    "percentile",
    "running_service",
]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
SCENARIOS = ("uncontended", "contended")
MODES = ("bare", "transitions", "service")
BARE_TABLE = "bench_bare"
TTL_S = 30.0


# -- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of service.wire.figures.quantile (nearest rank), NaN for no
    values: a float the benchmarks' figures can scale and print."""
    found = quantile(values, q)
    return math.nan if found is None else found


def write_figures(path: Path, argv: list[str] | None, results: list[Any], **more: Any) -> None:
    """Write a run's figures as JSON: its arguments, the machine's CPUs, every result (a
    dataclass) and `more`."""
    payload = {
        "argv": sys.argv[1:] if argv is None else argv,
        "cpus": os.cpu_count(),
        "results": [asdict(r) for r in results],
        **more,
    }
    path.write_text(json.dumps(payload, indent=2))


@dataclass
class Result:
    """One measured row: `mode` is one of MODES; latencies in milliseconds."""

    database: str
    scenario: str
    mode: str
    clients: int
    seconds: float
    cycles: int
    errors: int
    cycles_per_s: float
    p50_ms: float
    p99_ms: float
    acquire_p50_ms: float
    acquire_p99_ms: float
    release_p50_ms: float
    release_p99_ms: float
    first_error: str | None = None
    statements_per_cycle: float | None = None
    config: dict[str, Any] = field(default_factory=dict)


def _result(
    database: str, scenario: str, mode: str, clients: int, window: float, merged: dict[str, Any]
) -> Result:
    cycle, acquire, release = merged["cycle"], merged["acquire"], merged["release"]
    return Result(
        database=database,
        scenario=scenario,
        mode=mode,
        clients=clients,
        seconds=window,
        cycles=len(cycle),
        errors=merged["errors"],
        cycles_per_s=len(cycle) / window,
        p50_ms=percentile(cycle, 0.50) * 1000,
        p99_ms=percentile(cycle, 0.99) * 1000,
        acquire_p50_ms=percentile(acquire, 0.50) * 1000,
        acquire_p99_ms=percentile(acquire, 0.99) * 1000,
        release_p50_ms=percentile(release, 0.50) * 1000,
        release_p99_ms=percentile(release, 0.99) * 1000,
        first_error=merged["first_error"],
    )


# -- databases -------------------------------------------------------------------------------


# -- the service -----------------------------------------------------------------------------


@contextmanager
def running_service(db_url: str, *, log_path: Path, **env: str) -> Iterator[str]:
    """`python -m service` over `db_url` (auth off, loopback, free port) until the block ends;
    yields its base URL once /readyz answers 200. `env` adds `LAKELOCK_*` variables."""

    with LocalService.start(
        db_url=db_url, log_path=log_path, **{"LAKELOCK_AUTH": "off", **env}
    ) as svc:
        yield svc.url


# -- load: one client thread -----------------------------------------------------------------


class _Samples:
    """Latencies of one client process, filled by its threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cycle: list[float] = []
        self.acquire: list[float] = []
        self.release: list[float] = []
        self.errors = 0
        self.first_error: str | None = None

    def add(self, acquire: float, release: float) -> None:
        with self.lock:
            self.acquire.append(acquire)
            self.release.append(release)
            self.cycle.append(acquire + release)

    def failed(self, message: str) -> None:
        with self.lock:
            self.errors += 1
            self.first_error = self.first_error or message

    def as_dict(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle,
            "acquire": self.acquire,
            "release": self.release,
            "errors": self.errors,
            "first_error": self.first_error,
        }


Cycle = Callable[[str, str], tuple[float, float]]
"""(table, request id) → (acquire seconds, release seconds); raises on a failed transition."""


def _loop(cycle: Cycle, table: str, name: str, window: tuple[float, float], out: _Samples) -> None:
    """Run cycles until the window's end (wall clock, shared by all processes); keep those that
    started after its start and ended before its end."""
    start, stop = window
    n = 0
    while True:
        began = time.time()
        if began >= stop:
            return
        n += 1
        try:
            acquire, release = cycle(table, f"{name}-{n}")
        except Exception as exc:
            # a failed cycle is counted and reported in the table, not hidden; the load goes on
            out.failed(f"{type(exc).__name__}: {exc}")
            continue
        if began >= start and time.time() <= stop:
            out.add(acquire, release)


def _http_cycle(url: str) -> Cycle:
    """One keep-alive connection; acquire a commit lease, then release it."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": "application/json"}

    def call(method: str, path: str, body: bytes | None, expect: int) -> dict[str, Any]:
        conn.request(method, path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        if answer.status != expect:
            raise RuntimeError(f"{method} {path}: {answer.status} {data[:300]!r}")
        return json.loads(data)

    def cycle(table: str, request_id: str) -> tuple[float, float]:
        body = json.dumps({"holder": "bench", "ttl_s": TTL_S, "request_id": request_id})
        t0 = time.perf_counter()
        lease = call("POST", f"/v1/tables/{table}/commit-leases", body.encode(), 201)
        t1 = time.perf_counter()
        call("DELETE", f"/v1/leases/{lease['lease_id']}", None, 200)
        return t1 - t0, time.perf_counter() - t1

    return cycle


def _direct_cycle(engine: Any) -> Cycle:
    """The same two transitions straight through SQLAlchemy, without HTTP."""
    from datetime import timedelta

    from service.lock import leases
    from service.lock.db import run_transaction
    from service.lock.rows import Caller

    bench = Caller("bench")

    ttl = timedelta(seconds=TTL_S)

    def cycle(table: str, request_id: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        lease = run_transaction(
            engine,
            lambda conn: leases.acquire_commit(
                conn,
                table=table,
                holder="bench",
                ttl=ttl,
                request_id=request_id,
                caller=bench,
            ),
        )
        t1 = time.perf_counter()
        run_transaction(
            engine,
            lambda conn: leases.release(
                conn, lease_id=lease.lease_id, caller=bench, holder="bench"
            ),
        )
        return t1 - t0, time.perf_counter() - t1

    return cycle


def _bare_cycle(engine: Any) -> Cycle:
    """Two one-statement transactions: what any lock needs at least (write a row, delete it),
    through the service's engine and the DBAPI cursor, as the service's own hot statements
    (`db.Hot`): the row pays no Python layer the service skips."""
    mark = "?" if engine.dialect.name == "sqlite" else "%s"
    insert = f"INSERT INTO {BARE_TABLE} (id, table_name) VALUES ({mark}, {mark})"
    delete = f"DELETE FROM {BARE_TABLE} WHERE id = {mark}"

    def run(sql: str, params: tuple[str, ...]) -> None:
        with engine.begin() as conn:
            cursor = conn.connection.dbapi_connection.cursor()
            cursor.execute(sql, params)
            cursor.close()

    def cycle(table: str, request_id: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        run(insert, (request_id, table))
        t1 = time.perf_counter()
        run(delete, (request_id,))
        return t1 - t0, time.perf_counter() - t1

    return cycle


def _engine(url: str, pool_size: int) -> Any:
    """The service's own engine settings, and the bare table."""
    from sqlalchemy import text

    from service.lock.db import make_engine

    engine = make_engine(url, pool_size=pool_size)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {BARE_TABLE} "
                "(id VARCHAR(64) PRIMARY KEY, table_name VARCHAR(255) NOT NULL)"
            )
        )
    return engine


def count_statements(url: str, scenario: str, *, cycles: int = 100) -> float:
    """SQL statements per acquire→release cycle of the service's transitions, commits not
    counted. MariaDB counts them itself: the session's `Questions` less its commits and
    rollbacks, on the one pooled connection the cycles use one after the other. On SQLite a
    listener counts every statement SQLAlchemy sends."""
    from sqlalchemy import event

    engine = _engine(url, 1)
    cycle = _direct_cycle(engine)
    tables = tables_for(scenario, 4)
    cycle(tables[0], f"count-warm-{uuid.uuid4().hex[:6]}")  # first use creates the table row
    sent = 0

    def counted(*_: Any) -> None:
        nonlocal sent
        sent += 1

    def server_count() -> int:
        # one statement, itself counted in Questions: the reading after the cycles is
        # taken off below
        with engine.connect() as conn:
            status = dict(
                conn.exec_driver_sql(
                    "SHOW SESSION STATUS WHERE Variable_name IN "
                    "('Questions', 'Com_commit', 'Com_rollback')"
                ).all()
            )
        return int(status["Questions"]) - int(status["Com_commit"]) - int(status["Com_rollback"])

    on_server = engine.dialect.name != "sqlite"
    before = server_count() if on_server else 0
    event.listen(engine, "before_cursor_execute", counted)
    for n in range(cycles):
        cycle(tables[0], f"count-{uuid.uuid4().hex[:6]}-{n}")
    event.remove(engine, "before_cursor_execute", counted)
    if on_server:
        sent = server_count() - before - 1
    engine.dispose()
    return sent / cycles


# -- load: one client process ----------------------------------------------------------------


def _client_process(target: str, mode: str, tables: list[str], pipe: Pipe) -> None:
    """Threads, one per entry of `tables`, doing cycles in the window the parent sends."""
    tag = uuid.uuid4().hex[:6]
    if mode == "service":
        cycles = [_http_cycle(target) for _ in tables]
    else:
        engine = _engine(target, max(len(tables), 5))
        make = _bare_cycle if mode == "bare" else _direct_cycle
        cycles = [make(engine)] * len(tables)
    pipe.send("ready")
    window = pipe.recv()
    samples = _Samples()
    threads = [
        threading.Thread(target=_loop, args=(cycle, table, f"{tag}-{i}", window, samples))
        for i, (cycle, table) in enumerate(zip(cycles, tables, strict=True))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pipe.send(samples.as_dict())
    pipe.close()


def run_load(
    target: str, mode: str, tables: list[str], *, processes: int, seconds: float, warmup: float
) -> tuple[dict[str, Any], float]:
    """Spread `tables` (one per client) over `processes`, run them in a common window, and
    merge their samples. Returns the samples and the measured window in seconds."""
    ctx = multiprocessing.get_context("spawn")
    groups = [tables[i::processes] for i in range(processes)]
    workers: list[tuple[Any, Pipe]] = []
    for group in filter(None, groups):
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=_client_process, args=(target, mode, group, theirs))
        process.start()
        workers.append((process, ours))
    try:
        for process, pipe in workers:
            if not pipe.poll(120):
                raise RuntimeError(f"client process {process.pid} did not start")
            pipe.recv()
        start = time.time() + 0.2 + warmup
        window = (start, start + seconds)
        for _, pipe in workers:
            pipe.send(window)
        merged: dict[str, Any] = {
            "cycle": [],
            "acquire": [],
            "release": [],
            "errors": 0,
            "first_error": None,
        }
        for process, pipe in workers:
            if not pipe.poll(seconds + warmup + 180):
                raise RuntimeError(f"client process {process.pid} did not finish")
            part = pipe.recv()
            for key in ("cycle", "acquire", "release"):
                merged[key].extend(part[key])
            merged["errors"] += part["errors"]
            merged["first_error"] = merged["first_error"] or part["first_error"]
        return merged, seconds
    finally:
        for process, _ in workers:
            process.join(10)
            if process.is_alive():
                process.terminate()
                process.join(5)


def tables_for(scenario: str, clients: int) -> list[str]:
    if scenario == "contended":
        return ["bench.db.hot"] * clients
    return [f"bench.db.t{i:04d}" for i in range(clients)]


# -- the run ---------------------------------------------------------------------------------


def measure(args: argparse.Namespace, workdir: Path) -> list[Result]:
    results: list[Result] = []
    service_env = {"LAKELOCK_WORKERS": str(args.workers)}
    for database in args.databases:
        for scenario in args.scenarios:
            tables = tables_for(scenario, args.clients)
            with fresh_database(database, mariadb_url=args.mariadb_url, workdir=workdir) as url:
                statements = count_statements(url, scenario)
            for mode in MODES:
                with fresh_database(database, mariadb_url=args.mariadb_url, workdir=workdir) as url:
                    if mode != "service":
                        merged, window = run_load(
                            url,
                            mode,
                            tables,
                            processes=1,
                            seconds=args.seconds,
                            warmup=args.warmup,
                        )
                        config = {}
                    else:
                        log_path = workdir / f"service-{database}-{scenario}.log"
                        with running_service(url, log_path=log_path, **service_env) as base:
                            merged, window = run_load(
                                base,
                                mode,
                                tables,
                                processes=min(args.client_processes, args.clients),
                                seconds=args.seconds,
                                warmup=args.warmup,
                            )
                        config = {
                            "workers": args.workers,
                            "client_processes": args.client_processes,
                        }
                result = _result(database, scenario, mode, args.clients, window, merged)
                result.config = config
                if mode != "bare":
                    result.statements_per_cycle = statements
                results.append(result)
                print(_row(result), flush=True)
    return results


def ratios(results: list[Result]) -> list[dict[str, Any]]:
    """service/bare per database and scenario: throughput and p99 ratios, and the statements
    one cycle runs."""
    out = []
    by_key = {(r.database, r.scenario, r.mode): r for r in results}
    for (database, scenario, mode), service in by_key.items():
        bare = by_key.get((database, scenario, "bare"))
        if mode != "service" or bare is None or not bare.cycles:
            continue
        out.append(
            {
                "database": database,
                "scenario": scenario,
                "throughput_ratio": service.cycles_per_s / bare.cycles_per_s,
                "p99_ratio": service.p99_ms / bare.p99_ms,
                "statements_per_cycle": service.statements_per_cycle,
            }
        )
    return out


_HEADER = (
    f"{'database':<9} {'scenario':<12} {'mode':<12} {'clients':>7} {'cycles/s':>9} "
    f"{'p50 ms':>8} {'p99 ms':>8} {'acq p50':>8} {'stmts':>6} {'errors':>6}"
)


def _row(r: Result) -> str:
    statements = "" if r.statements_per_cycle is None else f"{r.statements_per_cycle:.1f}"
    return (
        f"{r.database:<9} {r.scenario:<12} {r.mode:<12} {r.clients:>7} {r.cycles_per_s:>9.1f} "
        f"{r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.acquire_p50_ms:>8.2f} {statements:>6} "
        f"{r.errors:>6}" + (f"  first error: {r.first_error}" if r.first_error else "")
    )


def report(results: list[Result]) -> str:
    """The ratios table (the rows were printed as they were measured)."""
    lines = [
        f"{'database':<9} {'scenario':<12} {'service/bare cycles':>19} {'p99 ratio':>10} "
        f"{'statements/cycle':>16}"
    ]
    for ratio in ratios(results):
        lines.append(
            f"{ratio['database']:<9} {ratio['scenario']:<12} "
            f"{ratio['throughput_ratio']:>19.2f} {ratio['p99_ratio']:>10.2f} "
            f"{ratio['statements_per_cycle']:>16.1f}"
        )
    return "\n".join(lines)


def comma_list(value: str) -> list[str]:
    """An argparse type: `a, b,` -> ["a", "b"]."""
    return [part.strip() for part in value.split(",") if part.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.lease_throughput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per row")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds run before measuring")
    p.add_argument(
        "--databases", type=comma_list, default=["sqlite", "mariadb"], help="sqlite,mariadb"
    )
    p.add_argument(
        "--scenarios", type=comma_list, default=list(SCENARIOS), help=",".join(SCENARIOS)
    )
    p.add_argument(
        "--mariadb-url",
        default=DEFAULT_MARIADB_URL,
        help="server to use; a fresh database is created on it per row and dropped after",
    )
    p.add_argument("--workers", type=int, default=1, help="service worker processes")
    p.add_argument(
        "--client-processes", type=int, default=4, help="processes the HTTP clients run in"
    )
    p.add_argument("--json", type=Path, help="write every figure to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in args.scenarios:
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario {name!r}; use {','.join(SCENARIOS)}")
    print(_HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="lakelock-bench-") as tmp:
        results = measure(args, Path(tmp))
    print()
    print(report(results))
    if args.json:
        write_figures(args.json, argv, results, ratios=ratios(results))
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
