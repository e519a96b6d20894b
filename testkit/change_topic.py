"""A change stream of one upsert table (demo.flink's: `event_id, dt, hr, v`, keyed by the
first three) as Kafka messages in the formats the Flink writer reads, and the rows the table
ends with.

    stream = ChangeStream(seed=7, keys=60)
    stream.advance(300)                       # 300 changes: inserts, updates, deletes
    stream.messages("debezium-json")          # [(key, value)] in order, bytes; None: tombstone
    stream.messages("debezium-json", schema=True)   # each event in Debezium's schema envelope
    stream.expected()                         # {(event_id, dt, hr): v} after every change

Each message is keyed by the row's key (JSON), so one key's changes keep their order in a
topic of several partitions. Formats, as their producers write them:

    upsert-kafka    the value is the row after the change; a delete is a tombstone
    debezium-json   {"before", "after", "op": c|u|d, "source", "ts_ms"}; a delete is followed
                    by a tombstone, as Debezium's connector sends it
    canal-json      {"data": [row], "old": [changed fields' old values], "type":
                    INSERT|UPDATE|DELETE, "database", "table", "pkNames", "isDdl", "es", "ts"}
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChangeStream", "Message"]

Message = tuple[bytes | None, bytes | None]
Key = tuple[str, str, int]

_DAY = "2024-06-20"
_TS0 = 1_718_841_600_000  # the day's first millisecond


@dataclass(frozen=True)
class _Change:
    op: str  # "c", "u", "d"
    key: Key
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    ts_ms: int


@dataclass
class ChangeStream:
    seed: int = 7
    keys: int = 60
    delete_ratio: float = 0.25
    changes: list[_Change] = field(default_factory=list)
    _state: dict[Key, int] = field(default_factory=dict)
    _value: int = 1_000_000

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def advance(self, count: int) -> None:
        """`count` more changes, each on a key drawn at random: an insert where the key has
        no row, else an update or (by `delete_ratio`) a delete."""
        for _ in range(count):
            i = self._random.randrange(self.keys)
            key = (f"k{i}", _DAY, i % 3)
            self._value += 1
            before = self._row(key, self._state[key]) if key in self._state else None
            if before is None:
                op, after = "c", self._row(key, self._value)
            elif self._random.random() < self.delete_ratio:
                op, after = "d", None
            else:
                op, after = "u", self._row(key, self._value)
            if after is None:
                del self._state[key]
            else:
                self._state[key] = after["v"]
            self.changes.append(_Change(op, key, before, after, _TS0 + len(self.changes)))

    def expected(self) -> dict[Key, int]:
        return dict(self._state)

    def messages(self, format: str, *, schema: bool = False, start: int = 0) -> list[Message]:
        """The changes from the `start`-th on, as (key, value) messages of `format`."""
        out: list[Message] = []
        for change in self.changes[start:]:
            key = _json(dict(zip(("event_id", "dt", "hr"), change.key, strict=True)))
            if format == "upsert-kafka":
                out.append((key, None if change.after is None else _json(change.after)))
            elif format == "debezium-json":
                event = _debezium(change)
                out.append((key, _json(_enveloped(event) if schema else event)))
                if change.op == "d":
                    out.append((key, None))
            elif format == "canal-json":
                out.append((key, _json(_canal(change))))
            else:
                raise ValueError(f"format {format!r}: upsert-kafka, debezium-json or canal-json")
        return out

    @staticmethod
    def _row(key: Key, value: int) -> dict[str, Any]:
        return {"event_id": key[0], "dt": key[1], "hr": key[2], "v": value}


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _debezium(change: _Change) -> dict[str, Any]:
    return {
        "before": change.before,
        "after": change.after,
        "source": {"connector": "mysql", "db": "shop", "table": "events", "ts_ms": change.ts_ms},
        "op": change.op,
        "ts_ms": change.ts_ms,
    }


_FIELDS = [
    {"field": "event_id", "type": "string", "optional": False},
    {"field": "dt", "type": "string", "optional": False},
    {"field": "hr", "type": "int32", "optional": False},
    {"field": "v", "type": "int64", "optional": True},
]


def _enveloped(event: dict[str, Any]) -> dict[str, Any]:
    """The event as Debezium's JSON converter writes it with `schemas.enable=true`."""
    row = {"type": "struct", "fields": _FIELDS, "optional": True, "name": "shop.events.Value"}
    return {
        "schema": {
            "type": "struct",
            "name": "shop.events.Envelope",
            "optional": False,
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {"field": "source", "type": "struct", "fields": [], "optional": False},
                {"field": "op", "type": "string", "optional": False},
                {"field": "ts_ms", "type": "int64", "optional": True},
            ],
        },
        "payload": event,
    }


def _canal(change: _Change) -> dict[str, Any]:
    kind = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}[change.op]
    row = change.after if change.after is not None else change.before
    old = None
    if change.op == "u" and change.before is not None and change.after is not None:
        old = [{k: v for k, v in change.before.items() if change.after[k] != v}]
    return {
        "data": [row],
        "old": old,
        "type": kind,
        "database": "shop",
        "table": "events",
        "pkNames": ["event_id", "dt", "hr"],
        "isDdl": False,
        "es": change.ts_ms,
        "ts": change.ts_ms,
    }
