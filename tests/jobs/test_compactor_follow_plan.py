"""The rewrite a follower makes of a due partition, the partitions a lease's release reports
compacted, and the per-partition debt the full plan reports (no Spark)."""

from datetime import UTC, date, datetime

import pytest

from compactor.config import ConfigError, config_from_dict
from compactor.debt import MAX_PARTITIONS, debt_of
from compactor.plan import Group, Step, follow_steps, plan
from compactor.stats import PartitionStats, TableStats

NOW = datetime(2024, 6, 20, 14, tzinfo=UTC)
HOT = "dt=2024-06-20/hr=13"
VALUES = {"dt": date(2024, 6, 20), "hr": 13}


def table(**values):
    return config_from_dict({"tables": [{"name": "local.db.t", **values}]}).table("local.db.t")


def test_a_due_partition_is_rewritten_sized_to_the_stream():
    config = table(rewrite_data_files={"strategy": "sort", "sort_order": "id"})

    data, dangling, deletes = follow_steps(config, [HOT], [VALUES], deletes=True)

    assert data.procedure == "rewrite_data_files" and data.partitions == (HOT,)
    assert data.partition_values == (VALUES,)
    # two files make a group; one delete makes a file worth rewriting; a file of the plan's
    # small size or more is never picked for its size; nothing committed part way
    assert data.options["min-input-files"] == "2"
    assert data.options["delete-file-threshold"] == "1"
    assert data.options["min-file-size-bytes"] == str(config.small_file_bytes)
    assert data.options["partial-progress.enabled"] == "false"
    # the target stays the table's; binpack, whatever the table sorts by in its full plan
    assert data.options["target-file-size-bytes"] == "134217728"
    assert data.strategy == "binpack" and data.sort_order is None
    # the equality deletes the rewrite left applying to nothing, in that partition only
    assert dangling.procedure == "remove_dangling_deletes"
    assert dangling.partitions == (HOT,) and dangling.partition_values == (VALUES,)
    # the position deletes of the partition, dropped where they apply to nothing
    assert deletes.procedure == "rewrite_position_delete_files"
    assert deletes.options == {"rewrite-all": "true"} and deletes.partitions == (HOT,)


def test_with_conversion_the_equality_deletes_become_positions_before_the_rewrite():
    config = table(convert_equality_deletes={"enabled": True, "delete_ratio": 0.2})

    convert, data, dangling = follow_steps(config, [HOT], [VALUES], deletes=True, equality=True)

    assert convert.procedure == "convert_equality_deletes"
    assert convert.partitions == (HOT,) and convert.partition_values == (VALUES,)
    # a big file with few deleted rows stays: Iceberg's ratio instead of one delete
    assert data.procedure == "rewrite_data_files"
    assert "delete-file-threshold" not in data.options
    assert data.options["delete-ratio-threshold"] == "0.2"
    # no equality delete is left to drop; the position deletes the rewrite left dangling are
    # dropped as before
    assert dangling.procedure == "rewrite_position_delete_files"
    assert dangling.options["rewrite-all"] == "true"
    # nothing to convert without deletes counted
    assert [s.procedure for s in follow_steps(config, [HOT], [VALUES], deletes=False)] == [
        "rewrite_data_files"
    ]
    # nor with position deletes only (a Spark MERGE's): the rewrite applies them, as without
    # conversion
    steps = follow_steps(config, [HOT], [VALUES], deletes=True, equality=False)
    assert [s.procedure for s in steps] == [
        "rewrite_data_files",
        "remove_dangling_deletes",
        "rewrite_position_delete_files",
    ]
    assert steps[0].options["delete-file-threshold"] == "1"


def test_conversion_is_off_by_default_and_its_ratio_is_checked():
    steps = follow_steps(table(), [HOT], [VALUES], deletes=True)
    assert "convert_equality_deletes" not in [s.procedure for s in steps]
    with pytest.raises(ConfigError, match="delete_ratio"):
        table(convert_equality_deletes={"enabled": True, "delete_ratio": 1.5})


