"""Binding: column resolution, literal coercion, implicit casts and type errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from mere.errors import InvalidExpression
from mere.expr import (
    Arith,
    Cast,
    Column,
    Compare,
    Expr,
    In,
    Literal,
    bind,
    is_boolean,
    parse,
    referenced_columns,
    to_sql,
)

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("i32", pa.int32()),
        ("i8", pa.int8()),
        ("u64", pa.uint64()),
        ("f", pa.float64()),
        ("f32", pa.float32()),
        ("d", pa.decimal128(10, 2)),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("b", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("ts_s", pa.timestamp("s")),
        ("ts_ns", pa.timestamp("ns")),
        ("tz", pa.timestamp("us", "UTC")),
        ("paris", pa.timestamp("ms", "Europe/Paris")),
        ("clock", pa.time64("us")),
        ("Amount", pa.float64()),
        ("My Col", pa.int32()),
        ("tags", pa.list_(pa.string())),
    ]
)


def b(sql: str, schema: pa.Schema = SCHEMA) -> Expr:
    return bind(parse(sql), schema)


def every_node_typed(expr: Expr) -> bool:
    return all(node.type is not None for node in expr.walk())


# --- names --------------------------------------------------------------------------------


def test_exact_and_case_insensitive_names():
    assert b("amount > 1").left == Column("Amount", None, pa.float64())
    assert b('"Amount" > 1').left == Column("Amount", None, pa.float64())
    assert b('"my col" = 1').left == Column("My Col", None, pa.int32())
    assert b("t.i = 1").left == Column("i", "t", pa.int64())
    assert referenced_columns(b("AMOUNT > 1 AND t.i = 2")) == {"Amount", "i"}


def test_exact_match_wins_over_case_insensitive():
    schema = pa.schema([("a", pa.int64()), ("A", pa.string())])
    assert b("a = 1", schema).left.type == pa.int64()
    assert b("A = 'x'", schema).left.type == pa.string()


def test_ambiguous_name():
    schema = pa.schema([("a", pa.int64()), ("A", pa.string())])
    with pytest.raises(InvalidExpression, match="ambiguous"):
        b("ab = 1", pa.schema([("Ab", pa.int64()), ("aB", pa.int64())]))
    with pytest.raises(InvalidExpression, match="ambiguous"):
        b("A = 1", pa.schema([("a", pa.int64()), ("a", pa.int64())]))
    assert b("a = 1", schema)  # exact wins


def test_unknown_column_lists_available_ones():
    with pytest.raises(InvalidExpression) as info:
        b("nope > 1 AND i = 2")
    message = str(info.value)
    assert "nope" in message and "nope > 1 AND i = 2" in message
    assert "Amount" in message and '"My Col"' in message and "ts_ns" in message


def test_bind_requires_a_schema():
    with pytest.raises(TypeError):
        bind(parse("x = 1"), {"x": pa.int64()})  # type: ignore[arg-type]


# --- literal coercion -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "literal"),
    [
        ("i = 10", Literal(10, pa.int64())),
        ("i32 = 10", Literal(10, pa.int32())),
        ("i8 = -100", Literal(-100, pa.int8())),
        ("f = 10", Literal(10.0, pa.float64())),
        ("f = 1.5", Literal(1.5, pa.float64())),
        ("f32 = 0.1", Literal(float(pa.scalar(0.1, pa.float32()).as_py()), pa.float32())),
        ("d = 10", Literal(Decimal("10.00"), pa.decimal128(10, 2))),
        ("d = 1.5", Literal(Decimal("1.50"), pa.decimal128(10, 2))),
        ("i = 10.0", Literal(10, pa.int64())),
        ("s = 'x'", Literal("x", pa.string())),
        ("ls = 'x'", Literal("x", pa.large_string())),
        ("bin = 'x'", Literal(b"x", pa.binary())),
        ("b = TRUE", Literal(True, pa.bool_())),
        ("day = '2024-01-31'", Literal(dt.date(2024, 1, 31), pa.date32())),
        ("ts = '2024-01-31 10:00'", Literal(dt.datetime(2024, 1, 31, 10), pa.timestamp("us"))),
        ("ts = '2024-01-31'", Literal(dt.datetime(2024, 1, 31), pa.timestamp("us"))),
        ("ts = DATE '2024-01-31'", Literal(dt.datetime(2024, 1, 31), pa.timestamp("us"))),
        (
            "ts_s = '2024-01-31 10:00:01'",
            Literal(dt.datetime(2024, 1, 31, 10, 0, 1), pa.timestamp("s")),
        ),
        (
            "tz = '2024-01-31 10:00'",
            Literal(dt.datetime(2024, 1, 31, 10, tzinfo=dt.UTC), pa.timestamp("us", "UTC")),
        ),
        (
            "tz = '2024-01-31 10:00+02:00'",
            Literal(dt.datetime(2024, 1, 31, 8, tzinfo=dt.UTC), pa.timestamp("us", "UTC")),
        ),
        (
            "tz = TIMESTAMP '2024-01-31 10:00:00'",
            Literal(dt.datetime(2024, 1, 31, 10, tzinfo=dt.UTC), pa.timestamp("us", "UTC")),
        ),
        ("clock = '10:30:00'", Literal(dt.time(10, 30), pa.time64("us"))),
        ("i = NULL", Literal(None, pa.int64())),
    ],
)
def test_literal_adapts_to_column(sql, literal):
    bound = b(sql)
    assert isinstance(bound, Compare)
    assert bound.right == literal
    assert bound.left.type == literal.type
    assert every_node_typed(bound)


def test_naive_text_against_zoned_column_is_wall_time_in_that_zone():
    bound = b("paris = '2024-01-31 10:00'")
    value = bound.right.value
    assert value.utcoffset() == dt.timedelta(hours=1)
    assert value.astimezone(dt.UTC) == dt.datetime(2024, 1, 31, 9, tzinfo=dt.UTC)


def test_literal_on_the_left_adapts_too():
    bound = b("10 < f")
    assert bound.left == Literal(10.0, pa.float64())
    assert bound.right == Column("f", None, pa.float64())


@pytest.mark.parametrize(
    ("sql", "cast_to"),
    [
        ("i8 = 1000", pa.int64()),  # does not fit int8: widen the column
        ("i = 1.5", pa.decimal128(20, 1)),
        ("i = 1e3", pa.float64()),
        ("d = 1.555", pa.decimal128(11, 3)),
        ("day < TIMESTAMP '2024-01-01 10:00:00'", pa.timestamp("us")),
        ("ts_s = TIMESTAMP '2024-01-01 10:00:00.5'", pa.timestamp("us")),  # text: rounded
        ("i = i32", None),
        ("i = f", None),
    ],
)
def test_column_is_widened_when_the_literal_cannot_be_exact(sql, cast_to):
    bound = b(sql)
    assert isinstance(bound, Compare)
    assert bound.left.type == bound.right.type
    if cast_to is not None:
        assert isinstance(bound.left, Cast) and bound.left.to == cast_to
    assert every_node_typed(bound)


@pytest.mark.parametrize(
    ("sql", "left", "right"),
    [
        ("i = i32", pa.int64(), pa.int64()),
        ("i32 < f32", pa.float32(), pa.float32()),  # REAL with an integer is REAL (DuckDB)
        ("i = d", pa.decimal128(21, 2), pa.decimal128(21, 2)),
        ("u64 = i", pa.decimal128(20, 0), pa.decimal128(20, 0)),
        ("s = ls", pa.large_string(), pa.large_string()),
        ("day = ts", pa.timestamp("us"), pa.timestamp("us")),
        ("ts = ts_ns", pa.timestamp("ns"), pa.timestamp("ns")),
    ],
)
def test_column_pairs_widen_to_a_common_type(sql, left, right):
    bound = b(sql)
    assert (bound.left.type, bound.right.type) == (left, right)


def test_int_compared_with_float_rounds_rather_than_fails():
    bound = b("i = f")
    assert isinstance(bound.left, Cast) and bound.left.safe is False


def test_in_list_coerces_every_value():
    bound = b("d IN (1, 2.5, NULL)")
    assert isinstance(bound, In)
    assert [v.value for v in bound.values] == [Decimal("1.00"), Decimal("2.50"), None]
    assert {v.type for v in bound.values} == {pa.decimal128(10, 2)}
    widened = b("i8 IN (1, 1000)")
    assert widened.operand.type == pa.int64()


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("i = 'x'", "cannot compare"),
        ("i = '5'", "cannot compare"),
        ("s = 5", "cannot compare"),
        ("b = 1", "cannot compare"),
        ("b = 'true'", "cannot compare"),
        ("s = i", "cannot compare"),
        ("day = i", "cannot compare"),
        ("ts = tz", "cannot compare"),
        ("tz < ts", "cannot compare"),
        ("day = '2024-13-01'", "not a valid DATE"),
        ("day = 'yesterday'", "not a valid DATE"),
        ("ts = 'noon'", "not a valid TIMESTAMP"),
        ("ts = '2024-01-01 10:00+02:00'", "time zone"),
        ("ts = TIMESTAMPTZ '2024-01-01 10:00:00'", "time zone"),
        ("i IN (1, 'a')", "cannot compare"),
        ("tags = 'a'", "cannot compare"),
        ("i AND b", "not a boolean"),
        ("NOT i", "not a boolean"),
        ("b OR 'x'", "not a boolean"),
        ("i IS TRUE", "not a boolean"),
        ("i LIKE 'a%'", "LIKE needs a string"),
        ("s + 1", "needs numbers"),
        ("-s", "needs numbers"),
        ("d // 2", "integer division"),
        ("f // 2", "integer division"),
        ("i || 'a'", "joins strings"),
        ("lower(i)", "needs a string"),
        ("abs(s)", "needs numbers"),
        ("substring(s, 0)", "start position"),
        ("substring(s, 1, -1)", "start position"),
        ("substring(s, i)", "start position"),
        ("length(s, 1)", "argument"),
        ("coalesce(i, 'a')", "cannot combine"),
        ("CAST(tags AS INTEGER) = 1", "cannot cast"),
    ],
)
def test_bind_errors(sql, fragment):
    with pytest.raises(InvalidExpression) as info:
        b(sql)
    assert fragment in str(info.value)


def test_type_error_message_quotes_expression_and_types():
    with pytest.raises(InvalidExpression) as info:
        b("i > 1 AND s = 5")
    message = str(info.value)
    assert "s = 5" in message and "VARCHAR" in message and "BIGINT" in message
    assert "CAST" in message  # says what to do


# --- results ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "type_"),
    [
        ("i + 1", pa.int64()),
        ("i32 + 1", pa.int32()),
        ("i32 + i", pa.int64()),
        ("i + 1.5", pa.decimal128(21, 1)),
        ("i / 2", pa.float64()),
        ("d / 2", pa.float64()),
        ("i // 2", pa.int64()),
        ("i % 2", pa.int64()),
        ("f % 2", pa.float64()),
        ("d + d", pa.decimal128(11, 2)),
        ("d * 2", pa.decimal128(21, 4)),
        ("-i", pa.int64()),
        ("-u64", pa.decimal128(20, 0)),
        ("s || 'x'", pa.string()),
        ("length(s)", pa.int64()),
        ("lower(s)", pa.string()),
        ("abs(i8)", pa.int8()),
        ("coalesce(i32, 0)", pa.int32()),
        ("coalesce(i32, i, 0)", pa.int64()),
        ("CAST(i AS VARCHAR)", pa.string()),
        ("NULL + NULL", pa.null()),
        ("i + NULL", pa.int64()),
        ("1 + 2.5", pa.decimal128(21, 1)),
        ("i > 1", pa.bool_()),
        ("NULL = NULL", pa.bool_()),
    ],
)
def test_result_types(sql, type_):
    bound = b(sql)
    assert bound.type == type_
    assert every_node_typed(bound)


def test_decimal_product_beyond_38_digits_falls_back_to_float():
    schema = pa.schema([("big", pa.decimal128(38, 2))])
    bound = b("big * big", schema)
    assert isinstance(bound, Arith) and bound.type == pa.float64()


def test_is_boolean_on_bound_trees():
    assert is_boolean(b("b"))
    assert is_boolean(b("NOT b AND i > 1"))
    assert is_boolean(b("NULL"))
    assert is_boolean(b("coalesce(b, FALSE)"))
    assert not is_boolean(b("i"))
    assert not is_boolean(b("i + 1"))
    assert not is_boolean(b("'x'"))


def test_bind_is_idempotent():
    for sql in ["i8 = 1000", "f32 = 0.1 AND day < '2024-01-01'", "d * 2 > 3", "i / 2 > 1"]:
        once = b(sql)
        assert bind(once, SCHEMA) == once


def test_bound_text_reparses_to_the_same_meaning():
    for sql in ["i8 = 1000", "tz > '2024-01-01 10:00'", "day < TIMESTAMP '2024-01-01 10:00:00'"]:
        once = b(sql)
        assert b(to_sql(once)) == once


def test_trees_built_in_code_bind_too():
    from mere.expr import And, Like

    tree = And((Compare(">", Column("I"), Literal(5)), Compare("=", Column("s"), Literal("x"))))
    bound = bind(tree, SCHEMA)
    assert bound.items[0].right == Literal(5, pa.int64())
    assert bound.items[1].right == Literal("x", pa.string())
    assert bind(Compare("=", Column("d"), Literal(Decimal("1.5"))), SCHEMA).right == Literal(
        Decimal("1.50"), pa.decimal128(10, 2)
    )
    with pytest.raises(InvalidExpression, match="unsupported literal"):
        bind(Compare("=", Column("i"), Literal(object())), SCHEMA)
    with pytest.raises(InvalidExpression, match="escape"):
        bind(Like(Column("s"), "a!", escape="!"), SCHEMA)
