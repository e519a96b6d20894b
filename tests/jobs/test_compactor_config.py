"""The compactor's TOML config: durations, defaults and overrides, mistakes named."""

from __future__ import annotations

from datetime import time, timedelta

import pytest

from compactor.config import ConfigError, config_from_dict, load_config, parse_duration
from compactor.job import parse_args, resolve


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        (90, timedelta(seconds=90)),
    ],
)
def test_durations_read_as_people_write_them(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["10", "ten minutes", "10x", "", "m10"])
def test_malformed_durations_are_refused(text):
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration(text)


def test_a_table_entry_overrides_the_defaults_key_by_key(tmp_path):
    path = tmp_path / "compactor.toml"
    path.write_text(
        """
        every = "10m"
        [service]
        url = "http://lakelock:8737"
        [catalog]
        name = "lake"
        warehouse = "/data/wh"
        [defaults.lease]
        ttl = "2m"
        [defaults.plan]
        recent_days = 3
        [defaults.rewrite_data_files]
        options = { "min-input-files" = 8, "partial-progress.enabled" = false }
        [[tables]]
        name = "lake.db.events"
        plan = { recent_days = 1, full_rewrite_at = "03:30" }
        rewrite_data_files = { strategy = "sort", sort_order = "event_id DESC NULLS LAST" }
        """
    )

    config = load_config(path)
    events = config.table("lake.db.events")
    other = config.table("lake.db.other")

    assert config.every == timedelta(minutes=10)
    assert config.service_url == "http://lakelock:8737"
    assert config.catalog.name == "lake"
    assert events.lease.ttl == timedelta(minutes=2)
    assert events.plan.recent_days == 1
    assert events.plan.full_rewrite_at == time(3, 30)
    assert events.rewrite_data_files.strategy == "sort"
    # options merge over the built-in defaults and become the strings Iceberg expects
    options = events.rewrite_data_files.options
    assert options["min-input-files"] == "8"
    assert options["partial-progress.enabled"] == "false"
    assert options["target-file-size-bytes"] == "134217728"
    # an unlisted table gets the defaults
    assert other.plan.recent_days == 3
    assert other.rewrite_data_files.strategy == "binpack"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tables": [{"name": "db.t", "plna": {}}]}, r'tables\["db.t"\]\.plna: unknown key'),
        ({"defaults": {"plan": {"min_small_file": 3}}}, "min_small_file"),
        ({"tables": [{"name": "db.t", "rewrite_data_files": {"strategy": "zorder"}}]}, "binpack"),
        ({"tables": [{"name": "t"}]}, "namespace.table"),
        ({"tables": [{"name": "db.t", "lease": {"ttl": "soon"}}]}, "not a duration"),
        ({"catalog": {"type": "nessie"}}, "catalog"),
        (
            {"tables": [{"name": "db.t", "rewrite_manifests": {"enabled": "yes"}}]},
            "true or false",
        ),
        (
            {
                "tables": [
                    {"name": "db.t", "rewrite_data_files": {"options": {"min-input-files": 13}}}
                ]
            },
            r"min-input-files.*at most plan.trigger_small_files \(12\), got 13",
        ),
    ],
)
def test_config_mistakes_are_named(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("remove_orphan_files", {"enabled": True, "older_than": "1m"}, "older_than=1m .* 24h"),
        ("expire_snapshots", {"older_than": "2h"}, "older_than=2h is below the floor of 24h"),
        ("expire_snapshots", {"retain_last": 2}, "retain_last=2 is below the floor of 5"),
        ("remove_orphan_files", {"min_older_than": "1m"}, "min_older_than cannot be set"),
        ("expire_snapshots", {"min_retain_last": 1}, "min_retain_last cannot be set"),
    ],
)
def test_retention_below_a_floor_is_refused_at_load_time(tmp_path, section, values, message):
    path = tmp_path / "c.toml"
    entry = ", ".join(
        f"{k} = {v!r}".replace("'", '"').replace("True", "true") for k, v in values.items()
    )
    path.write_text(f'[[tables]]\nname = "local.db.a"\n{section} = {{ {entry} }}\n')

    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_floor_in_the_defaults_is_refused_naming_the_defaults():
    with pytest.raises(ConfigError, match=r"defaults: .*older_than=1m"):
        config_from_dict(
            {"defaults": {"remove_orphan_files": {"enabled": True, "older_than": "1m"}}}
        )


def test_every_mistake_in_a_file_is_listed_with_its_place_and_rule():
    with pytest.raises(ConfigError) as caught:
        config_from_dict(
            {
                "every": "soon",
                "service": {"uri": "http://x"},
                "defaults": {"plan": {"small_file_fraction": 2}},
                "tables": [
                    {"name": "db.a", "lease": {"scope": "rows", "ttl": "0s"}},
                    {"name": "db.b", "expire_snapshots": {"retain_last": 1}},
                ],
            }
        )

    assert caught.value.problems == [
        ("every", "not a duration: 'soon' (use e.g. 30s, 10m, 1h30m, 7d)"),
        ("service.uri", "unknown key"),
        ("defaults.plan.small_file_fraction", "must be <= 1"),
        ('tables["db.a"].lease.ttl', "must be at least 1s"),
        ('tables["db.a"].lease.scope', "must be one of partitions, table"),
        ('tables["db.b"]', "expire_snapshots.retain_last=1 is below the floor of 5"),
    ]
    assert '  tables["db.a"].lease.ttl: must be at least 1s' in str(caught.value)


def test_manifest_thresholds_are_read_and_checked():
    config = config_from_dict(
        {"tables": [{"name": "db.t", "rewrite_manifests": {"min_small_manifests": 8}}]}
    )
    assert config.tables[0].rewrite_manifests.min_small_manifests == 8
    with pytest.raises(ConfigError, match="min_small_manifests"):
        config_from_dict(
            {"tables": [{"name": "db.t", "rewrite_manifests": {"min_small_manifests": 0}}]}
        )


def test_command_line_overrides_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[service]\nurl = "http://a:1"\n[[tables]]\nname = "local.db.a"\n')

    config, selection = resolve(
        parse_args(["run", "--config", str(path), "--once", "--service-url", "http://b:2"])
    )

    assert config.service_url == "http://b:2"
    assert selection == ["local.db.a"]


def test_no_table_anywhere_is_an_error():
    with pytest.raises(ConfigError, match="no table"):
        resolve(parse_args(["plan"]))
