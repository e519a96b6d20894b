"""A small binlog reader: a MariaDB/MySQL row binlog as change lines in landing folders, in
Debezium's JSON and in canal-json, continuing from its saved position after a restart.

    reader = BinlogReader(server.settings(), landing=Path("var/cdc/landing"),
                          state=Path("var/cdc/binlog-position.json"), schema="shop")
    reader.follow(stop)              # until `stop` is set: one landing file per flush
    reader.caught_up(server.position())   # True when every commit up to there is written

    landing/debezium/<table>/changes-<mtime>-<n>.jsonl   Debezium envelopes with the
                                                         {"schema", "payload"} wrapper
    landing/canal/<table>/changes-<mtime>-<n>.jsonl      canal-json messages

A tool for the demo, its benchmark and the tests, not part of lakelock's production path: there
Debezium or canal publish to Kafka, and the ingest job reads the topic. It follows what they
do: a row event of an INSERT, UPDATE or DELETE becomes one Debezium event per row (op c, u, d;
a delete followed by a tombstone) and one canal message per row event (`data` the rows, `old`
the changed columns' previous values); DDL becomes a canal `isDdl` message. Debezium
encodings: DATETIME as io.debezium.time.MicroTimestamp, TIMESTAMP as ZonedTimestamp, DATE as
Date (days), DECIMAL precise (base64 of the unscaled value, the scale in the schema), binary as
base64. canal writes every value as MySQL's text, binary as ISO-8859-1 text.

Delivery is at least once: lines are written at transaction boundaries, then the position
after them is saved (atomically). A reader killed between the two writes the same transactions
again after its restart, and replaying them converges (docs/jobs.md §1).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from demo.generate import write_lines

__all__ = ["BinlogReader"]

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1)


def _debezium_field(column: Any) -> dict[str, Any]:
    """Debezium's schema of one column (its type name as pymysqlreplication reports it)."""
    from pymysqlreplication.constants import FIELD_TYPE

    kind = column.type
    field: dict[str, Any] = {"field": column.name, "optional": True}
    if kind in (FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2):
        field.update(type="int64", name="io.debezium.time.MicroTimestamp")
    elif kind in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        field.update(type="string", name="io.debezium.time.ZonedTimestamp")
    elif kind in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        field.update(type="int32", name="io.debezium.time.Date")
    elif kind == FIELD_TYPE.NEWDECIMAL:
        field.update(
            type="bytes",
            name="org.apache.kafka.connect.data.Decimal",
            parameters={"scale": str(column.decimals)},
        )
    elif kind in (FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG):
        field.update(type="int32")
    elif kind == FIELD_TYPE.LONGLONG:
        field.update(type="int64")
    elif kind in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        field.update(type="double")
    elif kind == FIELD_TYPE.JSON:
        field.update(type="string", name="io.debezium.data.Json")
    else:
        field.update(type="string")
    return field


def _debezium_value(value: Any, field: dict[str, Any]) -> Any:
    name = field.get("name")
    if value is None:
        return None
    if name == "io.debezium.time.MicroTimestamp":
        delta = value - _EPOCH
        return delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    if name == "io.debezium.time.ZonedTimestamp":
        return value.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
    if name == "io.debezium.time.Date":
        return (value - date(1970, 1, 1)).days
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = int(field["parameters"]["scale"])
        unscaled = int(Decimal(value).scaleb(scale))
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
    if name == "io.debezium.data.Json":
        return value if isinstance(value, str) else json.dumps(_text_keys(value))
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _text_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_text(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_keys(v) for v in value]
    return _text(value) if isinstance(value, bytes) else value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key_names(event: Any) -> list[str]:
    key = getattr(event, "primary_key", None) or ()
    return [key] if isinstance(key, str) else list(key)


