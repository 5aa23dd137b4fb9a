"""The expression tree: small immutable nodes shared by parsing, binding, skipping and evaluation.

A node is a frozen dataclass, so trees compare by value, hash, and can be shared
freely between threads. Every node has a ``type`` field: ``None`` until
:func:`mere.expr.bind` resolves it against a schema (literals carry their natural
type from the start: ``1`` is ``int64``, ``1.5`` is ``decimal128(2, 1)``, ``'a'``
is ``string``, ``NULL`` is ``null``).

``BETWEEN`` does not appear here: the parser rewrites ``x BETWEEN a AND b`` to
``x >= a AND x <= b``, which has exactly the same three-valued meaning.

This module also holds :func:`to_sql` (the canonical text of a tree, used in
error messages and history) and :func:`referenced_columns`, because both only
need the shape of the tree.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

#: Comparison operators, in the spelling the tree uses (``==`` and ``<>`` are normalised).
COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=")
#: Binary value operators. ``/`` is true division, ``//`` integer division, ``||`` concatenation.
ARITH_OPS = ("+", "-", "*", "/", "//", "%", "||")
#: Scalar functions the engine evaluates (lower-case names).
FUNCTIONS = (
    "abs",
    "coalesce",
    "contains",
    "date_trunc",
    "day",
    "ends_with",
    "hour",
    "isfinite",
    "isinf",
    "isnan",
    "length",
    "lower",
    "ltrim",
    "minute",
    "month",
    "quarter",
    "rtrim",
    "second",
    "starts_with",
    "substring",
    "trim",
    "upper",
    "year",
)
#: The units ``date_trunc`` takes (DuckDB's names; weeks start on Monday).
DATE_TRUNC_UNITS = (
    "year",
    "quarter",
    "month",
    "week",
    "day",
    "hour",
    "minute",
    "second",
    "millisecond",
    "microsecond",
)


class Expr:
    """Base class of every expression node."""

    __slots__ = ()

    #: The node's resolved Arrow type; ``None`` before binding (set by each dataclass).
    type: pa.DataType | None

    def children(self) -> tuple[Expr, ...]:
        """The direct sub-expressions, in order."""
        out: list[Expr] = []
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Expr):
                out.append(value)
            elif isinstance(value, tuple):
                out.extend(v for v in value if isinstance(v, Expr))
        return tuple(out)

    def walk(self) -> Iterator[Expr]:
        """This node and all its descendants, depth first, parents before children."""
        stack: list[Expr] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children()))

    def __str__(self) -> str:
        return to_sql(self)


@dataclass(frozen=True, slots=True)
class Column(Expr):
    """A column reference; ``qualifier`` keeps the ``t`` of ``t.col`` (ignored by binding)."""

    name: str
    qualifier: str | None = None
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    """A constant. ``value`` is the Python object pyarrow's ``as_py()`` gives for ``type``."""

    value: Any
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Compare(Expr):
    """``left op right`` with ``op`` one of :data:`COMPARE_OPS`; NULL if either side is NULL."""

    op: str
    left: Expr
    right: Expr
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class And(Expr):
    """Kleene conjunction of two or more items (FALSE wins over NULL)."""

    items: tuple[Expr, ...]
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Or(Expr):
    """Kleene disjunction of two or more items (TRUE wins over NULL)."""

    items: tuple[Expr, ...]
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Not(Expr):
    """Logical negation; NOT NULL is NULL."""

    operand: Expr
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class In(Expr):
    """``operand [NOT] IN (values...)`` over literal values, with SQL NULL semantics.

    ``x IN (1, NULL)`` is TRUE when x = 1 and NULL otherwise; ``x NOT IN (1, NULL)``
    is never TRUE. A list with non-literal items is an :class:`InList` until bound.
    """

    operand: Expr
    values: tuple[Literal, ...]
    negated: bool = False
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class InList(Expr):
    """``operand [NOT] IN (values...)`` where some value is not a literal; unbound only.

    Binding gives the operand and every value one common type, as DuckDB does, and
    then rewrites the list to an OR of an :class:`In` over its literals and ``=``
    comparisons with its other values (so a bound tree never holds an InList).
    """

    operand: Expr
    values: tuple[Expr, ...]
    negated: bool = False
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Between(Expr):
    """``operand BETWEEN low AND high``; unbound only.

    Binding gives the three one common type, as DuckDB does, and then rewrites it to
    ``operand >= low AND operand <= high``.
    """

    operand: Expr
    low: Expr
    high: Expr
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class IsNull(Expr):
    """``operand IS [NOT] NULL``; never NULL itself."""

    operand: Expr
    negated: bool = False
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Distinct(Expr):
    """``left IS DISTINCT FROM right`` (``negated``: ``IS NOT DISTINCT FROM``); never NULL.

    Two NULLs are not distinct, a NULL and a value are; two values are distinct
    when ``left = right`` is FALSE (so NaN is not distinct from NaN).
    """

    left: Expr
    right: Expr
    negated: bool = False
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class IsBool(Expr):
    """``operand IS [NOT] TRUE`` / ``IS [NOT] FALSE``; never NULL itself."""

    operand: Expr
    value: bool
    negated: bool = False
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Like(Expr):
    """``operand [NOT] [I]LIKE pattern [ESCAPE escape]``.

    ``%`` matches any run of characters and ``_`` one character. As in standard
    SQL and DuckDB there is no escape character unless ``ESCAPE`` names one.
    """

    operand: Expr
    pattern: str
    negated: bool = False
    case_insensitive: bool = False
    escape: str | None = None
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Arith(Expr):
    """``left op right`` with ``op`` one of :data:`ARITH_OPS`; NULL if either side is NULL."""

    op: str
    left: Expr
    right: Expr
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Neg(Expr):
    """Unary minus."""

    operand: Expr
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """``CAST(operand AS to)``.

    ``safe`` casts fail on overflow or lost precision (every user-written cast);
    binding inserts ``safe=False`` casts only where rounding is the intended
    meaning (an integer compared with a float becomes the nearest float).
    """

    operand: Expr
    to: pa.DataType
    safe: bool = True
    type: pa.DataType | None = None


