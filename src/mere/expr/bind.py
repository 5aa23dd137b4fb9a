"""Binding: resolve columns against a schema and give every node an Arrow type.

After :func:`bind`, every node carries its type, literals have the type of what
they are compared with, and explicit :class:`~mere.expr.ast.Cast` nodes make both
sides of every comparison and arithmetic operator the same type. Evaluation
(:mod:`mere.expr.arrow`) and file skipping (:mod:`mere.expr.skipping`) therefore
need no schema and agree on exactly which values are compared.

Rules:

* **Names.** A column name matches a field of the same name; otherwise a unique
  case-insensitive match (quoted or not); several case-insensitive matches are an
  error, as is an unknown name (the message lists the available columns). A
  qualifier (``t.col``) is kept but ignored.
* **Literals adapt to columns.** ``10`` compared with a ``float`` column becomes
  ``10.0``, with an ``int32`` column an ``int32`` (when it fits), with a decimal
  column a decimal of that scale (when exact). A string literal compared with a
  date, timestamp or time column is parsed as one (``'2024-01-01'``,
  ``'2024-01-01 10:00:00'``); a naive text compared with a time-zone-aware
  column means that wall time in the column's zone. Strings never turn into
  numbers or booleans: ``int_col = '5'`` is an error.
* **One type per expression**, as in DuckDB: an IN list, a BETWEEN, coalesce and
  an arithmetic operator take the common type of all their operands at once, each
  typed literal with its own type (``r IN (0.1, 2.0e0)`` is DOUBLE for a REAL
  ``r``); only integer literals, strings and NULL adapt to the others.
* **Otherwise the narrower side is widened**: integers to a wider integer, to a
  decimal or to ``float64`` (REAL with an integer or decimal stays REAL); decimals
  to a decimal of enough precision (or ``float64`` beyond 38 digits); dates to
  timestamps; timestamp units to the finer.
  Timestamps with and without a time zone do not compare.
* **Arithmetic** follows DuckDB: ``+ - *`` keep the (widened) operand type and
  fail on overflow; ``/`` is true division in ``float64``; ``//`` is integer
  division truncating toward zero (integers only); ``%`` has the sign of the
  dividend. Division or remainder by zero gives NULL (not an error, not infinity).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import re
import struct
import zoneinfo
from collections.abc import Sequence
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere.errors import InvalidExpression
from mere.expr import ast
from mere.expr.arrow import arith_result_type, cast_values, unary_result_type
from mere.expr.ast import to_sql, type_sql

#: What the expression language supports; used as the ``help`` of InvalidExpression.
SUPPORTED_SQL = (
    "supported: columns (plain, \"quoted\" or table.column), literals (numbers, 'strings', "
    "TRUE/FALSE, NULL, DATE '...', TIMESTAMP '...', TIMESTAMPTZ '...'), comparisons "
    "(= == != <> < <= > >=), AND/OR/NOT, [NOT] IN (...), [NOT] BETWEEN, IS [NOT] NULL, "
    "IS [NOT] TRUE/FALSE, IS [NOT] DISTINCT FROM, [NOT] LIKE/ILIKE [ESCAPE 'c'], "
    "+ - * / // % ||, unary minus, CAST(x AS type), EXTRACT(part FROM x), and the functions "
    + ", ".join(ast.FUNCTIONS)
    + " (see docs/filters.md)"
)

_COMPARE_HELP = (
    "numbers compare with numbers, strings with strings, booleans with booleans, and "
    "dates/timestamps with each other or with 'YYYY-MM-DD[ HH:MM:SS[+HH:MM]]' strings; "
    "use CAST(x AS type) to convert"
)

_INT_BITS = {
    pa.int8(): 8,
    pa.int16(): 16,
    pa.int32(): 32,
    pa.int64(): 64,
    pa.uint8(): 8,
    pa.uint16(): 16,
    pa.uint32(): 32,
    pa.uint64(): 64,
}
_SIGNED = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}
#: Decimal digits needed to hold every value of an integer type.
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
_UNIT_ORDER = {"s": 0, "ms": 1, "us": 2, "ns": 3}
_OFFSET = re.compile(r"([+-])(\d{2}):?(\d{2})\Z")
_FRACTION = re.compile(r"[.,](\d+)")
_BLOB_ESCAPE = re.compile(r"\\x([0-9A-Fa-f]{2})")
_BLOB_HELP = "compare the BLOB with a BLOB literal instead: bn = 'a\\x00b'::BLOB"


# --- type categories --------------------------------------------------------------------


def category(type_: pa.DataType) -> str:
    """A coarse family used to decide which values may meet in one operator."""
    if pat.is_null(type_):
        return "null"
    if pat.is_integer(type_):
        return "int"
    if pat.is_floating(type_):
        return "float"
    if pat.is_decimal(type_):
        return "decimal"
    if pat.is_string(type_) or pat.is_large_string(type_) or pat.is_string_view(type_):
        return "string"
    if (
        pat.is_binary(type_)
        or pat.is_large_binary(type_)
        or pat.is_binary_view(type_)
        or pat.is_fixed_size_binary(type_)
    ):
        return "binary"
    if pat.is_boolean(type_):
        return "bool"
    if pat.is_date(type_):
        return "date"
    if pat.is_timestamp(type_):
        return "timestamp"
    if pat.is_time(type_):
        return "time"
    return "other"


#: Smallest and largest argument counts of each function.
_ARITY = {
    "abs": (1, 1),
    "coalesce": (1, 10_000),
    "contains": (2, 2),
    "date_trunc": (2, 2),
    "day": (1, 1),
    "ends_with": (2, 2),
    "hour": (1, 1),
    "isfinite": (1, 1),
    "isinf": (1, 1),
    "isnan": (1, 1),
    "length": (1, 1),
    "lower": (1, 1),
    "ltrim": (1, 2),
    "minute": (1, 1),
    "month": (1, 1),
    "quarter": (1, 1),
    "rtrim": (1, 2),
    "second": (1, 1),
    "starts_with": (2, 2),
    "substring": (2, 3),
    "trim": (1, 2),
    "upper": (1, 1),
    "year": (1, 1),
}
_DATE_PARTS = ("year", "quarter", "month", "day", "hour", "minute", "second")
_FLOAT_TESTS = ("isnan", "isinf", "isfinite")
_STRING_TESTS = ("starts_with", "ends_with", "contains")
_TRIMS = ("trim", "ltrim", "rtrim")
_NUMERIC = ("int", "float", "decimal")
_ORDERED = (*_NUMERIC, "string", "binary", "bool", "date", "timestamp", "time", "null")


def natural_int_type(value: int) -> pa.DataType:
    """``int64`` when ``value`` fits, else ``decimal128(38, 0)``; OverflowError beyond that."""
    if -(2**63) <= value < 2**63:
        return pa.int64()
    if abs(value) < 10**38:
        return pa.decimal128(38, 0)
    raise OverflowError(value)


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both ``a`` and ``b`` widen to for comparison or arithmetic, or None."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca == "null":
        return b
    if cb == "null":
        return a
    if ca in _NUMERIC and cb in _NUMERIC:
        return _common_numeric(a, b, ca, cb)
    if ca == cb == "string":
        return pa.large_string() if pa.large_string() in (a, b) else pa.string()
    if ca == cb == "binary":
        return pa.large_binary() if pa.large_binary() in (a, b) else pa.binary()
    if ca == cb == "date":
        return pa.date32()
    if {ca, cb} == {"date", "timestamp"}:
        return a if ca == "timestamp" else b
    if ca == cb == "timestamp":
        if (a.tz is None) != (b.tz is None):
            return None
        unit = max(a.unit, b.unit, key=_UNIT_ORDER.__getitem__)
        return pa.timestamp(unit, a.tz)
    if ca == cb == "time":
        return max(a, b, key=lambda t: _UNIT_ORDER[t.unit])  # the finer unit
    return None


def _common_numeric(a: pa.DataType, b: pa.DataType, ca: str, cb: str) -> pa.DataType:
    if ca == cb == "int":
        return _common_int(a, b)
    if "float" in (ca, cb):
        # As in DuckDB: REAL with an integer or a decimal is REAL, with a DOUBLE DOUBLE.
        return pa.float64() if pa.float64() in (a, b) else pa.float32()
    # decimal with decimal or integer
    da = a if ca == "decimal" else _int_as_decimal(a)
    db = b if cb == "decimal" else _int_as_decimal(b)
    scale = max(da.scale, db.scale)
    digits = max(da.precision - da.scale, db.precision - db.scale)
    if digits + scale > 38:
        return pa.float64()
    return pa.decimal128(digits + scale, scale)


def _common_int(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    sa, sb = pat.is_signed_integer(a), pat.is_signed_integer(b)
    wa, wb = _INT_BITS[a], _INT_BITS[b]
    if sa == sb:
        return a if wa >= wb else b
    signed_bits, unsigned_bits = (wa, wb) if sa else (wb, wa)
    if signed_bits > unsigned_bits:
        return _SIGNED[signed_bits]
    if unsigned_bits < 64:
        return _SIGNED[unsigned_bits * 2]
    return pa.decimal128(20, 0)


def _int_as_decimal(type_: pa.DataType) -> pa.DataType:
    bits = _INT_BITS[type_]
    digits = _INT_DIGITS[bits] + (1 if bits == 64 and pat.is_unsigned_integer(type_) else 0)
    return pa.decimal128(digits, 0)


# --- literal values ---------------------------------------------------------------------


def make_literal(value: Any, type_: pa.DataType) -> ast.Literal:
    """A literal of ``type_`` whose value is normalised through pyarrow (ValueError if invalid)."""
    if value is None:
        return ast.Literal(None, type_)
    try:
        scalar = pa.scalar(value, type=type_)
    except (pa.ArrowException, OverflowError, TypeError) as e:
        raise ValueError(str(e)) from None
    return ast.Literal(scalar.as_py(), type_)


def _tzinfo(tz: str) -> dt.tzinfo:
    match = _OFFSET.match(tz)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        delta = dt.timedelta(hours=int(match.group(2)), minutes=int(match.group(3)))
        return dt.timezone(sign * delta)
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}") from None


def parse_timestamp(text: str) -> dt.datetime:
    """ISO text (``YYYY-MM-DD[ HH:MM[:SS[.ffffff]]][Z|+HH[:MM]]``) as a datetime."""
    for frac in _FRACTION.findall(text):
        if len(frac) > 6 and frac[6:].strip("0"):
            raise ValueError("timestamps are given to at most microsecond precision")
    return dt.datetime.fromisoformat(text.strip())


def _datetime_for(value: dt.datetime, type_: pa.DataType) -> dt.datetime:
    """``value`` adjusted to a timestamp type: naive values are wall times in its zone."""
    if type_.tz is None:
        if value.tzinfo is not None:
            raise ValueError(
                "has a time zone offset but the other side is a TIMESTAMP without time zone"
            )
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=_tzinfo(type_.tz))
    return value


def _rounded_to(value: dt.datetime, unit: str) -> dt.datetime:
    """``value`` (a wall time) rounded to a unit of seconds or milliseconds as DuckDB
    reads timestamp text into such a type: as a cast does (:func:`cast_values`)."""
    if unit not in ("s", "ms"):
        return value
    fine = pa.timestamp("us")
    wall = pa.array([value.replace(tzinfo=None)], fine)
    rounded = cast_values(wall, fine, pa.timestamp(unit), safe=True)[0].as_py()
    return rounded.replace(tzinfo=value.tzinfo)


def blob_from_text(text: str) -> bytes:
    """BLOB text as DuckDB reads it: ASCII characters, and ``\\xHH`` for any byte."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\":
            match = _BLOB_ESCAPE.match(text, i)
            if match is None:
                raise ValueError(
                    f"invalid escape in BLOB text {text!r}: a backslash starts \\xHH "
                    "(two hex digits; '\\x5C' is a backslash)"
                )
            out.append(int(match.group(1), 16))
            i = match.end()
        elif ord(text[i]) < 128:
            out.append(ord(text[i]))
            i += 1
        else:
            raise ValueError(
                f"BLOB text {text!r} holds a non-ASCII character: write bytes past 0x7F "
                "as \\xHH escapes"
            )
    return bytes(out)


