"""Streaming ingest for a benchmark lake: the ingest job itself (`python -m ingest_gate`), one
process per table, reading JSON-lines files that `python -m demo.generate` wrote into its
landing folder, gated by a lakelock service, by counts: each start lands `batches` files and the
job reads them one per micro-batch, then ends by itself (available-now), its checkpoint
committed, so the next start begins with the next files.

    streams = Streams(out, tables, service=service, warehouse=warehouse, catalog="local")
    streams.create(spark)                 # the demo's click-event table, for each
    jobs = streams.start(batches=20, rows=200, seed=1)
    ...
    figures = wait(jobs)                  # {table: {"exit": 0, "committed": n, ...}}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit import LocalService

__all__ = ["Job", "Streams", "batch_outcomes", "wait"]

ROOT = Path(__file__).resolve().parent.parent


def batch_outcomes(log: Path) -> dict[str, int]:
    """How many micro-batches of an ingest job's log ended how (committed, failed, empty, ...):
    the job logs one JSON line per batch."""
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        start = line.find('{"')
        if start < 0 or '"outcome"' not in line:
            continue
        try:
            record = json.loads(line[start:])
        except ValueError:
            continue
        if "batch_id" in record:
            counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
    return counts


@dataclass(frozen=True)
class Job:
    table: str
    process: subprocess.Popen
    log: Path


def wait(jobs: Sequence[Job]) -> dict[str, Any]:
    """Each job's exit status and its batches by outcome, once all have stopped."""
    return {j.table: {"exit": j.process.wait(3600), **batch_outcomes(j.log)} for j in jobs}


@dataclass
class Streams:
    """An ingest job per table in `tables`, each with its landing folder and checkpoint under
    `out/streams/<table>`; a later `start` continues from the checkpoint."""

    out: Path
    tables: Sequence[str]
    service: LocalService
    warehouse: Path
    catalog: str = "local"

    def create(self, spark: Any) -> None:
        from demo.generate import create_events_table

        for table in self.tables:
            create_events_table(spark, table)

    def _folder(self, table: str) -> Path:
        return self.out / "streams" / table.rsplit(".", 1)[1]

    def _config(self, table: str) -> Path:
        folder = self._folder(table)
        path = folder / "ingest.toml"
        path.write_text(
            f"""
table = "{table}"
landing_path = "{folder / "landing"}"
dead_letter_path = "{folder / "dead-letter"}"
checkpoint_path = "{folder / "checkpoint"}"
max_files_per_trigger = 1
available_now = true
key_columns = ["event_id", "dt", "hr"]
lakelock_url = "{self.service.url}"
holder = "ingest-{table.rsplit(".", 1)[1]}"
spark_master = "local[1]"
[catalog]
name = "{self.catalog}"
warehouse = "{self.warehouse.resolve()}"
"""
        )
        return path

    def start(self, *, batches: int, rows: int, seed: int) -> list[Job]:
        """Write `batches` files of `rows` events into each landing folder, then start each job,
        which reads them, one micro-batch each, and ends."""
        jobs = []
        for i, table in enumerate(self.tables):
            folder = self._folder(table)
            (folder / "landing").mkdir(parents=True, exist_ok=True)
            generate = [sys.executable, "-m", "demo.generate", "--out"]
            subprocess.run(
                [
                    *generate,
                    str(folder / "landing"),
                    "--count",
                    str(batches * rows),
                    "--files",
                    str(batches),
                    "--seed",
                    str(seed * 1000 + i),
                ],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            env = {**os.environ, "LAKELOCK_TOKEN": self.service.token("job")}
            log = folder / f"ingest-{seed}.log"
            config = self._config(table)
            process = subprocess.Popen(
                [sys.executable, "-m", "ingest_gate", "--config", str(config)],
                cwd=ROOT,
                env=env,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            jobs.append(Job(table, process, log))
        return jobs
