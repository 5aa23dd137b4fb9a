"""SQL expressions: one tree for filters and values, used for file skipping and row evaluation.

Typical use::

    predicate = bind(parse("amount > 10 AND country IN ('FR', 'DE')"), schema)
    if not is_boolean(predicate): ...                    # a filter must be boolean
    if may_match(predicate, ranges, row_count): ...      # skip files by statistics
    table = filter_table(predicate, table)               # filter rows
    values = evaluate(bind(parse("price * 1.1"), schema), table)   # compute a value

Text is parsed with sqlglot's DuckDB dialect (:mod:`mere.expr.parse`), names and
types are resolved by :func:`bind` (:mod:`mere.expr.bind`), evaluation follows SQL
three-valued logic with NaN the greatest float, equal to itself (:mod:`mere.expr.arrow`),
and skipping is sound by construction (:mod:`mere.expr.skipping`). The language, as
users see it, is described in docs/filters.md. Every user-facing error is
:class:`~mere.errors.InvalidExpression`.
"""

from __future__ import annotations

from mere.expr.arrow import cast_values, evaluate, filter_table, to_arrow
from mere.expr.ast import (
    And,
    Arith,
    Cast,
    Column,
    Compare,
    Distinct,
    Expr,
    Func,
    In,
    IsBool,
    IsNull,
    Like,
    Literal,
    Neg,
    Not,
    Or,
    referenced_columns,
    to_sql,
)
from mere.expr.bind import bind, is_boolean
from mere.expr.parse import parse
from mere.expr.skipping import ColumnRange, may_match, must_match, row_group_pushdown

__all__ = [
    "And",
    "Arith",
    "Cast",
    "Column",
    "ColumnRange",
    "Compare",
    "Distinct",
    "Expr",
    "Func",
    "In",
    "IsBool",
    "IsNull",
    "Like",
    "Literal",
    "Neg",
    "Not",
    "Or",
    "bind",
    "cast_values",
    "evaluate",
    "filter_table",
    "is_boolean",
    "may_match",
    "must_match",
    "parse",
    "referenced_columns",
    "row_group_pushdown",
    "to_arrow",
    "to_sql",
]
