"""File skipping: can any row of a file satisfy a predicate, given per-column facts?

The analysis is abstract interpretation over SQL's three truth values. For each
sub-predicate it computes the set of outcomes some row of the file *might* produce,
a subset of {TRUE, FALSE, NULL}; a file is skipped only when TRUE is impossible.
Working with all three values makes ``NOT`` exact (it swaps TRUE and FALSE and
keeps NULL), so ``NOT (x > 5)`` prunes a file whose minimum exceeds 5 while a
file holding only NULLs is still pruned for both ``x > 5`` and ``NOT (x > 5)``.

Value sub-expressions are abstracted as a range ``[lo, hi]`` of their non-null values
(either end may be unknown) plus whether NULL or NaN may occur. Columns come from
:class:`ColumnRange`; literals are exact; binding's widening casts, unary minus and
``+``/``-`` on integers, ``float64`` and decimals transform ranges; every other
expression is "anything". Combining sub-expressions assumes nothing about how columns
correlate, which can only add outcomes, never drop one: the answer is sound.

Floats: NaN equals NaN and sorts above every other value (+inf included), as in
DuckDB and Spark; ``-0.0 = 0.0``. Min/max statistics leave NaN out, so a float
column may hold NaN beyond its min/max unless its NaN count says otherwise: a range
says separately whether a non-NaN value and whether NaN may occur, and a
comparison's outcomes are those of its non-NaN values plus those NaN gives. NaN
bounds count as unknown.

Errors: an expression that may fail at run time (integer overflow, a failing cast)
gets unknown bounds, so :func:`must_match` never lets a delete drop a file whose rows
would have raised when read.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from mere.errors import InvalidExpression
from mere.expr import ast
from mere.expr.arrow import cast_values, evaluate
from mere.expr.bind import category

T, F, N = "TRUE", "FALSE", "NULL"
_ANY = frozenset((T, F, N))
#: The comparison that holds exactly when ``op`` is false (for non-null operands).
NEGATED_OP = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
#: Casts from one type category to another that keep order (bounds follow the cast).
MONOTONE_CASTS = {
    "int": ("int", "float", "decimal"),
    "decimal": ("int", "float", "decimal"),
    "float": ("int", "float", "decimal"),
    "bool": ("int", "float", "decimal", "bool"),
    "date": ("date", "timestamp"),
    "timestamp": ("date", "timestamp"),
    "string": ("string",),
    "binary": ("binary",),
}
_EXACT = decimal.Context(prec=100)
_ERRORS = (TypeError, ValueError, ArithmeticError, OverflowError, pa.ArrowException)


@dataclass(frozen=True)
class ColumnRange:
    """What is known about one column in one file.

    ``min``/``max`` must bound every non-null value other than NaN (``min <= v <= max``);
    None means unknown (or that every value is null). ``null_count`` None means
    unknown, and so does ``nan_count`` (how many values of a floating-point column are
    NaN: without it, NaN is assumed possible). Values are the Python objects pyarrow's
    ``as_py()`` gives for the column's type. A partition column is ``min == max ==
    value`` with ``null_count`` equal to ``row_count`` when the value is NULL, else 0.
    """

    min: Any | None
    max: Any | None
    null_count: int | None
    row_count: int
    nan_count: int | None = None


@dataclass(frozen=True)
class _Range:
    """The possible values of an expression over the rows of one file."""

    lo: Any | None  # None: unknown
    hi: Any | None
    may_null: bool
    may_value: bool  # some row may hold a value that is neither NULL nor NaN
    may_nan: bool

    @property
    def present(self) -> bool:
        """Whether some row may be non-null (a number, NaN, or any other value)."""
        return self.may_value or self.may_nan


def _anything(type_: pa.DataType | None) -> _Range:
    return _Range(None, None, True, True, _floating(type_))


def _floating(type_: pa.DataType | None) -> bool:
    return type_ is None or bool(pat.is_floating(type_))


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def may_match(expr: ast.Expr, ranges: Mapping[str, ColumnRange], row_count: int) -> bool:
    """False only if no row of the file can make the bound predicate ``expr`` TRUE.

    ``ranges`` maps column names (as bound) to what the file's statistics or partition
    values say; absent columns are unknown. Anything the analysis does not understand
    is assumed to match, so a False answer is always safe to act on.
    """
    if row_count <= 0:
        return False
    return T in _Analyzer(ranges).outcomes(expr)


def must_match(expr: ast.Expr, ranges: Mapping[str, ColumnRange], row_count: int) -> bool:
    """True only if every row of the file makes the bound predicate ``expr`` TRUE.

    The mirror of :func:`may_match` over the same analysis: FALSE and NULL must
    both be impossible. A delete uses it to drop a whole file without reading it
    (a predicate on partition columns, or statistics that settle it).
    """
    if row_count <= 0:
        return False
    return _Analyzer(ranges).outcomes(expr) == frozenset((T,))


class _Analyzer:
    def __init__(self, ranges: Mapping[str, ColumnRange]) -> None:
        self.ranges = ranges

    # --- predicates -------------------------------------------------------------------

    def outcomes(self, expr: ast.Expr) -> frozenset[str]:
        """The truth values some row may give ``expr`` (a superset of the real ones)."""
        if isinstance(expr, ast.And):
            return _and([self.outcomes(i) for i in expr.items])
        if isinstance(expr, ast.Or):
            return _or([self.outcomes(i) for i in expr.items])
        if isinstance(expr, ast.Not):
            return _not(self.outcomes(expr.operand))
        if isinstance(expr, ast.Compare):
            return self._compare(expr.op, self.range(expr.left), self.range(expr.right))
        if isinstance(expr, ast.Distinct):
            out = self._not_distinct(self.range(expr.left), self.range(expr.right))
            return out if expr.negated else _not(out)
        if isinstance(expr, ast.IsNull):
            r = self.range(expr.operand)
            out = _set(T if r.may_null else None, F if r.present else None)
            return _not(out) if expr.negated else out
        if isinstance(expr, ast.IsBool):
            inner = self.outcomes(expr.operand)
            hit, miss = (T, F) if expr.value else (F, T)
            out = _set(T if hit in inner else None, F if (miss in inner or N in inner) else None)
            return _not(out) if expr.negated else out
        if isinstance(expr, ast.In):
            out = self._in(expr)
            return _not(out) if expr.negated else out
        if isinstance(expr, ast.Like):
            out = self._like(expr)
            return _not(out) if expr.negated else out
        if isinstance(expr, ast.Func) and expr.name == "isnan":
            r = self.range(expr.args[0])
            return _set(
                T if r.may_nan else None, F if r.may_value else None, N if r.may_null else None
            )
        if isinstance(expr, ast.Func) and expr.name == "starts_with":
            prefix = expr.args[-1]
            if isinstance(prefix, ast.Literal) and isinstance(prefix.value, str):
                return self._prefix(self.range(expr.args[0]), prefix.value)
            return _ANY
        # A boolean value: a literal, a boolean column, a cast, a function...
        r = self.range(expr)
        return _set(
            T if r.may_value and r.hi is not False else None,
            F if r.may_value and r.lo is not True else None,
            N if r.may_null else None,
        )

    def _compare(self, op: str, a: _Range, b: _Range) -> frozenset[str]:
        null = N if (a.may_null or b.may_null) else None
        true, false = _value_outcomes(op, a, b)
        return _set(T if true else None, F if false else None, null)

    def _not_distinct(self, a: _Range, b: _Range) -> frozenset[str]:
        """Outcomes of ``a IS NOT DISTINCT FROM b`` (never NULL)."""
        true = a.may_null and b.may_null
        false = (a.may_null and b.present) or (b.may_null and a.present)
        if a.present and b.present:
            equal, unequal = _value_outcomes("=", a, b)
            true, false = true or equal, false or unequal
        return _set(T if true else None, F if false else None)

    def _in(self, expr: ast.In) -> frozenset[str]:
        r = self.range(expr.operand)
        present = [v.value for v in expr.values if v.value is not None]
        list_has_null = len(present) < len(expr.values)
        numbers = [v for v in present if not _is_nan(v)]
        out: set[str] = set()
        if r.may_null:
            out.add(N)
        if r.may_nan:  # NaN rows: found if NaN is listed, else not found
            out.add(T if len(numbers) < len(present) else (N if list_has_null else F))
        if r.may_value:
            try:
                true = any(_within(v, r) for v in numbers)
                single = r.lo is not None and r.hi is not None and r.lo == r.hi
                always = single and any(r.lo == v for v in numbers)
            except _ERRORS:
                true, always = True, False
            if true:
                out.add(T)
            if not always:
                out.add(N if list_has_null else F)
        return frozenset(out)

    def _like(self, expr: ast.Like) -> frozenset[str]:
        r = self.range(expr.operand)
        null = N if r.may_null else None
        if not r.may_value:
            return _set(null)
        tokens = ast.like_tokens(expr.pattern, expr.escape)
        if tokens and all(c == "%" and w for c, w in tokens):
            return _set(T, null)  # '%' matches every non-null string
        if expr.case_insensitive:
            return _set(T, F, null)
        prefix = ""
        for char, wildcard in tokens:
            if wildcard:
                break
            prefix += char
        rest = tokens[len(prefix) :]
        if rest and all(c == "%" and w for c, w in rest):
            return self._prefix(r, prefix)  # 'abc%': starts with 'abc'
        exact = len(prefix) == len(tokens)
        try:
            if exact:
                true = _within(prefix, r)
            else:
                true = _may_start_with(prefix, r)
        except _ERRORS:
            true = True
        return _set(T if true else None, F, null)

    def _prefix(self, r: _Range, prefix: str) -> frozenset[str]:
        """Outcomes of "starts with ``prefix``" over the strings in ``r``."""
        null = N if r.may_null else None
        if not r.may_value:
            return _set(null)
        try:
            true = _may_start_with(prefix, r)
            # Every string between two that start with the prefix starts with it too.
            false = not (
                isinstance(r.lo, str)
                and isinstance(r.hi, str)
                and r.lo.startswith(prefix)
                and r.hi.startswith(prefix)
            )
        except _ERRORS:
            true, false = True, True
        return _set(T if true else None, F if false else None, null)

    # --- values -----------------------------------------------------------------------

    def range(self, expr: ast.Expr) -> _Range:
        """The possible values of ``expr`` over the file's rows."""
        if isinstance(expr, ast.Column):
            return self._column(expr)
        if isinstance(expr, ast.Literal):
            value = expr.value
            if value is None:
                return _Range(None, None, True, False, False)
            if _is_nan(value):
                return _Range(None, None, False, False, True)
            return _Range(value, value, False, True, False)
        if isinstance(expr, ast.Cast):
            return self._cast(expr)
        if isinstance(expr, ast.Neg):
            inner = self.range(expr.operand)
            return _checked(_Range(_neg(inner.hi), _neg(inner.lo), *_flags(inner)), expr.type)
        if isinstance(expr, ast.Arith) and expr.op in ("+", "-"):
            return self._add(expr)
        if isinstance(expr, ast.Compare | ast.And | ast.Or | ast.Not | ast.In | ast.IsNull):
            return _bool_range(self.outcomes(expr))
        if isinstance(expr, ast.IsBool | ast.Like | ast.Distinct):
            return _bool_range(self.outcomes(expr))
        if isinstance(expr, ast.Func):
            return self._func(expr)
        return _anything(expr.type)

    def _func(self, expr: ast.Func) -> _Range:
        if expr.name in ("isnan", "starts_with"):  # the predicates outcomes() analyses
            return _bool_range(self.outcomes(expr))
        if expr.name in _MONOTONE_FUNCTIONS and expr.args:
            inner = self.range(expr.args[-1])
            arg_type = expr.args[-1].type
            if arg_type is not None and _fixed_clock(arg_type):
                lo, hi = _apply(expr, inner.lo), _apply(expr, inner.hi)
                return _Range(lo, hi, inner.may_null, inner.may_value, False)
        return _anything(expr.type)

    def _column(self, expr: ast.Column) -> _Range:
        facts = self.ranges.get(expr.name)
        if facts is None:
            return _anything(expr.type)
        nulls, nans = facts.null_count, facts.nan_count
        floating = _floating(expr.type)
        if not floating:
            nans = 0
        may_null = nulls is None or nulls > 0
        may_nan = floating and (nans is None or nans > 0)
        if nulls is None or nans is None:
            may_value = nulls is None or nulls < facts.row_count
        else:
            may_value = nulls + nans < facts.row_count
        lo = None if _is_nan(facts.min) else facts.min
        hi = None if _is_nan(facts.max) else facts.max
        return _Range(lo, hi, may_null, may_value, may_nan)

    def _cast(self, expr: ast.Cast) -> _Range:
        inner = self.range(expr.operand)
        src, dst = expr.operand.type, expr.to
        if (
            src is None
            or category(dst) not in MONOTONE_CASTS.get(category(src), ())
            or (inner.may_nan and not _floating(dst))  # NaN to a non-float fails
        ):
            return _Range(None, None, inner.may_null, True, _floating(dst))
        lo, hi = (_cast_value(v, src, dst, expr.safe) for v in (inner.lo, inner.hi))
        if lo is None or hi is None:  # a bound did not convert: the cast may fail
            lo = hi = None
        return _Range(lo, hi, inner.may_null, inner.may_value, inner.may_nan)

    def _add(self, expr: ast.Arith) -> _Range:
        a, b = self.range(expr.left), self.range(expr.right)
        may_null, may_value = a.may_null or b.may_null, a.may_value and b.may_value
        nan = (a.may_nan and b.present) or (b.may_nan and a.present)
        type_ = expr.type
        if type_ is None or not (
            pat.is_integer(type_) or type_ == pa.float64() or pat.is_decimal(type_)
        ):
            return _Range(None, None, True, True, _floating(type_))
        if expr.op == "+":
            lo, hi = _plus(a.lo, b.lo), _plus(a.hi, b.hi)
        else:
            lo, hi = _minus(a.lo, b.hi), _minus(a.hi, b.lo)
        if type_ == pa.float64() and any(
            v is None or (isinstance(v, float) and not math.isfinite(v))
            for v in (a.lo, a.hi, b.lo, b.hi)
        ):
            nan = True  # inf - inf is NaN
        return _checked(_Range(lo, hi, may_null, may_value, nan), type_)


