"""File skipping for a whole table at once: ``may_match`` / ``must_match`` over statistics columns.

:mod:`mere.expr.skipping` decides for one file, from Python values, whether a
predicate may (or must) hold for a row of it. This module runs the same
analysis over every file of a table in one pass of Arrow compute kernels: each
truth value a sub-predicate may take is a boolean array (one entry per file),
each bound of a value range an array of the column's statistics. The answer
is the same as the per-file analysis, file by file (the property tests check
that), at the cost of a few kernels per node of the predicate instead of a
Python walk of the tree per file.

Nodes it does not model exactly (arithmetic, most functions) make it give up
(:func:`may_match_all` returns None); the caller then asks the per-file
analysis, which remains the reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere.expr import ast
from mere.expr.arrow import cast_values
from mere.expr.bind import category
from mere.expr.skipping import MONOTONE_CASTS, NEGATED_OP, ColumnRange

#: A truth value per file: a constant for every file, or a boolean array without nulls.
Bools: TypeAlias = "bool | pa.BooleanArray"
#: A bound per file: an array (null: unknown), a scalar for every file, or None (unknown).
Bound: TypeAlias = "pa.Array | pa.Scalar | None"

#: Functions whose bounds the per-file analysis follows (this module does not).
_MONOTONE_FUNCTIONS = ("year", "date_trunc")


class Unsupported(Exception):
    """The predicate holds something this module does not analyse exactly."""


@dataclass(frozen=True)
class ColumnFacts:
    """One column's statistics over every file (arrays of one entry per file; None: unknown)."""

    min: pa.Array | None
    max: pa.Array | None
    null_count: pa.Array | None
    nan_count: pa.Array | None = None


@dataclass(frozen=True)
class Facts:
    """What the log knows of every file: row counts, and statistics by (bound) column name."""

    rows: pa.Array
    columns: Mapping[str, ColumnFacts]

    @staticmethod
    def from_ranges(
        ranges: Sequence[Mapping[str, ColumnRange]],
        rows: Sequence[int],
        types: Mapping[str, pa.DataType],
    ) -> Facts:
        """Facts from per-file :class:`ColumnRange` objects (for tests and small tables).

        A column absent from a file's ranges is unknown there.
        """
        columns = {}
        for name, type_ in types.items():
            per = [r.get(name) for r in ranges]
            columns[name] = ColumnFacts(
                pa.array([p.min if p else None for p in per], type_),
                pa.array([p.max if p else None for p in per], type_),
                pa.array([p.null_count if p else None for p in per], pa.int64()),
                pa.array([p.nan_count if p else None for p in per], pa.int64()),
            )
        return Facts(pa.array(list(rows), pa.int64()), columns)


# --- truth values per file ------------------------------------------------------------------


def _or(*xs: Bools) -> Bools:
    out: Bools = False
    for x in xs:
        if x is True or out is True:
            out = True
        elif x is False:
            continue
        elif out is False:
            out = x
        else:
            out = pc.or_(out, x)
    return out


def _and(*xs: Bools) -> Bools:
    out: Bools = True
    for x in xs:
        if x is False or out is False:
            out = False
        elif x is True:
            continue
        elif out is True:
            out = x
        else:
            out = pc.and_(out, x)
    return out


def _not(x: Bools) -> Bools:
    if isinstance(x, bool):
        return not x
    return pc.invert(x)


@dataclass(frozen=True)
class _Outcomes:
    """Per file: may the sub-predicate be TRUE, FALSE, NULL for some row?"""

    t: Bools
    f: Bools
    n: Bools

    def negate(self) -> _Outcomes:
        return _Outcomes(self.f, self.t, self.n)


_ANY = _Outcomes(True, True, True)


def _conj(parts: Sequence[_Outcomes]) -> _Outcomes:
    t = _and(*(p.t for p in parts))
    f = _or(*(p.f for p in parts))
    n = _and(_and(*(_or(p.t, p.n) for p in parts)), _or(*(p.n for p in parts)))
    return _Outcomes(t, f, n)


