"""What the ingest gate costs a micro-batch when the table is free.

    python -m benchmarks.gate_overhead                    # 300 passes, SQLite
    python -m benchmarks.gate_overhead --passes 200 --database mariadb

Runs `Gate.commit()` passes with an empty body against a real service process (one commit
lease acquired, renewer started and stopped, lease released per pass) and prints the median and
p99 of the gate's own time per pass: the time from entering `with gate.commit(...)` to the body,
plus the time from the body's end to leaving (`waited_s` + release), and of the lease calls alone
(`lease_calls_s`). This is the per-batch overhead the streaming job pays when nothing blocks it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.lease_throughput import percentile, running_service
from ingest_gate.gate import Gate
from service.client import LeaseClient
from testkit import fresh_database

__all__ = ["main", "measure"]


def measure(url: str, *, passes: int, warmup: int = 10) -> dict[str, float]:
    client = LeaseClient(url)
    gate = Gate(client, holder="bench-ingest", ttl_s=30.0, max_hold_s=60.0)
    totals, calls = [], []
    try:
        for number in range(warmup + passes):
            entered = time.perf_counter()
            with gate.commit("lake.db.bench") as gate_pass:
                body_started = time.perf_counter()
            left = time.perf_counter()
            if number >= warmup:
                # the gate's time: entering (acquire, renewer start) + leaving (release, stop)
                totals.append((body_started - entered) + (left - body_started))
                calls.append(gate_pass.lease_calls_s)
    finally:
        client.close()
    return {
        "passes": passes,
        "overhead_p50_ms": round(percentile(totals, 0.50) * 1000, 2),
        "overhead_p99_ms": round(percentile(totals, 0.99) * 1000, 2),
        "lease_calls_p50_ms": round(percentile(calls, 0.50) * 1000, 2),
        "lease_calls_p99_ms": round(percentile(calls, 0.99) * 1000, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate_overhead")
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--database", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument("--mariadb-url", default="mysql+pymysql://root@127.0.0.1:3306/test")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes must be >= 1")
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        with (
            fresh_database(args.database, mariadb_url=args.mariadb_url, workdir=workdir) as url,
            running_service(url, log_path=workdir / "service.log") as base,
        ):
            result = {"database": args.database, **measure(base, passes=args.passes)}
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