# --- helpers --------------------------------------------------------------------------


def _value_outcomes(op: str, a: _Range, b: _Range) -> tuple[bool, bool]:
    """Whether ``x op y`` may be TRUE, and FALSE, for non-null x in ``a`` and y in ``b``."""
    true = false = False

    def outcome(result: bool) -> None:
        nonlocal true, false
        true, false = true or result, false or not result

    if a.may_value and b.may_value:
        true = _possible(op, a, b)
        false = _possible(NEGATED_OP[op], a, b)
    if a.may_nan and b.may_value:  # NaN is above every number
        outcome(op in (">", ">=", "!="))
    if a.may_value and b.may_nan:
        outcome(op in ("<", "<=", "!="))
    if a.may_nan and b.may_nan:  # and equal to itself
        outcome(op in ("=", "<=", ">="))
    return true, false


#: Integer types' value ranges, to notice arithmetic that may overflow (an error).
_INT_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}


def _checked(r: _Range, type_: pa.DataType | None) -> _Range:
    """``r``, with unknown bounds when a bound is unknown or beyond the integer type.

    Integer arithmetic fails on overflow, so a result whose bounds may leave the type
    may raise instead of producing a value: nothing about its values is certain.
    """
    limits = _INT_RANGES.get(type_) if type_ is not None else None
    if limits is None:
        return r
    if r.lo is None or r.hi is None or r.lo < limits[0] or r.hi > limits[1]:
        return _Range(None, None, r.may_null, True, r.may_nan)
    return r


