"""SQL text to expression tree, using sqlglot's DuckDB dialect.

The DuckDB dialect is used because DuckDB is the reference these semantics are
tested against and because its grammar covers what users write in filters:
``'strings'`` with ``''`` escapes, ``"quoted identifiers"``, ``==``/``!=``/``<>``,
``//`` for integer division, ``x::TYPE`` casts and typed literals such as
``DATE '2024-01-01'``. sqlglot only tokenises and builds a tree; every node it
produces is translated here by an explicit allow-list, so anything not listed
(subqueries, aggregates, window functions, statements, parameters, CASE, ...)
becomes :class:`~mere.errors.InvalidExpression` naming the construct.

Normalisations made here, so later stages see one canonical form:

* ``x BETWEEN a AND b`` is a :class:`~mere.expr.ast.Between` (``NOT BETWEEN`` its
  negation), which binding makes ``x >= a AND x <= b`` once the three have one type;
* ``NOT`` directly over ``IN``/``LIKE``/``IS NULL``/``IS TRUE``/``IS DISTINCT FROM`` flips
  their ``negated`` flag;
* function spellings become one name: ``substr`` is ``substring``, ``ltrim(s)`` and
  ``TRIM(LEADING FROM s)`` are ``ltrim``, ``EXTRACT(year FROM x)`` and
  ``date_part('year', x)`` are ``year(x)``;
* nested ``AND``/``OR`` are flattened;
* unary minus on a number and casts of literals (``DATE '...'``, ``CAST('1' AS INT)``)
  are folded into typed literals;
* an ``IN`` list containing non-literals is an :class:`~mere.expr.ast.InList`, which
  binding makes an OR of ``=`` comparisons once the whole list has one type.

Numeric literals: integers are ``int64`` (``decimal128(38, 0)`` beyond that range),
numbers with a decimal point are exact decimals (``1.5`` is ``decimal128(2, 1)``, as in
DuckDB), numbers with an exponent (``1e3``) are ``float64``.
"""

from __future__ import annotations

import decimal
from typing import Any, NoReturn, cast

import pyarrow as pa
import pyarrow.types as pat
import sqlglot
from sqlglot import exp

from mere.errors import InvalidExpression
from mere.expr import ast
from mere.expr.bind import SUPPORTED_SQL, cast_literal, natural_int_type

DIALECT = "duckdb"

_COMPARE = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITH = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.IntDiv: "//",
    exp.Mod: "%",
    exp.DPipe: "||",
}
#: One-argument functions, by their sqlglot node.
_FUNCS: dict[type[exp.Expression], str] = {
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length",
    exp.Abs: "abs",
    exp.IsNan: "isnan",
    exp.IsInf: "isinf",
    exp.Year: "year",
    exp.Quarter: "quarter",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
    exp.Minute: "minute",
    exp.Second: "second",
}
#: Two-argument string predicates, by their sqlglot node.
_STRING_TESTS: dict[type[exp.Expression], str] = {
    exp.StartsWith: "starts_with",
    exp.EndsWith: "ends_with",
    exp.Contains: "contains",
}
#: Functions sqlglot leaves anonymous, by lower-case name: (mere name, argument count).
_ANONYMOUS = {"isfinite": ("isfinite", 1), "prefix": ("starts_with", 2), "suffix": ("ends_with", 2)}
#: The parts ``EXTRACT(part FROM x)`` and ``date_part('part', x)`` take.
_DATE_PARTS = ("year", "quarter", "month", "day", "hour", "minute", "second")

