"""partition_name against the paths Iceberg 1.9.2's `PartitionSpec.partitionToPath` gives.
tests/spark/test_partition_names.py checks identity date/int/string, day, hour, month, year,
bucket and string truncate against Iceberg on real tables; the other identity types here follow
Iceberg's `toHumanString` source (Java's `toString` of the value)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from jobkit.partition import (
    PartitionField,
    PartitionSpec,
    UnsupportedPartition,
    escape,
    partition_name,
    scope_refusal,
)


def spec(*fields: tuple[str, str, str, str]) -> PartitionSpec:
    return PartitionSpec(spec_id=0, fields=tuple(PartitionField(*f) for f in fields))


DT_HR = spec(("dt", "date", "identity", "dt"), ("hr", "int", "identity", "hr"))


def test_identity_date_and_hour():
    assert partition_name(DT_HR, (date(2024, 6, 20), 13)) == "dt=2024-06-20/hr=13"


def test_values_by_field_name():
    assert partition_name(DT_HR, {"hr": 7, "dt": date(2024, 6, 1)}) == "dt=2024-06-01/hr=7"


def test_null_values_are_named_null():
    assert partition_name(DT_HR, (None, None)) == "dt=null/hr=null"


@pytest.mark.parametrize(
    ("transform", "value", "expected"),
    [
        ("day", date(2024, 6, 20), "ts_day=2024-06-20"),
        ("day", 19894, "ts_day=2024-06-20"),  # days since 1970, as Iceberg stores it
        ("day", date(1969, 12, 31), "ts_day=1969-12-31"),
        ("hour", 477469, "ts_hour=2024-06-20-13"),
        ("hour", -1, "ts_hour=1969-12-31-23"),
        ("month", 653, "ts_month=2024-06"),
        ("month", -1, "ts_month=1969-12"),
        ("year", 54, "ts_year=2024"),
        ("year", -1, "ts_year=1969"),
        ("day", None, "ts_day=null"),
        ("hour", None, "ts_hour=null"),
    ],
)
def test_time_transforms(transform, value, expected):
    name = {"day": "ts_day", "hour": "ts_hour", "month": "ts_month", "year": "ts_year"}[transform]
    assert partition_name(spec(("ts", "timestamptz", transform, name)), [value]) == expected


def test_bucket():
    assert partition_name(spec(("id", "long", "bucket[16]", "id_bucket")), [7]) == "id_bucket=7"


@pytest.mark.parametrize(
    ("source_type", "value", "expected"),
    [
        ("string", "ab", "name_trunc=ab"),
        ("string", "a/", "name_trunc=a%2F"),
        ("int", -10, "name_trunc=-10"),
        ("decimal(9,2)", Decimal("1.5"), "name_trunc=1.50"),
        ("binary", b"\x00\xff", "name_trunc=AP8%3D"),  # base64, then escaped
    ],
)
def test_truncate_keeps_the_source_type(source_type, value, expected):
    field = ("name", source_type, "truncate[2]", "name_trunc")
    assert partition_name(spec(field), [value]) == expected


@pytest.mark.parametrize(
    ("source_type", "value", "expected"),
    [
        ("boolean", True, "v=true"),
        ("long", 2**40, "v=1099511627776"),
        ("decimal(9,2)", Decimal("-0.01"), "v=-0.01"),
        ("decimal(10,8)", Decimal("0"), "v=0E-8"),  # BigDecimal.toString goes scientific
        ("timestamptz", datetime(2024, 6, 20, 13, 45, tzinfo=UTC), "v=2024-06-20T13%3A45Z"),
        ("timestamptz", 1718888401500000, "v=2024-06-20T13%3A00%3A01.500Z"),
        ("timestamp", datetime(2024, 6, 20, 13, 0, 1, 1), "v=2024-06-20T13%3A00%3A01.000001"),
        ("uuid", "F79C3E09-677C-4BBD-A479-3F349CB785E7", "v=f79c3e09-677c-4bbd-a479-3f349cb785e7"),
    ],
)
def test_identity_types(source_type, value, expected):
    assert partition_name(spec(("v", source_type, "identity", "v")), [value]) == expected


def test_escaping_matches_java_url_encoder():
    assert escape("a b/c=d%e~f*g.h-i_j+k&ü") == "a+b%2Fc%3Dd%25e%7Ef*g.h-i_j%2Bk%26%C3%BC"


def test_field_names_are_escaped_too():
    assert partition_name(spec(("a b", "int", "identity", "a b")), [1]) == "a+b=1"


def test_void_is_always_null():
    assert partition_name(spec(("x", "int", "void", "x_null")), [3]) == "x_null=null"


def test_wrong_value_count_is_refused():
    with pytest.raises(ValueError, match="1 values for 2 partition fields"):
        partition_name(DT_HR, [date(2024, 6, 20)])


def test_double_identity_is_unsupported():
    with pytest.raises(UnsupportedPartition):
        partition_name(spec(("x", "double", "identity", "x")), [1.5])


def test_hour_needs_an_int():
    with pytest.raises(TypeError):
        partition_name(spec(("ts", "timestamptz", "hour", "ts_hour")), [date(2024, 6, 20)])


def test_scope_usable_when_key_holds_every_partition_source():
    assert scope_refusal(DT_HR, specs_in_use=[0], key_columns=["event_id", "DT", "hr"]) is None


def test_scope_refused_when_key_lacks_a_partition_column():
    reason = scope_refusal(DT_HR, specs_in_use=[0], key_columns=["event_id", "dt"])
    assert reason is not None and "hr" in reason


def test_scope_refused_with_live_files_on_another_spec():
    reason = scope_refusal(DT_HR, specs_in_use=[0, 1], key_columns=["event_id", "dt", "hr"])
    assert reason is not None and "[1]" in reason


def test_scope_refused_for_unpartitioned_and_double_tables():
    assert scope_refusal(spec(), specs_in_use=[0], key_columns=["id"]) is not None
    doubles = spec(("x", "double", "identity", "x"))
    assert scope_refusal(doubles, specs_in_use=[0], key_columns=["x"]) is not None
