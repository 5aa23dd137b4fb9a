"""Bound expression to a ``pyarrow.compute.Expression``, and evaluation over a table.

The translation is mechanical because binding already made operand types equal.
SQL semantics kept here:

* three-valued logic: ``AND``/``OR`` are Kleene (``and_kleene``/``or_kleene``), every
  comparison or arithmetic with a NULL operand is NULL, and a filter keeps only
  rows where the predicate is TRUE;
* ``IN`` with a NULL operand is NULL, and a NULL in the list turns "not found" into NULL;
* ``+ - *`` and unary minus use Arrow's *checked* kernels: overflow is an error, as
  in DuckDB, never a silent wrap-around;
* ``/``, ``//`` and ``%`` by zero give NULL (the divisor is replaced by NULL first);
* floating-point NaN equals NaN and sorts above every other value, ``+inf`` included
  (as in DuckDB, Spark and PostgreSQL; Arrow's kernels follow IEEE, so comparisons of
  floats test for NaN first), and ``-0.0 = 0.0``;
* user-written casts round as DuckDB does (:func:`cast_values`) and fail on overflow;
* run-time failures (overflow, a failing cast) become
  :class:`~mere.errors.InvalidExpression` naming the expression (:func:`evaluate`,
  :func:`filter_table`).
"""

from __future__ import annotations

import math
import re
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from mere.errors import InvalidExpression
from mere.expr import ast
from mere.expr.ast import to_sql

_COMPARE_KERNELS = {
    "=": "equal",
    "!=": "not_equal",
    "<": "less",
    "<=": "less_equal",
    ">": "greater",
    ">=": "greater_equal",
}
_ARITH_KERNELS = {
    "+": "add_checked",
    "-": "subtract_checked",
    "*": "multiply_checked",
    "/": "divide_checked",
    "//": "divide_checked",
    "%": "remainder_checked",
}
_DIVISIONS = ("/", "//", "%")
#: Decimal digits of the largest value of an integer type, by bit width.
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
_UNARY_KERNELS = {
    "lower": "utf8_lower",
    "upper": "utf8_upper",
    "abs": "abs_checked",
}
#: Functions of a date or timestamp (computed in the column's time zone, if it has one).
_DATE_FUNCTIONS = ("year", "quarter", "month", "day", "hour", "minute", "second", "date_trunc")
#: The outcome of ``x op y`` when at least one side is NaN, given which sides are.
_NAN_OUTCOME = {
    "=": lambda a, b: pc.and_kleene(a, b),
    "!=": lambda a, b: pc.xor(a, b),
    "<": lambda a, b: pc.and_kleene(pc.invert(a), b),
    "<=": lambda a, b: b,
    ">": lambda a, b: pc.and_kleene(a, pc.invert(b)),
    ">=": lambda a, b: a,
}
_TRIM = {"trim": "utf8_trim", "ltrim": "utf8_ltrim", "rtrim": "utf8_rtrim"}
#: What DuckDB's trim removes by default: Unicode's space separators (category Zs:
#: the space, no-break spaces, the em and ideographic spaces, ...), not tabs or newlines.
_SPACES = " \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u202f\u205f\u3000"
_STRING_TESTS = {
    "starts_with": "starts_with",
    "ends_with": "ends_with",
    "contains": "match_substring",
}


def arith_result_type(op: str, operand_type: pa.DataType) -> pa.DataType:
    """The type Arrow's kernel for ``op`` yields on two operands of ``operand_type``.

    Raises the Arrow error when the kernel does not exist or the type overflows
    (a decimal product beyond 38 digits).
    """
    empty = pa.array([], type=operand_type)
    return pc.call_function(_ARITH_KERNELS[op], [empty, empty]).type


def unary_result_type(kernel: str, operand_type: pa.DataType) -> pa.DataType:
    """The type Arrow's ``kernel`` yields on one operand of ``operand_type``."""
    return pc.call_function(kernel, [pa.array([], type=operand_type)]).type


def to_arrow(expr: ast.Expr) -> pc.Expression:
    """The pyarrow compute expression for a bound ``expr``.

    A bare ``NULL`` becomes a boolean NULL, so the result is always usable as a filter
    when :func:`~mere.expr.is_boolean` holds.

    Raises:
        ValueError: ``expr`` is not bound.
    """
    _require_bound(expr)
    if isinstance(expr, ast.Literal) and expr.value is None:
        return pc.scalar(pa.scalar(None, type=pa.bool_()))
    return _convert(expr)