#: Functions whose result never decreases as their (last) argument grows.
_MONOTONE_FUNCTIONS = ("year", "date_trunc")


def _fixed_clock(type_: pa.DataType) -> bool:
    """Dates and timestamps whose wall clock never goes back (no zone, or UTC)."""
    if pat.is_date(type_):
        return True
    if not pat.is_timestamp(type_):
        return False
    return type_.tz is None or type_.tz in ("UTC", "utc", "Etc/UTC", "+00:00", "Z")


def _apply(expr: ast.Func, value: Any) -> Any:
    """``expr`` evaluated with ``value`` as its last argument (None if unknown or failing)."""
    if value is None:
        return None
    node = expr.args[-1]
    try:
        table = pa.table({"v": pa.array([value], type=node.type)})
        column = ast.Column("v", type=node.type)
        result = evaluate(ast.Func(expr.name, (*expr.args[:-1], column), expr.type), table)
        return result[0].as_py()
    except (*_ERRORS, InvalidExpression):
        return None


def _set(*items: str | None) -> frozenset[str]:
    return frozenset(i for i in items if i is not None)


def _not(outcomes: frozenset[str]) -> frozenset[str]:
    swap = {T: F, F: T, N: N}
    return frozenset(swap[o] for o in outcomes)


def _and(parts: Sequence[frozenset[str]]) -> frozenset[str]:
    return _set(
        T if all(T in p for p in parts) else None,
        F if any(F in p for p in parts) else None,
        N if all(T in p or N in p for p in parts) and any(N in p for p in parts) else None,
    )