def _fits_unit(value: dt.datetime, unit: str) -> bool:
    if unit == "s":
        return value.microsecond == 0
    if unit == "ms":
        return value.microsecond % 1000 == 0
    return True


def _parse_text_as(text: str, type_: pa.DataType) -> Any:
    """A string literal read as a date, timestamp, time or binary value of ``type_``."""
    cat = category(type_)
    if cat == "date":
        return dt.date.fromisoformat(text.strip())
    if cat == "timestamp":
        value = parse_timestamp(text)
        if type_.tz is None:  # DuckDB's TIMESTAMPTZ is in microseconds: nothing to round
            value = _rounded_to(value, type_.unit)
        return _datetime_for(value, type_)
    if cat == "time":
        return dt.time.fromisoformat(text.strip())
    if cat == "binary":
        return blob_from_text(text)
    if cat == "string":
        return text
    raise TypeError


def coerce_literal(lit: ast.Literal, target: pa.DataType) -> ast.Literal:
    """``lit`` moved as close to ``target`` as is exact; unchanged if nothing fits.

    Returns a literal of ``target`` when the value converts without loss, a literal
    of a nearby type when only that is exact (a timestamp with microseconds for a
    seconds column), or ``lit`` itself; the caller then widens. Raises ValueError
    for a string that should be a date/time but is malformed.
    """
    value, src = lit.value, lit.type
    assert src is not None
    if value is None:
        return ast.Literal(None, target)
    if src == target:
        return lit
    cs, ct = category(src), category(target)
    if cs == "string" and ct in ("string", "binary", "date", "time"):
        return make_literal(_parse_text_as(value, target), target)
    if cs == "string" and ct == "timestamp":
        return _timestamp_literal(_parse_text_as(value, target), target)
    if cs == "date" and ct == "timestamp":
        midnight = dt.datetime.combine(value, dt.time())
        return _timestamp_literal(_datetime_for(midnight, target), target)
    if cs == ct == "timestamp":
        return _timestamp_literal(_datetime_for(value, target), target)
    if ct == "float" and cs in _NUMERIC:
        # Numbers meet a float column in its own precision: f32_col = 0.1 means 0.1f;
        # a DOUBLE (0.1e0) meets a REAL column in DOUBLE, as in DuckDB, unless exact.
        if cs == "float" and target == pa.float32() and not _exact_in_real(value):
            return lit
        return make_literal(float(value), target)
    if cs in ("int", "decimal") and ct in ("int", "decimal"):
        return _exact_number(lit, target)
    return lit


