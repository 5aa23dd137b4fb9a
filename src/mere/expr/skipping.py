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

Floats: Parquet-style statistics ignore NaN, so a float column may hold NaN beyond
its min/max. NaN compares FALSE with everything (and ``!=`` TRUE), so for floats
FALSE (or TRUE for ``!=``) is always considered possible; NaN bounds count as unknown.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from mere.expr import ast
from mere.expr.bind import category

T, F, N = "TRUE", "FALSE", "NULL"
_ANY = frozenset((T, F, N))
_NEGATED_OP = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_MONOTONE = {
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

    ``min``/``max`` must bound every non-null value (``min <= v <= max``); None means
    unknown (or that every value is null). ``null_count`` None means unknown. Values
    are the Python objects pyarrow's ``as_py()`` gives for the column's type. A
    partition column is ``min == max == value`` with ``null_count`` equal to
    ``row_count`` when the value is NULL, else 0.
    """

    min: Any | None
    max: Any | None
    null_count: int | None
    row_count: int


@dataclass(frozen=True)
class _Range:
    """The possible values of an expression over the rows of one file."""

    lo: Any | None  # None: unknown
    hi: Any | None
    may_null: bool
    may_value: bool  # some row may be non-null
    may_nan: bool


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
        if isinstance(expr, ast.IsNull):
            r = self.range(expr.operand)
            out = _set(T if r.may_null else None, F if r.may_value else None)
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
        # A boolean value: a literal, a boolean column, a cast, a function...
        r = self.range(expr)
        return _set(
            T if r.may_value and r.hi is not False else None,
            F if r.may_value and r.lo is not True else None,
            N if r.may_null else None,
        )

    def _compare(self, op: str, a: _Range, b: _Range) -> frozenset[str]:
        null = N if (a.may_null or b.may_null) else None
        if not (a.may_value and b.may_value):
            return _set(null)
        true, false = _possible(op, a, b), _possible(_NEGATED_OP[op], a, b)
        if a.may_nan or b.may_nan:  # NaN: every comparison FALSE except !=, which is TRUE
            true, false = (True, false) if op == "!=" else (true, True)
        return _set(T if true else None, F if false else None, null)

    def _in(self, expr: ast.In) -> frozenset[str]:
        r = self.range(expr.operand)
        present = [v.value for v in expr.values if v.value is not None]
        list_has_null = len(present) < len(expr.values)
        null = N if (r.may_null or list_has_null) else None
        if not r.may_value:
            return _set(null)
        if r.may_nan or any(_is_nan(v) for v in present):
            return _set(T, F, null)
        try:
            true = any(_within(v, r) for v in present)
            single = r.lo is not None and r.hi is not None and r.lo == r.hi
            always = single and any(r.lo == v for v in present)
        except _ERRORS:
            return _set(T, F, null)
        false = not always and not list_has_null
        return _set(T if true else None, F if false else None, null)

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
        exact = len(prefix) == len(tokens)
        try:
            if exact:
                true = _within(prefix, r)
            else:
                true = _may_start_with(prefix, r)
        except _ERRORS:
            true = True
        return _set(T if true else None, F, null)

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
                return _Range(None, None, False, True, True)
            return _Range(value, value, False, True, False)
        if isinstance(expr, ast.Cast):
            return self._cast(expr)
        if isinstance(expr, ast.Neg):
            inner = self.range(expr.operand)
            return _Range(_neg(inner.hi), _neg(inner.lo), *_flags(inner))
        if isinstance(expr, ast.Arith) and expr.op in ("+", "-"):
            return self._add(expr)
        if isinstance(expr, ast.Compare | ast.And | ast.Or | ast.Not | ast.In | ast.IsNull):
            return _bool_range(self.outcomes(expr))
        if isinstance(expr, ast.IsBool | ast.Like):
            return _bool_range(self.outcomes(expr))
        return _anything(expr.type)

    def _column(self, expr: ast.Column) -> _Range:
        facts = self.ranges.get(expr.name)
        if facts is None:
            return _anything(expr.type)
        nulls = facts.null_count
        may_null = nulls is None or nulls > 0
        may_value = nulls is None or nulls < facts.row_count
        lo = None if _is_nan(facts.min) else facts.min
        hi = None if _is_nan(facts.max) else facts.max
        return _Range(lo, hi, may_null, may_value, _floating(expr.type))

    def _cast(self, expr: ast.Cast) -> _Range:
        inner = self.range(expr.operand)
        src, dst = expr.operand.type, expr.to
        nan = inner.may_nan and _floating(dst)
        if src is None or category(dst) not in _MONOTONE.get(category(src), ()):
            return _Range(None, None, inner.may_null, inner.may_value, _floating(dst))
        lo, hi = (_cast_value(v, src, dst, expr.safe) for v in (inner.lo, inner.hi))
        return _Range(lo, hi, inner.may_null, inner.may_value, nan)

    def _add(self, expr: ast.Arith) -> _Range:
        a, b = self.range(expr.left), self.range(expr.right)
        may_null, may_value = a.may_null or b.may_null, a.may_value and b.may_value
        nan = a.may_nan or b.may_nan
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
        return _Range(lo, hi, may_null, may_value, nan)


# --- helpers --------------------------------------------------------------------------


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
    """``value`` cast as Arrow casts it (the same rounding); None if that fails."""
    if value is None:
        return None
    try:
        result = pa.scalar(value, type=src).cast(dst, safe=safe).as_py()
    except _ERRORS:
        return None
    return None if _is_nan(result) else result
