"""Table patterns in the compactor's config: what they match, how their keys layer."""

from __future__ import annotations

from datetime import timedelta

import pytest

from compactor.config import ConfigError, config_from_dict
from compactor.job import parse_args, resolve
from compactor.patterns import expand, is_pattern, matches
from compactor.procedure_config import RetentionRefused


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("lake.db.*", "lake.db.events", True),
        ("lake.db.*", "lake.other.events", False),
        ("lake.db.ev*", "lake.db.events", True),
        ("lake.db.ev?nts", "lake.db.events", True),
        ("lake.db.[ab]*", "lake.db.audit", True),
        ("lake.db.[ab]*", "lake.db.events", False),
        ("lake.*.events", "lake.raw.events", True),
        # a wildcard never crosses a dot: no metadata table, no nested namespace
        ("lake.db.*", "lake.db.events.files", False),
        ("lake.*", "lake.db.events", False),
        ("db.*", "lake.db.events", False),
        ("lake.db.events", "lake.db.events", True),
        ("lake.db.Events", "lake.db.events", False),
    ],
)
def test_a_pattern_matches_part_by_part(pattern, name, expected):
    assert matches(pattern, name) is expected


def test_expand_keeps_exact_names_and_lists_each_table_once():
    listed = {
        "lake.db.*": ["lake.db.b", "lake.db.a", "lake.db.c"],
        "lake.db.[ab]": ["lake.db.b", "lake.db.a", "lake.db.c"],
    }

    names = expand(["lake.db.*", "lake.db.[ab]", "lake.db.gone"], listed.__getitem__)

    # the exact name stays although the catalog does not list it: a missing table is reported
    assert names == ["lake.db.a", "lake.db.b", "lake.db.c", "lake.db.gone"]
    assert not is_pattern("lake.db.gone")


def test_expand_drops_what_the_catalog_lists_outside_the_pattern():
    assert expand(["lake.db.ev*"], lambda _: ["lake.db.events", "lake.db.audit"]) == [
        "lake.db.events"
    ]


def _config(*tables, defaults=None):
    return config_from_dict({"defaults": defaults or {}, "tables": list(tables)})


def test_an_exact_entry_keeps_its_keys_over_a_pattern_and_the_pattern_over_the_defaults():
    config = _config(
        {"name": "lake.db.*", "plan": {"recent_days": 2, "min_small_files": 30}},
        {"name": "lake.db.events", "plan": {"min_small_files": 5}},
        defaults={"plan": {"recent_days": 7, "max_snapshots": 100}, "lease": {"ttl": "2m"}},
    )

    events = config.table("lake.db.events")
    other = config.table("lake.db.other")
    outside = config.table("lake.raw.clicks")

    assert events.plan.min_small_files == 5  # its own entry
    assert events.plan.recent_days == 2  # the pattern's, under its entry
    assert events.plan.max_snapshots == 100  # the defaults'
    assert events.lease.ttl == timedelta(minutes=2)
    assert (other.plan.min_small_files, other.plan.recent_days) == (30, 2)
    assert (outside.plan.min_small_files, outside.plan.recent_days) == (10, 7)
    assert config.selection == ("lake.db.events", "lake.db.*")


def test_later_patterns_win_over_earlier_ones_key_by_key():
    config = _config(
        {"name": "lake.*.*", "plan": {"recent_days": 2, "min_small_files": 30}},
        {"name": "lake.db.*", "plan": {"recent_days": 1}},
    )

    table = config.table("lake.db.events")

    assert (table.plan.recent_days, table.plan.min_small_files) == (1, 30)
    assert config.table("lake.raw.events").plan.recent_days == 2


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "*.db.events"}, "the catalog cannot be a pattern"),
        ({"name": "lake.db.*", "plan": {"min_small_file": 3}}, r'tables\["lake.db.\*"\]'),
        ({"name": "*"}, "namespace.table"),
        ({"name": "lake.db.*", "expire_snapshots": {"retain_last": 1}}, "below the floor"),
    ],
)
def test_pattern_mistakes_are_named_at_load_time(entry, message):
    with pytest.raises(ConfigError, match=message):
        _config(entry)


def test_layers_that_together_break_a_floor_are_refused():
    # each valid alone: a short orphan age is no floor breach while the step is off
    short = {"remove_orphan_files": {"older_than": "1h"}}
    enabled = {"remove_orphan_files": {"enabled": True}}

    # an exact entry under them is refused at load time
    with pytest.raises(ConfigError, match=r'tables\["lake.db.a"\]: remove_orphan_files'):
        _config({"name": "lake.*.*", **short}, {"name": "lake.db.a", **enabled})
    # tables only patterns name: when the table is looked up (at a tick, which reports it)
    config = _config({"name": "lake.*.*", **short}, {"name": "lake.db.*", **enabled})
    assert not config.table("lake.raw.a").remove_orphan_files.enabled
    with pytest.raises(RetentionRefused, match="older_than=1h is below the floor of 24h"):
        config.table("lake.db.a")


def test_the_fleet_section_is_read_and_checked():
    config = config_from_dict({"fleet": {"max_concurrent": 4, "claim_ttl": "2m"}})
    assert config.fleet.max_concurrent == 4
    assert config.fleet.claim_ttl == timedelta(minutes=2)
    assert config.fleet.scheduler == "fair"
    with pytest.raises(ConfigError, match=r"fleet\.max_concurrent: must be >= 1"):
        config_from_dict({"fleet": {"max_concurrent": 0}})
    with pytest.raises(ConfigError, match=r"fleet\.scheduler: must be one of fair, fifo"):
        config_from_dict({"fleet": {"scheduler": "random"}})


def test_a_pattern_on_the_command_line_is_a_selection(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[tables]]\nname = "local.db.*"\n')

    _, selection = resolve(parse_args(["run", "--config", str(path), "--once"]))
    assert selection == ["local.db.*"]

    _, selection = resolve(parse_args(["run", "--table", "local.raw.*", "--once"]))
    assert selection == ["local.raw.*"]
    with pytest.raises(ConfigError, match="catalog cannot be a pattern"):
        resolve(parse_args(["run", "--table", "*.db.t", "--once"]))


def test_no_claim_is_only_for_one_off_runs(capsys):
    assert parse_args(["run", "--table", "local.db.t", "--once", "--no-claim"]).no_claim
    with pytest.raises(SystemExit) as exited:
        parse_args(["run", "--table", "local.db.t", "--every", "10m", "--no-claim"])
    assert exited.value.code == 2
    assert "--no-claim is for one-off runs" in capsys.readouterr().err