def _exact_in_real(value: float) -> bool:
    """Whether a REAL (float32) holds ``value`` exactly (NaN and infinities included)."""
    try:
        return math.isnan(value) or struct.unpack("<f", struct.pack("<f", value))[0] == value
    except OverflowError:  # beyond REAL's range
        return False


def _timestamp_literal(value: dt.datetime, target: pa.DataType) -> ast.Literal:
    if _fits_unit(value, target.unit):
        return make_literal(value, target)
    return make_literal(value, pa.timestamp("us", target.tz))


def _exact_number(lit: ast.Literal, target: pa.DataType) -> ast.Literal:
    value = decimal.Decimal(lit.value)
    if pat.is_integer(target):
        if value != value.to_integral_value():
            return lit
        try:
            return make_literal(int(value), target)
        except ValueError:
            return lit
    scale = target.scale
    quantum = decimal.Decimal(1).scaleb(-scale)
    try:
        quantized = value.quantize(quantum, context=decimal.Context(prec=80))
    except decimal.InvalidOperation:
        return lit
    if quantized != value or len(quantized.as_tuple().digits) > target.precision:
        return lit
    try:
        return make_literal(quantized, target)
    except ValueError:
        return lit


def cast_literal(lit: ast.Literal, to: pa.DataType, *, context: str) -> ast.Literal:
    """``CAST(lit AS to)`` computed now, with the same meaning as the Arrow cast.

    Strings become dates/timestamps/times by ISO parsing (``TIMESTAMPTZ`` text without
    an offset is UTC); everything else is :func:`~mere.expr.arrow.cast_values`, the cast
    evaluation uses (it rounds as DuckDB does and fails on overflow). Raises
    InvalidExpression naming ``context``.
    """
    src = lit.type or pa.null()
    if lit.value is None:
        return ast.Literal(None, to)
    try:
        if category(src) == "string" and category(to) in ("date", "time", "timestamp", "binary"):
            return make_literal(_parse_text_as(lit.value, _utc(to)), to)
        if category(src) == "date" and category(to) == "timestamp":
            midnight = dt.datetime.combine(lit.value, dt.time())
            return make_literal(_datetime_for(midnight, _utc(to)), to)
        cast = cast_values(pa.array([lit.value], type=src), src, to, safe=True)
        return ast.Literal(cast[0].as_py(), to)
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as e:
        raise InvalidExpression(
            f"cannot evaluate {context!r}: {_first_line(str(e)) or 'invalid value'}",
            help="dates are 'YYYY-MM-DD', timestamps 'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]'; "
            "casts fail on values out of the target type's range",
        ) from None