def evaluate(expr: ast.Expr, table: pa.Table) -> pa.ChunkedArray:
    """Evaluate a bound value or boolean ``expr`` over every row of ``table``.

    Constants are broadcast to the table's length. Errors at run time (overflow,
    a failing cast) become InvalidExpression.
    """
    _require_bound(expr)
    arrow_expr = _convert(expr)
    source = table
    if table.num_columns == 0:
        source = pa.table({"_": pa.nulls(table.num_rows)})
    try:
        result = ds.dataset(source).to_table(columns={"value": arrow_expr})
    except pa.ArrowException as e:
        raise evaluation_error(expr, e) from None
    return result.column("value")


def filter_table(predicate: ast.Expr, table: pa.Table, *, text: str | None = None) -> pa.Table:
    """The rows of ``table`` where the bound ``predicate`` is TRUE (FALSE and NULL drop a row).

    Errors at run time (overflow, a failing cast) become InvalidExpression naming
    ``text`` (the predicate as the user wrote it) or else the predicate's SQL. A table
    without columns keeps its row count.
    """
    _require_bound(predicate)
    try:
        if table.num_columns == 0:
            source = pa.table({"_": pa.nulls(table.num_rows)})
            return source.filter(to_arrow(predicate)).select([])
        return table.filter(to_arrow(predicate))
    except pa.ArrowException as e:
        raise evaluation_error(predicate, e, text) from None


_TRUNCATED = re.compile(r"Float value (\S+) was truncated converting to (\w+)")
_NOT_IN_RANGE = re.compile(r"Integer value (\S+) not in range: (\S+) to (\S+)")


def evaluation_error(
    expr: ast.Expr, error: Exception, text: str | None = None
) -> InvalidExpression:
    """The InvalidExpression for a run-time failure of ``expr`` (overflow, a failing cast)."""
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    truncated, not_in_range = _TRUNCATED.search(detail), _NOT_IN_RANGE.search(detail)
    help = "check the data for values the expression cannot convert"
    if detail == "overflow":
        detail = "integer overflow: a result does not fit in its type"
        help = (
            "integer arithmetic fails on overflow, as in DuckDB: CAST an operand to "
            "BIGINT, DECIMAL or DOUBLE first"
        )
    elif truncated or not_in_range:
        if truncated:
            value = truncated.group(1)
            value = value if len(value) <= 24 else f"{float(value):.6g}"
            detail = f"the value {value} is out of range for {truncated.group(2).upper()}"
        else:
            assert not_in_range is not None
            low, high = not_in_range.group(2), not_in_range.group(3)
            detail = f"the value {not_in_range.group(1)} is out of range ({low} to {high})"
        help = "casts fail on values out of the target type's range (NaN and infinity too)"
    elif len(detail) > 200:
        detail = detail[:197] + "..."
    return InvalidExpression(
        f"evaluating {text if text is not None else to_sql(expr)!r} failed: {detail}", help=help
    )


def _require_bound(expr: ast.Expr) -> None:
    for node in expr.walk():
        if node.type is None:
            raise ValueError(f"expression {to_sql(expr)!r} is not bound; call bind() first")


def _scalar(value: object, type_: pa.DataType) -> pc.Expression:
    return pc.scalar(pa.scalar(value, type=type_))


def _convert(expr: ast.Expr) -> pc.Expression:
    if isinstance(expr, ast.Column):
        return pc.field(expr.name)
    if isinstance(expr, ast.Literal):
        assert expr.type is not None
        return _scalar(expr.value, expr.type)
    if isinstance(expr, ast.Compare):
        return _compare(expr.op, expr.left, expr.right)
    if isinstance(expr, ast.Distinct):
        return _distinct(expr)
    if isinstance(expr, ast.And):
        return reduce(pc.and_kleene, (_convert(i) for i in expr.items))
    if isinstance(expr, ast.Or):
        return reduce(pc.or_kleene, (_convert(i) for i in expr.items))
    if isinstance(expr, ast.Not):
        return pc.invert(_convert(expr.operand))
    if isinstance(expr, ast.In):
        return _in(expr)
    if isinstance(expr, ast.IsNull):
        x = _convert(expr.operand)
        return pc.is_valid(x) if expr.negated else pc.is_null(x)
    if isinstance(expr, ast.IsBool):
        x = _convert(expr.operand)
        truth = pc.coalesce(x if expr.value else pc.invert(x), _scalar(False, pa.bool_()))
        return pc.invert(truth) if expr.negated else truth
    if isinstance(expr, ast.Like):
        pattern = arrow_like_pattern(expr.pattern, expr.escape)
        matched = pc.match_like(
            _convert(expr.operand), pattern=pattern, ignore_case=expr.case_insensitive
        )
        return pc.invert(matched) if expr.negated else matched
    if isinstance(expr, ast.Arith):
        return _arith(expr)
    if isinstance(expr, ast.Neg):
        return pc.negate_checked(_convert(expr.operand))
    if isinstance(expr, ast.Cast):
        return _cast(expr)
    if isinstance(expr, ast.Func):
        return _func(expr)
    raise TypeError(f"not an expression node: {expr!r}")


