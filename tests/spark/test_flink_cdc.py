"""MySQL CDC -> Flink -> Iceberg through the catalog front: the Flink writer (`--source
mysql-cdc`, Flink CDC's MySQL source), submitted to a Flink session cluster, reads a private
MariaDB's row binlog, a snapshot of a dimension table then its changes, into an upsert table at
the front, beside lakelock's compactor. Rows change from before the snapshot is read until
after it; at the end the Iceberg table (read by Iceberg's reader in Spark from its metadata
file) equals the MySQL table.

With `--mysql-snapshot incremental` (Flink CDC's lock-free chunks) this test fails on MariaDB:
changes committed in the second a chunk's read ended are skipped (docs/flink.md)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.exceptions import NoSuchTableError

from compactor.report import Outcome
from demo.flink import Compactor, snapshot_read, wait_until
from demo.mariadb import PrivateMariaDB
from jobkit.flink import FlinkWriter
from tests.spark.test_catalog_front import CATALOG, direct
from tests.spark.test_flink_writer import compactor_config, flink_fixtures

pytestmark = [pytest.mark.spark, pytest.mark.flink]

front, lakelock_server, spark = flink_fixtures("flink-cdc")

WAIT_S = 300  # a guard against a hang only
ROWS = 5000
COLUMNS = "id INT, name STRING, level INT"


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    with PrivateMariaDB.start(tmp_path_factory.mktemp("mariadb")) as server:
        yield server


def mysql_rows(mariadb: PrivateMariaDB) -> dict[int, tuple[str, int]]:
    with mariadb.connect("shop") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, level FROM user_member")
        return {int(i): (str(n), int(level)) for i, n, level in cur.fetchall()}


def iceberg_rows(front: Any, spark: Any) -> dict[int, tuple[str, int]] | None:
    try:
        metadata = direct(front, f"{CATALOG}.db.user_member").metadata_location
    except NoSuchTableError:
        return None
    rows = snapshot_read(spark, metadata).collect()
    return {row.id: (row.name, row.level) for row in rows}


def difference(found: dict[int, Any] | None, expected: dict[int, Any]) -> str:
    """The keys the Iceberg table lacks, has over, or holds other values of (the first 10)."""
    found = found or {}
    lacks = sorted(set(expected) - set(found))
    over = sorted(set(found) - set(expected))
    other = sorted(k for k in set(found) & set(expected) if found[k] != expected[k])
    return (
        f"lacks {lacks[:10]} ({len(lacks)}), has over {over[:10]} ({len(over)}), "
        f"other values {[(k, found[k], expected[k]) for k in other[:10]]} ({len(other)})"
    )


def change(mariadb: PrivateMariaDB, rng: random.Random, count: int, next_id: list[int]) -> None:
    """`count` inserts, updates and deletes of random members, each its own transaction."""
    with mariadb.connect("shop") as conn, conn.cursor() as cur:
        for _ in range(count):
            cur.execute("SELECT id FROM user_member")
            ids = [int(r[0]) for r in cur.fetchall()]
            roll = rng.random()
            if roll < 0.3 or not ids:
                next_id[0] += 1
                cur.execute(
                    "INSERT INTO user_member VALUES (%s, %s, %s)",
                    (next_id[0], f"m{next_id[0]}", 1),
                )
            elif roll < 0.8:
                cur.execute(
                    "UPDATE user_member SET level = level + 1, name = %s WHERE id = %s",
                    (f"u{rng.randrange(10**6)}", rng.choice(ids)),
                )
            else:
                cur.execute("DELETE FROM user_member WHERE id = %s", (rng.choice(ids),))


class Changes(threading.Thread):
    """Inserts, updates and deletes (`change`, a batch at a time) in a thread of its own, from
    before the job reads the table until `stop`: whenever the snapshot is read, rows change
    while it is, and in the same second as it ends."""

    def __init__(self, mariadb: PrivateMariaDB, rng: random.Random, next_id: list[int]) -> None:
        super().__init__(daemon=True)
        self.mariadb, self.rng, self.next_id = mariadb, rng, next_id
        self.batches = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                change(self.mariadb, self.rng, 10, self.next_id)
                self.batches += 1
        except BaseException as exc:  # the test raises it from `stop`
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        if self.error is not None:
            raise self.error


def test_a_dimension_table_ends_equal_to_its_mysql_table(
    front, spark, mariadb, cluster, tmp_path, writers, job_client
):
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute(
            "CREATE TABLE shop.user_member (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
            "level INT NOT NULL)"
        )
        cur.executemany(
            "INSERT INTO shop.user_member VALUES (%s, %s, %s)",
            [(i, f"m{i}", 1) for i in range(ROWS)],
        )
    rng, next_id = random.Random(17), [ROWS - 1]
    args = [
        *("--catalog-uri", f"{front.url}/iceberg"),
        *("--table", "db.user_member"),
        *("--columns", COLUMNS),
        *("--key", "id"),
        *("--source", "mysql-cdc"),
        *("--mysql", f"127.0.0.1:{mariadb.port}"),
        *("--mysql-database", "shop"),
        *("--mysql-table", "user_member"),
        *("--checkpoints", (tmp_path / "checkpoints").as_uri()),
        *("--checkpoint-every-s", "1"),
        *("--jobmanager", cluster.address),  # the demo's test runs it on a MiniCluster
    ]
    changes = Changes(mariadb, rng, next_id)
    changes.start()
    writer = FlinkWriter.start(args=args, token=front.token("job"), log_path=tmp_path / "f.log")
    writers.append(writer)
    compactor = Compactor(spark, job_client, compactor_config(f"{CATALOG}.db.user_member"), print)
    try:
        # the snapshot is committed once the table holds rows: the rows went on changing
        wait_until(
            "the snapshot in Iceberg",
            lambda: bool(iceberg_rows(front, spark)),
            writer=writer,
            deadline=time.monotonic() + WAIT_S,
        )
        compactor.start()
        seen = changes.batches
        wait_until(
            "more changes after the snapshot",
            lambda: changes.batches >= seen + 5,
            writer=writer,
            deadline=time.monotonic() + WAIT_S,
        )
    finally:
        changes.stop()
    try:
        for _ in range(2):
            change(mariadb, rng, 100, next_id)
            expected = mysql_rows(mariadb)
            try:
                wait_until(
                    "the Iceberg table equal to MySQL's",
                    lambda: iceberg_rows(front, spark) == expected,  # noqa: B023
                    writer=writer,
                    deadline=time.monotonic() + WAIT_S,
                    compactor=compactor,
                )
            except TimeoutError:
                found = iceberg_rows(front, spark)
                pytest.fail(f"the tables differ: {difference(found, expected)}")
        report = writer.stop()
    finally:
        compactor.stop(WAIT_S)
    assert not compactor.failures, compactor.failures
    assert all(run.outcome == Outcome.COMPACTED for run in compactor.runs), [
        (run.outcome, run.error) for run in compactor.runs
    ]
    assert report["status"] == "CANCELED" and report["restarts"] == 0, report
    assert iceberg_rows(front, spark) == mysql_rows(mariadb)