def _disj(parts: Sequence[_Outcomes]) -> _Outcomes:
    return _conj([p.negate() for p in parts]).negate()


@dataclass(frozen=True)
class _Range:
    """Per file: bounds of an expression's non-null, non-NaN values, and what may occur."""

    lo: Bound
    hi: Bound
    may_null: Bools
    may_value: Bools
    may_nan: Bools

    @property
    def present(self) -> Bools:
        return _or(self.may_value, self.may_nan)


def _floating(type_: pa.DataType | None) -> bool:
    return type_ is None or bool(pat.is_floating(type_))


def _anything(type_: pa.DataType | None) -> _Range:
    return _Range(None, None, True, True, _floating(type_))


# --- bounds ---------------------------------------------------------------------------------


def _known(x: Bound) -> Bools:
    """Where a bound is known."""
    if x is None:
        return False
    if isinstance(x, pa.Scalar):
        return bool(x.is_valid)
    if x.null_count == 0:
        return True
    return pc.is_valid(x)


def _cmp(fn: str, x: Bound, y: Bound) -> Bools:
    """``x <fn> y`` where both are known, False elsewhere (never null)."""
    if x is None or y is None:
        return False
    if isinstance(x, pa.Scalar) and isinstance(y, pa.Scalar):
        if not (x.is_valid and y.is_valid):
            return False
        return bool(_call(fn, x, y).as_py())
    out = _call(fn, x, y)
    if out.null_count:
        out = pc.fill_null(out, False)
    return out


def _call(fn: str, x: Any, y: Any) -> Any:
    try:
        return getattr(pc, fn)(x, y)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise Unsupported(f"cannot compare {x.type} with {y.type}") from exc


def _same_type(x: Bound, y: Bound) -> tuple[Bound, Bound]:
    """Bring a literal to the type of the statistics it is compared with, exactly, or give up."""
    if x is None or y is None:
        return x, y
    if x.type == y.type:
        return x, y
    if isinstance(y, pa.Scalar) and not isinstance(x, pa.Scalar):
        return x, _exact_cast(y, x.type)
    if isinstance(x, pa.Scalar) and not isinstance(y, pa.Scalar):
        return _exact_cast(x, y.type), y
    if category(x.type) == category(y.type) and category(x.type) in ("int", "string"):
        return x, y  # kernels compare these exactly across widths
    raise Unsupported(f"bounds of types {x.type} and {y.type}")


def _exact_cast(value: pa.Scalar, type_: pa.DataType) -> pa.Scalar:
    if not value.is_valid:
        return pa.scalar(None, type_)
    try:
        cast = pc.cast(value, type_)
        if pc.cast(cast, value.type).equals(value):
            return cast
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    raise Unsupported(f"{value} as {type_}")


def _possible(op: str, a: _Range, b: _Range) -> Bools:
    """Per file: may ``x op y`` hold for some non-null x in ``a`` and y in ``b``?"""
    alo, blo = _same_type(a.lo, b.lo)
    ahi, bhi = _same_type(a.hi, b.hi)
    if op == "=":  # not (a.hi < b.lo or b.hi < a.lo)
        return _not(
            _or(_cmp("less", *_same_type(a.hi, b.lo)), _cmp("less", *_same_type(b.hi, a.lo)))
        )
    if op == "!=":
        all_known = _and(_known(alo), _known(ahi), _known(blo), _known(bhi))
        single = _and(
            _cmp("equal", alo, ahi), _cmp("equal", *_same_type(ahi, blo)), _cmp("equal", blo, bhi)
        )
        return _or(_not(all_known), _not(single))
    if op in ("<", "<="):
        fn = "less" if op == "<" else "less_equal"
        lo, hi = _same_type(a.lo, b.hi)
        return _or(_not(_known(lo)), _not(_known(hi)), _cmp(fn, lo, hi))
    fn = "greater" if op == ">" else "greater_equal"
    hi, lo = _same_type(a.hi, b.lo)
    return _or(_not(_known(hi)), _not(_known(lo)), _cmp(fn, hi, lo))


