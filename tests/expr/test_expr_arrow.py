"""Row filtering and evaluation semantics with pyarrow compute (hand-checked cases)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mere.errors import InvalidExpression
from mere.expr import bind, evaluate, parse, to_arrow

UTC = dt.UTC
TABLE = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "i": pa.array([10, -7, None, 0, 3], pa.int64()),
        "j": pa.array([3, 2, 1, None, 0], pa.int32()),
        "f": pa.array([1.5, None, -0.0, 2.0, float("nan")], pa.float64()),
        "d": pa.array(
            [Decimal("1.50"), Decimal("-2.25"), None, Decimal("0.00"), Decimal("10.01")],
            pa.decimal128(10, 2),
        ),
        "s": pa.array(["FR", "it's", None, "a\\b", "héllo 😀"], pa.string()),
        "b": pa.array([True, False, None, True, False], pa.bool_()),
        "day": pa.array(
            [dt.date(2024, 1, 1), dt.date(2024, 2, 29), None, dt.date(2023, 12, 31), None],
            pa.date32(),
        ),
        "ts": pa.array(
            [
                dt.datetime(2024, 1, 1, 10),
                None,
                dt.datetime(2024, 1, 1, 9, 59, 59, 999999),
                dt.datetime(2025, 1, 1),
                dt.datetime(2024, 1, 1, 10, 0, 0, 1),
            ],
            pa.timestamp("us"),
        ),
        "tz": pa.array(
            [
                dt.datetime(2024, 1, 1, 10, tzinfo=UTC),
                dt.datetime(2024, 1, 1, 12, tzinfo=UTC),
                None,
                dt.datetime(2023, 1, 1, tzinfo=UTC),
                dt.datetime(2024, 1, 1, 9, tzinfo=UTC),
            ],
            pa.timestamp("us", "UTC"),
        ),
        "Odd Name": pa.array([1, 2, 3, 4, 5], pa.int16()),
    }
)


def ids(sql: str, table: pa.Table = TABLE) -> list[int]:
    return table.filter(to_arrow(bind(parse(sql), table.schema)))["id"].to_pylist()


def values(sql: str, table: pa.Table = TABLE) -> list:
    return evaluate(bind(parse(sql), table.schema), table).to_pylist()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("i > 0", [1, 5]),
        ("0 < i", [1, 5]),
        ("i = NULL", []),
        ("i != NULL", []),
        ("NOT (i = NULL)", []),
        ("i IS NULL", [3]),
        ("i IS NOT NULL", [1, 2, 4, 5]),
        ("i > 0 OR i IS NULL", [1, 3, 5]),
        # Kleene logic: NULL AND FALSE is FALSE, NULL OR TRUE is TRUE.
        ("NOT (i > 0 AND j > 1)", [2, 3, 4, 5]),
        ("NOT (i > 0 OR j > 1)", []),
        ("(i > 0 OR j > 1) IS NULL", [3, 4]),
        ("i IN (10, 3)", [1, 5]),
        ("i NOT IN (10, 3)", [2, 4]),
        ("i IN (10, NULL)", [1]),
        ("i NOT IN (10, NULL)", []),
        ("NOT (i IN (10, NULL))", []),
        ("(i IN (10, NULL)) IS NULL", [2, 3, 4, 5]),
        ("i BETWEEN 0 AND 3", [4, 5]),
        ("i NOT BETWEEN 0 AND 3", [1, 2]),
        ("b", [1, 4]),
        ("NOT b", [2, 5]),
        ("b = TRUE", [1, 4]),
        ("b IS TRUE", [1, 4]),
        ("b IS NOT TRUE", [2, 3, 5]),
        ("b IS FALSE", [2, 5]),
        ("b IS NOT FALSE", [1, 3, 4]),
        ("b AND NULL", []),
        ("b OR NULL", [1, 4]),
        ("NULL", []),
        ("TRUE", [1, 2, 3, 4, 5]),
        ("FALSE", []),
        ("1 = 1", [1, 2, 3, 4, 5]),
        ("f > 1", [1, 4, 5]),  # NaN is above every number
        ("f = 0", [3]),  # -0.0 = 0
        ("f != 2", [1, 3, 5]),  # NaN != 2
        ("f > 100", [5]),  # NaN > 100
        ("f < 100", [1, 3, 4]),  # NaN is not < 100
        ("f = CAST('NaN' AS DOUBLE)", [5]),  # NaN = NaN
        ("d > 1.5", [5]),
        ("d >= 1.5", [1, 5]),
        ("d = 0", [4]),
        ("d < -2", [2]),
        ("d > i", [2, 5]),
        ("i = f", []),
        ("j = f", []),
        ("d = f", [1]),
        ("s = 'it''s'", [2]),
        ("s = 'a\\b'", [4]),
        ("s = 'héllo 😀'", [5]),
        ("s > 'a'", [2, 4, 5]),
        ("s < 'a'", [1]),
        ("s LIKE 'F%'", [1]),
        ("s LIKE '%\\%'", [4]),  # backslash is an ordinary character
        ("s LIKE 'a\\_'", [4]),
        ("s LIKE '_t''s'", [2]),
        ("s NOT LIKE '%o%'", [1, 2, 4]),
        ("s ILIKE 'fr'", [1]),
        ("s LIKE '%😀'", [5]),
        ("s LIKE 'it_s' ESCAPE '!'", [2]),
        ("s LIKE 'F!R' ESCAPE '!'", [1]),
        ("s LIKE 'a\\b' ESCAPE '\\'", []),
        ("s LIKE 'a!%' ESCAPE '!'", []),
        ("s || 'x' = 'FRx'", [1]),
        ("lower(s) = 'fr'", [1]),
        ("upper(s) = 'HÉLLO 😀'", [5]),
        ("length(s) = 7", [5]),
        ("substring(s, 2, 2) = 't'''", [2]),
        ("coalesce(i, 99) = 99", [3]),
        ("abs(i) = 7", [2]),
        ("day = '2024-02-29'", [2]),
        ("day >= DATE '2024-01-01'", [1, 2]),
        ("day < TIMESTAMP '2024-01-01 00:00:01'", [1, 4]),
        ("ts > '2024-01-01 10:00:00'", [4, 5]),
        ("ts >= '2024-01-01 10:00'", [1, 4, 5]),
        ("ts < '2024-01-01'", []),
        ("ts >= DATE '2024-01-01' AND ts < DATE '2024-01-02'", [1, 3, 5]),
        ("tz > '2024-01-01 09:30'", [1, 2]),
        ("tz > '2024-01-01 11:30:00+02:00'", [1, 2]),  # 09:30 UTC
        ("tz > TIMESTAMPTZ '2024-01-01 11:00:00+00'", [2]),
        ("tz BETWEEN DATE '2024-01-01' AND DATE '2024-01-02'", [1, 2, 5]),
        ('"Odd Name" % 2 = 0', [2, 4]),
        ('t."odd name" = 1', [1]),
    ],
)
def test_filter(sql, expected):
    assert ids(sql) == expected


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("i + 1", [11, -6, None, 1, 4]),
        ("i - j", [7, -9, None, None, 3]),
        ("i * 2", [20, -14, None, 0, 6]),
        ("i / 4", [2.5, -1.75, None, 0.0, 0.75]),
        ("i / j", [10 / 3, -3.5, None, None, None]),  # division by zero -> NULL
        ("i // 3", [3, -2, None, 0, 1]),  # truncates toward zero
        ("i % 3", [1, -1, None, 0, 0]),  # sign of the dividend
        ("i // j", [3, -3, None, None, None]),
        ("i % j", [1, -1, None, None, None]),
        ("f / 0", [None, None, None, None, None]),
        ("-i", [-10, 7, None, 0, -3]),
        ("d + 1", [Decimal("2.50"), Decimal("-1.25"), None, Decimal("1.00"), Decimal("11.01")]),
        ("d * 2", [Decimal("3.00"), Decimal("-4.50"), None, Decimal("0.00"), Decimal("20.02")]),
        ("d / 2", [0.75, -1.125, None, 0.0, 5.005]),
        ("d % 1", [Decimal("0.50"), Decimal("-0.25"), None, Decimal("0.00"), Decimal("0.01")]),
        ("i + 0.5", [Decimal("10.5"), Decimal("-6.5"), None, Decimal("0.5"), Decimal("3.5")]),
        ("1", [1, 1, 1, 1, 1]),
        ("'x'", ["x"] * 5),
        ("NULL", [None] * 5),
        ("i > 0", [True, False, None, False, True]),
        ("coalesce(s, 'none')", ["FR", "it's", "none", "a\\b", "héllo 😀"]),
        ("CAST(i AS VARCHAR)", ["10", "-7", None, "0", "3"]),
        ("CAST(day AS VARCHAR)", ["2024-01-01", "2024-02-29", None, "2023-12-31", None]),
        ("substring(s, 3)", ["", "'s", None, "b", "llo 😀"]),
        ("length(s)", [2, 4, None, 3, 7]),
    ],
)
def test_evaluate(sql, expected):
    assert values(sql) == expected


def test_evaluate_types_and_lengths():
    result = evaluate(bind(parse("j + 1"), TABLE.schema), TABLE)
    assert isinstance(result, pa.ChunkedArray)
    assert result.type == pa.int32() and len(result) == TABLE.num_rows
    empty = TABLE.slice(0, 0)
    assert len(evaluate(bind(parse("1"), empty.schema), empty)) == 0
    no_columns = pa.table({"x": [1, 2, 3]}).select([])
    assert evaluate(bind(parse("2"), no_columns.schema), no_columns).to_pylist() == [2, 2, 2]


def test_overflow_is_an_error_not_a_wrap():
    table = pa.table({"x": pa.array([2**62, 1], pa.int64()), "y": pa.array([100, 1], pa.int8())})
    with pytest.raises(InvalidExpression, match="overflow"):
        evaluate(bind(parse("x * 4"), table.schema), table)
    with pytest.raises(InvalidExpression, match="overflow"):
        evaluate(bind(parse("y + 100"), table.schema), table)
    assert evaluate(bind(parse("y + 1000"), table.schema), table).to_pylist() == [1100, 1001]


def test_failing_cast_is_an_error():
    table = pa.table({"s": ["1", "x"]})
    with pytest.raises(InvalidExpression, match="evaluating"):
        evaluate(bind(parse("CAST(s AS INTEGER)"), table.schema), table)


def test_large_int_compared_with_float_rounds_like_sql():
    table = pa.table({"x": pa.array([2**53 + 1], pa.int64()), "f": [float(2**53)]})
    assert table.filter(to_arrow(bind(parse("x = f"), table.schema))).num_rows == 1


def test_float32_column_matches_decimal_text():
    table = pa.table({"f": pa.array([0.1, 0.2], pa.float32())})
    assert table.filter(to_arrow(bind(parse("f = 0.1"), table.schema))).num_rows == 1


def test_zoned_column_in_another_zone():
    table = pa.table(
        {
            "t": pa.array(
                [dt.datetime(2024, 7, 1, 8, tzinfo=UTC), dt.datetime(2024, 7, 1, 9, tzinfo=UTC)],
                pa.timestamp("ms", "Europe/Paris"),
            )
        }
    )
    # 10:00 wall time in Paris in July is 08:00 UTC.
    pred = bind(parse("t = '2024-07-01 10:00'"), table.schema)
    assert table.filter(to_arrow(pred)).num_rows == 1


def test_large_string_and_binary_columns():
    table = pa.table(
        {"s": pa.array(["a", "b"], pa.large_string()), "x": pa.array([b"a", b"\xff"], pa.binary())}
    )
    assert table.filter(to_arrow(bind(parse("s = 'b'"), table.schema))).num_rows == 1
    assert table.filter(to_arrow(bind(parse("s LIKE 'a%'"), table.schema))).num_rows == 1
    assert table.filter(to_arrow(bind(parse("x = 'a'"), table.schema))).num_rows == 1


def test_to_arrow_rejects_unbound_expressions():
    with pytest.raises(ValueError, match="bind"):
        to_arrow(parse("x > 1"))
    with pytest.raises(ValueError, match="bind"):
        evaluate(parse("x > 1"), TABLE)


def test_to_arrow_gives_a_compute_expression():
    expr = to_arrow(bind(parse("i > 1 AND s IN ('a', 'b')"), TABLE.schema))
    assert isinstance(expr, pc.Expression)
    assert isinstance(to_arrow(bind(parse("NULL"), TABLE.schema)), pc.Expression)


@pytest.mark.parametrize("float_type", [pa.float64(), pa.float32()])
def test_in_finds_every_nan_and_both_zeros(float_type: pa.DataType) -> None:
    """NaN equals NaN whatever its sign bit or payload (``-x`` of a NaN, ``inf - inf``
    set the sign on x86), and -0.0 equals 0.0, in IN as in ``=``."""
    width, code = (8, "<d") if float_type == pa.float64() else (4, "<f")
    negative_nan = struct.unpack(code, struct.pack(code, float("nan"))[: width - 1] + b"\xff")[0]
    table = pa.table(
        {
            "id": [1, 2, 3, 4, 5],
            "f": pa.array([negative_nan, float("nan"), -0.0, 0.0, 1.0], float_type),
        }
    )
    assert ids("f = CAST('NaN' AS DOUBLE)", table) == [1, 2]
    assert ids("f IN (CAST('NaN' AS DOUBLE))", table) == [1, 2]
    assert ids("f IN (1.0, CAST('NaN' AS DOUBLE))", table) == [1, 2, 5]
    assert ids("f NOT IN (CAST('NaN' AS DOUBLE))", table) == [3, 4, 5]
    assert ids("f IN (0.0)", table) == [3, 4]
    assert ids("f IN (-0.0)", table) == [3, 4]


def test_a_double_literal_meets_a_real_column_in_double_unless_exact() -> None:
    """As DuckDB: ``f = 0.1`` (a decimal) is 0.1f, ``f = 0.1e0`` (a DOUBLE) is not;
    a DOUBLE that REAL holds exactly (0.5e0, NaN) still matches."""
    table = pa.table({"id": [1, 2, 3], "f": pa.array([0.1, 3.0e38, 0.5], pa.float32())})
    assert ids("f = 0.1", table) == [1]
    assert ids("f = 0.1e0", table) == []
    assert ids("f = 3e38", table) == []
    assert ids("f > 3e38", table) == [2]
    assert ids("f = 0.5e0", table) == [3]
    assert ids("f IN (0.1e0, 0.5e0)", table) == [3]
    assert ids("f < CAST('NaN' AS DOUBLE)", table) == [1, 2, 3]