def test_without_deletes_counted_only_the_data_files_are_rewritten():
    steps = follow_steps(table(), [HOT], [VALUES], deletes=False)
    assert [s.procedure for s in steps] == ["rewrite_data_files"]


def test_the_follow_options_of_a_file_go_over_the_defaults():
    config = table(follow={"options": {"min-input-files": 3}, "partitions_per_group": 4})
    (step,) = follow_steps(config, [HOT], [VALUES], deletes=False)
    assert step.options["min-input-files"] == "3"
    assert step.options["delete-file-threshold"] == "1"  # the default kept
    assert config.follow.partitions_per_group == 4
    with pytest.raises(ConfigError, match="partitions_per_group"):
        table(follow={"partitions_per_group": 0})


def test_follow_steps_need_one_value_mapping_per_partition():
    with pytest.raises(ValueError):
        follow_steps(table(), [HOT, "dt=2024-06-20/hr=14"], [VALUES], deletes=False)


def test_a_release_reports_compacted_only_what_a_groups_data_steps_rewrote():
    rewrite = Step("rewrite_data_files", "x")
    manifests = Step("rewrite_manifests", "x")
    assert Group((HOT,), (rewrite,)).rewrites == (HOT,)
    assert Group(None, (manifests,)).rewrites == ()
    assert Group(None, (rewrite, manifests), covers=(HOT,)).rewrites == (HOT,)
    assert Group((HOT,), (Step("expire_snapshots", "x"),)).rewrites == ()


def hour(h: int, **counts: int) -> PartitionStats:
    return PartitionStats(
        {"dt": date(2024, 6, 20), "hr": h}, name=f"dt=2024-06-20/hr={h}", **counts
    )


def test_a_whole_table_lease_reports_the_partitions_its_rewrite_covers():
    stats = TableStats(
        "local.db.t",
        partitions=(
            hour(10, data_files=12, small_files=12),
            hour(11, data_files=1, small_files=1),
            hour(12, data_files=2, small_files=2, position_delete_files=1),
        ),
        small_file_bytes=table().small_file_bytes,
    )
    p = plan(stats, table(lease={"scope": "table"}), NOW)
    (group,) = p.groups
    assert group.partitions is None
    # what a rewrite would change: enough small files, or a delete file
    assert group.rewrites == ("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=12")


def test_the_debt_names_each_partitions_small_and_delete_files():
    stats = TableStats(
        "local.db.t",
        partitions=(
            hour(10, data_files=3, small_files=2, position_delete_files=1),
            hour(11, data_files=1),  # one big file: owes nothing, not named
            hour(12, data_files=1, small_files=1, dangling_position_delete_files=2),
            # equality deletes: those that apply counted apart, a dangling one not
            hour(
                13,
                data_files=1,
                equality_delete_files=2,
                position_delete_files=1,
                dangling_equality_delete_files=1,
            ),
        ),
    )
    debt = debt_of(stats, table(), measured_at=NOW)
    assert debt["partitions"] == {
        "dt=2024-06-20/hr=13": {"data_files": 0, "delete_files": 4, "equality_delete_files": 2},
        "dt=2024-06-20/hr=10": {"data_files": 2, "delete_files": 1, "equality_delete_files": 0},
        "dt=2024-06-20/hr=12": {"data_files": 1, "delete_files": 2, "equality_delete_files": 0},
    }


def test_the_debt_names_at_most_the_most_indebted_partitions():
    # one partition owing 2 files past the limit of those owing 1
    owing = [PartitionStats({"n": i}, name=f"n={i}", small_files=1) for i in range(MAX_PARTITIONS)]
    owing.append(PartitionStats({"n": -1}, name="n=-1", small_files=2))
    debt = debt_of(TableStats("local.db.t", partitions=tuple(owing)), table(), measured_at=NOW)
    assert len(debt["partitions"]) == MAX_PARTITIONS
    assert debt["partitions"]["n=-1"] == {
        "data_files": 2,
        "delete_files": 0,
        "equality_delete_files": 0,
    }