@dataclass(frozen=True, slots=True)
class Func(Expr):
    """A call of one of the scalar functions in :data:`FUNCTIONS`."""

    name: str
    args: tuple[Expr, ...]
    type: pa.DataType | None = None


def referenced_columns(expr: Expr) -> set[str]:
    """The names of the columns ``expr`` reads (as written if unbound; qualifiers dropped)."""
    return {node.name for node in expr.walk() if isinstance(node, Column)}


def like_tokens(pattern: str, escape: str | None) -> list[tuple[str, bool]]:
    """A LIKE pattern as ``(text, is_wildcard)`` pieces, one character each.

    Wildcards are ``%`` and ``_``; the ``escape`` character (if any) makes the next
    character literal. Raises ValueError if the pattern ends with the escape character.
    """
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape:
            if i + 1 >= len(pattern):
                raise ValueError("it ends with the escape character")
            out.append((pattern[i + 1], False))
            i += 2
            continue
        out.append((c, c in "%_"))
        i += 1
    return out


# --- canonical SQL text ---------------------------------------------------------------

# Binding strength, higher binds tighter; used to print the fewest parentheses that keep
# the tree's shape when the text is parsed again.
_PREC_OR, _PREC_AND, _PREC_NOT, _PREC_CMP, _PREC_CONCAT, _PREC_ADD, _PREC_MUL, _PREC_NEG = range(
    1, 9
)
_PREC_ATOM = 100
_ARITH_PREC = {"+": _PREC_ADD, "-": _PREC_ADD, "||": _PREC_CONCAT}

_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def to_sql(expr: Expr) -> str:
    """Readable canonical SQL for ``expr`` (DuckDB dialect); parsing it gives the same tree.

    Literals print in their plainest form (a bound ``int32`` literal prints as ``5``),
    so re-parsing a *bound* tree may give literals of the natural type instead; binding
    it again gives the same result.
    """
    return _sql(expr)


def _prec(expr: Expr) -> int:
    if isinstance(expr, Or):
        return _PREC_OR
    if isinstance(expr, And):
        return _PREC_AND
    if isinstance(expr, Not):
        return _PREC_NOT
    if isinstance(expr, Compare | In | InList | Between | IsNull | IsBool | Like | Distinct):
        return _PREC_CMP
    if isinstance(expr, Arith):
        return _ARITH_PREC.get(expr.op, _PREC_MUL)
    if isinstance(expr, Neg):
        return _PREC_NEG
    if isinstance(expr, Literal) and _is_negative_number(expr.value):
        return _PREC_NEG
    return _PREC_ATOM


def _wrap(expr: Expr, min_prec: int) -> str:
    """The text of ``expr``, parenthesised unless it binds at least as tightly as ``min_prec``."""
    text = _sql(expr)
    return text if _prec(expr) >= min_prec else f"({text})"


