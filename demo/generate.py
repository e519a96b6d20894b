"""Click-event generator for the landing folder, with the answer the table must end up with.

    gen = EventGenerator(seed=1, duplicate_ratio=0.1, late_update_ratio=0.05, bad_ratio=0.02)
    gen.write_file("var/landing", 100)      # one JSON-lines file, written atomically
    gen.expected_rows()                     # the final row per key, as JSON-shaped dicts
    generate("var/landing", count=1000, files=10, seed=1)   # the same, in one call
    create_events_table(spark, "local.db.events")           # the table they go into (DDL)

    python -m demo.generate --out var/landing --count 1000 --files 10 --bad-ratio 0.02
    python -m demo.generate --out var/landing --rate 200 --duration-s 60

Each record is one of (chosen at random by the ratios; the rest are new events):
    new          a new key: event_id, and the dt/hr of its first event_time
    update       an existing key with a newer event_time and new values
    late_update  an existing key with an older event_time: the MERGE's guard must ignore it
    duplicate    an exact copy of a record written before
    bad          unparseable JSON, a missing key field, or a wrong type: goes to the dead letters

Expected final row per key: the latest event_time wins; on a tie the record written later wins
(the MERGE's `>=` and ingest_gate.job.changes.last_change_per_key agree). Files are named and
time-stamped in write order: names sort in write order, modification times strictly increase,
so the file source reads them in that order.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_TYPES",
    "KEY_FIELDS",
    "ChangeGenerator",
    "EventGenerator",
    "GenerateResult",
    "create_events_table",
    "events_table_sql",
    "format_time",
    "generate",
    "main",
    "write_lines",
]

EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")
KEY_FIELDS = ("event_id", "dt", "hr")
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("event_id", "STRING NOT NULL"),
    ("user_id", "BIGINT"),
    ("product_id", "STRING"),
    ("event_type", "STRING"),
    ("event_time", "TIMESTAMP"),
    ("dt", "DATE NOT NULL"),
    ("hr", "INT NOT NULL"),
    ("amount", "DOUBLE"),
)
"""The click-event table's columns in Spark SQL, as its DDL declares them."""
DEFAULT_START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

_mtime_lock = threading.Lock()


def write_lines(
    out_dir: str | os.PathLike[str], lines: Sequence[str], *, prefix: str, sequence: int = 0
) -> Path:
    """Write `lines` to a new `<prefix>-<mtime>-<sequence>.jsonl` file in `out_dir`, atomically;
    names and modification times increase in write order. Return its path.

    The file appears complete or not at all: it is written under a hidden temporary name in the
    same folder (the file source skips names starting with "."), then renamed.

    Raises:
        OSError: the folder cannot be written.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    mtime = _next_mtime_ns()
    name = f"{prefix}-{mtime:020d}-{sequence:05d}.jsonl"
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
            out.flush()
            os.fsync(out.fileno())
        os.utime(tmp, ns=(mtime, mtime))
        os.replace(tmp, folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return folder / name


def events_table_sql(
    table: str, *, format_version: int = 2, write_mode: str = "merge-on-read"
) -> list[str]:
    """The DDL of the click-event table: `write_mode` (merge-on-read or copy-on-write),
    partitioned by day and hour, of `format_version` (3: deletion vectors). Its key (event_id,
    dt, hr; KEY_FIELDS) goes to the ingest job as `key_columns`, not as identifier fields, which
    Iceberg 1.9 cannot MERGE merge-on-read into (see
    ingest_gate.job.table.identifier_merge_refusal)."""
    from ingest_gate.job.table import create_table_sql

    columns = ",\n  ".join(f"{name} {kind}" for name, kind in EVENT_COLUMNS)
    return create_table_sql(
        table,
        columns=columns,
        partitioned_by="dt, hr",
        format_version=format_version,
        write_mode=write_mode,
    )


def create_events_table(
    spark: Any, table: str, *, format_version: int = 2, write_mode: str = "merge-on-read"
) -> None:
    """Create the click-event table (and its namespace) if missing, as a user would in
    spark-sql: the ingest job takes its schema from it.

    Raises:
        pyspark.errors.PySparkException: the catalog refused a statement.
    """
    from jobkit.sql import quote_identifier

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_identifier(table.rsplit('.', 1)[0])}")
    for statement in events_table_sql(table, format_version=format_version, write_mode=write_mode):
        spark.sql(statement)


_last_mtime_ns = 0


def format_time(moment: datetime) -> str:
    """`2024-05-01T10:00:00.123456Z`: the event_time format of the records (UTC, microseconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _next_mtime_ns() -> int:
    # strictly increasing by at least 1 ms (the file system may keep only milliseconds)
    global _last_mtime_ns
    with _mtime_lock:
        _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 1_000_000)
        return _last_mtime_ns