_T = exp.DataType.Type
_SIMPLE_TYPES: dict[Any, pa.DataType] = {
    _T.TINYINT: pa.int8(),
    _T.SMALLINT: pa.int16(),
    _T.INT: pa.int32(),
    _T.BIGINT: pa.int64(),
    _T.UTINYINT: pa.uint8(),
    _T.USMALLINT: pa.uint16(),
    _T.UINT: pa.uint32(),
    _T.UBIGINT: pa.uint64(),
    _T.FLOAT: pa.float32(),
    _T.DOUBLE: pa.float64(),
    _T.BOOLEAN: pa.bool_(),
    _T.VARCHAR: pa.string(),
    _T.NVARCHAR: pa.string(),
    _T.TEXT: pa.string(),
    _T.CHAR: pa.string(),
    _T.NCHAR: pa.string(),
    _T.BPCHAR: pa.string(),
    _T.BLOB: pa.binary(),
    _T.VARBINARY: pa.binary(),
    _T.BINARY: pa.binary(),
    _T.DATE: pa.date32(),
    _T.TIME: pa.time64("us"),
    _T.TIMESTAMP_S: pa.timestamp("s"),
    _T.TIMESTAMP_MS: pa.timestamp("ms"),
    _T.TIMESTAMP_NS: pa.timestamp("ns"),
}
_TIMESTAMP_TYPES = (_T.TIMESTAMP, _T.TIMESTAMPNTZ, _T.DATETIME)
_TIMESTAMPTZ_TYPES = (_T.TIMESTAMPTZ, _T.TIMESTAMPLTZ)
_PRECISION_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}
_SUPPORTED_TYPES = (
    "TINYINT, SMALLINT, INTEGER, BIGINT, UTINYINT..UBIGINT, REAL/FLOAT, DOUBLE, DECIMAL(p, s), "
    "BOOLEAN, VARCHAR, BLOB, DATE, TIME, TIMESTAMP[_S|_MS|_NS], TIMESTAMPTZ"
)


