"""Records to changes, against the target table's columns: the three input formats.

    decoder = Decoder(target, key_columns=("userid",), format="debezium")
    decoded = decoder.decode(line)     # Decoded: changes, or why it is bad or skipped
    decoded.changes                    # [Change(deleted=False, row={...}, sub=1), ...]
    decoded.bad, decoded.skipped       # a reason, or None
    decoded.unknown                    # record fields the table has no column for (ignored)

Pure Python, no Spark: the job runs `Decoder.rows` over each partition of a micro-batch.

A change is (operation, row, position): `deleted` says upsert or delete, `row` holds the table's
columns (for a delete only the key is needed), and `sub` orders the changes one record makes
(a key change: the old key's delete, then the new key's upsert; canal: row after row). The
record's place in the stream (file and line, or Kafka partition and offset) comes from the
source; within a micro-batch the last change of each key by that order wins.

Formats (`format`):

    json      one row per line, an upsert; versions ordered by `event_time_column` (the MERGE
              keeps the newer), so a late, older version never overwrites a newer one
    debezium  Debezium's JSON, with or without the {"schema", "payload"} wrapper:
              op c, r: upsert `after`; u: upsert `after`, and delete `before`'s key when the key
              changed; d: delete `before`'s key; a tombstone (null, empty) and a schema change
              event are skipped; t (truncate) is dead-lettered, as is any other op
    canal     canal-json: `type` INSERT, UPDATE, DELETE with rows in `data` (every value a
              string), `old` the previous values of the columns an UPDATE changed (a key
              column there is a key change); `isDdl` messages are skipped

Values are read by the column's Iceberg type:

    boolean      true/false; 0/1 (MySQL's TINYINT(1)); canal "1"/"0"/"true"/"false"
    int, long    integers within range
    float,double numbers (and "NaN", "Infinity" as strings)
    decimal(P,S) numbers or numeric strings, at most S decimals, at most P digits; Debezium's
                 `precise` mode (base64 of the unscaled value) when the wrapper's schema says so
    date         "2024-06-20"; Debezium io.debezium.time.Date (days since 1970)
    timestamp    ISO-8601 (or "2024-06-20 13:45:00.123"); a value with an offset is moved to UTC;
                 Debezium Timestamp (epoch ms), MicroTimestamp (µs), NanoTimestamp (ns)
    timestamptz  as timestamp; a value without an offset is read in `time_zone` (UTC unless
                 configured); Debezium ZonedTimestamp (ISO string)
    string       strings only
    uuid         a UUID string, written in its canonical form
    binary,fixed base64 (canal: the ISO-8859-1 string canal writes for a binary column)
    struct       a JSON object; list: an array; map: an object (keys read by the key type);
                 a string holding one of those (how MySQL's JSON columns arrive) is parsed first

A record whose key or a required column is missing or null, or any value of the wrong type, is
bad: dead-lettered with the reason (`missing field k`, `wrong type for c: expected long`). A
record field with no column is ignored and counted (`unknown`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, Literal
from zoneinfo import ZoneInfo

from ingest_gate.job.target import IcebergType, ListOf, MapOf, Primitive, Struct, Target

__all__ = [
    "FORMATS",
    "Change",
    "Decoded",
    "Decoder",
    "Format",
    "Hint",
    "WrongType",
    "convert",
]

Format = Literal["json", "debezium", "canal"]
FORMATS: tuple[str, ...] = Format.__args__

_EPOCH = datetime(1970, 1, 1)
_EPOCH_DAY = date(1970, 1, 1)
_INT_RANGE = {"int": 2**31, "long": 2**63}


class WrongType(ValueError):
    """A value does not fit its column's type."""


@dataclass(frozen=True)
class Change:
    deleted: bool
    row: Mapping[str, Any]
    sub: int


@dataclass
class Decoded:
    """What one record became: changes, or a reason it was skipped, or a reason it is bad (a
    canal message may have both: its good rows apply, the message is dead-lettered for the rest).
    """

    changes: list[Change] = field(default_factory=list)
    bad: str | None = None
    skipped: str | None = None
    unknown: list[str] = field(default_factory=list)


# -- values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hint:
    """How Debezium's schema describes a field: its semantic name and parameters."""

    name: str | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _parse_datetime(text: str) -> datetime:
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text)


