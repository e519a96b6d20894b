"""A partition's values read back from the name the gate and the service give it: what the
follower filters its rewrite by, without reading the table's metadata tables."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from compactor.plan import partition_mapping, partition_values
from jobkit.partition import PartitionField, PartitionSpec, partition_name
from jobkit.predicate import partition_predicate


def spec(*fields: tuple[str, str, str, str]) -> PartitionSpec:
    return PartitionSpec(0, tuple(PartitionField(*f) for f in fields))


EVENTS = spec(("dt", "date", "identity", "dt"), ("hr", "int", "identity", "hr"))


def test_the_click_event_tables_names_read_back_as_spark_gives_the_values():
    assert partition_values(EVENTS, "dt=2024-06-20/hr=13") == (date(2024, 6, 20), 13)
    assert partition_mapping(EVENTS, "dt=2024-06-20/hr=0") == {"dt": date(2024, 6, 20), "hr": 0}


@pytest.mark.parametrize(
    ("field", "values"),
    [
        (("ts", "timestamptz", "day", "ts_day"), [date(2024, 6, 20), date(1969, 12, 31)]),
        (("ts", "timestamptz", "hour", "ts_hour"), [476053, 0, -1]),
        (("ts", "timestamptz", "month", "ts_month"), [653, 0, -1]),
        (("ts", "timestamptz", "year", "ts_year"), [54, 0]),
        (("id", "long", "bucket[16]", "id_bucket"), [0, 15]),
        (("name", "string", "truncate[2]", "name_trunc"), ["ab", "a b", "%/=+", "é"]),
        (("name", "string", "identity", "name"), ["a b/c=d%e~", "null-ish", ""]),
        (("flag", "boolean", "identity", "flag"), [True, False]),
        (("n", "long", "identity", "n"), [-5, 2**40]),
        (("price", "decimal(9,2)", "identity", "price"), [Decimal("1.50"), Decimal("-0.01")]),
        (("at", "timestamp", "identity", "at"), [datetime(2024, 6, 20, 13, 45, 0, 123000)]),
        (("u", "uuid", "identity", "u"), ["f79c3e09-677c-4c0a-9a1c-d1c7b8f4a4a1"]),
        (("b", "binary", "identity", "b"), [b"\x00\xffab"]),
    ],
)
def test_every_transform_reads_back_what_it_named(field, values):
    one = spec(field)
    for value in values:
        name = partition_name(one, (value,))
        assert partition_values(one, name) == (value,), name
        # and names it the same again
        assert partition_name(one, partition_values(one, name)) == name


def test_a_timestamptz_reads_back_as_a_naive_local_datetime_as_pyspark_hands_it_over():
    one = spec(("ts", "timestamptz", "identity", "ts"))
    local = datetime(2024, 6, 20, 13, 45, tzinfo=UTC).astimezone().replace(tzinfo=None)
    name = partition_name(one, (local,))
    assert name == "ts=2024-06-20T13%3A45Z"
    assert partition_values(one, name) == (local,)


def test_null_reads_back_as_none_and_filters_by_is_null():
    name = partition_name(EVENTS, (None, 13))
    assert name == "dt=null/hr=13"
    values = partition_values(EVENTS, name)
    assert values == (None, 13)
    where = partition_predicate(EVENTS, [values], catalog="local", alias=None)
    assert where == "(`dt` IS NULL AND `hr` = 13)"


@pytest.mark.parametrize(
    "name",
    [
        "dt=2024-06-20",  # a field missing
        "dt=2024-06-20/hr=13/x=1",  # one too many
        "hr=13/dt=2024-06-20",  # another order
        "dt=2024-6-20/hr=13",  # a date Iceberg never prints so
        "dt=2024-06-20/hr=013",  # reads as 13, which is named hr=13
        "dt=2024-06-20/hr=thirteen",
        "dt=2024-06-20/hr",
    ],
)
def test_a_name_that_is_not_one_lakelock_gives_is_refused(name):
    with pytest.raises(ValueError):
        partition_values(EVENTS, name)


def test_an_unpartitioned_table_has_no_names():
    with pytest.raises(ValueError):
        partition_values(spec(), "")