def parse(sql: str) -> ast.Expr:
    """Parse one SQL expression (a filter predicate or a value) into a tree.

    Raises:
        InvalidExpression: the text does not parse, holds more than one statement,
            or uses a construct outside the supported subset (the message names it).
    """
    if not isinstance(sql, str):
        raise InvalidExpression(
            f"expression must be a string, not {type(sql).__name__}", help=SUPPORTED_SQL
        )
    if not sql.strip():
        raise InvalidExpression("expression is empty", help=SUPPORTED_SQL)
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=DIALECT) if s is not None]
    except sqlglot.errors.ParseError as e:
        detail = "; ".join(
            f"{err.get('description')} at line {err.get('line')}, column {err.get('col')}"
            for err in e.errors[:3]
        )
        raise InvalidExpression(
            f"cannot parse expression {sql!r}: {detail}", help=SUPPORTED_SQL
        ) from None
    except RecursionError:
        raise InvalidExpression(f"expression {_short(sql)!r} is nested too deeply") from None
    except Exception as e:  # tokenizer and other sqlglot errors: never leak them
        raise InvalidExpression(
            f"cannot parse expression {sql!r}: {_first_line(str(e))}", help=SUPPORTED_SQL
        ) from None
    if len(statements) != 1:
        raise InvalidExpression(
            f"expression {sql!r} holds {len(statements)} statements; give exactly one expression",
            help=SUPPORTED_SQL,
        )
    try:
        return _Translator(sql).convert(cast(exp.Expression, statements[0]))
    except RecursionError:
        raise InvalidExpression(f"expression {_short(sql)!r} is nested too deeply") from None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "syntax error"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Translator:
    """Translates one sqlglot tree; keeps the source text for error messages."""

    def __init__(self, sql: str) -> None:
        self.sql = sql

    def fail(self, node: exp.Expression, what: str, help: str = SUPPORTED_SQL) -> NoReturn:
        """Raise InvalidExpression quoting ``node``'s text and the whole expression."""
        try:
            text = node.sql(dialect=DIALECT)
        except Exception:  # printing a malformed node must not hide the real error
            text = node.key.upper()
        raise InvalidExpression(f"{what}: {_short(text)!r} in expression {self.sql!r}", help=help)

    def convert(self, node: exp.Expression) -> ast.Expr:
        """Translate ``node`` or raise InvalidExpression."""
        if isinstance(node, exp.Paren):
            return self.convert(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Literal | exp.Boolean | exp.Null):
            return self._literal(node)
        for cls, op in _COMPARE.items():
            if isinstance(node, cls):
                return ast.Compare(op, self.convert(node.this), self.convert(node.expression))
        if isinstance(node, exp.And | exp.Or):
            return self._connective(node)
        if isinstance(node, exp.Not):
            return _negate(self.convert(node.this))
        if isinstance(node, exp.In):
            return self._in(node)
        if isinstance(node, exp.Between):
            x = self.convert(node.this)
            low, high = self.convert(node.args["low"]), self.convert(node.args["high"])
            return ast.Between(x, low, high)
        if isinstance(node, exp.Is):
            return self._is(node)
        if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            left, right = self.convert(node.this), self.convert(node.expression)
            return ast.Distinct(left, right, negated=isinstance(node, exp.NullSafeEQ))
        if isinstance(node, exp.Escape):
            return self._like(node.this, escape_node=node.expression)
        if isinstance(node, exp.Like | exp.ILike):
            return self._like(node, escape_node=None)
        for cls, op in _ARITH.items():
            if isinstance(node, cls):
                return ast.Arith(op, self.convert(node.this), self.convert(node.expression))
        if isinstance(node, exp.Neg):
            return _fold_neg(self.convert(node.this))
        if isinstance(node, exp.TryCast):
            self.fail(node, "TRY_CAST is not supported", help="use CAST(x AS type)")
        if isinstance(node, exp.Cast):
            return self._cast(node)
        return self._other(node)

    # --- leaves ---------------------------------------------------------------------

    def _column(self, node: exp.Column) -> ast.Column:
        if node.args.get("db") or node.args.get("catalog"):
            self.fail(node, "column references take at most one qualifier (table.column)")
        if isinstance(node.this, exp.Star):
            self.fail(node, "'*' is not allowed in an expression")
        if not isinstance(node.this, exp.Identifier):
            self.fail(node, "unsupported column reference")
        name = node.this.this
        if name.startswith("$"):
            self.fail(node, "parameters are not supported", help="write the value inline")
        qualifier = node.args.get("table")
        return ast.Column(name, qualifier.this if qualifier is not None else None)

    def _literal(self, node: exp.Expression) -> ast.Literal:
        if isinstance(node, exp.Null):
            return ast.Literal(None, pa.null())
        if isinstance(node, exp.Boolean):
            return ast.Literal(bool(node.this), pa.bool_())
        assert isinstance(node, exp.Literal)
        if node.is_string:
            return ast.Literal(node.this, pa.string())
        return self._number(node, node.this)

    def _number(self, node: exp.Expression, text: str) -> ast.Literal:
        lowered = text.lower()
        if "e" in lowered:
            try:
                return ast.Literal(float(text), pa.float64())
            except ValueError:
                self.fail(node, "malformed number")
        try:
            value = decimal.Decimal(text)
        except decimal.InvalidOperation:
            self.fail(node, "malformed number")
        if "." not in text:
            try:
                return int_literal(int(value))
            except OverflowError:
                self.fail(node, "integer literal out of range (at most 38 digits)")
        return decimal_literal(value)

    # --- connectives and predicates -------------------------------------------------

    def _connective(self, node: exp.Expression) -> ast.Expr:
        cls = ast.And if isinstance(node, exp.And) else ast.Or
        items: list[ast.Expr] = []
        for part in (node.this, node.expression):
            converted = self.convert(part)
            if isinstance(converted, cls):
                items.extend(converted.items)
            else:
                items.append(converted)
        return cls(tuple(items))

    def _in(self, node: exp.In) -> ast.Expr:
        if node.args.get("query") is not None:
            self.fail(node, "subqueries are not supported")
        if node.args.get("unnest") is not None or node.args.get("field") is not None:
            self.fail(node, "IN takes a parenthesised list of values")
        values = [self.convert(v) for v in node.expressions]
        if not values:
            self.fail(node, "IN needs at least one value")
        x = self.convert(node.this)
        if all(isinstance(v, ast.Literal) for v in values):
            return ast.In(x, tuple(v for v in values if isinstance(v, ast.Literal)))
        return ast.InList(x, tuple(values))

    def _is(self, node: exp.Is) -> ast.Expr:
        x = self.convert(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return ast.IsNull(x)
        if isinstance(target, exp.Boolean):
            return ast.IsBool(x, bool(target.this))
        self.fail(node, "IS must be followed by [NOT] NULL, TRUE or FALSE")

    def _like(self, node: exp.Expression, escape_node: exp.Expression | None) -> ast.Expr:
        if not isinstance(node, exp.Like | exp.ILike):
            self.fail(node, "ESCAPE must follow a LIKE pattern")
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            self.fail(node, "the LIKE pattern must be a string literal")
        escape: str | None = None
        if escape_node is not None:
            if not (
                isinstance(escape_node, exp.Literal)
                and escape_node.is_string
                and len(escape_node.this) == 1
            ):
                self.fail(escape_node, "ESCAPE takes a one-character string literal")
            escape = escape_node.this
        if node.args.get("escape") is not None:
            self.fail(node, "ESCAPE is only supported as a literal character")
        try:
            ast.like_tokens(pattern.this, escape)
        except ValueError as e:
            self.fail(node, f"invalid LIKE pattern: {e}")
        like = ast.Like(
            self.convert(node.this),
            pattern.this,
            negated=False,
            case_insensitive=isinstance(node, exp.ILike),
            escape=escape,
        )
        return _negate(like) if node.args.get("negate") else like

    # --- casts and functions --------------------------------------------------------

    def _cast(self, node: exp.Cast) -> ast.Expr:
        to = self.arrow_type(node.args["to"])
        operand = self.convert(node.this)
        if isinstance(operand, ast.Literal):
            return cast_literal(operand, to, context=_short(node.sql(dialect=DIALECT)))
        return ast.Cast(operand, to)

    def arrow_type(self, node: exp.DataType) -> pa.DataType:
        """The Arrow type for a SQL type name, or InvalidExpression."""
        kind = node.this
        params = [p.this for p in node.expressions if isinstance(p, exp.DataTypeParam)]
        ints = [int(p.this) for p in params if isinstance(p, exp.Literal) and not p.is_string]
        if kind in _SIMPLE_TYPES:
            return _SIMPLE_TYPES[kind]
        if kind == _T.DECIMAL:
            precision = ints[0] if ints else 18
            scale = ints[1] if len(ints) > 1 else (0 if ints else 3)
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                self.fail(node, "DECIMAL precision must be 1..38 and scale 0..precision")
            return pa.decimal128(precision, scale)
        if kind in _TIMESTAMP_TYPES or kind in _TIMESTAMPTZ_TYPES:
            unit = "us"
            if ints:
                if ints[0] not in _PRECISION_UNITS:
                    self.fail(node, "timestamp precision must be 0, 3, 6 or 9")
                unit = _PRECISION_UNITS[ints[0]]
            return pa.timestamp(unit, "UTC" if kind in _TIMESTAMPTZ_TYPES else None)
        self.fail(node, "unsupported type", help=f"supported types: {_SUPPORTED_TYPES}")

    def _other(self, node: exp.Expression) -> ast.Expr:
        for cls, name in _FUNCS.items():
            if isinstance(node, cls):
                if any(v is not None and k != "this" for k, v in node.args.items()):
                    raise InvalidExpression(
                        f"{name}() takes 1 argument in expression {self.sql!r}",
                        help=SUPPORTED_SQL,
                    )
                return ast.Func(name, (self.convert(node.this),))
        if isinstance(node, exp.Coalesce):
            args = [node.this, *node.expressions]
            return ast.Func("coalesce", tuple(self.convert(a) for a in args))
        if isinstance(node, exp.Substring):
            args = [node.this, node.args.get("start"), node.args.get("length")]
            return ast.Func("substring", tuple(self.convert(a) for a in args if a is not None))
        for cls, name in _STRING_TESTS.items():
            if isinstance(node, cls):
                return ast.Func(name, (self.convert(node.this), self.convert(node.expression)))
        if isinstance(node, exp.Trim):
            return self._trim(node)
        if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
            return self._date_trunc(node)
        if isinstance(node, exp.Extract):
            return self._date_part(node, node.this, node.expression)
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("date_part", "datepart"):
            if len(node.expressions) != 2:
                self.fail(node, "date_part() takes 2 arguments: date_part('part', x)")
            return self._date_part(node, node.expressions[0], node.expressions[1])
        if isinstance(node, exp.Anonymous) and node.name.lower() in _ANONYMOUS:
            name, count = _ANONYMOUS[node.name.lower()]
            if len(node.expressions) != count:
                self.fail(node, f"{node.name.lower()}() takes {count} argument(s)")
            return ast.Func(name, tuple(self.convert(a) for a in node.expressions))
        if isinstance(node, exp.Subquery | exp.Select | exp.Exists | exp.Query):
            self.fail(node, "subqueries are not supported")
        if isinstance(node, exp.Window):
            self.fail(node, "window functions are not supported")
        if isinstance(node, exp.AggFunc):
            self.fail(node, "aggregate functions are not supported in a row expression")
        if isinstance(node, exp.Placeholder | exp.Parameter):
            self.fail(node, "parameters are not supported", help="write the value inline")
        if isinstance(node, exp.Anonymous | exp.Func):
            name = node.name if isinstance(node, exp.Anonymous) else node.key
            self.fail(
                node,
                f"unknown or unsupported function {name.upper()}",
                help=f"supported functions: {', '.join(ast.FUNCTIONS)}",
            )
        if isinstance(node, exp.Star):
            self.fail(node, "'*' is not allowed in an expression")
        self.fail(node, f"unsupported construct {node.key.upper()}")

    def _trim(self, node: exp.Trim) -> ast.Expr:
        position = str(node.args.get("position") or "BOTH").upper()
        name = {"BOTH": "trim", "LEADING": "ltrim", "TRAILING": "rtrim"}.get(position)
        if name is None or node.args.get("collation") is not None:
            self.fail(node, "unsupported TRIM form")
        args = [self.convert(node.this)]
        if node.expression is not None:
            args.append(self.convert(node.expression))
        return ast.Func(name, tuple(args))

    def _date_trunc(self, node: exp.Expression) -> ast.Expr:
        unit = node.args.get("unit")
        text = unit.name.lower() if isinstance(unit, exp.Var | exp.Literal) else ""
        if text not in ast.DATE_TRUNC_UNITS:
            self.fail(
                node,
                "date_trunc() takes a unit string literal first",
                help="units: " + ", ".join(ast.DATE_TRUNC_UNITS),
            )
        return ast.Func("date_trunc", (ast.Literal(text, pa.string()), self.convert(node.this)))

    def _date_part(
        self, node: exp.Expression, part: exp.Expression | None, value: exp.Expression | None
    ) -> ast.Expr:
        text = part.name.lower() if isinstance(part, exp.Var | exp.Literal) else ""
        if text not in _DATE_PARTS or value is None:
            self.fail(node, "unsupported date part", help="parts: " + ", ".join(_DATE_PARTS))
        return ast.Func(text, (self.convert(value),))


def int_literal(value: int) -> ast.Literal:
    """An integer literal: ``int64`` when it fits, else ``decimal128(38, 0)``."""
    type_ = natural_int_type(value)
    return ast.Literal(value if pat.is_integer(type_) else decimal.Decimal(value), type_)


def decimal_literal(value: decimal.Decimal) -> ast.Literal:
    """An exact decimal literal typed by its digits (``float64`` beyond 38 digits)."""
    _sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = max(len(digits) + max(exponent, 0), scale, 1)
    if precision > 38:
        return ast.Literal(float(value), pa.float64())
    if exponent > 0:  # 1E+2 style (not produced by the parser, but keep the value exact)
        value = value.quantize(decimal.Decimal(1))
    return ast.Literal(value, pa.decimal128(precision, scale))


def _fold_neg(operand: ast.Expr) -> ast.Expr:
    """``-operand``, folded into the literal when it is a number."""
    if isinstance(operand, ast.Literal) and operand.type is not None:
        value = operand.value
        if isinstance(value, int) and not isinstance(value, bool):
            return int_literal(-value)
        if isinstance(value, decimal.Decimal) and operand.type == pa.decimal128(38, 0):
            return int_literal(int(-value))  # -9223372036854775808 is an int64 again
        if isinstance(value, float | decimal.Decimal):
            return ast.Literal(-value, operand.type)
    return ast.Neg(operand)


def _negate(expr: ast.Expr) -> ast.Expr:
    """``NOT expr``, folded into predicates that carry a ``negated`` flag."""
    if isinstance(expr, ast.In | ast.InList | ast.IsNull | ast.IsBool | ast.Like | ast.Distinct):
        return _flip(expr)
    return ast.Not(expr)


def _flip(
    expr: ast.In | ast.InList | ast.IsNull | ast.IsBool | ast.Like | ast.Distinct,
) -> ast.Expr:
    import dataclasses

    return dataclasses.replace(expr, negated=not expr.negated)


def rename_in_sql(sql: str, old: str, new: str) -> str:
    """``sql`` with every reference to column ``old`` (any case) made to ``new``.

    For expressions stored with a table (CHECK constraints) when a column is
    renamed; everything else is left as written.
    """
    tree = sqlglot.parse_one(sql, dialect=DIALECT)
    key = old.casefold()

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name.casefold() == key:
            return exp.column(new, quoted=True)
        return node

    return str(tree.transform(rename).sql(dialect=DIALECT))
