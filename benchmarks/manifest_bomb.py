"""What a manifest bomb costs the catalog front: the service's CPU time and peak memory for one
ordinary commit, and for commits naming a manifest of a few kilobytes that deflates to many
entries, with the front's bounds as set and with them raised.

    python -m benchmarks.manifest_bomb                       # 300,000 and 2,000,000 entries
    python -m benchmarks.manifest_bomb --entries 300000 --max-entries 1000000

One service process (SQLite, the front over a local warehouse) per row, its CPU time (user +
system) and its peak resident memory (VmHWM) read from /proc before and after the commit; the
commits are sent with httpx, their files written with pyiceberg. A bomb is one real manifest of
one entry (deflate) whose block is repeated `--entries` times and deflated again.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Row", "main"]


@dataclass
class Row:
    commit: str
    entries: int
    bytes: int
    status: int
    seconds: float
    cpu_ms: float
    peak_rss_mb: float  # the process's peak resident memory after the commit
    peak_growth_mb: float  # how much the commit raised it


def _proc(pid: int) -> tuple[float, float]:
    """The process's CPU seconds (user + system) and peak resident memory (MB)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    status = Path(f"/proc/{pid}/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return cpu, peak / 1024


def run(entries: int, max_entries: int | None, workdir: Path) -> list[Row]:
    import httpx
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.manifest import ManifestEntryStatus
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from demo.service import LocalService
    from service.lock import migrate
    from testkit.avro import bomb
    from testkit.commits import data_file, entry, manifest_list, new_manifest, snapshot_commit

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))

    db_url = f"sqlite:///{workdir / 'lakelock.db'}"
    migrate.upgrade(db_url)
    env = {"LAKELOCK_CATALOG_WAREHOUSE": (workdir / "wh").as_uri()}
    if max_entries is not None:
        env |= {
            "LAKELOCK_CATALOG_MAX_MANIFEST_ENTRIES": str(max_entries),
            "LAKELOCK_CATALOG_MAX_COMMIT_ENTRIES": str(max_entries * 2),
        }
    rows = []
    with LocalService.start(db_url=db_url, log_path=workdir / "service.log", **env) as service:
        catalog = RestCatalog("lakelock", uri=f"{service.url}/iceberg", token=service.token("job"))
        catalog.create_namespace("db")
        table = catalog.create_table("db.t", schema, partition_spec=spec)
        table.append(pa.table({"id": pa.array([0], pa.int64()), "p": ["1"]}))
        table = catalog.load_table("db.t")
        for name, count in (("ordinary", 1), ("bomb", entries)):
            head = table.current_snapshot()
            snapshot_id = uuid.uuid4().int >> 66
            added = entry(snapshot_id, data_file(table, "1", name), ManifestEntryStatus.ADDED)
            manifest = new_manifest(table, snapshot_id, [added], compression="deflate")
            path = manifest.manifest_path
            if count > 1:
                with table.io.new_input(path).open() as stream:
                    exploded = bomb(stream.read(), count)
                with table.io.new_output(path).create(overwrite=True) as out:
                    out.write(exploded)
            size = os.path.getsize(path.removeprefix("file://"))
            listed = manifest_list(
                table, snapshot_id, head.snapshot_id, 9, [*head.manifests(table.io), manifest]
            )
            body = snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
            pid = service.process.pid
            cpu, peak = _proc(pid)
            started = time.perf_counter()
            with httpx.Client(base_url=f"{service.url}/iceberg", timeout=600) as c:
                answer = c.post(
                    "/v1/namespaces/db/tables/t",
                    json=body,
                    headers={"Authorization": f"Bearer {service.token('job')}"},
                )
            took = time.perf_counter() - started
            cpu_after, peak_after = _proc(pid)
            rows.append(
                Row(
                    name,
                    count,
                    size,
                    answer.status_code,
                    round(took, 3),
                    round((cpu_after - cpu) * 1000, 1),
                    round(peak_after, 1),
                    round(peak_after - peak, 1),
                )
            )
            table = catalog.load_table("db.t")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.manifest_bomb", description=__doc__)
    p.add_argument("--entries", type=int, nargs="+", default=[300_000, 2_000_000])
    p.add_argument(
        "--max-entries", type=int, help="LAKELOCK_CATALOG_MAX_MANIFEST_ENTRIES (default: its own)"
    )
    args = p.parse_args(argv)
    print(
        f"{'commit':<9} {'entries':>9} {'bytes':>9} {'status':>6} {'s':>7} {'cpu ms':>8} "
        f"{'peak MB':>8} {'+MB':>7}"
    )
    for count in args.entries:
        with tempfile.TemporaryDirectory(prefix="lakelock-bench-bomb-") as tmp:
            for row in run(count, args.max_entries, Path(tmp)):
                print(
                    f"{row.commit:<9} {row.entries:>9} {row.bytes:>9} {row.status:>6} "
                    f"{row.seconds:>7.3f} {row.cpu_ms:>8.1f} {row.peak_rss_mb:>8.1f} "
                    f"{row.peak_growth_mb:>7.1f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