def _compare(op: str, left: ast.Expr, right: ast.Expr) -> pc.Expression:
    """``left op right`` (one type after binding), with NaN the greatest float, equal to itself."""
    a, b = _convert(left), _convert(right)
    plain = getattr(pc, _COMPARE_KERNELS[op])(a, b)
    if left.type is None or not pa.types.is_floating(left.type):
        return plain
    a_nan, b_nan = _nan_test(left, a), _nan_test(right, b)
    # Against a number that is not NaN, IEEE already answers = != and "the other side
    # is smaller" right: NaN = 5 and NaN < 5 are FALSE, NaN != 5 is TRUE.
    if b_nan is None and op in ("=", "!=", "<", "<="):
        return plain
    if a_nan is None and op in ("=", "!=", ">", ">="):
        return plain
    false = _scalar(False, pa.bool_())
    a_nan = false if a_nan is None else a_nan
    b_nan = false if b_nan is None else b_nan
    # ``plain`` is NULL exactly when a side is NULL; otherwise NaN decides if present.
    nan_decides = pc.and_kleene(pc.is_valid(plain), pc.or_kleene(a_nan, b_nan))
    return pc.if_else(nan_decides, _NAN_OUTCOME[op](a_nan, b_nan), plain)


def _nan_test(node: ast.Expr, converted: pc.Expression) -> pc.Expression | None:
    """``is_nan(node)``, or None when ``node`` is a literal that is not NaN."""
    if isinstance(node, ast.Literal):
        if isinstance(node.value, float) and math.isnan(node.value):
            return _scalar(True, pa.bool_())
        return None
    return pc.is_nan(converted)


def _distinct(expr: ast.Distinct) -> pc.Expression:
    """``IS [NOT] DISTINCT FROM``: NULLs are equal to each other, never NULL itself."""
    a, b = _convert(expr.left), _convert(expr.right)
    a_null, b_null = pc.is_null(a), pc.is_null(b)
    equal = pc.if_else(
        pc.or_kleene(a_null, b_null),
        pc.and_kleene(a_null, b_null),
        _compare("=", expr.left, expr.right),
    )
    return equal if expr.negated else pc.invert(equal)


