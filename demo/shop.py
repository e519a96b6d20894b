"""A shop in MariaDB to stream from: two tables, a random workload, and the equality check.

    create_source(conn)                               # shop.user_member, shop.orders in MariaDB
    create_targets(spark, "local.db", suffix="_dbz")  # their Iceberg tables, by DDL
    workload = Workload(conn, seed=1)
    workload.run(200)                                 # 200 random transactions, commit times kept
    differences(source_rows(conn, "orders"), iceberg_rows(warehouse, "local.db.orders_dbz"),
                TABLES["orders"])                     # [] when equal, row by row

The tables, as a near-real-time lake keeps a MySQL dimension and fact table in sync:

    user_member  a dimension keyed by userid, unpartitioned, copy-on-write, its key the Iceberg
                 table's identifier field (the ingest job reads it from there)
    orders       partitioned by day(created_at); merge key (order_id, created_at), so a
                 batch's commit lease names its day partitions (docs/design.md §4); an order whose
                 created_at moves to another day is a key change for Iceberg (a delete and an
                 insert) although MySQL's key is order_id alone

The workload: inserts, updates, updates of MySQL's key (user_member.userid) and of the Iceberg
key (orders.created_at, across days), deletes; 1-4 statements per transaction.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = [
    "TABLES",
    "Table",
    "Workload",
    "create_source",
    "create_targets",
    "differences",
    "iceberg_rows",
    "source_rows",
]

_MERGE_ON_READ = (
    "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read', "
    "'write.delete.granularity'='file')"
)
# Iceberg 1.9 cannot MERGE merge-on-read into a table with identifier fields (see
# ingest_gate.job.table.identifier_merge_refusal): the small dimension table is copy-on-write
_COPY_ON_WRITE = "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='copy-on-write')"


@dataclass(frozen=True)
class Table:
    name: str
    mysql: str
    iceberg: str  # columns, then what follows the column list
    key: tuple[str, ...]  # the Iceberg merge key
    identifier: bool  # the key is declared as identifier fields (else: key_columns)


TABLES = {
    "user_member": Table(
        "user_member",
        "userid VARCHAR(32) PRIMARY KEY, name VARCHAR(64), show_params TEXT, "
        "member_level INT, update_time DATETIME(6)",
        "userid STRING NOT NULL, name STRING, show_params STRING, member_level INT, "
        "update_time TIMESTAMP_NTZ) USING iceberg",
        ("userid",),
        True,
    ),
    "orders": Table(
        "orders",
        "order_id BIGINT PRIMARY KEY, userid VARCHAR(32), amount DECIMAL(10,2), "
        "status VARCHAR(16), paid BOOLEAN, created_at DATETIME(6) NOT NULL",
        "order_id BIGINT NOT NULL, userid STRING, amount DECIMAL(10,2), status STRING, "
        "paid BOOLEAN, created_at TIMESTAMP_NTZ NOT NULL) USING iceberg "
        "PARTITIONED BY (days(created_at))",
        ("order_id", "created_at"),
        False,
    ),
}


def create_source(conn: Any, schema: str = "shop") -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {schema}")
        for table in TABLES.values():
            cur.execute(f"CREATE TABLE IF NOT EXISTS {schema}.{table.name} ({table.mysql})")


def create_targets(spark: Any, namespace: str, *, suffix: str) -> dict[str, str]:
    """The Iceberg tables of TABLES, named `<namespace>.<table><suffix>`; returns them by table."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    out = {}
    for table in TABLES.values():
        name = f"{namespace}.{table.name}{suffix}"
        props = _COPY_ON_WRITE if table.identifier else _MERGE_ON_READ
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({table.iceberg} {props}")
        if table.identifier:
            spark.sql(f"ALTER TABLE {name} SET IDENTIFIER FIELDS {', '.join(table.key)}")
        out[table.name] = name
    return out


@dataclass
class Workload:
    """Random transactions on the shop; `commits` keeps (commit time, binlog position, tables
    written) of each, for measuring how long a change takes to be visible in Iceberg."""

    conn: Any
    seed: int = 0
    schema: str = "shop"
    start: datetime = datetime(2024, 6, 20, 8, 0)
    commits: list[tuple[float, tuple[str, int], frozenset[str]]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._users: list[str] = []
        self._orders: list[int] = []
        self._next_user = 0
        self._next_order = 0
        self._clock = self.start

    def run(self, transactions: int, *, position: Any = None) -> None:
        """Run `transactions` transactions; `position()` (SHOW MASTER STATUS) is read after
        each commit when given."""
        with self.conn.cursor() as cur:
            cur.execute(f"USE {self.schema}")
            for _ in range(transactions):
                cur.execute("BEGIN")
                tables = frozenset(self._statement(cur) for _ in range(self._rng.randint(1, 4)))
                cur.execute("COMMIT")
                at = time.time()
                self.commits.append((at, position() if position else ("", 0), tables))

    def _tick(self) -> datetime:
        self._clock += timedelta(seconds=self._rng.randint(1, 900))
        return self._clock

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _statement(self, cur: Any) -> str:
        """One random statement; returns the table it wrote."""
        rng = self._rng
        if rng.random() < 0.4:
            self._user(cur, rng.random())
            return "user_member"
        self._order(cur, rng.random())
        return "orders"

    def _user(self, cur: Any, r: float) -> None:
        rng = self._rng
        if r < 0.35 or len(self._users) < 3:
            self._next_user += 1
            userid = f"u{self._next_user:05d}"
            cur.execute(
                "INSERT INTO user_member VALUES (%s, %s, %s, %s, %s)",
                (userid, f"name {userid}", '{"theme": "dark"}', rng.randint(0, 5), self._tick()),
            )
            self._users.append(userid)
            self._count("insert")
        elif r < 0.75:
            cur.execute(
                "UPDATE user_member SET name = %s, member_level = %s, update_time = %s "
                "WHERE userid = %s",
                (f"renamed {rng.randint(0, 999)}", rng.randint(0, 9), self._tick(), self._pick()),
            )
            self._count("update")
        elif r < 0.85:
            old = self._pick()
            self._next_user += 1
            new = f"u{self._next_user:05d}"
            cur.execute("UPDATE user_member SET userid = %s WHERE userid = %s", (new, old))
            self._users[self._users.index(old)] = new
            self._count("key_change")
        else:
            userid = self._pick()
            cur.execute("DELETE FROM user_member WHERE userid = %s", (userid,))
            self._users.remove(userid)
            self._count("delete")

    def _pick(self) -> str:
        return self._rng.choice(self._users)

    def _order(self, cur: Any, r: float) -> None:
        rng = self._rng
        if r < 0.4 or len(self._orders) < 3:
            self._next_order += 1
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    self._next_order,
                    f"u{rng.randint(1, max(1, self._next_user)):05d}",
                    Decimal(rng.randint(100, 99_999)) / 100,
                    "new",
                    False,
                    self._tick(),
                ),
            )
            self._orders.append(self._next_order)
            self._count("insert")
        elif r < 0.8:
            cur.execute(
                "UPDATE orders SET status = %s, paid = %s, amount = amount + 1 WHERE order_id = %s",
                (rng.choice(("paid", "shipped", "returned")), rng.random() < 0.7, self._order_id()),
            )
            self._count("update")
        elif r < 0.9:
            # a later day: the Iceberg key (order_id, created_at) changes, and its partition
            cur.execute(
                "UPDATE orders SET created_at = created_at + INTERVAL %s HOUR WHERE order_id = %s",
                (rng.randint(20, 60), self._order_id()),
            )
            self._count("key_change")
        else:
            order = self._order_id()
            cur.execute("DELETE FROM orders WHERE order_id = %s", (order,))
            self._orders.remove(order)
            self._count("delete")

    def _order_id(self) -> int:
        return self._rng.choice(self._orders)