def _canal_value(value: Any) -> str | None:
    """MySQL's text of a value, as canal writes it."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds")
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dict | list):
        return json.dumps(_text_keys(value))
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


class BinlogReader:
    """Follows a server's binlog from the saved position (else from the start of its first
    binlog) and writes change lines for the tables of `schema`. See the module docstring."""

    def __init__(
        self,
        settings: dict[str, Any],
        *,
        landing: Path,
        state: Path,
        schema: str,
        server_id: int = 4242,
        flush_every: int = 200,
        formats: tuple[str, ...] = ("debezium", "canal"),
    ) -> None:
        self.settings = settings
        self.landing = landing
        self.state = state
        self.schema = schema
        self.server_id = server_id
        self.flush_every = flush_every
        self.formats = formats
        self.position: tuple[str, int] | None = self._saved()
        self.files_written = 0
        self.events_written = 0
        # (commit time as the workload saw it is not in the binlog: the flush time is)
        self.flushed: list[tuple[float, tuple[str, int], list[str]]] = []
        self._pending: dict[tuple[str, str], list[str]] = {}
        self._txn: dict[tuple[str, str], list[str]] = {}
        self._lock = threading.Lock()
        self._sequence = 0

    def _saved(self) -> tuple[str, int] | None:
        if not self.state.exists():
            return None
        data = json.loads(self.state.read_text())
        return str(data["file"]), int(data["pos"])

    def _save(self, position: tuple[str, int]) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"file": position[0], "pos": position[1]}))
        os.replace(tmp, self.state)
        self.position = position

    def caught_up(self, position: tuple[str, int]) -> bool:
        """Whether every commit up to `position` (SHOW MASTER STATUS) is written and saved."""
        with self._lock:
            return self.position is not None and self.position >= position

    # -- the loop

    def follow(
        self,
        stop: threading.Event,
        *,
        idle_flush_s: float = 0.2,
        on_flush: Callable[[list[str]], None] | None = None,
    ) -> None:
        """Read until `stop` is set (seen within `idle_flush_s`): each committed transaction's
        lines join the pending ones, written out every `flush_every` lines and whenever the
        binlog has been quiet for `idle_flush_s` (the server's heartbeat)."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import HeartbeatLogEvent, QueryEvent, RotateEvent, XidEvent
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        start: dict[str, Any] = {"resume_stream": False}
        if self.position is not None:
            file, pos = self.position
            start = {"resume_stream": True, "log_file": file, "log_pos": pos}
        # blocking, with the server's heartbeat when idle: one connection for the whole run
        # (a non-blocking reader reconnects at every end of the log)
        stream = BinLogStreamReader(
            connection_settings=self.settings,
            server_id=self.server_id,
            blocking=True,
            slave_heartbeat=idle_flush_s,
            only_events=[
                *(WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent),
                *(XidEvent, QueryEvent, RotateEvent, HeartbeatLogEvent),
            ],
            only_schemas=[self.schema],
            is_mariadb=True,
            **start,
        )
        last_file = self.position[0] if self.position else None
        try:
            while not stop.is_set():
                event = stream.fetchone()
                if isinstance(event, RotateEvent):
                    last_file = event.next_binlog
                elif isinstance(event, HeartbeatLogEvent):
                    # nothing more for now: write what is pending
                    if last_file is not None:
                        self._flush((last_file, stream.log_pos), on_flush)
                elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    self._rows(event)
                elif isinstance(event, QueryEvent):
                    self._query(event)
                elif isinstance(event, XidEvent) and self._committed():
                    self._flush((last_file or "", stream.log_pos), on_flush)
        finally:
            stream.close()

    def _committed(self) -> bool:
        """Move the committed transaction's lines to the pending ones; True when enough are
        pending to write them out."""
        for key, lines in self._txn.items():
            self._pending.setdefault(key, []).extend(lines)
        self._txn.clear()
        return sum(len(v) for v in self._pending.values()) >= self.flush_every

    def _flush(
        self, position: tuple[str, int], on_flush: Callable[[list[str]], None] | None
    ) -> None:
        if self._txn:
            return  # inside a transaction: its position is no boundary
        paths = []
        for (fmt, table), lines in sorted(self._pending.items()):
            if lines:
                folder = self.landing / fmt / table
                paths.append(
                    str(write_lines(folder, lines, prefix="changes", sequence=self._sequence))
                )
                self._sequence += 1
                self.events_written += len(lines)
        self._pending.clear()
        with self._lock:
            if paths or self.position != position:
                self._save(position)
        if paths:
            self.files_written += len(paths)
            self.flushed.append((time.time(), position, paths))
            if on_flush is not None:
                on_flush(paths)

    # -- events to lines

    def _rows(self, event: Any) -> None:
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        table = event.table
        fields = [_debezium_field(c) for c in event.columns]
        kind = (
            "DELETE"
            if isinstance(event, DeleteRowsEvent)
            else "UPDATE"
            if isinstance(event, UpdateRowsEvent)
            else "INSERT"
        )
        if "debezium" in self.formats:
            out = self._txn.setdefault(("debezium", table), [])
            for row in event.rows:
                before = row.get("before_values") or (row["values"] if kind == "DELETE" else None)
                after = row.get("after_values") or (row["values"] if kind == "INSERT" else None)
                op = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}[kind]
                out.append(self._debezium(event, fields, op, before, after))
                if op == "d":
                    out.append("null")  # Debezium's tombstone after a delete
        if "canal" in self.formats:
            data, old = [], []
            for row in event.rows:
                values = row.get("after_values") or row["values"]
                data.append({k: _canal_value(v) for k, v in values.items()})
                if kind == "UPDATE":
                    before = row["before_values"]
                    old.append(
                        {k: _canal_value(v) for k, v in before.items() if values.get(k) != v}
                    )
            message = {
                "id": event.packet.log_pos,
                "database": event.schema,
                "table": table,
                "pkNames": _key_names(event),
                "isDdl": False,
                "type": kind,
                "es": event.timestamp * 1000,
                "ts": int(time.time() * 1000),
                "data": data,
                "old": old or None,
            }
            self._txn.setdefault(("canal", table), []).append(json.dumps(message))

    def _debezium(
        self, event: Any, fields: list[dict[str, Any]], op: str, before: Any, after: Any
    ) -> str:
        def image(values: dict[str, Any] | None) -> dict[str, Any] | None:
            if values is None:
                return None
            return {f["field"]: _debezium_value(values.get(f["field"]), f) for f in fields}

        row_schema = {"type": "struct", "optional": True, "fields": fields}
        envelope = {
            "schema": {
                "type": "struct",
                "name": f"{event.schema}.{event.table}.Envelope",
                "fields": [
                    {**row_schema, "field": "before"},
                    {**row_schema, "field": "after"},
                    {"type": "string", "field": "op"},
                ],
            },
            "payload": {
                "before": image(before),
                "after": image(after),
                "op": op,
                "ts_ms": int(time.time() * 1000),
                "source": {
                    "connector": "mysql",
                    "db": event.schema,
                    "table": event.table,
                    "pos": event.packet.log_pos,
                    "ts_ms": event.timestamp * 1000,
                },
            },
        }
        return json.dumps(envelope, separators=(",", ":"))

    def _query(self, event: Any) -> None:
        query = _text(event.query).strip()
        words = query.split()
        if not words or words[0].upper() not in ("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE"):
            return
        if "canal" in self.formats:
            for table in self._tables_named(query):
                message = {
                    "database": _text(event.schema),
                    "table": table,
                    "isDdl": True,
                    "type": words[0].upper(),
                    "sql": query,
                    "data": None,
                    "old": None,
                }
                self._pending.setdefault(("canal", table), []).append(json.dumps(message))

    def _tables_named(self, query: str) -> list[str]:
        """The tables that already have a landing folder and that `query` names."""
        folder = self.landing / "canal"
        known = [p.name for p in folder.iterdir()] if folder.exists() else []
        text = query.replace("`", " ").lower().split()
        return [t for t in known if t.lower() in text]