def cast_values(values: Any, src: pa.DataType, dst: pa.DataType, safe: bool = True) -> Any:
    """``values`` (a compute Expression or an Array) cast from ``src`` to ``dst``.

    ``safe`` casts (every user-written CAST) follow DuckDB: floating-point to integer
    rounds half to even; decimal to integer, decimal to a smaller scale,
    floating-point to decimal and a timestamp to a coarser unit round half away from
    zero; an integer or decimal becomes the nearest float; a timestamp or time becomes DuckDB's
    text (no trailing zeros in the fraction, a TIMESTAMPTZ in UTC as ``+00``);
    values out of the target's range (and NaN or infinity to an integer) fail.
    Unsafe casts are binding's deliberate roundings (an integer compared with a
    float becomes the nearest float).
    """
    t = pa.types
    if t.is_float16(dst) and not t.is_floating(src) and not t.is_null(src):
        # Arrow casts few types into float16: through DOUBLE, as a value becomes a REAL
        # (and a value beyond float16's range is refused, not infinite).
        double = cast_values(values, src, pa.float64(), safe)
        return cast_values(double, pa.float64(), dst, safe)
    if t.is_integer(src) and t.is_floating(dst):
        return values.cast(dst, safe=False)  # the nearest float, past 2^53 too
    if t.is_decimal(src) and dst in (pa.float32(), pa.float64()):
        # Arrow's own cast scales in floating point (DECIMAL 1.005 -> 1.0050000000000001);
        # through the exact text it is the nearest float, as in DuckDB.
        return values.cast(pa.string()).cast(dst, safe=False)
    if (t.is_timestamp(src) or t.is_time(src)) and _is_string(dst):
        return _temporal_text(values, src).cast(dst)
    if safe and t.is_timestamp(src) and t.is_timestamp(dst) and _UNITS[dst.unit] < _UNITS[src.unit]:
        values = _round_to_unit(values, src, dst.unit)
    elif (
        safe and _is_string(src) and t.is_timestamp(dst) and dst.unit in ("s", "ms") and not dst.tz
    ):
        fine = pa.timestamp("us", dst.tz)  # text finer than the unit rounds, as in DuckDB
        values = _round_to_unit(values.cast(fine), fine, dst.unit)
    elif safe and t.is_floating(src) and t.is_floating(dst) and dst.bit_width < src.bit_width:
        if isinstance(values, pa.Array | pa.ChunkedArray):  # evaluated: check the range
            narrow = values.cast(dst)
            if pc.any(pc.and_(pc.is_finite(values), pc.invert(pc.is_finite(narrow)))).as_py():
                raise pa.ArrowInvalid(f"a value is out of range for {dst} (beyond its largest)")
            return narrow
    if safe and t.is_floating(src) and t.is_integer(dst):
        values = pc.round(values, round_mode="half_to_even")
    elif safe and t.is_decimal(src) and t.is_integer(dst):
        values = pc.round(_wider_decimal(values, src), round_mode="half_towards_infinity")
    elif safe and t.is_decimal(src) and t.is_decimal(dst) and dst.scale < src.scale:
        values = pc.round(
            _wider_decimal(values, src), ndigits=dst.scale, round_mode="half_towards_infinity"
        )
    elif safe and t.is_floating(src) and t.is_decimal(dst):
        values = pc.round(values, ndigits=dst.scale, round_mode="half_towards_infinity")
    elif t.is_integer(src) and t.is_decimal(dst):
        # Arrow refuses integer -> DECIMAL(p, s) unless p - s holds every value of the
        # integer type; SQL checks the actual values. Go through a wide decimal first.
        wide = pa.decimal128(min(38, _INT_DIGITS[src.bit_width] + dst.scale), dst.scale)
        if wide.precision - wide.scale >= _INT_DIGITS[src.bit_width] and wide != dst:
            values = values.cast(wide, safe=safe)
    elif (
        safe and _is_string(src) and (t.is_integer(dst) or t.is_floating(dst) or t.is_decimal(dst))
    ):
        values = pc.utf8_trim_whitespace(values)  # DuckDB reads ' 12 ' as 12
    return values.cast(dst, safe=safe)


