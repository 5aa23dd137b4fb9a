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
* floating-point NaN follows IEEE comparisons (NaN = NaN is false), as Arrow does.
"""

from __future__ import annotations

from functools import reduce

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
_UNARY_KERNELS = {"lower": "utf8_lower", "upper": "utf8_upper", "abs": "abs_checked"}


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
        raise InvalidExpression(
            f"evaluating {to_sql(expr)!r} failed: {str(e).strip().splitlines()[0]}",
            help="check the data for overflow or values the expression cannot convert",
        ) from None
    return result.column("value")


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
        kernel = getattr(pc, _COMPARE_KERNELS[expr.op])
        return kernel(_convert(expr.left), _convert(expr.right))
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


def _cast(expr: ast.Cast) -> pc.Expression:
    operand = _convert(expr.operand)
    src, dst = expr.operand.type, expr.to
    if src is not None and pa.types.is_integer(src) and pa.types.is_decimal(dst):
        # Arrow refuses integer -> DECIMAL(p, s) unless p - s holds every value of the
        # integer type; SQL checks the actual values. Go through a wide decimal first.
        wide = pa.decimal128(min(38, _INT_DIGITS[src.bit_width] + dst.scale), dst.scale)
        if wide.precision - wide.scale >= _INT_DIGITS[src.bit_width] and wide != dst:
            operand = operand.cast(wide, safe=expr.safe)
    return operand.cast(dst, safe=expr.safe)


def _in(expr: ast.In) -> pc.Expression:
    assert expr.operand.type is not None
    x = _convert(expr.operand)
    present = [v.value for v in expr.values if v.value is not None]
    if pa.types.is_floating(expr.operand.type):
        # is_in hashes bits, so -0.0 would miss 0.0; adding +0.0 turns -0.0 into 0.0.
        x = pc.add(x, _scalar(0.0, expr.operand.type))
        present = [v + 0.0 for v in present]
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
    if expr.name in _UNARY_KERNELS:
        return getattr(pc, _UNARY_KERNELS[expr.name])(args[0])
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
