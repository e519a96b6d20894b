"""What the two jobs' configs share: one error, one duration type, one way to read TOML.

    parse_duration("10m"), parse_duration("1h30m"), parse_duration(90)   # timedelta
    format_duration(timedelta(hours=24))                                 # "24h"
    layered("ingest.toml", overrides={"policy": "proceed"})   # flags over file over defaults
    build(IngestConfig, values, title="invalid ingest configuration")   # the model, or
                                                                         # ConfigError

Field types for the config models (pydantic dataclasses, `extra="forbid"`):

    Duration       "90s", "10m", "1h30m", "7d", "2w" or a number of seconds
    rule(check, "must be ...")   a field rule of one's own, reported like pydantic's
    Bool           true or false (the strings "true" and "false" too, as flags give them)
    Columns        a list of column names, or one comma-separated string
    TextMap        a table whose values become strings (Iceberg and Spark options are strings)

Every mistake is reported at once, one line per key with the rule it broke:

    invalid ingest configuration:
      policy: must be one of fail, proceed
      max_batches: must be >= 1 when set

Imports pydantic only: the jobs' base install has it, and not FastAPI.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)

__all__ = [
    "STRICT",
    "Bool",
    "Columns",
    "ConfigError",
    "Duration",
    "Positive",
    "TextMap",
    "build",
    "catalog_input",
    "format_duration",
    "layered",
    "merge",
    "parse_duration",
    "read_toml",
    "rule",
]

STRICT = ConfigDict(extra="forbid")
"""The models' config: an unknown key is a mistake, named as such."""


class ConfigError(ValueError):
    """One or more configuration values broke a rule; fix the keys named, one per line.

    ConfigError([("policy", "must be one of fail, proceed")], title="invalid ingest configuration")
    error.problems    # [(key, rule), ...]; key "" is the value itself (see `build`)
    """

    def __init__(
        self, problems: Sequence[tuple[str, str]], *, title: str = "invalid configuration"
    ) -> None:
        self.problems = list(problems)
        self.title = title
        lines = [f"  {key}: {rule}" if key else f"  {rule}" for key, rule in self.problems]
        super().__init__(f"{title}:\n" + "\n".join(lines))


# -- durations -------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """`"90s"`, `"10m"`, `"1h30m"`, `"7d"` (or a number of seconds) as a timedelta.

    Raises:
        ConfigError: not a duration.
    """
    if isinstance(text, timedelta):
        return text
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ConfigError([("", f"not a duration: {text!r}")])
    if isinstance(text, int | float):
        return timedelta(seconds=float(text))
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ConfigError([("", f"not a duration: {text!r} (use e.g. 30s, 10m, 1h30m, 7d)")])
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


def format_duration(value: timedelta) -> str:
    """`"5d"`, `"24h"`, `"90m"`, `"45s"`: days from two days up, as people say them."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit == "d" else 1) and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


# -- field types -----------------------------------------------------------------------------


def _bool(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError([("", "must be true or false")])
    return value


def _columns(value: Any) -> Any:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError([("", "must be a list of column names")])
    return tuple(value)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def text_map(value: Any) -> Any:
    """A mapping with every value as a string (booleans as `true`/`false`); else unchanged."""
    if not isinstance(value, Mapping):
        raise ConfigError([("", "must be a table of key = value")])
    return {str(k): _text(v) for k, v in value.items()}


def catalog_input(value: Any) -> Any:
    """A `[catalog]` table with its `properties` as strings (TOML gives numbers and booleans)."""
    if isinstance(value, Mapping) and isinstance(value.get("properties"), Mapping):
        return {**value, "properties": text_map(value["properties"])}
    return value


def rule(check: Any, text: str) -> AfterValidator:
    """A field rule: `check(value)` must hold, else `text` is the problem reported.

    max_batches: Annotated[int, rule(lambda v: v >= 1, "must be >= 1")]
    """

    def validate(value: Any) -> Any:
        if not check(value):
            raise ConfigError([("", text)])
        return value

    return AfterValidator(validate)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
Positive = Annotated[int, Field(ge=1)]
Bool = Annotated[bool, BeforeValidator(_bool)]
Columns = Annotated[tuple[str, ...], BeforeValidator(_columns)]
TextMap = Annotated[dict[str, str], BeforeValidator(text_map)]


# -- building and loading --------------------------------------------------------------------

_RULES = {
    "unexpected_keyword_argument": "unknown key",
    "extra_forbidden": "unknown key",
    "missing": "must be set",
    "missing_argument": "must be set",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a float",
    "float_parsing": "must be a float",
    "string_type": "must be a string",
    "dict_type": "must be a table",
    "dataclass_type": "must be a table",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "time_parsing": "must be a time of day, e.g. 03:00",
    "time_type": "must be a time of day, e.g. 03:00",
}
_BOUNDS = {
    "greater_than_equal": ">=",
    "greater_than": ">",
    "less_than_equal": "<=",
    "less_than": "<",
}


def _key(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    if not key:
        return prefix
    return f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"


def problems_of(error: ValidationError, *, where: str = "") -> list[tuple[str, str]]:
    """(key, rule) for each error pydantic found; a ConfigError raised by a validator keeps its
    own keys, under the location it was raised at."""
    out: list[tuple[str, str]] = []
    for err in error.errors():
        key = _join(where, _key(err["loc"]))
        kind, ctx = err["type"], err.get("ctx") or {}
        raised = ctx.get("error")
        if isinstance(raised, ConfigError):
            out += [(_join(key, k), rule) for k, rule in raised.problems]
        elif kind == "literal_error":
            choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            out.append((key, "must be one of " + ", ".join(choices)))
        elif kind in _BOUNDS:
            limit = next(iter(ctx.values()), "?")
            limit = f"{limit:g}" if isinstance(limit, float) else limit
            out.append((key, f"must be {_BOUNDS[kind]} {limit}"))
        elif kind in _RULES:
            out.append((key, _RULES[kind]))
        elif raised is not None:
            out.append((key, str(raised)))
        else:
            out.append((key, err["msg"]))
    return out


def build(
    cls: type, values: Mapping[str, Any], *, where: str = "", title: str = "invalid configuration"
) -> Any:
    """`cls(**values)`, validated by pydantic.

    Raises:
        ConfigError: listing every bad key (under `where`) and its rule.
    """
    try:
        return TypeAdapter(cls).validate_python(dict(values))
    except ValidationError as exc:
        raise ConfigError(problems_of(exc, where=where), title=title) from None
    except ConfigError as exc:  # raised outside pydantic's reach, e.g. by __post_init__
        raise ConfigError([(_join(where, k), r) for k, r in exc.problems], title=title) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML document at `path`.

    Raises:
        ConfigError: the file is missing, unreadable or not TOML.
    """
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([(str(path), exc.strerror or str(exc))]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError([(str(path), f"not TOML: {exc}")]) from None


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, tables merged key by key, anything else replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def layered(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The values of the TOML file at `path` (if any) with `overrides` (flags) over them; the
    model's own defaults fill in the rest.

    Raises:
        ConfigError: as read_toml.
    """
    values = read_toml(path) if path is not None else {}
    return merge(values, overrides or {})
