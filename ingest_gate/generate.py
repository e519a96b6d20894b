"""Click-event generator for the landing folder, with the answer the table must end up with.

    gen = EventGenerator(seed=1, duplicate_ratio=0.1, late_update_ratio=0.05, bad_ratio=0.02)
    gen.write_file("var/landing", 100)      # one JSON-lines file, written atomically
    gen.expected_rows()                     # the final row per key, as JSON-shaped dicts
    generate("var/landing", count=1000, files=10, seed=1)   # the same, in one call

    python -m ingest_gate.generate --out var/landing --count 1000 --files 10 --bad-ratio 0.02
    python -m ingest_gate.generate --out var/landing --rate 200 --duration-s 60

Each record is one of (chosen at random by the ratios; the rest are new events):
    new          a new key: event_id, and the dt/hr of its first event_time
    update       an existing key with a newer event_time and new values
    late_update  an existing key with an older event_time: the MERGE's guard must ignore it
    duplicate    an exact copy of a record written before
    bad          unparseable JSON, a missing key field, or a wrong type: goes to the dead letters

Expected final row per key: the latest event_time wins; on a tie the record written later wins
(the MERGE's `>=` and ingest_gate.schema.dedupe_latest agree). Files are named and time-stamped
in write order: names sort in write order, modification times strictly increase, so the file
source reads them in that order.
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

__all__ = ["EVENT_TYPES", "EventGenerator", "GenerateResult", "format_time", "generate", "main"]

EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")
KEY_FIELDS = ("event_id", "dt", "hr")
DEFAULT_START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

_mtime_lock = threading.Lock()
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
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        mtime = _next_mtime_ns()
        name = f"events-{mtime:020d}-{len(self.files):05d}.jsonl"
        lines = self.records(n)
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
        self.files.append(str(folder / name))
        return folder / name

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
        prog="python -m ingest_gate.generate", description="Write click events as JSONL files."
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