def _or(parts: Sequence[frozenset[str]]) -> frozenset[str]:
    return _not(_and([_not(p) for p in parts]))


def _flags(r: _Range) -> tuple[bool, bool, bool]:
    return r.may_null, r.may_value, r.may_nan


def _bool_range(outcomes: frozenset[str]) -> _Range:
    lo = False if F in outcomes else (True if T in outcomes else None)
    hi = True if T in outcomes else (False if F in outcomes else None)
    return _Range(lo, hi, N in outcomes, T in outcomes or F in outcomes, False)


def _possible(op: str, a: _Range, b: _Range) -> bool:
    """Whether ``x op y`` may hold for some non-null x in ``a`` and y in ``b``."""
    try:
        if op == "=":
            return not (_lt(a.hi, b.lo) or _lt(b.hi, a.lo))
        if op == "!=":
            bounds = (a.lo, a.hi, b.lo, b.hi)
            return any(v is None for v in bounds) or not (a.lo == a.hi == b.lo == b.hi)
        if op == "<":
            return a.lo is None or b.hi is None or a.lo < b.hi
        if op == "<=":
            return a.lo is None or b.hi is None or a.lo <= b.hi
        if op == ">":
            return a.hi is None or b.lo is None or a.hi > b.lo
        if op == ">=":
            return a.hi is None or b.lo is None or a.hi >= b.lo
    except _ERRORS:
        return True
    return True


