"""The Kafka parts that need no broker: retention gaps and lag from offsets, the checkpoint's
offset lines, the jar cache's names, and the demo's keyed messages (a key change split so that
each key's changes stay in its own partition)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from demo.generate import KEY_FIELDS, ChangeGenerator
from demo.kafka import as_messages
from ingest_gate.job.kafka import Gap, RetentionLoss, _offsets_json, lag_of, lost_ranges
from jobkit.maven import ICEBERG_VERSIONS, _artifact_name, _pom, jar_set, sets


def test_a_partition_whose_earliest_offset_passed_the_checkpoint_lost_the_records_between():
    needed = {("t", 0): 100, ("t", 1): 50, ("t", 2): 7}
    earliest = {("t", 0): 150, ("t", 1): 50, ("t", 2): 0}
    assert lost_ranges(needed, earliest) == [Gap("t", 0, 100, 150)]
    assert lost_ranges(needed, {}) == []  # a partition the broker no longer names: not a gap


def test_the_retention_error_names_each_range_and_both_ways_on():
    error = str(RetentionLoss("lake.db.t", [Gap("t", 0, 100, 150), Gap("t", 3, 7, 8)]))
    assert "t:0 offsets 100..149 (50 records)" in error
    assert "t:3 offsets 7..7 (1 records)" in error
    assert 'on_data_loss = "skip"' in error and "backfill" in error


def test_lag_is_latest_minus_the_position_per_topic_partition():
    assert lag_of({("t", 0): 10, ("t", 1): 5}, {("t", 0): 12, ("t", 1): 5, ("t", 2): 3}) == {
        "t:0": 2,
        "t:1": 0,
        "t:2": 3,
    }


def test_the_checkpoint_offset_file_is_read_from_its_last_line():
    text = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"events":{"1":40,"0":12}}\n'
    assert _offsets_json(text) == {("events", 0): 12, ("events", 1): 40}


@pytest.mark.parametrize(
    ("jar", "name"),
    [
        ("kafka-clients-3.4.1.jar", "kafka-clients"),
        ("zstd-jni-1.5.6-10.jar", "zstd-jni"),
        ("spark-sql-kafka-0-10_2.12-3.5.7.jar", "spark-sql-kafka-0-10_2.12"),
        ("scala-library-2.13.16.jar", "scala-library"),
    ],
)
def test_a_jar_is_known_by_its_artifact_name_without_the_version(jar, name):
    assert _artifact_name(jar) == name


def test_each_jar_set_names_its_versions_and_gets_a_pom_of_its_own():
    for version in ICEBERG_VERSIONS:
        for each in sets(version).values():
            assert all(a.count(":") in (2, 3) for a in each.artifacts)
            assert each.artifacts[0].split(":")[2] in each.folder_name
            assert "<artifactId>" in _pom(each.artifacts)
            # a classifier goes into the pom, never into Spark's --packages
            assert all(p.count(":") == 2 for p in each.packages.split(","))
    s3 = sets(ICEBERG_VERSIONS[0])["s3-server"]
    assert "<classifier>jar-with-dependencies</classifier>" in _pom(s3.artifacts)


@pytest.mark.parametrize("version", ICEBERG_VERSIONS)
def test_every_iceberg_jar_of_a_version_is_that_version(version):
    iceberg = [a for each in sets(version).values() for a in each.artifacts if "iceberg" in a]
    assert {a.split(":")[2] for a in iceberg} == {version}
    assert {a.split(":")[1] for a in iceberg} == {
        "iceberg-spark-runtime-3.5_2.12",
        "iceberg-flink-runtime-1.20",
        "iceberg-aws-bundle",
    }


def test_an_iceberg_version_lakelock_does_not_run_on_is_named_with_those_it_does(monkeypatch):
    monkeypatch.setenv("LAKELOCK_ICEBERG_VERSION", "1.10.0")
    with pytest.raises(ValueError, match=r"'1\.10\.0'.*1\.11\.0 or 1\.9\.2"):
        jar_set("spark-iceberg")
    monkeypatch.delenv("LAKELOCK_ICEBERG_VERSION")
    assert jar_set("spark-iceberg").artifacts[0].endswith(":1.11.0")


def _key(message):
    return None if message[0] is None else json.loads(message[0])


@pytest.mark.parametrize("fmt", ["debezium", "canal"])
def test_a_key_change_becomes_a_delete_under_the_old_key_and_an_insert_under_the_new(fmt):
    gen = ChangeGenerator(
        seed=3, format=fmt, key_change_ratio=1.0, update_ratio=0.0, delete_ratio=0.0
    )
    first, change = gen.records(2)
    messages = as_messages([first, change], fmt, KEY_FIELDS)
    old_key = _key(messages[0])
    ops = [
        (
            _key(m),
            None if m[1] is None else json.loads(m[1]).get("op" if fmt == "debezium" else "type"),
        )
        for m in messages[1:]
    ]
    if fmt == "debezium":
        assert [op for _, op in ops] == ["d", None, "c"]  # the delete's tombstone between
    else:
        assert [op for _, op in ops] == ["DELETE", "INSERT"]
    assert ops[0][0] == old_key and ops[-1][0] != old_key


def test_a_debezium_tombstone_goes_under_the_key_it_deletes_and_a_broken_record_under_none():
    gen = ChangeGenerator(
        seed=4, format="debezium", delete_ratio=0.5, update_ratio=0.0, key_change_ratio=0.0
    )
    lines = [*gen.records(40), '{"broken']
    messages = as_messages(lines, "debezium", KEY_FIELDS)
    tombstones = [(b, t) for b, t in pairwise(messages) if t[1] is None]
    assert len(tombstones) >= 5
    assert all(t[0] == before[0] is not None for before, t in tombstones)
    assert messages[-1] == (None, b'{"broken')


def test_a_new_cluster_id_never_starts_with_a_dash():
    """Kafka's storage tool reads `--cluster-id -x...` as an option: one id in 64 did."""
    from demo.kafka import _cluster_id

    ids = [_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")] and all(len(i) == 22 for i in ids)