def _sql(expr: Expr) -> str:
    if isinstance(expr, Column):
        name = quote_identifier(expr.name)
        return f"{quote_identifier(expr.qualifier)}.{name}" if expr.qualifier else name
    if isinstance(expr, Literal):
        return literal_sql(expr.value, expr.type)
    if isinstance(expr, Compare):
        # Comparisons do not chain: both operands must bind tighter.
        return f"{_wrap(expr.left, _PREC_CONCAT)} {expr.op} {_wrap(expr.right, _PREC_CONCAT)}"
    if isinstance(expr, And):
        return " AND ".join(_wrap(item, _PREC_AND + 1) for item in expr.items)
    if isinstance(expr, Or):
        return " OR ".join(_wrap(item, _PREC_OR + 1) for item in expr.items)
    if isinstance(expr, Not):
        return f"NOT {_wrap(expr.operand, _PREC_ATOM)}"
    if isinstance(expr, In | InList):
        values = ", ".join(_sql(v) for v in expr.values)
        neg = " NOT" if expr.negated else ""
        return f"{_wrap(expr.operand, _PREC_CONCAT)}{neg} IN ({values})"
    if isinstance(expr, Between):
        low, high = _wrap(expr.low, _PREC_CONCAT), _wrap(expr.high, _PREC_CONCAT)
        return f"{_wrap(expr.operand, _PREC_CONCAT)} BETWEEN {low} AND {high}"
    if isinstance(expr, IsNull):
        return f"{_wrap(expr.operand, _PREC_CONCAT)} IS {'NOT ' if expr.negated else ''}NULL"
    if isinstance(expr, Distinct):
        neg = "NOT " if expr.negated else ""
        left, right = _wrap(expr.left, _PREC_CONCAT), _wrap(expr.right, _PREC_CONCAT)
        return f"{left} IS {neg}DISTINCT FROM {right}"
    if isinstance(expr, IsBool):
        neg = "NOT " if expr.negated else ""
        return f"{_wrap(expr.operand, _PREC_CONCAT)} IS {neg}{'TRUE' if expr.value else 'FALSE'}"
    if isinstance(expr, Like):
        neg = " NOT" if expr.negated else ""
        op = "ILIKE" if expr.case_insensitive else "LIKE"
        escape = f" ESCAPE {quote_string(expr.escape)}" if expr.escape is not None else ""
        return f"{_wrap(expr.operand, _PREC_CONCAT)}{neg} {op} {quote_string(expr.pattern)}{escape}"
    if isinstance(expr, Arith):
        prec = _prec(expr)
        # Left-associative: an equal-precedence left operand needs no parentheses.
        return f"{_wrap(expr.left, prec)} {expr.op} {_wrap(expr.right, prec + 1)}"
    if isinstance(expr, Neg):
        return f"-{_wrap(expr.operand, _PREC_ATOM)}"
    if isinstance(expr, Cast):
        return f"CAST({_sql(expr.operand)} AS {type_sql(expr.to)})"
    if isinstance(expr, Func):
        return f"{expr.name}({', '.join(_sql(a) for a in expr.args)})"
    raise TypeError(f"not an expression node: {expr!r}")


@functools.lru_cache(maxsize=1024)
def quote_identifier(name: str) -> str:
    """``name`` as SQL: bare when it reads back as itself, else in double quotes."""
    if _SIMPLE_NAME.match(name) and not _is_keyword(name):
        return name
    return '"' + name.replace('"', '""') + '"'


@functools.lru_cache(maxsize=1024)
def _is_keyword(name: str) -> bool:
    """Whether a bare ``name`` would not parse back as a plain column reference."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(name, dialect="duckdb")
    except Exception:  # any failure means: quote it
        return True
    return not (
        isinstance(tree, exp.Column)
        and tree.name == name
        and not tree.table
        and not tree.this.quoted
    )


def quote_string(text: str) -> str:
    """``text`` as a SQL string literal (``'`` doubled)."""
    return "'" + text.replace("'", "''") + "'"


def _is_negative_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        return False
    return value < 0 or (isinstance(value, float) and math.copysign(1.0, value) < 0)


def literal_sql(value: Any, type_: pa.DataType | None) -> str:
    """The SQL text of a literal value."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return f"CAST('{value!r}' AS {type_sql(type_ or pa.float64())})"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return quote_string(value)
    if isinstance(value, bytes):
        try:
            return quote_string(value.decode("utf-8"))
        except UnicodeDecodeError:
            return "from_hex(" + quote_string(value.hex()) + ")"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return f"TIMESTAMPTZ {quote_string(value.isoformat(sep=' '))}"
        return f"TIMESTAMP {quote_string(value.isoformat(sep=' '))}"
    if isinstance(value, dt.date):
        return f"DATE {quote_string(value.isoformat())}"
    if isinstance(value, dt.time):
        return f"TIME {quote_string(value.isoformat())}"
    return quote_string(str(value))


def type_sql(type_: pa.DataType) -> str:
    """A SQL (DuckDB) spelling of an Arrow type, for CAST texts and messages."""
    simple = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.uint8(): "UTINYINT",
        pa.uint16(): "USMALLINT",
        pa.uint32(): "UINTEGER",
        pa.uint64(): "UBIGINT",
        pa.float16(): "FLOAT",
        pa.float32(): "REAL",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR",
        pa.string_view(): "VARCHAR",
        pa.binary(): "BLOB",
        pa.large_binary(): "BLOB",
        pa.date32(): "DATE",
        pa.date64(): "DATE",
        pa.null(): "NULL",
    }
    if type_ in simple:
        return simple[type_]
    if pat.is_decimal(type_):
        return f"DECIMAL({type_.precision}, {type_.scale})"
    if pat.is_timestamp(type_):
        base = "TIMESTAMPTZ" if type_.tz is not None else "TIMESTAMP"
        suffix = {"s": "_S", "ms": "_MS", "us": "", "ns": "_NS"}[type_.unit]
        return base if type_.tz is not None else base + suffix
    if pat.is_time(type_):
        return "TIME"
    return str(type_).upper()