def _lt(x: Any, y: Any) -> bool:
    """``x < y`` with unknown (None) ends never less."""
    return x is not None and y is not None and bool(x < y)


def _within(value: Any, r: _Range) -> bool:
    return not ((r.lo is not None and value < r.lo) or (r.hi is not None and value > r.hi))


def _may_start_with(prefix: str, r: _Range) -> bool:
    """Whether a string in ``r`` may start with ``prefix``."""
    if not prefix:
        return True
    if r.hi is not None and r.hi < prefix:
        return False
    # Every string above ``lo`` that does not start with the prefix sorts after all that do.
    return not (r.lo is not None and r.lo > prefix and not r.lo.startswith(prefix))


def _neg(value: Any) -> Any:
    if value is None:
        return None
    try:
        return -value
    except _ERRORS:
        return None


def _plus(x: Any, y: Any) -> Any:
    if x is None or y is None:
        return None
    try:
        if isinstance(x, decimal.Decimal) or isinstance(y, decimal.Decimal):
            return _EXACT.add(decimal.Decimal(x), decimal.Decimal(y))
        return x + y
    except _ERRORS:
        return None


def _minus(x: Any, y: Any) -> Any:
    if x is None or y is None:
        return None
    try:
        if isinstance(x, decimal.Decimal) or isinstance(y, decimal.Decimal):
            return _EXACT.subtract(decimal.Decimal(x), decimal.Decimal(y))
        return x - y
    except _ERRORS:
        return None


