import json
from pathlib import Path

import pytest

from demo.generate import EventGenerator, generate, main

FIELDS = {"event_id", "user_id", "product_id", "event_type", "event_time", "dt", "hr", "amount"}


def _lines(files: list[str]) -> list[str]:
    return [line for f in files for line in Path(f).read_text().splitlines()]


def test_count_is_spread_over_files_and_every_line_is_counted(tmp_path: Path):
    result = generate(tmp_path, count=10, files=3, seed=1)
    assert len(result.files) == 3
    assert len(_lines(result.files)) == 10 == result.records
    assert sum(result.by_kind.values()) == 10


def test_same_seed_writes_the_same_records(tmp_path: Path):
    a = generate(tmp_path / "a", count=50, seed=7, duplicate_ratio=0.2, bad_ratio=0.1)
    b = generate(tmp_path / "b", count=50, seed=7, duplicate_ratio=0.2, bad_ratio=0.1)
    assert _lines(a.files) == _lines(b.files)


def test_expected_keeps_the_latest_event_time_per_key(tmp_path: Path):
    gen = EventGenerator(seed=3, update_ratio=0.3, late_update_ratio=0.2, duplicate_ratio=0.2)
    gen.write_file(tmp_path, 300)
    latest: dict[tuple, dict] = {}
    for line in _lines(gen.files):
        event = json.loads(line)
        key = (event["event_id"], event["dt"], event["hr"])
        if key not in latest or event["event_time"] >= latest[key]["event_time"]:
            latest[key] = event
    assert gen.expected_rows() == [latest[k] for k in sorted(latest)]
    assert gen.by_kind["late_update"] > 0 and gen.by_kind["update"] > 0


def test_late_updates_are_older_than_the_row_they_target(tmp_path: Path):
    gen = EventGenerator(seed=5, update_ratio=0.0, late_update_ratio=0.5)
    gen.write_file(tmp_path, 200)
    assert gen.by_kind["late_update"] > 0
    # late updates never win: every expected row is the key's first (new) event
    first: dict[str, dict] = {}
    for line in _lines(gen.files):
        event = json.loads(line)
        first.setdefault(event["event_id"], event)
    assert {r["event_id"]: r for r in gen.expected_rows()} == first


def test_bad_records_fail_the_schema_in_one_of_the_promised_ways(tmp_path: Path):
    gen = EventGenerator(seed=11, update_ratio=0.0, bad_ratio=1.0)
    gen.write_file(tmp_path, 60)
    assert gen.expected_rows() == []
    for line in _lines(gen.files):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        missing = {"event_id", "dt", "hr", "event_time"} - set(event)
        wrong = [k for k in ("user_id", "amount", "hr") if isinstance(event.get(k), str)]
        assert missing or wrong or event.get("event_time") == "soon", line


def test_good_records_have_every_field_and_dt_hr_of_the_event_time(tmp_path: Path):
    result = generate(tmp_path, count=20, seed=2, update_ratio=0.0)
    for line in _lines(result.files):
        event = json.loads(line)
        assert set(event) == FIELDS
        assert event["event_time"].startswith(event["dt"])
        assert int(event["event_time"][11:13]) == event["hr"]


def test_files_appear_atomically_and_sort_in_write_order(tmp_path: Path):
    gen = EventGenerator(seed=1)
    paths = [gen.write_file(tmp_path, 5) for _ in range(4)]
    assert sorted(p.name for p in paths) == [p.name for p in paths]
    mtimes = [p.stat().st_mtime_ns for p in paths]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == 4
    assert sorted(tmp_path.iterdir()) == sorted(paths)  # no temp files left behind


def test_ratios_over_one_are_refused():
    with pytest.raises(ValueError, match="add up"):
        EventGenerator(update_ratio=0.6, duplicate_ratio=0.6)


def test_command_line_prints_a_summary_and_writes_expected_rows(tmp_path: Path, capsys):
    expected = tmp_path / "expected.jsonl"
    code = main(
        [
            "--out",
            str(tmp_path / "land"),
            "--count",
            "12",
            "--files",
            "2",
            "--seed",
            "4",
            "--expected",
            str(expected),
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 12 and len(summary["files"]) == 2
    assert len(expected.read_text().splitlines()) == summary["expected_rows"]


def test_an_update_window_keeps_updates_and_copies_on_recent_keys():
    from datetime import UTC, datetime, timedelta

    window = timedelta(hours=2)
    gen = EventGenerator(seed=5, update_ratio=0.4, duplicate_ratio=0.1, update_window=window)
    born: dict[str, datetime] = {}
    newest = datetime.min.replace(tzinfo=UTC)
    old_touched = 0
    for line in gen.records(20_000):
        event = json.loads(line)
        at = datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))
        first = born.setdefault(event["event_id"], at)
        newest = max(newest, first)
        # a record on a key born more than the window (plus the spread of the last 1,000
        # records a copy is taken from) before the newest key is one the window kept out
        old_touched += first < newest - window - timedelta(hours=1)
    assert newest - min(born.values()) > 2 * window  # most keys fell out of the window
    assert old_touched == 0