def _utc(type_: pa.DataType) -> pa.DataType:
    """For a tz-aware timestamp type, the same unit in UTC (how TIMESTAMPTZ text is read)."""
    if pat.is_timestamp(type_) and type_.tz is not None:
        return pa.timestamp(type_.unit, "UTC")
    return type_


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


# --- binding ----------------------------------------------------------------------------


def bind(expr: ast.Expr, schema: pa.Schema) -> ast.Expr:
    """Resolve ``expr`` against ``schema`` and type every node (see the module docstring).

    Raises:
        InvalidExpression: unknown or ambiguous column, or operands whose types
            cannot meet (the message quotes the expression and the types).
    """
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    return _Binder(schema, expr).bind(expr)


def is_boolean(expr: ast.Expr) -> bool:
    """Whether ``expr`` yields a boolean (usable as a filter).

    For a bound expression this is its type (``BOOLEAN``, or an untyped ``NULL``).
    For an unbound one it is decided from the shape: predicates are boolean, a
    bare column is not (its type is unknown until bound).
    """
    if isinstance(expr, ast.Literal):
        return expr.type is not None and (pat.is_boolean(expr.type) or pat.is_null(expr.type))
    if expr.type is not None:
        return bool(pat.is_boolean(expr.type))
    if isinstance(expr, ast.Func):
        return expr.name in (*_FLOAT_TESTS, *_STRING_TESTS)
    return isinstance(
        expr,
        ast.Compare
        | ast.And
        | ast.Or
        | ast.Not
        | ast.In
        | ast.InList
        | ast.Between
        | ast.IsNull
        | ast.IsBool
        | ast.Like
        | ast.Distinct,
    )


