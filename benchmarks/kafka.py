"""Kafka into Iceberg through lakelock: events per second from a topic to visible rows, and lag.

    python -m benchmarks.kafka                     # 1, 4 and 8 partitions, 20000 events each
    python -m benchmarks.kafka --events 2000 --partitions 1 4 --lag-seconds 20 --out var/k

A broker of Apache Kafka's own jars runs on loopback (demo.kafka); the click-event generator
(demo.generate: 30% updates of earlier keys, 10% duplicates) writes JSON events keyed by row key.
Two phases:

    throughput  for each partition count, `--events` events produced with the job stopped, then
                drained by one available-now run of the ingest job (`--per-batch` offsets per
                micro-batch): events per second of the drain, from its start to the commit that
                makes the last rows visible. Twice per count: with the gate (a lakelock service
                on SQLite) and the compactor running every `--compact-every-s` on the same table,
                and with neither (no service, no compactor: the real limit of this path). The
                table's rows are then counted against the generator's distinct keys.
    lag         a topic of 4 partitions, the job running (1 s trigger, gate and compactor), the
                producer at `--rate` events/s for `--lag-seconds`: after each batch, the records
                the job is behind over all partitions (latest offset minus the batch's end, as
                the job reports it to the service), p50/p99/max, and as seconds at that rate.

Spark runs `local[2]` in this process, as the demo's does. Writes `results.json` in `--out`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.lease_throughput import percentile

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.kafka",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=20000, help="events per drain")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--per-batch", type=int, default=2000, help="maxOffsetsPerTrigger")
    parser.add_argument("--compact-every-s", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=400.0, help="events/s in the lag phase")
    parser.add_argument("--lag-seconds", type=float, default=60.0, help="lag phase length")
    parser.add_argument("--out", type=Path, default=Path("var/kafka-benchmark"))
    return parser


class Bench:
    """The broker, the Spark session, the service and the compactor of one benchmark run."""

    def __init__(self, spark: Any, kafka: Any, service: Any, out: Path, args: Any) -> None:
        from service.client import LeaseClient

        self.spark, self.kafka, self.service, self.out, self.args = spark, kafka, service, out, args
        self.client = LeaseClient(service.url, token=service.token("job"))
        self.runs = 0

    def values(self, table: str, topic: str, *, gated: bool, **more: Any) -> dict[str, Any]:
        from demo.generate import KEY_FIELDS

        self.runs += 1
        return {
            "table": table,
            "catalog": {"warehouse": str(self.out / "warehouse")},
            "source": "kafka",
            "kafka": {
                "kafka.bootstrap.servers": self.kafka.bootstrap,
                "subscribe": topic,
                "maxOffsetsPerTrigger": str(self.args.per_batch),
            },
            "key_columns": list(KEY_FIELDS),
            "dead_letter_path": str(self.out / "dead-letter" / str(self.runs)),
            "checkpoint_path": str(self.out / "checkpoint" / str(self.runs)),
            "trigger_interval_s": 1.0,
            "gate_enabled": gated,
            "lakelock_url": self.service.url,
            "lakelock_token": self.service.token("job"),
            "holder": "benchmark-ingest",
            "lease_ttl_s": 20.0,
            "max_hold_s": 120.0,
            "poll_s": 1.0,
            **more,
        }

    def compactor(self, table: str) -> tuple[Callable[[threading.Event], None], list[str]]:
        """A loop running the demo's compaction of `table` every `--compact-every-s`."""
        from benchmarks.convergence import demo_table_config
        from compactor.report import publish
        from compactor.run import run_table

        outcomes: list[str] = []
        config = demo_table_config(table)

        def loop(stop: threading.Event) -> None:
            while not stop.wait(self.args.compact_every_s):
                report = run_table(self.spark, client=self.client, config=config, holder="bench")
                publish(report, client=self.client)
                outcomes.append(str(report.outcome))

        return loop, outcomes

    def topic(self, name: str, partitions: int) -> str:
        self.kafka.create_topic(name, partitions=partitions)
        return name

    def drain(
        self, partitions: int, *, gated: bool, events: int | None = None, name: str | None = None
    ) -> dict[str, Any]:
        from demo.generate import KEY_FIELDS, EventGenerator, create_events_table
        from demo.kafka import as_messages
        from ingest_gate.job.config import load_config
        from ingest_gate.job.run import run

        name = name or f"p{partitions}_{'gated' if gated else 'bare'}"
        table = f"local.db.events_{name}"
        create_events_table(self.spark, table)
        topic = self.topic(f"events-{name}", partitions)
        gen = EventGenerator(seed=partitions, update_ratio=0.3, duplicate_ratio=0.1)
        lines = gen.records(events or self.args.events)
        produced = self.kafka.produce(topic, as_messages(lines, "json", KEY_FIELDS))
        values = self.values(table, topic, gated=gated, available_now=True)
        stop = threading.Event()
        thread = None
        outcomes: list[str] = []
        started = time.monotonic()
        handle = run(load_config(overrides=values), spark=self.spark)
        if gated:
            loop, outcomes = self.compactor(table)
            thread = threading.Thread(target=loop, args=(stop,), daemon=True)
            thread.start()
        records = handle.wait()
        elapsed = time.monotonic() - started
        stop.set()
        if thread is not None:
            thread.join()
        rows = self.spark.sql(f"SELECT count(*) AS n FROM {table}").first()["n"]
        return {
            "partitions": partitions,
            "events": produced,
            "seconds": round(elapsed, 1),
            "events_per_s": round(produced / elapsed, 1),
            "batches": len(records),
            "failed_batches": sum(r.outcome == "failed" for r in records),
            "compactions": outcomes,
            "rows_equal_distinct_keys": rows == len(gen.expected_rows()),
        }

    def lag(self) -> dict[str, Any]:
        from demo.generate import KEY_FIELDS, EventGenerator, create_events_table
        from demo.kafka import as_messages
        from ingest_gate.job.config import load_config
        from ingest_gate.job.run import run

        table = "local.db.events_lag"
        create_events_table(self.spark, table)
        topic = self.topic("events-lag", 4)
        values = self.values(table, topic, gated=True)
        handle = run(load_config(overrides=values), spark=self.spark)
        loop, outcomes = self.compactor(table)
        stop = threading.Event()
        compactor = threading.Thread(target=loop, args=(stop,), daemon=True)
        compactor.start()
        gen = EventGenerator(seed=99, update_ratio=0.3, duplicate_ratio=0.1)
        tick_s, owed, produced = 0.1, 0.0, 0
        started = time.monotonic()
        while time.monotonic() - started < self.args.lag_seconds:
            tick = time.monotonic()
            owed += self.args.rate * tick_s
            count, owed = int(owed), owed - int(owed)
            if count:
                produced += self.kafka.produce(
                    topic, as_messages(gen.records(count), "json", KEY_FIELDS)
                )
            time.sleep(max(0.0, tick_s - (time.monotonic() - tick)))
        end = self.kafka.end_offsets(topic)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            records = handle.records
            if records and records[-1].lag is not None and not any(records[-1].lag.values()):
                break
            time.sleep(0.5)
        handle.stop()
        stop.set()
        compactor.join()
        behind = [sum(r.lag.values()) for r in handle.records if r.lag is not None]
        waits = [r.gate_wait_s for r in handle.records]
        if not behind:
            raise RuntimeError("the lag phase committed no batch: raise --lag-seconds or --rate")
        p50, p99 = percentile(behind, 0.5), percentile(behind, 0.99)
        return {
            "rate_events_per_s": self.args.rate,
            "seconds": self.args.lag_seconds,
            "events": produced,
            "offsets": sum(end.values()),
            "batches": len(handle.records),
            "lag_records": {"p50": p50, "p99": p99, "max": max(behind)},
            "lag_seconds_at_rate": {
                "p50": round(p50 / self.args.rate, 2),
                "p99": round(p99 / self.args.rate, 2),
            },
            "gate_wait_s_max": round(max(waits, default=0.0), 2),
            "compactions": outcomes,
        }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from demo.kafka import LocalKafka
    from jobkit.spark import CatalogConfig, build_session
    from testkit import LocalService

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    out = args.out.resolve()
    kafka = LocalKafka.start(out / "kafka")
    service = LocalService.start(
        db_url=f"sqlite:///{out / 'lakelock.db'}", log_path=out / "service.log"
    )
    spark = build_session(
        CatalogConfig(warehouse=str(out / "warehouse")),
        app_name="lakelock-kafka-benchmark",
        master="local[2]",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
        jar_sets=("spark-kafka",),
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        bench = Bench(spark, kafka, service, out, args)
        # one drain first, not counted: the first query of a session pays for the JVM's warm-up
        warm_up = bench.drain(1, gated=False, events=min(args.events, 500), name="warm_up")
        print(f"warm-up (not counted): {json.dumps(warm_up)}", flush=True)
        throughput = []
        for partitions in args.partitions:
            for gated in (True, False):
                figures = {"mode": "gate + compactor" if gated else "neither (the limit)"}
                figures.update(bench.drain(partitions, gated=gated))
                print(f"throughput: {json.dumps(figures)}", flush=True)
                throughput.append(figures)
        lag = bench.lag()
        print(f"lag: {json.dumps(lag)}", flush=True)
        results = {"throughput": throughput, "lag": lag, "per_batch": args.per_batch}
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        exact = all(t["rows_equal_distinct_keys"] for t in throughput)
        return 0 if exact else 1
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.stop()
        service.stop()
        kafka.stop()


if __name__ == "__main__":
    sys.exit(main())