def _cast_value(value: Any, src: pa.DataType, dst: pa.DataType, safe: bool) -> Any:
    """``value`` cast as evaluation casts it (the same rounding); None if that fails."""
    if value is None:
        return None
    try:
        result = cast_values(pa.array([value], type=src), src, dst, safe)[0].as_py()
    except _ERRORS:
        return None
    return None if _is_nan(result) else result


# --- row-group pushdown ---------------------------------------------------------------

#: Column types whose Parquet row-group statistics order values as SQL does.
_PUSHDOWN_CATEGORIES = ("int", "decimal", "string", "bool", "date", "timestamp")


def row_group_pushdown(expr: ast.Expr, exclude: frozenset[str] = frozenset()) -> ast.Expr | None:
    """The part of a bound predicate a Parquet reader may check against row-group statistics.

    Returns the conjunction of the top-level conjuncts of ``expr`` that are safe to hand
    to pyarrow's Parquet reader (None if there is none); the caller still filters every
    row with the whole predicate, so dropping conjuncts only reads more. Safe means
    built with AND/OR/NOT from ``column op literal``, ``column IN (literals)`` and
    ``column IS [NOT] NULL`` over columns of integer, decimal, string, boolean, date
    and timestamp types, none in ``exclude``. Floating-point columns are never pushed
    down: Parquet statistics leave NaN out, and NaN compares above every number.
    Nothing that can fail at run time (arithmetic, casts, functions) is pushed down.
    """
    items = expr.items if isinstance(expr, ast.And) else (expr,)
    safe = tuple(item for item in items if _pushable(item, exclude))
    if not safe:
        return None
    return safe[0] if len(safe) == 1 else ast.And(safe, pa.bool_())


def _pushable(expr: ast.Expr, exclude: frozenset[str]) -> bool:
    if isinstance(expr, ast.And | ast.Or):
        return all(_pushable(item, exclude) for item in expr.items)
    if isinstance(expr, ast.Not):
        return _pushable(expr.operand, exclude)
    if isinstance(expr, ast.Compare):
        pair = (expr.left, expr.right)
        return any(
            _plain_column(a, exclude) and isinstance(b, ast.Literal) and b.value is not None
            for a, b in (pair, pair[::-1])
        )
    if isinstance(expr, ast.In):
        return _plain_column(expr.operand, exclude)
    if isinstance(expr, ast.IsNull):
        return _plain_column(expr.operand, exclude)
    return False


def _plain_column(expr: ast.Expr, exclude: frozenset[str]) -> bool:
    return (
        isinstance(expr, ast.Column)
        and expr.name not in exclude
        and expr.type is not None
        and category(expr.type) in _PUSHDOWN_CATEGORIES
    )
