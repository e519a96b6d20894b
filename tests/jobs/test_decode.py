"""Records to changes against the table's own columns, without Spark: every type, the three
formats, and every kind of bad input kept apart from the good (dead letter or skipped, with why).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from ingest_gate.job.decode import Decoder, WrongType, convert
from ingest_gate.job.target import Field, ListOf, MapOf, Primitive, Struct, Target, target_of
from jobkit.partition import PartitionSpec

P = Primitive


def _target(*columns: Field, identifier: tuple[str, ...] = ()) -> Target:
    return Target("local.db.t", tuple(columns), identifier, PartitionSpec(0, ()), (0, 0))


MEMBERS = _target(
    Field("userid", P("string"), True),
    Field("name", P("string")),
    Field("member_level", P("int")),
    Field("update_time", P("timestamp")),
    identifier=("userid",),
)


def _decoder(fmt: str, target: Target = MEMBERS, **kw) -> Decoder:
    return Decoder(target, key_columns=kw.pop("key_columns", ("userid",)), format=fmt, **kw)


# -- types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("boolean", True, True),
        ("boolean", 1, True),  # MySQL's TINYINT(1) through Debezium
        ("int", 7, 7),
        ("long", 2**40, 2**40),
        ("long", Decimal("3.0"), 3),
        ("float", 1.5, 1.5),
        ("double", Decimal("2.25"), 2.25),
        ("double", 3, 3.0),
        ("double", "NaN", float("nan")),
        ("decimal(9,2)", Decimal("12.3"), Decimal("12.30")),
        ("decimal(9,2)", "-0.05", Decimal("-0.05")),
        ("decimal(38,10)", "1234567890123456789012345678.0123456789", None),
        ("date", "2024-06-20", date(2024, 6, 20)),
        ("date", 19894, date(2024, 6, 20)),  # io.debezium.time.Date
        ("timestamp", "2024-06-20T13:45:00.123456", datetime(2024, 6, 20, 13, 45, 0, 123456)),
        ("timestamp", "2024-06-20 15:45:00+02:00", datetime(2024, 6, 20, 13, 45)),
        ("timestamp", 1718891100000, datetime(2024, 6, 20, 13, 45)),  # epoch ms
        ("timestamptz", "2024-06-20T13:45:00Z", datetime(2024, 6, 20, 13, 45, tzinfo=UTC)),
        ("timestamptz", "2024-06-20 13:45:00", datetime(2024, 6, 20, 13, 45, tzinfo=UTC)),
        ("string", "héllo", "héllo"),
        ("uuid", "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
        ("binary", base64.b64encode(b"\x00\xff").decode(), bytearray(b"\x00\xff")),
        ("fixed[2]", base64.b64encode(b"ab").decode(), bytearray(b"ab")),
    ],
)
def test_each_primitive_reads_its_json_shapes(kind, value, expected):
    got = convert(value, P(kind))
    if expected is None:  # the value itself, exactly
        assert got == Decimal(value)
    elif isinstance(expected, float) and expected != expected:
        assert got != got
    else:
        assert got == expected
        assert type(got) is type(expected)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("boolean", "yes"),
        ("boolean", 2),
        ("int", 2**31),
        ("int", "7"),  # a string is not an int in JSON (canal's strings are read as text)
        ("long", True),
        ("long", 1.5),
        ("float", "1.5"),
        ("decimal(9,2)", "1.234"),  # never rounded
        ("decimal(4,2)", "123.45"),  # too many digits
        ("decimal(9,2)", "lots"),
        ("date", "2024-13-01"),
        ("timestamp", "soon"),
        ("string", 5),
        ("uuid", "not-a-uuid"),
        ("binary", "%%%"),
        ("fixed[4]", base64.b64encode(b"ab").decode()),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(kind, value):
    with pytest.raises(WrongType):
        convert(value, P(kind))


def test_nested_types_read_where_the_json_shape_matches():
    kind = Struct(
        (
            Field("tags", ListOf(P("string"))),
            Field("scores", MapOf(P("int"), P("double"))),
            Field("at", P("date"), required=True),
        )
    )
    value = {"tags": ["a", "b"], "scores": {"1": 0.5}, "at": "2024-06-20", "extra": 1}
    assert convert(value, kind) == (["a", "b"], {1: 0.5}, date(2024, 6, 20))
    # MySQL's JSON columns arrive as strings: parsed first
    assert convert(json.dumps(value), kind) == (["a", "b"], {1: 0.5}, date(2024, 6, 20))
    with pytest.raises(WrongType):
        convert({"tags": "a", "at": "2024-06-20"}, kind)  # a string is not a list
    with pytest.raises(WrongType):
        convert({"tags": []}, kind)  # a required nested field is missing


def test_canal_strings_are_read_by_the_column_type_in_the_configured_zone():
    zone = __import__("zoneinfo").ZoneInfo("Asia/Shanghai")
    assert convert("42", P("long"), text=True) == 42
    assert convert("1", P("boolean"), text=True) is True
    assert convert("2024-06-20 21:45:00", P("timestamptz"), text=True, zone=zone) == datetime(
        2024, 6, 20, 13, 45, tzinfo=UTC
    )
    assert convert("\x00\xff", P("binary"), text=True) == bytearray(b"\x00\xff")


def test_debezium_schema_names_decide_the_time_unit_and_decimal_encoding():
    wrapper = {
        "schema": {
            "type": "struct",
            "fields": [
                {
                    "field": "after",
                    "type": "struct",
                    "fields": [
                        {"field": "id", "type": "int64"},
                        {"field": "at", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
                        {
                            "field": "price",
                            "type": "bytes",
                            "name": "org.apache.kafka.connect.data.Decimal",
                            "parameters": {"scale": "2"},
                        },
                    ],
                }
            ],
        },
        "payload": {
            "op": "c",
            "after": {
                "id": 1,
                "at": 1718891100123456,
                "price": base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode(),
            },
        },
    }
    target = _target(
        Field("id", P("long"), True), Field("at", P("timestamp")), Field("price", P("decimal(9,2)"))
    )
    decoded = _decoder("debezium", target, key_columns=("id",)).decode(json.dumps(wrapper))
    assert decoded.bad is None
    assert decoded.changes[0].row == {
        "id": 1,
        "at": datetime(2024, 6, 20, 13, 45, 0, 123456),
        "price": Decimal("123.45"),
    }


# -- formats ---------------------------------------------------------------------------------


def _row(**values):
    base = {"userid": "u1", "name": "Ann", "member_level": 1, "update_time": "2024-06-20T10:00:00"}
    return {**base, **values}


def test_json_is_one_upsert_per_line_and_unknown_fields_are_counted_not_written():
    decoded = _decoder("json").decode(json.dumps(_row(nickname="A", age=3)))
    assert decoded.bad is None
    assert [c.deleted for c in decoded.changes] == [False]
    assert decoded.changes[0].row["member_level"] == 1
    assert decoded.unknown == ["nickname", "age"]


def test_debezium_ops_upsert_delete_and_change_the_key():
    d = _decoder("debezium")

    def ops(envelope):
        return [(c.deleted, c.row["userid"], c.sub) for c in d.decode(json.dumps(envelope)).changes]

    assert ops({"op": "c", "after": _row()}) == [(False, "u1", 1)]
    assert ops({"op": "r", "after": _row()}) == [(False, "u1", 1)]
    assert ops({"op": "u", "before": _row(), "after": _row(name="B")}) == [(False, "u1", 1)]
    # a key change: the old key is deleted first, then the new one written
    assert ops({"op": "u", "before": _row(), "after": _row(userid="u2")}) == [
        (True, "u1", 0),
        (False, "u2", 1),
    ]
    assert ops({"op": "d", "before": _row(), "after": None}) == [(True, "u1", 0)]
    # the same with the schema/payload wrapper
    assert ops({"schema": {"type": "struct"}, "payload": {"op": "d", "before": _row()}}) == [
        (True, "u1", 0)
    ]


def test_a_delete_needs_only_the_key_of_before():
    decoded = _decoder("debezium").decode(json.dumps({"op": "d", "before": {"userid": "u9"}}))
    assert decoded.bad is None and decoded.changes[0].row == {"userid": "u9"}


def test_canal_messages_carry_several_rows_and_old_shows_a_key_change():
    message = {
        "type": "UPDATE",
        "isDdl": False,
        "data": [
            {
                "userid": "u2",
                "name": "B",
                "member_level": "2",
                "update_time": "2024-06-20 10:00:01",
            },
            {
                "userid": "u3",
                "name": "C",
                "member_level": "3",
                "update_time": "2024-06-20 10:00:02",
            },
        ],
        "old": [{"userid": "u1"}, {"name": "c"}],
    }
    decoded = _decoder("canal").decode(json.dumps(message))
    assert decoded.bad is None
    assert [(c.deleted, c.row["userid"], c.sub) for c in decoded.changes] == [
        (True, "u1", 0),
        (False, "u2", 1),
        (False, "u3", 3),
    ]
    assert decoded.changes[1].row["member_level"] == 2
    deleted = {**message, "type": "DELETE", "old": None}
    assert [c.deleted for c in _decoder("canal").decode(json.dumps(deleted)).changes] == [
        True,
        True,
    ]


def test_a_bad_row_of_a_canal_message_is_dead_lettered_and_its_good_rows_apply():
    message = {
        "type": "INSERT",
        "data": [{"userid": "u1", "member_level": "x"}, {"userid": "u2", "member_level": "2"}],
    }
    decoded = _decoder("canal").decode(json.dumps(message))
    assert decoded.bad == "data[0]: wrong type for member_level: expected int"
    assert [c.row["userid"] for c in decoded.changes] == ["u2"]


# -- bad input: never stops the stream -------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "raw", "reason"),
    [
        ("debezium", '{"op": "x", "after": {"userid": "u1"}}', "unknown op 'x'"),
        ("debezium", '{"op": "c", "before": null}', "op c without after"),
        ("debezium", '{"op": "u"}', "op u without after"),
        ("debezium", '{"op": "d", "after": null}', "op d without before"),
        ("debezium", '{"before": null, "after": {"userid": "u1"}}', "not a Debezium change"),
        ("debezium", '{"op": "t"}', "op t (truncate) is not applied"),
        ("debezium", '{"op": "c", "after": {"userid": 5}}', "wrong type for userid"),
        ("debezium", '{"op": "c", "after": {"name": "x"}}', "missing field userid"),
        ("debezium", '{"op": "c", "after": {"userid": "u", "update_time": "x"}}', "update_time"),
        ("json", '{"userid": "u1", "member_level": "high"}', "expected int"),
        ("json", "{not json", "unparseable JSON"),
        ("json", "[1, 2]", "unparseable JSON"),
        ("canal", '{"type": "UPSERT", "data": [{"userid": "u1"}]}', "unknown type 'UPSERT'"),
        ("canal", '{"type": "INSERT", "data": []}', "without data rows"),
        ("canal", "garbage", "unparseable JSON"),
    ],
)
def test_bad_records_are_dead_lettered_with_their_reason(fmt, raw, reason):
    decoded = _decoder(fmt).decode(raw)
    assert decoded.bad is not None and reason in decoded.bad
    assert decoded.changes == [] or fmt == "canal"


@pytest.mark.parametrize(
    ("fmt", "raw", "reason"),
    [
        ("debezium", None, "tombstone"),
        ("debezium", "", "tombstone"),
        ("debezium", "null", "tombstone"),
        ("debezium", '{"schema": null, "payload": null}', "tombstone"),
        ("debezium", '{"ddl": "ALTER TABLE t ADD c INT", "databaseName": "db"}', "DDL"),
        ("canal", '{"type": "ALTER", "isDdl": true, "sql": "ALTER TABLE t ADD c INT"}', "DDL"),
    ],
)
def test_tombstones_and_ddl_are_skipped_and_counted(fmt, raw, reason):
    decoded = _decoder(fmt).decode(raw)
    assert (decoded.skipped, decoded.bad, decoded.changes) == (reason, None, [])


def test_spark_rows_mark_each_record_once_whatever_it_made():
    d = _decoder("debezium")
    records = [
        (json.dumps({"op": "u", "before": _row(), "after": _row(userid="u2")}), "f1", 1),
        ("null", "f1", 2),
        ("{", "f1", 3),
    ]
    rows = list(d.rows(records))
    assert [(r[0], r[3], r[8]) for r in rows] == [
        ("change", True, True),
        ("change", False, False),
        ("skip", None, True),
        ("bad", None, True),
    ]


def test_the_schema_json_of_iceberg_gives_columns_and_identifier_fields():
    schema = {
        "type": "struct",
        "schema-id": 3,
        "identifier-field-ids": [1],
        "fields": [
            {"id": 1, "name": "userid", "required": True, "type": "string"},
            {
                "id": 2,
                "name": "tags",
                "required": False,
                "type": {"type": "list", "element-id": 4, "element": "string"},
            },
            {
                "id": 3,
                "name": "attrs",
                "required": False,
                "type": {
                    "type": "map",
                    "key-id": 5,
                    "key": "string",
                    "value-id": 6,
                    "value": "long",
                },
            },
        ],
    }
    target = target_of(json.dumps(schema), PartitionSpec(0, ()))
    assert target.identifier == ("userid",)
    assert target.version == (3, 0)
    assert target.columns[1].type == ListOf(P("string"))
    assert target.columns[2].type == MapOf(P("string"), P("long"))