@dataclass
class GenerateResult:
    """What a generator wrote, and the rows the table must hold afterwards."""

    files: list[str] = field(default_factory=list)
    records: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    expected: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self, *, include_expected: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "files": self.files,
            "records": self.records,
            "by_kind": self.by_kind,
            "expected_rows": len(self.expected),
        }
        if include_expected:
            out["expected"] = self.expected
        return out


class EventGenerator:
    """Seeded click events; keeps the expected final row per key across files.

    EventGenerator(seed=1)                                  # new events and some updates
    EventGenerator(seed=1, duplicate_ratio=0.2, late_update_ratio=0.1, bad_ratio=0.05)
    EventGenerator(seed=1, update_window=timedelta(hours=3))   # updates touch recent keys only
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        start: datetime = DEFAULT_START,
        update_ratio: float = 0.2,
        duplicate_ratio: float = 0.0,
        late_update_ratio: float = 0.0,
        bad_ratio: float = 0.0,
        update_window: timedelta | None = None,
    ) -> None:
        ratios = {
            "update_ratio": update_ratio,
            "duplicate_ratio": duplicate_ratio,
            "late_update_ratio": late_update_ratio,
            "bad_ratio": bad_ratio,
        }
        for name, value in ratios.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if sum(ratios.values()) > 1.0:
            raise ValueError(f"the ratios add up to more than 1: {ratios}")
        self._rng = random.Random(seed)
        self._clock = start
        self._ratios = ratios
        self._latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._keys: list[tuple[Any, ...]] = []
        # the first event time of each key, in the order of _keys (the clock only moves
        # forward, so ascending): updates pick among the keys younger than `update_window`
        self._born: list[datetime] = []
        self._update_window = update_window
        self._history: list[str] = []
        self.by_kind: Counter[str] = Counter()
        self.files: list[str] = []

    # -- records --------------------------------------------------------------------------------

    def records(self, n: int) -> list[str]:
        """`n` JSON lines; the expected rows account for them as if written in this order."""
        return [self._record() for _ in range(n)]

    def _record(self) -> str:
        r = self._rng.random()
        kind = "new"
        edge = 0.0
        for name in ("bad", "duplicate", "late_update", "update"):
            edge += self._ratios[f"{name}_ratio"]
            if r < edge:
                kind = name
                break
        if kind != "bad" and kind != "new" and not self._keys:
            kind = "new"  # nothing to update or copy yet
        self.by_kind[kind] += 1
        if kind == "bad":
            return self._bad()
        if kind == "duplicate":
            # with an update window, a copy of a recent record: it touches a recent partition
            recent = self._history if self._update_window is None else self._history[-1000:]
            line = self._rng.choice(recent)
        else:
            event = self._event(kind)
            line = json.dumps(event, separators=(",", ":"))
        self._history.append(line)
        self._expect(json.loads(line))
        return line

    def _tick(self) -> datetime:
        self._clock += timedelta(microseconds=self._rng.randint(1_000, 2_000_000))
        return self._clock

    def _event(self, kind: str) -> dict[str, Any]:
        rng = self._rng
        if kind == "new":
            moment = self._tick()
            return {
                "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "user_id": rng.randint(1, 10_000),
                "product_id": f"p{rng.randint(1, 500):04d}",
                "event_type": rng.choice(EVENT_TYPES),
                "event_time": format_time(moment),
                "dt": moment.strftime("%Y-%m-%d"),
                "hr": moment.hour,
                "amount": round(rng.uniform(0.0, 500.0), 2),
            }
        key = rng.choice(self._updatable())
        event = dict(self._latest[key])
        latest = datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))
        if kind == "update":
            moment = self._tick()  # the clock only moves forward: newer than every record
        else:
            moment = latest - timedelta(microseconds=rng.randint(1_000, 3_600_000_000))
        event["event_time"] = format_time(moment)
        event["event_type"] = rng.choice(EVENT_TYPES)
        event["amount"] = round(rng.uniform(0.0, 500.0), 2)
        return event

    def _updatable(self) -> list[tuple[Any, ...]]:
        """The keys an update may pick: all, or those born within `update_window` of the clock
        (streams mostly update recent keys, so older partitions go cold); never none."""
        if self._update_window is None:
            return self._keys
        first = bisect.bisect_left(self._born, self._clock - self._update_window)
        return self._keys[min(first, len(self._keys) - 1) :]

    def _bad(self) -> str:
        rng = self._rng
        event = self._event("new")
        flavour = rng.choice(("unparseable", "missing", "wrong_type"))
        if flavour == "unparseable":
            line = json.dumps(event, separators=(",", ":"))
            return line[: rng.randint(1, len(line) - 2)]
        if flavour == "missing":
            del event[rng.choice((*KEY_FIELDS, "event_time"))]
        else:
            field_name, value = rng.choice(
                (("user_id", "abc"), ("amount", "lots"), ("hr", "ten"), ("event_time", "soon"))
            )
            event[field_name] = value
        return json.dumps(event, separators=(",", ":"))

    def _expect(self, event: dict[str, Any]) -> None:
        key = tuple(event[k] for k in KEY_FIELDS)
        current = self._latest.get(key)
        if current is None:
            self._keys.append(key)
            self._born.append(datetime.fromisoformat(event["event_time"].replace("Z", "+00:00")))
            self._latest[key] = event
        elif event["event_time"] >= current["event_time"]:
            # same fixed-width UTC format: string order is time order; >= : later written wins
            self._latest[key] = event

    # -- files ----------------------------------------------------------------------------------

    def write_file(self, out_dir: str | os.PathLike[str], n: int) -> Path:
        """Write `n` records to a new `.jsonl` file in `out_dir`, atomically; return its path.

        The file appears complete or not at all: it is written under a hidden temporary name in
        the same folder (the file source skips names starting with "."), then renamed.

        Raises:
            OSError: the folder cannot be written.
        """
        lines = self.records(n)
        path = write_lines(out_dir, lines, prefix="events", sequence=len(self.files))
        self.files.append(str(path))
        return path

    def expected_rows(self) -> list[dict[str, Any]]:
        """The final row per key, JSON-shaped as written, sorted by key."""
        return [self._latest[k] for k in sorted(self._latest)]

    def result(self) -> GenerateResult:
        return GenerateResult(
            files=list(self.files),
            records=sum(self.by_kind.values()),
            by_kind=dict(self.by_kind),
            expected=self.expected_rows(),
        )


class ChangeGenerator(EventGenerator):
    """Change events of the click-event table, as a change-data-capture tool writes them:
    inserts, updates, updates that change the key, deletes (each followed by a tombstone, as
    Debezium does), and bad records; `expected_rows()` is the table's final state.

    ChangeGenerator(seed=1, format="debezium")      # Debezium JSON, without the wrapper
    ChangeGenerator(seed=1, format="canal", delete_ratio=0.2, key_change_ratio=0.1)

    Debezium's encodings of the columns: `event_time` (a TIMESTAMP column) as a ZonedTimestamp
    string, `dt` as io.debezium.time.Date (days since 1970). canal: every value a string.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        format: str = "debezium",
        start: datetime = DEFAULT_START,
        update_ratio: float = 0.3,
        delete_ratio: float = 0.1,
        key_change_ratio: float = 0.05,
        bad_ratio: float = 0.0,
    ) -> None:
        if format not in ("debezium", "canal"):
            raise ValueError(f"format must be debezium or canal, got {format!r}")
        super().__init__(seed=seed, start=start, update_ratio=update_ratio, bad_ratio=bad_ratio)
        self.format = format
        self._change_ratios = {"delete": delete_ratio, "key_change": key_change_ratio}
        if sum(self._change_ratios.values()) + update_ratio + bad_ratio > 1.0:
            raise ValueError("the ratios add up to more than 1")
        self._position = 0

    def records(self, n: int) -> list[str]:
        lines: list[str] = []
        while len(lines) < n:
            lines.extend(self._change())
        # only a delete's tombstone can run past `n` (it comes last): the count stays exact
        return lines[:n]

    def _change(self) -> list[str]:
        r = self._rng.random()
        kind, edge = "new", 0.0
        ratios = {**self._change_ratios, "update": self._ratios["update_ratio"]}
        for name in ("bad", "delete", "key_change", "update"):
            edge += ratios.get(name, self._ratios.get(f"{name}_ratio", 0.0))
            if r < edge:
                kind = name
                break
        if kind in ("delete", "key_change", "update") and not self._keys:
            kind = "new"
        self.by_kind[kind] += 1
        if kind == "bad":
            return [self._bad_change()]
        if kind == "new":
            row = self._event("new")
            self._put(row)
            return [self._envelope("c", None, row)]
        key = self._rng.choice(self._keys)
        before = self._latest[key]
        if kind == "delete":
            self._drop(key)
            return (
                [self._envelope("d", before, None), "null"]
                if self.format == "debezium"
                else [self._envelope("d", before, None)]
            )
        after = self._event("update")  # newer values of a random key; the key is set below
        after = {**after, **{k: before[k] for k in KEY_FIELDS}}
        if kind == "key_change":
            after["event_id"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            self._drop(key)
        self._put(after)
        return [self._envelope("u", before, after)]

    def _put(self, row: dict[str, Any]) -> None:
        key = tuple(row[k] for k in KEY_FIELDS)
        if key not in self._latest:
            self._keys.append(key)
        self._latest[key] = row

    def _drop(self, key: tuple[Any, ...]) -> None:
        del self._latest[key]
        index = self._keys.index(key)
        self._keys[index] = self._keys[-1]
        self._keys.pop()

    def _envelope(
        self, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> str:
        self._position += 1
        if self.format == "debezium":
            return json.dumps(
                {
                    "before": _debezium_row(before),
                    "after": _debezium_row(after),
                    "op": op,
                    "source": {"connector": "generator", "pos": self._position, "row": 0},
                },
                separators=(",", ":"),
            )
        kind = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}[op]
        row = after if after is not None else before
        old = None
        if op == "u" and before is not None and after is not None:
            old = [{k: _canal_value(v) for k, v in before.items() if after.get(k) != v}]
        return json.dumps(
            {
                "id": self._position,
                "database": "demo",
                "table": "events",
                "pkNames": list(KEY_FIELDS),
                "isDdl": False,
                "type": kind,
                "data": [{k: _canal_value(v) for k, v in (row or {}).items()}],
                "old": old,
            },
            separators=(",", ":"),
        )

    def _bad_change(self) -> str:
        rng = self._rng
        row = self._event("new")
        flavour = rng.choice(("unparseable", "unknown_op", "no_after", "wrong_type"))
        if flavour == "unparseable":
            line = self._envelope("c", None, row)
            return line[: rng.randint(1, len(line) - 2)]
        if flavour == "unknown_op":
            line = json.loads(self._envelope("c", None, row))
            line["op" if self.format == "debezium" else "type"] = "x"
            return json.dumps(line)
        if flavour == "no_after":
            line = json.loads(self._envelope("c", None, row))
            line["after" if self.format == "debezium" else "data"] = None
            return json.dumps(line)
        return self._envelope("c", None, {**row, "hr": "ten"})


_EPOCH_DATE = datetime(1970, 1, 1, tzinfo=UTC).date()


def _debezium_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    out = dict(row)
    if isinstance(out.get("dt"), str):
        # io.debezium.time.Date: days since 1970
        out["dt"] = (datetime.fromisoformat(out["dt"]).date() - _EPOCH_DATE).days
    return out


def _canal_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.endswith("Z") and "T" in value:
        # canal writes MySQL's own text: "2024-05-01 10:00:00.123456", here in UTC
        return value[:-1].replace("T", " ")
    return str(value)


def generate(
    out_dir: str | os.PathLike[str],
    *,
    count: int | None = None,
    files: int = 1,
    rate: float | None = None,
    duration_s: float | None = None,
    file_interval_s: float = 1.0,
    seed: int = 0,
    update_ratio: float = 0.2,
    duplicate_ratio: float = 0.0,
    late_update_ratio: float = 0.0,
    bad_ratio: float = 0.0,
) -> GenerateResult:
    """Write `count` records over `files` files at once, or `rate` records per second (one file
    every `file_interval_s`) for `duration_s` seconds (forever when None; stop with Ctrl-C).

    Raises:
        ValueError: neither or both of `count` and `rate`, or a bad ratio.
        OSError: the folder cannot be written.
    """
    if (count is None) == (rate is None):
        raise ValueError("give exactly one of count and rate")
    gen = EventGenerator(
        seed=seed,
        update_ratio=update_ratio,
        duplicate_ratio=duplicate_ratio,
        late_update_ratio=late_update_ratio,
        bad_ratio=bad_ratio,
    )
    if count is not None:
        if count < 0 or files < 1:
            raise ValueError("count must be >= 0 and files >= 1")
        for i in range(files):
            # spread evenly; the first files take the remainder
            gen.write_file(out_dir, count // files + (1 if i < count % files else 0))
        return gen.result()
    assert rate is not None
    if rate <= 0 or file_interval_s <= 0:
        raise ValueError("rate and file_interval_s must be > 0")
    started = time.monotonic()
    owed = 0.0
    try:
        while duration_s is None or time.monotonic() - started < duration_s:
            tick = time.monotonic()
            owed += rate * file_interval_s
            n = int(owed)
            owed -= n
            if n:
                gen.write_file(out_dir, n)
            time.sleep(max(0.0, file_interval_s - (time.monotonic() - tick)))
    except KeyboardInterrupt:
        pass  # the files written so far are complete; report them
    return gen.result()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print a JSON summary; `--expected FILE` writes the expected rows (JSONL)."""
    parser = argparse.ArgumentParser(
        prog="python -m demo.generate", description="Write click events as JSONL files."
    )
    parser.add_argument("--out", default="var/landing", help="landing folder")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--count", type=int, help="records in total (default 1000)")
    amount.add_argument("--rate", type=float, help="records per second")
    parser.add_argument("--files", type=int, default=1, help="files for --count")
    parser.add_argument("--duration-s", type=float, help="seconds for --rate (default: forever)")
    parser.add_argument("--file-interval-s", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-ratio", type=float, default=0.2)
    parser.add_argument("--duplicate-ratio", type=float, default=0.0)
    parser.add_argument("--late-update-ratio", type=float, default=0.0)
    parser.add_argument("--bad-ratio", type=float, default=0.0)
    parser.add_argument("--expected", help="write the expected final rows here (JSON lines)")
    parser.add_argument("--print-expected", action="store_true", help="include them in stdout")
    args = parser.parse_args(argv)
    count = 1000 if args.count is None and args.rate is None else args.count
    try:
        result = generate(
            args.out,
            count=count,
            files=args.files,
            rate=args.rate,
            duration_s=args.duration_s,
            file_interval_s=args.file_interval_s,
            seed=args.seed,
            update_ratio=args.update_ratio,
            duplicate_ratio=args.duplicate_ratio,
            late_update_ratio=args.late_update_ratio,
            bad_ratio=args.bad_ratio,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.expected:
        Path(args.expected).write_text(
            "".join(json.dumps(row) + "\n" for row in result.expected), encoding="utf-8"
        )
    print(json.dumps(result.as_dict(include_expected=args.print_expected)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