#: Ticks per second of each timestamp unit.
_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _round_to_unit(values: Any, src: pa.DataType, unit: str) -> Any:
    """Timestamps of ``src`` rounded half away from zero to the coarser ``unit`` (as DuckDB)."""
    ticks = values.cast(pa.int64())
    per = _UNITS[src.unit] // _UNITS[unit]
    half = pc.multiply(pc.sign(ticks).cast(pa.int64()), pa.scalar(per // 2, pa.int64()))
    rounded = pc.divide(pc.add_checked(ticks, half), pa.scalar(per, pa.int64()))  # truncates
    return rounded.cast(pa.timestamp(unit, src.tz))


def _temporal_text(values: Any, src: pa.DataType) -> Any:
    """A timestamp or time as DuckDB writes it: ``2024-01-01 12:00:00.9``, ``...+00`` for UTC."""
    if pa.types.is_timestamp(src) and src.tz is not None:
        values = values.cast(pa.timestamp(src.unit, "UTC"))  # written as ...Z
    text = pc.replace_substring_regex(
        values.cast(pa.string()), pattern=r"(\.\d*?)0+(Z?)$", replacement=r"\1\2"
    )
    text = pc.replace_substring_regex(text, pattern=r"\.(Z?)$", replacement=r"\1")
    return pc.replace_substring_regex(text, pattern=r"Z$", replacement="+00")


def _wider_decimal(values: Any, type_: pa.DataType) -> Any:
    """``values`` as a decimal one digit wider, so rounding up cannot overflow."""
    if type_.precision >= 38:
        return values
    return values.cast(pa.decimal128(type_.precision + 1, type_.scale))


def _is_string(type_: pa.DataType) -> bool:
    t = pa.types
    return bool(t.is_string(type_) or t.is_large_string(type_) or t.is_string_view(type_))


def _cast(expr: ast.Cast) -> pc.Expression:
    assert expr.operand.type is not None
    return cast_values(_convert(expr.operand), expr.operand.type, expr.to, expr.safe)


def _in(expr: ast.In) -> pc.Expression:
    assert expr.operand.type is not None
    x = _convert(expr.operand)
    present = [v.value for v in expr.values if v.value is not None]
    if pa.types.is_floating(expr.operand.type):
        # is_in hashes bits: -0.0 would miss 0.0 and a NaN with its sign bit set (-x
        # of a NaN, inf - inf) the NaN of the list. One zero and one NaN on both sides.
        kind = expr.operand.type
        x = pc.if_else(pc.is_nan(x), _scalar(math.nan, kind), pc.add(x, _scalar(0.0, kind)))
        present = [math.nan if v != v else v + 0.0 for v in present]
    value_set = pa.array(present, type=expr.operand.type)
    null = _scalar(None, pa.bool_())
    found = pc.if_else(pc.is_null(x), null, pc.is_in(x, value_set=value_set, skip_nulls=True))
    if len(present) < len(expr.values):
        found = pc.or_kleene(found, null)  # not found + NULL in the list -> NULL
    return pc.invert(found) if expr.negated else found


def _arith(expr: ast.Arith) -> pc.Expression:
    left, right = _convert(expr.left), _convert(expr.right)
    if expr.op == "||":
        return pc.binary_join_element_wise(left, right, _scalar("", expr.type or pa.string()))
    if expr.op in _DIVISIONS:
        right = _null_if_zero(expr.right, right)
    return getattr(pc, _ARITH_KERNELS[expr.op])(left, right)


def _null_if_zero(node: ast.Expr, converted: pc.Expression) -> pc.Expression:
    """The divisor with zeros replaced by NULL, so division by zero yields NULL."""
    assert node.type is not None
    if isinstance(node, ast.Literal):
        return _scalar(None, node.type) if node.value == 0 else converted
    zero = pa.scalar(0, type=pa.int8()).cast(node.type)
    return pc.if_else(pc.equal(converted, pc.scalar(zero)), _scalar(None, node.type), converted)


def _func(expr: ast.Func) -> pc.Expression:
    args = [_convert(a) for a in expr.args]
    if expr.name in _DATE_FUNCTIONS:
        return _date_function(expr, args)
    if expr.name in _UNARY_KERNELS:
        return getattr(pc, _UNARY_KERNELS[expr.name])(args[0])
    if expr.name in ("isnan", "isinf", "isfinite"):
        operand = args[0]
        if expr.args[0].type is not None and not pa.types.is_floating(expr.args[0].type):
            operand = operand.cast(pa.float64())  # DuckDB: a number is never NaN or infinite
        return getattr(pc, f"is_{expr.name[2:]}")(operand)
    if expr.name in _TRIM:
        chars = _text_argument(expr, 1, _SPACES)
        return getattr(pc, _TRIM[expr.name])(args[0], characters=chars)
    if expr.name in _STRING_TESTS:
        pattern = _text_argument(expr, 1, "")
        return getattr(pc, _STRING_TESTS[expr.name])(args[0], pattern=pattern)
    if expr.name == "length":
        return pc.utf8_length(args[0]).cast(pa.int64())
    if expr.name == "coalesce":
        return pc.coalesce(*args)
    if expr.name == "substring":
        bounds = [a.value for a in expr.args[1:] if isinstance(a, ast.Literal)]
        start = bounds[0] - 1
        stop = start + bounds[1] if len(bounds) > 1 else None
        return pc.utf8_slice_codeunits(args[0], start=start, stop=stop)
    raise TypeError(f"unknown function {expr.name!r}")


def _text_argument(expr: ast.Func, index: int, default: str) -> str:
    """The string literal argument ``index`` of ``expr`` (binding made it one)."""
    if index >= len(expr.args):
        return default
    arg = expr.args[index]
    assert isinstance(arg, ast.Literal) and isinstance(arg.value, str)
    return arg.value


def _date_function(expr: ast.Func, args: list[pc.Expression]) -> pc.Expression:
    """year() ... second() and date_trunc(): dates count as their midnight (as in DuckDB)."""
    node, value = expr.args[-1], args[-1]
    assert node.type is not None and expr.type is not None
    if pa.types.is_date(node.type):
        value = value.cast(pa.timestamp("s"))
    if expr.name == "date_trunc":
        unit = expr.args[0].value if isinstance(expr.args[0], ast.Literal) else None
        floored = pc.floor_temporal(value, multiple=1, unit=unit, week_starts_monday=True)
        return floored.cast(expr.type)
    return getattr(pc, expr.name)(value).cast(expr.type)


def arrow_like_pattern(pattern: str, escape: str | None) -> str:
    """A SQL LIKE pattern rewritten for Arrow's ``match_like`` (whose escape is backslash)."""
    out: list[str] = []
    for char, wildcard in ast.like_tokens(pattern, escape):
        if wildcard:
            out.append(char)
        elif char in "%_\\":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)
