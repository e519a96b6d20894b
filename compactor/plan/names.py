"""A partition's values read back from its name: what the follower needs to limit a rewrite to
the partitions the service names, without reading the table's metadata tables.

    partition_values(spec, "dt=2024-06-20/hr=13")       # (date(2024, 6, 20), 13)
    partition_values(spec, "ts_hour=2024-06-20-13")     # (476053,): hours since 1970
    partition_mapping(spec, "dt=2024-06-20/hr=13")      # {"dt": date(2024, 6, 20), "hr": 13}

The inverse of `jobkit.partition.partition_name` (Iceberg's `partitionToPath`): each
`field=value` unescaped as `URLDecoder` does, the value read by the field's transform back into
the form Spark hands partition values to Python (a `date` for identity dates and `day`, ordinals
for `hour`, `month`, `year`, `int` for `bucket`, ...), which `jobkit.predicate.partition_predicate`
turns into the filter a full plan's group gets. A name is accepted only when naming the values
again gives the same name, byte for byte; anything else (another spec's name, a transform or
type lakelock cannot name) raises ValueError and the partition is left to the full plan.

A value `null` reads as None: the string "null" and a null share a name, as in Iceberg's paths,
and the filter then selects the null partition only (the other is compacted by the full plan).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote_plus

from jobkit.partition import PartitionField, PartitionSpec, UnsupportedPartition, partition_name

__all__ = ["partition_mapping", "partition_values"]

_EPOCH = datetime(1970, 1, 1)
_PARAMETERISED = re.compile(r"^(bucket|truncate)\[(\d+)\]$")
_HOUR = re.compile(r"^(\d{4})-(\d{2})-(\d{2})-(\d{2})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def partition_values(spec: PartitionSpec, name: str) -> tuple[Any, ...]:
    """The values of partition `name` of `spec`, one per field in spec order.

    Raises:
        ValueError: `name` is not a partition of `spec` as lakelock names it (wrong fields, a
            value its transform cannot take, a name that does not come back the same;
            `UnsupportedPartition` for a transform or type lakelock cannot name).
    """
    if not spec.fields:
        raise ValueError("an unpartitioned table has no partitions")
    parts = name.split("/")
    if len(parts) != len(spec.fields):
        raise ValueError(f"{name!r} has {len(parts)} fields, the spec {len(spec.fields)}")
    values = []
    for field, part in zip(spec.fields, parts, strict=True):
        key, sep, text = part.partition("=")
        if not sep or unquote_plus(key) != field.name:
            raise ValueError(f"{name!r}: expected field {field.name!r}, found {part!r}")
        values.append(_value(field, unquote_plus(text)))
    try:
        again = partition_name(spec, values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name!r}: {exc}") from None
    if again != name:
        raise ValueError(f"{name!r} reads back as {again!r}: not a name lakelock gives")
    return tuple(values)


def partition_mapping(spec: PartitionSpec, name: str) -> dict[str, Any]:
    """`partition_values` keyed by partition field name (compactor.plan.Step.partition_values).

    Raises:
        as partition_values.
    """
    return dict(zip((f.name for f in spec.fields), partition_values(spec, name), strict=True))


def _value(field: PartitionField, text: str) -> Any:
    """The value of `field` whose human form (Iceberg's `toHumanString`) is `text`."""
    transform = field.transform
    if text == "null" or transform == "void":
        return None
    try:
        if transform == "identity":
            return _identity(field.source_type, text)
        if transform == "day":
            return date.fromisoformat(text)
        if transform == "hour":
            return _hour(text)
        if transform == "month":
            return _month(text)
        if transform == "year":
            return int(text) - 1970
        match = _PARAMETERISED.match(transform)
        if match and match.group(1) == "bucket":
            return int(text)
        if match:  # truncate keeps the source type
            return _identity(field.source_type, text)
    except (ValueError, InvalidOperation) as exc:
        raise ValueError(f"partition field {field.name}: cannot read {text!r}: {exc}") from None
    raise UnsupportedPartition(f"partition field {field.name}: unknown transform {transform!r}")


def _identity(source_type: str, text: str) -> Any:
    kind = source_type.split("(", 1)[0]
    read = _IDENTITY.get(kind)
    if read is None:
        raise UnsupportedPartition(f"cannot read {source_type} partition values")
    return read(text)


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"not a boolean: {text!r}")
    return text == "true"


def _timestamptz(text: str) -> datetime:
    if not text.endswith("Z"):
        raise ValueError(f"not a UTC timestamp: {text!r}")
    # as PySpark hands a timestamptz to Python: a naive datetime in local time
    return datetime.fromisoformat(text).astimezone().replace(tzinfo=None)


def _base64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _text(text: str) -> str:
    return text


# per source type (its name up to a parenthesis), what reads an identity value's human form
_IDENTITY: dict[str, Callable[[str], Any]] = {
    "boolean": _boolean,
    "int": int,
    "long": int,
    "string": _text,
    "uuid": _text,
    "date": date.fromisoformat,
    "timestamp": datetime.fromisoformat,
    "timestamptz": _timestamptz,
    "decimal": Decimal,
    "binary": _base64,
    "fixed": _base64,
}


def _hour(text: str) -> int:
    match = _HOUR.match(text)
    if not match:
        raise ValueError(f"not an hour (yyyy-MM-dd-HH): {text!r}")
    year, month, day, hour = (int(g) for g in match.groups())
    at = datetime(year, month, day, hour)
    return int((at - _EPOCH) // timedelta(hours=1))


def _month(text: str) -> int:
    match = _MONTH.match(text)
    if not match:
        raise ValueError(f"not a month (yyyy-MM): {text!r}")
    year, month = int(match.group(1)), int(match.group(2))
    if not 1 <= month <= 12:
        raise ValueError(f"month {month} out of range")
    return (year - 1970) * 12 + month - 1