def _value_outcomes(op: str, a: _Range, b: _Range) -> tuple[Bools, Bools]:
    """Per file: may ``x op y`` be TRUE, and FALSE, for non-null x in ``a`` and y in ``b``?"""
    both = _and(a.may_value, b.may_value)
    true: Bools = False
    false: Bools = False
    if both is not False:
        true = _and(both, _possible(op, a, b))
        false = _and(both, _possible(NEGATED_OP[op], a, b))
    for cond, result in (
        (_and(a.may_nan, b.may_value), op in (">", ">=", "!=")),
        (_and(a.may_value, b.may_nan), op in ("<", "<=", "!=")),
        (_and(a.may_nan, b.may_nan), op in ("=", "<=", ">=")),
    ):
        if result:
            true = _or(true, cond)
        else:
            false = _or(false, cond)
    return true, false


# --- the analysis ---------------------------------------------------------------------------


class _Analyzer:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.n = len(facts.rows)

    def outcomes(self, expr: ast.Expr) -> _Outcomes:
        if isinstance(expr, ast.And):
            return _conj([self.outcomes(i) for i in expr.items])
        if isinstance(expr, ast.Or):
            return _disj([self.outcomes(i) for i in expr.items])
        if isinstance(expr, ast.Not):
            return self.outcomes(expr.operand).negate()
        if isinstance(expr, ast.Compare):
            a, b = self.range(expr.left), self.range(expr.right)
            true, false = _value_outcomes(expr.op, a, b)
            return _Outcomes(true, false, _or(a.may_null, b.may_null))
        if isinstance(expr, ast.Distinct):
            out = self._not_distinct(self.range(expr.left), self.range(expr.right))
            return out if expr.negated else out.negate()
        if isinstance(expr, ast.IsNull):
            r = self.range(expr.operand)
            out = _Outcomes(r.may_null, r.present, False)
            return out.negate() if expr.negated else out
        if isinstance(expr, ast.IsBool):
            inner = self.outcomes(expr.operand)
            hit, miss = (inner.t, inner.f) if expr.value else (inner.f, inner.t)
            out = _Outcomes(hit, _or(miss, inner.n), False)
            return out.negate() if expr.negated else out
        if isinstance(expr, ast.In):
            out = self._in(expr)
            return out.negate() if expr.negated else out
        if isinstance(expr, ast.Like):
            out = self._like(expr)
            return out.negate() if expr.negated else out
        if isinstance(expr, ast.Func) and expr.name == "isnan":
            r = self.range(expr.args[0])
            return _Outcomes(r.may_nan, r.may_value, r.may_null)
        if isinstance(expr, ast.Func) and expr.name == "starts_with":
            prefix = expr.args[-1]
            if isinstance(prefix, ast.Literal) and isinstance(prefix.value, str):
                return self._prefix(self.range(expr.args[0]), prefix.value)
            return _ANY
        # A boolean value: a literal, a boolean column, a cast, a function...
        r = self.range(expr)
        return _Outcomes(
            _and(r.may_value, _not(_cmp("equal", r.hi, pa.scalar(False)))),
            _and(r.may_value, _not(_cmp("equal", r.lo, pa.scalar(True)))),
            r.may_null,
        )

    def _not_distinct(self, a: _Range, b: _Range) -> _Outcomes:
        true = _and(a.may_null, b.may_null)
        false = _or(_and(a.may_null, b.present), _and(b.may_null, a.present))
        both = _and(a.present, b.present)
        if both is not False:
            equal, unequal = _value_outcomes("=", a, b)
            true = _or(true, _and(both, equal))
            false = _or(false, _and(both, unequal))
        return _Outcomes(true, false, False)

    def _in(self, expr: ast.In) -> _Outcomes:
        r = self.range(expr.operand)
        present = [v.value for v in expr.values if v.value is not None]
        list_has_null = len(present) < len(expr.values)
        numbers = [v for v in present if not (isinstance(v, float) and math.isnan(v))]
        nan_listed = len(numbers) < len(present)
        t: Bools = False
        f: Bools = False
        n: Bools = r.may_null
        # NaN rows: found if NaN is listed, else not found (NULL when the list has a NULL)
        if nan_listed:
            t = _or(t, r.may_nan)
        elif list_has_null:
            n = _or(n, r.may_nan)
        else:
            f = _or(f, r.may_nan)
        if r.may_value is not False:
            within: Bools = False
            always: Bools = False
            single = _and(_known(r.lo), _known(r.hi), _cmp("equal", r.lo, r.hi))
            for item in expr.values:
                value = item.value
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    continue
                literal = self._literal_bound(value, item.type)
                lo, v = _same_type(r.lo, literal)
                hi, w = _same_type(r.hi, literal)
                inside = _not(_or(_cmp("less", v, lo), _cmp("greater", w, hi)))
                within = _or(within, inside)
                always = _or(always, _and(single, _cmp("equal", lo, v)))
            t = _or(t, _and(r.may_value, within))
            miss = _and(r.may_value, _not(always))
            if list_has_null:
                n = _or(n, miss)
            else:
                f = _or(f, miss)
        return _Outcomes(t, f, n)

    def _like(self, expr: ast.Like) -> _Outcomes:
        r = self.range(expr.operand)
        null = r.may_null
        tokens = ast.like_tokens(expr.pattern, expr.escape)
        if r.may_value is False:
            return _Outcomes(False, False, null)
        if tokens and all(c == "%" and w for c, w in tokens):
            return _Outcomes(r.may_value, False, null)  # '%' matches every non-null string
        if expr.case_insensitive:
            return _Outcomes(r.may_value, r.may_value, null)
        prefix = ""
        for char, wildcard in tokens:
            if wildcard:
                break
            prefix += char
        rest = tokens[len(prefix) :]
        if rest and all(c == "%" and w for c, w in rest):
            return self._prefix(r, prefix)
        if len(prefix) == len(tokens):
            literal = pa.scalar(prefix, pa.string())
            lo, v = _same_type(r.lo, literal)
            hi, w = _same_type(r.hi, literal)
            true = _not(_or(_cmp("less", v, lo), _cmp("greater", w, hi)))
        else:
            true = self._may_start_with(prefix, r)
        # a file whose values are all null: no TRUE, no FALSE
        return _Outcomes(_and(r.may_value, true), r.may_value, null)

    def _prefix(self, r: _Range, prefix: str) -> _Outcomes:
        null = r.may_null
        if r.may_value is False:
            return _Outcomes(False, False, null)
        true = self._may_start_with(prefix, r)
        both = _and(_known(r.lo), _known(r.hi), _starts(r.lo, prefix), _starts(r.hi, prefix))
        return _Outcomes(_and(r.may_value, true), _and(r.may_value, _not(both)), null)

    def _may_start_with(self, prefix: str, r: _Range) -> Bools:
        if not prefix:
            return True
        literal = pa.scalar(prefix, pa.string())
        hi, p = _same_type(r.hi, literal)
        lo, q = _same_type(r.lo, literal)
        below = _cmp("less", hi, p)
        beyond = _and(_cmp("greater", lo, q), _not(_starts(lo, prefix)))
        return _not(_or(below, beyond))

    # --- values -------------------------------------------------------------------------

    def range(self, expr: ast.Expr) -> _Range:
        if isinstance(expr, ast.Column):
            return self._column(expr)
        if isinstance(expr, ast.Literal):
            value = expr.value
            if value is None:
                return _Range(None, None, True, False, False)
            if isinstance(value, float) and math.isnan(value):
                return _Range(None, None, False, False, True)
            bound = self._literal_bound(value, expr.type)
            return _Range(bound, bound, False, True, False)
        if isinstance(expr, ast.Cast):
            return self._cast(expr)
        if isinstance(
            expr,
            ast.Compare
            | ast.And
            | ast.Or
            | ast.Not
            | ast.In
            | ast.IsNull
            | ast.IsBool
            | ast.Like
            | ast.Distinct,
        ) or (isinstance(expr, ast.Func) and expr.name in ("isnan", "starts_with")):
            return _bool_range(self.outcomes(expr))
        if isinstance(expr, ast.Neg) or (isinstance(expr, ast.Arith) and expr.op in ("+", "-")):
            raise Unsupported("arithmetic bounds")  # the per-file analysis tracks them
        if isinstance(expr, ast.Func) and expr.name in _MONOTONE_FUNCTIONS:
            raise Unsupported(f"bounds of {expr.name}()")
        return _anything(expr.type)

    @staticmethod
    def _literal_bound(value: Any, type_: pa.DataType | None) -> pa.Scalar:
        try:
            return pa.scalar(value, type_)
        except (
            pa.ArrowInvalid,
            pa.ArrowTypeError,
            pa.ArrowNotImplementedError,
            TypeError,
            ValueError,
            OverflowError,
        ) as exc:
            raise Unsupported(f"literal {value!r}") from exc

    def _column(self, expr: ast.Column) -> _Range:
        facts = self.facts.columns.get(expr.name)
        if facts is None:
            return _anything(expr.type)
        rows = self.facts.rows
        floating = _floating(expr.type)
        nulls = facts.null_count
        nans = facts.nan_count if floating else None
        null_known = _known(nulls)
        may_null = _or(_not(null_known), _cmp("greater", nulls, pa.scalar(0, pa.int64())))
        if floating:
            nan_known = _known(nans)
            may_nan = _or(_not(nan_known), _cmp("greater", nans, pa.scalar(0, pa.int64())))
            # with both counts known: some row is neither NULL nor NaN
            both = _and(null_known, nan_known)
            sum_less = (
                _cmp("less", pc.add(nulls, nans), rows)
                if nulls is not None and nans is not None
                else False
            )
            some_left = _or(_not(null_known), _cmp("less", nulls, rows))
            may_value = _or(_and(both, sum_less), _and(_not(both), some_left))
        else:
            may_nan = False
            may_value = _or(_not(null_known), _cmp("less", nulls, rows))
        lo, hi = facts.min, facts.max
        if lo is not None and pat.is_floating(lo.type):
            lo = pc.if_else(pc.is_nan(lo), pa.scalar(None, lo.type), lo)
        if hi is not None and pat.is_floating(hi.type):
            hi = pc.if_else(pc.is_nan(hi), pa.scalar(None, hi.type), hi)
        return _Range(lo, hi, may_null, may_value, may_nan)

    def _cast(self, expr: ast.Cast) -> _Range:
        inner = self.range(expr.operand)
        src, dst = expr.operand.type, expr.to
        if src is None or category(dst) not in MONOTONE_CASTS.get(category(src), ()):
            return _Range(None, None, inner.may_null, True, _floating(dst))
        # Where NaN may meet a cast to a non-float (which fails): nothing is known.
        failing = _and(inner.may_nan, not _floating(dst))
        lo, hi = (self._cast_bound(b, src, dst, expr.safe) for b in (inner.lo, inner.hi))
        both = _and(_known(lo), _known(hi), _not(failing))  # a bound that did not convert
        lo, hi = _where(both, lo), _where(both, hi)
        may_value = _or(inner.may_value, failing)
        may_nan = _and(inner.may_nan, _not(failing))
        return _Range(lo, hi, inner.may_null, may_value, may_nan)

    @staticmethod
    def _cast_bound(bound: Bound, src: pa.DataType, dst: pa.DataType, safe: bool) -> Bound:
        """The bound cast as evaluation casts it; null where the cast fails or gives NaN."""
        if bound is None:
            return None
        scalar = isinstance(bound, pa.Scalar)
        values = pa.array([bound.as_py()], bound.type) if scalar else bound
        if values.type != src:
            values = pc.cast(values, src, safe=False)
        try:
            out = cast_values(values, src, dst, safe)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
            if scalar:
                return pa.scalar(None, dst)
            out = _cast_each(values, src, dst, safe)
        if pat.is_floating(out.type):
            out = pc.if_else(pc.is_nan(out), pa.scalar(None, out.type), out)
        return out[0] if scalar else out