class _Binder:
    """Binds one tree against one schema."""

    def __init__(self, schema: pa.Schema, root: ast.Expr) -> None:
        self.schema = schema
        self.root = root
        self.names: list[str] = list(schema.names)

    def fail(self, what: str, node: ast.Expr, help: str = SUPPORTED_SQL) -> NoReturn:
        raise InvalidExpression(f"{what} in {to_sql(node)!r}", help=help)

    def bind(self, node: ast.Expr) -> ast.Expr:
        """The bound copy of ``node``."""
        if isinstance(node, ast.Column):
            return self._column(node)
        if isinstance(node, ast.Literal):
            return node if node.type is not None else self._untyped(node)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.Distinct):
            return self._distinct(node)
        if isinstance(node, ast.And | ast.Or):
            items = tuple(self._boolean(self.bind(i), i, node) for i in node.items)
            return dataclasses.replace(node, items=items, type=pa.bool_())
        if isinstance(node, ast.Not):
            return ast.Not(self._boolean(self.bind(node.operand), node.operand, node), pa.bool_())
        if isinstance(node, ast.IsBool):
            operand = self._boolean(self.bind(node.operand), node.operand, node)
            return dataclasses.replace(node, operand=operand, type=pa.bool_())
        if isinstance(node, ast.IsNull):
            return dataclasses.replace(node, operand=self.bind(node.operand), type=pa.bool_())
        if isinstance(node, ast.In):
            return self._in(node)
        if isinstance(node, ast.InList):
            return self._in_list(node)
        if isinstance(node, ast.Between):
            return self._between(node)
        if isinstance(node, ast.Like):
            return self._like(node)
        if isinstance(node, ast.Arith):
            return self._arith(node)
        if isinstance(node, ast.Neg):
            return self._neg(node)
        if isinstance(node, ast.Cast):
            return self._cast(node)
        if isinstance(node, ast.Func):
            return self._func(node)
        raise TypeError(f"not an expression node: {node!r}")

    # --- columns ----------------------------------------------------------------------

    def _column(self, node: ast.Column) -> ast.Expr:
        name = node.name
        exact = [n for n in self.names if n == name]
        if not exact:
            exact = [n for n in self.names if n.casefold() == name.casefold()]
        if len(exact) == 1:
            field = self.schema.field(self.names.index(exact[0]))
            column = ast.Column(field.name, node.qualifier, field.type)
            if pat.is_float16(field.type):  # no kernels for half floats: REAL holds each exactly
                return ast.Cast(column, pa.float32(), type=pa.float32())
            return column
        if not exact:
            available = ", ".join(ast.quote_identifier(n) for n in self.names) or "(none)"
            raise InvalidExpression(
                f"unknown column {ast.quote_identifier(name)} in {to_sql(self.root)!r}; "
                f"available columns: {available}",
                help='quote names with spaces or capitals in double quotes, e.g. "My Col"',
            )
        raise InvalidExpression(
            f"column name {ast.quote_identifier(name)} in {to_sql(self.root)!r} is ambiguous: "
            "it matches " + ", ".join(ast.quote_identifier(n) for n in exact),
            help="write the exact name in double quotes",
        )

    def _untyped(self, node: ast.Literal) -> ast.Literal:
        """A literal built in code without a type gets the type pyarrow infers for its value."""
        try:
            return make_literal(node.value, pa.scalar(node.value).type)
        except (ValueError, TypeError, pa.ArrowException):
            raise InvalidExpression(
                f"unsupported literal value {node.value!r}",
                help="literals are numbers, strings, booleans, None, dates, datetimes, "
                "decimals and bytes",
            ) from None

    # --- type unification --------------------------------------------------------------

    def _unify(
        self,
        nodes: Sequence[ast.Expr],
        ctx: ast.Expr,
        *,
        what: str = "compare",
        narrow: bool = False,
    ) -> tuple[list[ast.Expr], pa.DataType]:
        """Give bound ``nodes`` one common type: literals adapt, other nodes are cast.

        The type is DuckDB's for all of ``nodes`` at once: each typed literal counts
        with its own type (a DOUBLE literal next to a REAL column makes both DOUBLE,
        even when REAL holds the literal exactly), except integer literals, which
        take the type of the rest when they fit, as DuckDB's do; text and NULL take
        whatever type the rest has. With ``narrow`` (a comparison, whose answer is
        all that is kept), the one non-literal is then compared in its own type
        when it widens exactly and every literal converts to it exactly: the same
        answer, with no cast of the column.
        """
        hard = [n for n in nodes if not isinstance(n, ast.Literal)]
        literals = [n for n in nodes if isinstance(n, ast.Literal)]
        target: pa.DataType | None = None
        for n in hard:
            assert n.type is not None
            target = n.type if target is None else self._widen(target, n.type, ctx, nodes, what)
        # Typed literals count with their own type; text and NULLs adapt to the result.
        for lit in literals:
            assert lit.type is not None
            if category(lit.type) in ("string", "null"):
                continue
            if target is None:
                target = lit.type
            else:
                target = self._widen(target, self._demand(lit, target, ctx), ctx, nodes, what)
        if target is None:
            soft = [n for n in literals if category(n.type) == "string"]
            for n in soft:
                assert n.type is not None
                target = n.type if target is None else self._widen(target, n.type, ctx, nodes, what)
        if target is None:
            return list(nodes), pa.null()
        for lit in literals:
            moved = self._coerce(lit, target, ctx)
            if moved.type != target:
                assert moved.type is not None
                target = self._widen(target, moved.type, ctx, nodes, what)
        out: list[ast.Expr] = []
        for n in nodes:
            if isinstance(n, ast.Literal):
                moved = self._coerce(n, target, ctx)
                if moved.type != target:
                    moved = cast_literal(moved, target, context=to_sql(ctx))
                out.append(moved)
            else:
                out.append(n)
        if narrow and len(hard) == 1:
            narrowed = _narrowed(out, hard[0], target)
            if narrowed is not None:
                return narrowed
        cast_out: list[ast.Expr] = []
        for n in out:
            if not isinstance(n, ast.Literal) and n.type != target:
                n = ast.Cast(n, target, safe=not _rounds(n.type, target), type=target)
            cast_out.append(n)
        return cast_out, target

    def _demand(self, lit: ast.Literal, target: pa.DataType, ctx: ast.Expr) -> pa.DataType:
        """The type ``lit`` and a side of type ``target`` meet in (before text is read)."""
        assert lit.type is not None
        common = common_type(target, lit.type)
        if common is not None and not pat.is_integer(lit.type):
            return common
        # Integer literals fit themselves to the other side, as DuckDB's INTEGER_LITERAL;
        # a literal with no common type (a naive TIMESTAMP for a zoned column) is read
        # in the other side's type when it can be.
        moved = self._coerce(lit, target, ctx)
        assert moved.type is not None
        return moved.type

    def _widen(
        self,
        target: pa.DataType,
        other: pa.DataType,
        ctx: ast.Expr,
        nodes: Sequence[ast.Expr],
        what: str,
    ) -> pa.DataType:
        common = common_type(target, other)
        if common is None:
            described = " and ".join(f"{to_sql(n)} ({type_sql(n.type)})" for n in nodes if n.type)
            self.fail(f"cannot {what} {described}", ctx, help=_COMPARE_HELP)
        return common

    def _coerce(self, lit: ast.Literal, target: pa.DataType, ctx: ast.Expr) -> ast.Literal:
        try:
            return coerce_literal(lit, target)
        except (ValueError, TypeError, OverflowError) as e:
            self.fail(
                f"{to_sql(lit)} is not a valid {type_sql(target)}: {_first_line(str(e))}",
                ctx,
                help=_COMPARE_HELP,
            )

    def _boolean(self, bound: ast.Expr, original: ast.Expr, ctx: ast.Expr) -> ast.Expr:
        assert bound.type is not None
        if pat.is_boolean(bound.type):
            return bound
        if pat.is_null(bound.type) and isinstance(bound, ast.Literal):
            return ast.Literal(None, pa.bool_())
        self.fail(
            f"{to_sql(original)} is {type_sql(bound.type)}, not a boolean",
            ctx,
            help="AND, OR, NOT and IS TRUE/FALSE need boolean operands, e.g. amount > 0",
        )

    def _check_ordered(self, nodes: Sequence[ast.Expr], ctx: ast.Expr) -> None:
        for n in nodes:
            assert n.type is not None
            if category(n.type) not in _ORDERED:
                self.fail(f"cannot compare values of type {n.type}", ctx, help=_COMPARE_HELP)

    # --- predicates -------------------------------------------------------------------

    def _compare(self, node: ast.Compare) -> ast.Expr:
        left, right = self.bind(node.left), self.bind(node.right)
        self._check_ordered((left, right), node)
        (left, right), target = self._unify((left, right), node, narrow=True)
        if pat.is_null(target):
            return ast.Literal(None, pa.bool_())
        return ast.Compare(node.op, left, right, pa.bool_())

    def _distinct(self, node: ast.Distinct) -> ast.Expr:
        left, right = self.bind(node.left), self.bind(node.right)
        self._check_ordered((left, right), node)
        (left, right), target = self._unify((left, right), node, narrow=True)
        if pat.is_null(target):  # NULL IS DISTINCT FROM NULL
            return ast.Literal(node.negated, pa.bool_())
        return ast.Distinct(left, right, node.negated, pa.bool_())

    def _in(self, node: ast.In) -> ast.Expr:
        operand = self.bind(node.operand)
        self._check_ordered((operand,), node)
        unified, target = self._unify((operand, *node.values), node, narrow=True)
        if pat.is_null(target):
            return ast.Literal(None, pa.bool_())
        values = tuple(v for v in unified[1:] if isinstance(v, ast.Literal))
        return ast.In(unified[0], values, node.negated, pa.bool_())

    def _in_list(self, node: ast.InList) -> ast.Expr:
        """``x IN (a, b, ...)`` with a non-literal item: one type for the whole list,
        then an OR of an IN over its literals and ``=`` with its other items."""
        operand = self.bind(node.operand)
        values = [self.bind(v) for v in node.values]
        self._check_ordered((operand, *values), node)
        unified, target = self._unify((operand, *values), node, narrow=True)
        if pat.is_null(target):
            return ast.Literal(None, pa.bool_())
        x, items = unified[0], unified[1:]
        parts: list[ast.Expr] = []
        literals = tuple(v for v in items if isinstance(v, ast.Literal))
        if literals:
            parts.append(ast.In(x, literals, False, pa.bool_()))
        parts += [
            ast.Compare("=", x, v, pa.bool_()) for v in items if not isinstance(v, ast.Literal)
        ]
        out = parts[0] if len(parts) == 1 else ast.Or(tuple(parts), pa.bool_())
        return ast.Not(out, pa.bool_()) if node.negated else out

    def _between(self, node: ast.Between) -> ast.Expr:
        """``x BETWEEN low AND high``: one type for the three (as DuckDB), then
        ``x >= low AND x <= high``."""
        x, low, high = (self.bind(n) for n in (node.operand, node.low, node.high))
        self._check_ordered((x, low, high), node)
        (x, low, high), target = self._unify((x, low, high), node, narrow=True)
        if pat.is_null(target):
            return ast.Literal(None, pa.bool_())
        return ast.And(
            (ast.Compare(">=", x, low, pa.bool_()), ast.Compare("<=", x, high, pa.bool_())),
            pa.bool_(),
        )

    def _like(self, node: ast.Like) -> ast.Expr:
        operand = self.bind(node.operand)
        assert operand.type is not None
        if isinstance(operand, ast.Literal) and operand.value is None:
            return ast.Literal(None, pa.bool_())
        if category(operand.type) != "string":
            self.fail(
                f"LIKE needs a string, but {to_sql(node.operand)} is {type_sql(operand.type)}",
                node,
                help="use CAST(x AS VARCHAR) LIKE '...'",
            )
        try:
            ast.like_tokens(node.pattern, node.escape)
        except ValueError as e:
            self.fail(f"invalid LIKE pattern: {e}", node)
        return dataclasses.replace(node, operand=operand, type=pa.bool_())

    # --- values -----------------------------------------------------------------------

    def _numeric(self, nodes: Sequence[ast.Expr], ctx: ast.Expr, what: str) -> None:
        for n in nodes:
            assert n.type is not None
            if category(n.type) not in (*_NUMERIC, "null"):
                self.fail(
                    f"{what} needs numbers, but {to_sql(n)} is {type_sql(n.type)}",
                    ctx,
                    help="arithmetic works on integers, decimals and floats; || joins strings",
                )

    def _arith(self, node: ast.Arith) -> ast.Expr:
        left, right = self.bind(node.left), self.bind(node.right)
        op = node.op
        if op == "||":
            for n in (left, right):
                assert n.type is not None
                if category(n.type) not in ("string", "null"):
                    self.fail(
                        f"|| joins strings, but {to_sql(n)} is {type_sql(n.type)}",
                        node,
                        help="use CAST(x AS VARCHAR) || ...",
                    )
            (left, right), target = self._unify((left, right), node, what="concatenate")
            if pat.is_null(target):
                return ast.Literal(None, pa.string())
            return ast.Arith(op, left, right, target)
        self._numeric((left, right), node, f"operator {op}")
        if op == "/":
            left, right = (self._to_float64(n, node) for n in (left, right))
            return ast.Arith(op, left, right, pa.float64())
        (left, right), target = self._unify((left, right), node, what="combine")
        if pat.is_null(target):
            return ast.Literal(None, pa.null())
        if op == "//" and category(target) != "int":
            self.fail(
                f"// is integer division, but the operands are {type_sql(target)}",
                node,
                help="use / for division of decimals and floats",
            )
        try:
            return ast.Arith(op, left, right, arith_result_type(op, target))
        except pa.ArrowInvalid:
            # Decimal precision would exceed 38 digits: compute in float64 instead.
            left, right = (self._to_float64(n, node) for n in (left, right))
            return ast.Arith(op, left, right, arith_result_type(op, pa.float64()))
        except pa.ArrowNotImplementedError:
            self.fail(f"operator {op} is not supported for {type_sql(target)}", node)

    def _to_float64(self, node: ast.Expr, ctx: ast.Expr) -> ast.Expr:
        assert node.type is not None
        if node.type == pa.float64():
            return node
        if isinstance(node, ast.Literal):
            return cast_literal(node, pa.float64(), context=to_sql(ctx))
        return ast.Cast(node, pa.float64(), safe=False, type=pa.float64())

    def _neg(self, node: ast.Neg) -> ast.Expr:
        operand = self.bind(node.operand)
        self._numeric((operand,), node, "unary minus")
        assert operand.type is not None
        if pat.is_null(operand.type):
            return ast.Literal(None, pa.null())
        if pat.is_unsigned_integer(operand.type):
            wider = common_type(operand.type, pa.int8())
            assert wider is not None
            operand = self._cast_node(operand, wider, node)
        assert operand.type is not None
        try:
            return ast.Neg(operand, unary_result_type("negate_checked", operand.type))
        except pa.ArrowException:
            self.fail(f"cannot negate {type_sql(operand.type)}", node)

    def _cast_node(self, operand: ast.Expr, to: pa.DataType, ctx: ast.Expr) -> ast.Expr:
        if isinstance(operand, ast.Literal):
            return cast_literal(operand, to, context=to_sql(ctx))
        return ast.Cast(operand, to, safe=not _rounds(operand.type, to), type=to)

    def _cast(self, node: ast.Cast) -> ast.Expr:
        operand = self.bind(node.operand)
        assert operand.type is not None
        self._check_text_cast(operand, node.to, node)
        if isinstance(operand, ast.Literal):
            return cast_literal(operand, node.to, context=to_sql(node))
        try:
            pc.cast(pa.array([], type=operand.type), node.to)
        except pa.ArrowException:
            self.fail(
                f"cannot cast {type_sql(operand.type)} to {type_sql(node.to)}",
                node,
                help="casts between numbers, strings, booleans, dates and timestamps are supported",
            )
        return ast.Cast(operand, node.to, node.safe, node.to)

    def _check_text_cast(self, operand: ast.Expr, to: pa.DataType, node: ast.Cast) -> None:
        """Refuse the casts to and from text whose answers would differ from DuckDB's.

        DuckDB writes a BLOB's bytes as ``\\xHH`` escapes and reads them back, and
        writes floats in its own shortest form (``10000000000.0`` where Arrow
        writes ``1e+10``); Arrow does neither. A BLOB literal's text is read as
        DuckDB reads it (:func:`blob_from_text`).
        """
        src, dst = category(operand.type), category(to)
        if src == "binary" and dst == "string":
            self.fail("a cast of a BLOB to text", node, help=_BLOB_HELP)
        if src == "string" and dst == "binary" and not isinstance(operand, ast.Literal):
            self.fail("a cast of text to a BLOB (except a literal)", node, help=_BLOB_HELP)
        if src == "float" and dst == "string":
            self.fail(
                f"a cast of {type_sql(operand.type)} to text",
                node,
                help="its text differs between DuckDB and Arrow (1e+10 against "
                "10000000000.0): compare the number itself",
            )

    def _func(self, node: ast.Func) -> ast.Expr:
        args = [self.bind(a) for a in node.args]
        name = node.name
        if name not in _ARITY:
            self.fail(f"unknown function {name}", node, help=f"functions: {', '.join(_ARITY)}")
        low, high = _ARITY[name]
        if not low <= len(args) <= high:
            count = str(low) if low == high else f"{low} to {high}"
            self.fail(f"{name}() takes {count} argument(s), got {len(args)}", node)
        if name == "coalesce":
            unified, target = self._unify(args, node, what="combine")
            return ast.Func(name, tuple(unified), target)
        if name in (*_DATE_PARTS, "date_trunc"):
            return self._date_function(node, args)
        first = args[0]
        assert first.type is not None
        if name in _FLOAT_TESTS:
            self._numeric(args, node, f"{name}()")
            if pat.is_null(first.type):
                return ast.Literal(None, pa.bool_())
            return ast.Func(name, (first,), pa.bool_())
        if name == "abs":
            self._numeric(args, node, "abs()")
            if pat.is_null(first.type):
                return ast.Literal(None, pa.null())
            return ast.Func(name, (first,), first.type)
        if category(first.type) not in ("string", "null"):
            self.fail(
                f"{name}() needs a string, but {to_sql(first)} is {type_sql(first.type)}", node
            )
        if pat.is_null(first.type):
            first = ast.Literal(None, pa.string())
            assert first.type is not None
        if name == "length":
            return ast.Func(name, (first,), pa.int64())
        if name in (*_STRING_TESTS, *_TRIMS) and len(args) > 1:
            second = args[1]
            if not isinstance(second, ast.Literal) or category(second.type) not in (
                "string",
                "null",
            ):
                self.fail(f"{name}() takes a string literal as its second argument", node)
            if second.value is None:
                return ast.Literal(None, pa.bool_() if name in _STRING_TESTS else first.type)
            second = ast.Literal(second.value, pa.string())
            out_type = pa.bool_() if name in _STRING_TESTS else first.type
            return ast.Func(name, (first, second), out_type)
        if name == "substring":
            for pos, arg in enumerate(args[1:]):
                value = arg.value if isinstance(arg, ast.Literal) else None
                if not isinstance(value, int) or isinstance(value, bool) or value < 1 - pos:
                    self.fail(
                        "substring() takes a start position >= 1 and a length >= 0 "
                        "as integer literals",
                        node,
                    )
            ints = tuple(
                make_literal(a.value, pa.int64()) for a in args[1:] if isinstance(a, ast.Literal)
            )
            return ast.Func(name, (first, *ints), first.type)
        return ast.Func(name, (first,), first.type)

    def _date_function(self, node: ast.Func, args: list[ast.Expr]) -> ast.Expr:
        """year() ... second() (BIGINT) and date_trunc() (a TIMESTAMP, as in DuckDB)."""
        name, value = node.name, args[-1]
        assert value.type is not None
        if name == "date_trunc":
            unit = args[0]
            if not (isinstance(unit, ast.Literal) and unit.value in ast.DATE_TRUNC_UNITS):
                self.fail(
                    "date_trunc() takes a unit string literal first",
                    node,
                    help="units: " + ", ".join(ast.DATE_TRUNC_UNITS),
                )
        if category(value.type) not in ("date", "timestamp", "null"):
            self.fail(
                f"{name}() needs a date or timestamp, but {to_sql(value)} is "
                f"{type_sql(value.type)}",
                node,
                help="use CAST(x AS DATE) or CAST(x AS TIMESTAMP)",
            )
        if name != "date_trunc":
            out: pa.DataType = pa.int64()
        elif pat.is_timestamp(value.type):
            out = value.type
        else:
            out = pa.timestamp("us")
        if pat.is_null(value.type):
            return ast.Literal(None, out)
        return ast.Func(name, (*args[:-1], value), out)