def source_rows(conn: Any, table: str, schema: str = "shop") -> list[dict[str, Any]]:
    """SELECT * of a MariaDB table, as dicts."""
    import pymysql.cursors

    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {schema}.{table}")
        return list(cur.fetchall())


def iceberg_rows(warehouse: Path, table: str) -> list[dict[str, Any]]:
    """The rows of a Hadoop-catalog Iceberg table as pyiceberg reads them from its current
    metadata file: a reader independent of Spark and of the ingest job."""
    from pyiceberg.table import StaticTable

    from service.ops.iceberg_audit import metadata_file

    return (
        StaticTable.from_metadata(str(metadata_file(warehouse, table)))
        .scan()
        .to_arrow()
        .to_pylist()
    )


def _normal(value: Any) -> Any:
    # MySQL's BOOLEAN is TINYINT(1): 0/1 there, false/true in Iceberg
    if isinstance(value, bool):
        return int(value)
    return value


def differences(
    source: list[dict[str, Any]], target: list[dict[str, Any]], table: Table
) -> list[str]:
    """How `target` (Iceberg rows) differs from `source` (MySQL rows), row by row; [] if equal."""
    key = table.key

    def index(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r[k] for k in key): {c: _normal(v) for c, v in r.items()} for r in rows}

    want, got = index(source), index(target)
    problems = []
    if len(got) != len(target):
        problems.append(f"{table.name}: {len(target) - len(got)} duplicate keys in Iceberg")
    missing, extra = want.keys() - got.keys(), got.keys() - want.keys()
    if missing:
        problems.append(f"{table.name}: {len(missing)} rows missing, e.g. {sorted(missing)[:3]}")
    if extra:
        problems.append(f"{table.name}: {len(extra)} rows too many, e.g. {sorted(extra)[:3]}")
    stale = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    if stale:
        k = stale[0]
        problems.append(
            f"{table.name}: {len(stale)} rows differ, e.g. {k}: {got[k]} != MySQL {want[k]}"
        )
    return problems