def _from_epoch(value: int, hint: Hint | None) -> datetime:
    """Debezium's integer timestamps: ms (Timestamp, the default), µs or ns by semantic name."""
    name = (hint.name or "") if hint else ""
    if name.endswith("MicroTimestamp"):
        return _EPOCH + timedelta(microseconds=value)
    if name.endswith("NanoTimestamp"):
        return _EPOCH + timedelta(microseconds=value // 1000)
    return _EPOCH + timedelta(milliseconds=value)


def _integer(value: Any, kind: str) -> int:
    if isinstance(value, bool):
        raise WrongType(kind)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise WrongType(kind) from None
    if isinstance(value, Decimal | float):
        if value != int(value):  # NaN and infinity raise here, a fraction differs
            raise WrongType(kind)
        value = int(value)
    if not isinstance(value, int) or not -_INT_RANGE[kind] <= value < _INT_RANGE[kind]:
        raise WrongType(kind)
    return value


def _decimal(value: Any, kind: Primitive, how: _How) -> Decimal:
    hint = how.hint
    precision, scale = kind.decimal or (38, 0)
    if isinstance(value, str) and hint is not None and hint.name == _KAFKA_DECIMAL:
        # Debezium decimal.handling.mode=precise: the unscaled value, big-endian, base64
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        value = Decimal(unscaled).scaleb(-int(hint.parameters.get("scale", scale)))
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise WrongType(kind.name)
    try:
        number = Decimal(value.strip() if isinstance(value, str) else str(value))
    except InvalidOperation:
        raise WrongType(kind.name) from None
    if not number.is_finite():
        raise WrongType(kind.name)
    with localcontext() as context:
        context.prec = 100  # decimal(38, s) has more digits than the default context's 28
        scaled = number.quantize(Decimal(1).scaleb(-scale))
    if scaled != number:
        raise WrongType(kind.name)  # more decimals than the scale: never round silently
    number = scaled
    if len(number.as_tuple().digits) > precision:
        raise WrongType(kind.name)
    return number


_KAFKA_DECIMAL = "org.apache.kafka.connect.data.Decimal"


@dataclass(frozen=True)
class _How:
    """How a value arrived: Debezium's hint for it, canal's strings, the zone of naive times."""

    hint: Hint | None = None
    text: bool = False
    zone: ZoneInfo | None = None


def _boolean(value: Any, kind: Primitive, how: _How) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if how.text and isinstance(value, str) and value.lower() in ("0", "1", "true", "false"):
        return value.lower() in ("1", "true")
    raise WrongType(kind.name)


def _int(value: Any, kind: Primitive, how: _How) -> int:
    if isinstance(value, str) and not how.text:
        raise WrongType(kind.name)
    return _integer(value, kind.name)


def _float(value: Any, kind: Primitive, how: _How) -> float:
    if isinstance(value, str):
        if not how.text and value not in ("NaN", "Infinity", "-Infinity"):
            raise WrongType(kind.name)
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise WrongType(kind.name)
    number = float(value)
    if kind.name == "float" and math.isfinite(number) and abs(number) > 3.4028235e38:
        raise WrongType(kind.name)
    return number


def _date(value: Any, kind: Primitive, how: _How) -> date:
    if isinstance(value, int) and not isinstance(value, bool) and not how.text:
        return _EPOCH_DAY + timedelta(days=value)  # io.debezium.time.Date
    if not isinstance(value, str):
        raise WrongType(kind.name)
    return date.fromisoformat(value.strip())


def _timestamp(value: Any, kind: Primitive, how: _How) -> datetime:
    if isinstance(value, int) and not isinstance(value, bool) and not how.text:
        moment = _from_epoch(value, how.hint).replace(tzinfo=UTC)
    elif isinstance(value, str):
        moment = _parse_datetime(value)
        if moment.tzinfo is None and kind.name == "timestamptz":
            moment = moment.replace(tzinfo=how.zone or UTC)
    else:
        raise WrongType(kind.name)
    if kind.name == "timestamp":
        return _naive_utc(moment)
    return moment.astimezone(UTC)


def _string(value: Any, kind: Primitive, how: _How) -> str:
    if not isinstance(value, str):
        raise WrongType(kind.name)
    return value if kind.name == "string" else str(uuid.UUID(value))


def _binary(value: Any, kind: Primitive, how: _How) -> bytearray:
    if not isinstance(value, str):
        raise WrongType(kind.name)
    data = value.encode("latin-1") if how.text else base64.b64decode(value, validate=True)
    if kind.fixed is not None and len(data) != kind.fixed:
        raise WrongType(kind.name)
    return bytearray(data)


_CONVERTERS = {
    "boolean": _boolean,
    "int": _int,
    "long": _int,
    "float": _float,
    "double": _float,
    "date": _date,
    "timestamp": _timestamp,
    "timestamptz": _timestamp,
    "string": _string,
    "uuid": _string,
    "binary": _binary,
}


def convert(
    value: Any,
    kind: IcebergType,
    *,
    hint: Hint | None = None,
    text: bool = False,
    zone: ZoneInfo | None = None,
) -> Any:
    """`value` (from a JSON record) as the Python value Spark takes for `kind`; `text`: canal's
    strings. None stays None.

    Raises:
        WrongType: the value does not fit `kind`.
    """
    if value is None:
        return None
    if isinstance(kind, Struct | ListOf | MapOf):
        if isinstance(value, str):
            try:
                value = json.loads(value, parse_float=Decimal)
            except ValueError:
                raise WrongType(str(kind)) from None
        return _nested(value, kind, zone=zone)
    how = _How(hint, text, zone)
    if kind.decimal:
        step = _decimal
    elif kind.fixed is not None:
        step = _binary
    else:
        step = _CONVERTERS.get(kind.name)
    if step is None:
        raise WrongType(kind.name)
    try:
        return step(value, kind, how)
    except WrongType:
        raise
    except (ValueError, TypeError, OverflowError, binascii.Error, UnicodeEncodeError):
        raise WrongType(kind.name) from None


def _nested(value: Any, kind: Struct | ListOf | MapOf, *, zone: ZoneInfo | None) -> Any:
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            raise WrongType(str(kind))
        items = [convert(v, kind.element, zone=zone) for v in value]
        if kind.element_required and any(v is None for v in items):
            raise WrongType(str(kind))
        return items
    if not isinstance(value, dict):
        raise WrongType(str(kind))
    if isinstance(kind, MapOf):
        out = {}
        for k, v in value.items():
            out[convert(k, kind.key, text=True, zone=zone)] = convert(v, kind.value, zone=zone)
        if kind.value_required and any(v is None for v in out.values()):
            raise WrongType(str(kind))
        return out
    values = []
    for f in kind.fields:
        item = convert(value.get(f.name), f.type, zone=zone)
        if item is None and f.required:
            raise WrongType(str(kind))
        values.append(item)
    return tuple(values)


# -- records ---------------------------------------------------------------------------------


class _Bad(Exception):
    """A record (or one row of it) cannot be applied; the message is the dead letter's reason."""


@dataclass(frozen=True)
class Decoder:
    """Reads records of one format into changes of `target`'s rows.

    Decoder(target, key_columns=("id",), format="canal", time_zone="Asia/Shanghai")
    Decoder(target, key_columns=("event_id", "dt", "hr"), format="json",
            event_time_column="event_time")
    """

    target: Target
    key_columns: tuple[str, ...]
    format: Format = "json"
    event_time_column: str | None = None
    time_zone: str = "UTC"

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def decode(self, raw: str | None) -> Decoded:
        """What `raw` (one line or one Kafka value) becomes. Never raises for a bad record."""
        # a Kafka message with no value is a tombstone whatever the format (a compacted
        # topic's delete marker); an empty line is one only in the change-stream formats
        if raw is None or (self.format != "json" and raw.strip() in ("", "null")):
            return Decoded(skipped="tombstone")
        try:
            record = json.loads(raw, parse_float=Decimal)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            return Decoded(bad="unparseable JSON: not a JSON object")
        out = Decoded()
        try:
            if self.format == "json":
                out.changes.append(Change(False, self._row(record, out), 0))
            elif self.format == "debezium":
                self._debezium(record, out)
            else:
                self._canal(record, out)
        except _Bad as exc:
            out.bad = str(exc)
            out.changes.clear()
        return out

    # -- rows

    def _row(
        self,
        values: Mapping[str, Any],
        out: Decoded,
        *,
        hints: Mapping[str, Hint] | None = None,
        text: bool = False,
        key_only: bool = False,
    ) -> dict[str, Any]:
        """The table's columns from one record row, checked: keys and required columns set,
        each value of its column's type. Fields with no column are noted in `out.unknown`."""
        if not isinstance(values, Mapping):
            raise _Bad("a row is not a JSON object")
        names = self.target.names
        known = set(names)
        out.unknown.extend(k for k in values if k not in known and k not in out.unknown)
        problems = []
        row: dict[str, Any] = {}
        required = set(self.key_columns)
        if self.event_time_column and not key_only:
            required.add(self.event_time_column)
        zone = self._zone
        for column in self.target.columns:
            if key_only and column.name not in self.key_columns:
                continue
            raw = values.get(column.name)
            if raw is None:
                if column.name in required or (column.required and not key_only):
                    problems.append(f"missing field {column.name}")
                row[column.name] = None
                continue
            hint = hints.get(column.name) if hints else None
            try:
                row[column.name] = convert(raw, column.type, hint=hint, text=text, zone=zone)
            except WrongType:
                problems.append(f"wrong type for {column.name}: expected {column.type}")
        if problems:
            raise _Bad("; ".join(problems))
        return row

    def _key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row.get(k) for k in self.key_columns)

    # -- debezium

    def _debezium(self, record: dict[str, Any], out: Decoded) -> None:
        hints: dict[str, Hint] = {}
        if "payload" in record and "schema" in record:
            hints = _debezium_hints(record.get("schema"))
            record = record["payload"]
            if record is None:
                out.skipped = "tombstone"
                return
            if not isinstance(record, dict):
                raise _Bad("payload is not a JSON object")
        if "ddl" in record or "tableChanges" in record:
            out.skipped = "DDL"
            return
        op = record.get("op")
        if op in ("c", "r", "u"):
            self._debezium_upsert(op, record, out, hints)
        elif op == "d":
            before = record.get("before")
            if before is None:
                raise _Bad("op d without before")
            out.changes.append(Change(True, self._row(before, out, hints=hints, key_only=True), 0))
        elif op == "m":
            out.skipped = "message"
        else:
            known = op is None or isinstance(op, str)  # a list or object is no op either
            raise _Bad((_DEBEZIUM_REFUSED.get(op) if known else None) or f"unknown op {op!r}")

    def _debezium_upsert(
        self, op: str, record: dict[str, Any], out: Decoded, hints: Mapping[str, Hint]
    ) -> None:
        """A create, snapshot read or update: the row after it, and a delete of the old key
        first when an update changed the key."""
        before, after = record.get("before"), record.get("after")
        if after is None:
            raise _Bad(f"op {op} without after")
        row = self._row(after, out, hints=hints)
        if op == "u" and before is not None:
            old = self._row(before, out, hints=hints, key_only=True)
            if self._key(old) != self._key(row):
                out.changes.append(Change(True, old, 0))
        out.changes.append(Change(False, row, 1))

    # -- canal

    def _canal(self, record: dict[str, Any], out: Decoded) -> None:
        if record.get("isDdl"):
            out.skipped = "DDL"
            return
        kind = record.get("type")
        data = record.get("data")
        if kind not in ("INSERT", "UPDATE", "DELETE"):
            raise _Bad(f"unknown type {kind!r}")
        if not isinstance(data, list) or not data:
            raise _Bad(f"type {kind} without data rows")
        old = record.get("old") or []
        if not isinstance(old, list):
            raise _Bad("old is not a list of rows")
        problems = []
        for i, values in enumerate(data):
            try:
                self._canal_row(kind, i, values, old[i] if i < len(old) else None, out)
            except _Bad as exc:
                problems.append(f"data[{i}]: {exc}")
        if problems:
            # the good rows apply; the message is kept, with what was wrong in each bad row
            out.bad = "; ".join(problems)

    def _canal_row(self, kind: str, i: int, values: Any, old: Any, out: Decoded) -> None:
        if kind == "DELETE":
            out.changes.append(
                Change(True, self._row(values, out, text=True, key_only=True), 2 * i)
            )
            return
        row = self._row(values, out, text=True)
        if kind == "UPDATE" and isinstance(old, Mapping) and set(old) & set(self.key_columns):
            before = {**values, **old}
            previous = self._row(before, out, text=True, key_only=True)
            if self._key(previous) != self._key(row):
                out.changes.append(Change(True, previous, 2 * i))
        out.changes.append(Change(False, row, 2 * i + 1))

    # -- Spark rows

    def rows(self, records: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
        """`(raw, source, position)` records as decoded rows (see ingest_gate.job.changes): one per
        change, plus one for a bad or skipped record; the first of each record marked."""
        names = self.target.names
        empty = (None,) * len(names)
        for raw, source, position in records:
            decoded = self.decode(raw)
            where = (source, position)
            first, unknown = True, decoded.unknown or None  # counted once per record
            for change in decoded.changes:
                values = tuple(change.row.get(n) for n in names)
                meta = ("change", None, None, change.deleted, unknown, *where, change.sub, first)
                yield (*meta, *values)
                first, unknown = False, None
            if decoded.bad is not None:
                yield ("bad", decoded.bad, raw, None, unknown, *where, 0, first, *empty)
            elif decoded.skipped is not None:
                yield ("skip", decoded.skipped, None, None, unknown, *where, 0, first, *empty)


# Debezium ops a table cannot take, and why
_DEBEZIUM_REFUSED = {
    "t": "op t (truncate) is not applied: truncate the table by hand",
    None: "not a Debezium change event: no op",
}


def _debezium_hints(schema: Any) -> dict[str, Hint]:
    """Semantic names of the row fields in a Debezium envelope's schema (before/after)."""
    hints: dict[str, Hint] = {}
    if not isinstance(schema, Mapping):
        return hints
    for part in schema.get("fields") or []:
        if isinstance(part, Mapping) and part.get("field") in ("before", "after"):
            for f in part.get("fields") or []:
                if isinstance(f, Mapping) and f.get("field") and f.get("name"):
                    params = f.get("parameters") or {}
                    hints[f["field"]] = Hint(
                        str(f["name"]), {str(k): str(v) for k, v in params.items()}
                    )
    return hints