def _narrowed(
    nodes: Sequence[ast.Expr], hard: ast.Expr, target: pa.DataType
) -> tuple[list[ast.Expr], pa.DataType] | None:
    """``nodes`` (literals already of ``target``) compared in ``hard``'s own type instead,
    when that gives the same answers: ``hard`` widens to ``target`` exactly and keeping
    order, and every literal converts to ``hard``'s type and back unchanged. None if not.
    """
    own = hard.type
    if own is None or own == target or not _widens_exactly(own, target):
        return None
    out: list[ast.Expr] = []
    for n in nodes:
        if isinstance(n, ast.Literal):
            try:
                moved = coerce_literal(n, own)
            except (ValueError, TypeError, OverflowError):
                return None
            if moved.type != own:
                return None
            n = moved
        out.append(n)
    return out, own


def _widens_exactly(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every ``src`` value is a distinct ``dst`` value, in the same order."""
    cs, cd = category(src), category(dst)
    if cs == cd == "float":
        return dst == pa.float64()
    if cs == cd == "timestamp":
        return (src.tz is None) == (dst.tz is None) and _UNIT_ORDER[src.unit] <= _UNIT_ORDER[
            dst.unit
        ]
    if cs == "int" and cd in ("int", "decimal"):
        return common_type(src, dst) == dst
    if cs == cd == "decimal":
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    return False


def _rounds(src: pa.DataType | None, dst: pa.DataType) -> bool:
    """Whether an implicit cast ``src -> dst`` is meant to round (so must not be 'safe')."""
    return src is not None and category(dst) == "float" and category(src) in _NUMERIC