def _cast_each(values: pa.Array, src: pa.DataType, dst: pa.DataType, safe: bool) -> pa.Array:
    out = []
    for v in values.to_pylist():
        try:
            out.append(
                None if v is None else cast_values(pa.array([v], src), src, dst, safe)[0].as_py()
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
            out.append(None)
    return pa.array(out, dst)


def _where(cond: Bools, value: Bound) -> Bound:
    """``value`` where ``cond``, unknown elsewhere."""
    if cond is True or value is None:
        return value
    if cond is False:
        return None
    if isinstance(value, pa.Scalar):
        value = pa.array([value.as_py()] * len(cond), value.type)
    return pc.if_else(cond, value, pa.scalar(None, value.type))


def _starts(x: Bound, prefix: str) -> Bools:
    if x is None:
        return False
    if isinstance(x, pa.Scalar):
        return bool(x.is_valid and isinstance(x.as_py(), str) and x.as_py().startswith(prefix))
    if not (pat.is_string(x.type) or pat.is_large_string(x.type)):
        return False
    out = pc.starts_with(x, prefix)
    return pc.fill_null(out, False) if out.null_count else out


def _bool_range(o: _Outcomes) -> _Range:
    """The range of a boolean value from its possible truth values."""
    lo_false, lo_true = o.f, _and(_not(o.f), o.t)
    hi_true, hi_false = o.t, _and(_not(o.t), o.f)
    return _Range(
        _bool_bound(lo_false, lo_true),
        _bool_bound(hi_false, hi_true),
        o.n,
        _or(o.t, o.f),
        False,
    )


def _bool_bound(is_false: Bools, is_true: Bools) -> Bound:
    if isinstance(is_false, bool) and isinstance(is_true, bool):
        if is_false:
            return pa.scalar(False)
        return pa.scalar(True) if is_true else None
    n = len(is_false) if not isinstance(is_false, bool) else len(is_true)  # type: ignore[arg-type]
    f = is_false if not isinstance(is_false, bool) else pa.array([is_false] * n)
    t = is_true if not isinstance(is_true, bool) else pa.array([is_true] * n)
    return pc.if_else(f, False, pc.if_else(t, True, pa.scalar(None, pa.bool_())))


# --- the entry points -----------------------------------------------------------------------


def _array(x: Bools, n: int) -> pa.BooleanArray:
    if isinstance(x, bool):
        return pa.array([x] * n, pa.bool_())
    return x


def may_match_all(predicate: ast.Expr, facts: Facts) -> pa.BooleanArray | None:
    """Per file: False only where no row can make ``predicate`` TRUE; None if not analysed."""
    try:
        out = _Analyzer(facts).outcomes(predicate)
    except Unsupported:
        return None
    n = len(facts.rows)
    return pc.and_(pc.greater(facts.rows, 0), _array(out.t, n))


def must_match_all(predicate: ast.Expr, facts: Facts) -> pa.BooleanArray | None:
    """Per file: True only where every row makes ``predicate`` TRUE; None if not analysed."""
    try:
        out = _Analyzer(facts).outcomes(predicate)
    except Unsupported:
        return None
    n = len(facts.rows)
    only_true = _and(out.t, _not(out.f), _not(out.n))
    return pc.and_(pc.greater(facts.rows, 0), _array(only_true, n))
