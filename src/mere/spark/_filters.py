"""Spark's pushed-down filters as a mere SQL condition, for pruning data files.

Spark hands a Python data source the AND-ed conjuncts of a query's filter
that it can express (``pyspark.sql.datasource.EqualTo``, ``In``, ``Not``,
...). Each one that translates becomes a SQL conjunct over the table's
columns; the data source uses their conjunction only to skip files whose
partition values or statistics rule every row out, and still returns every
filter to Spark, which evaluates them on the rows. A filter that does not
translate (a nested column, an array value, a type mere cannot compare) is
simply not used for pruning, so a translation can never change a result.

Not in use on Spark 4.3: the data source prunes nothing by pushed filters
there (see :class:`mere.spark.datasource.MereReader`: Spark keeps one
pushdown's planned partitions for every later scan of the DataFrame). Kept,
and tested, for a Spark that scopes them to the scan.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from mere.errors import MereError
from mere.log.actions import TableMeta
from mere.snapshot.scan import plan_scan

_COMPARISONS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}


def quote_identifier(name: str) -> str:
    """A column name as a SQL identifier (double quotes, doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(value: Any) -> str | None:
    """A Python value as a SQL literal, or None when it has no faithful one."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else None
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
            return f"'{value.replace(tzinfo=None).isoformat(sep=' ')}+00:00'"
        return f"'{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return None


def _like_pattern(prefix: str, value: str, suffix: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return sql_literal(prefix + escaped + suffix) + " ESCAPE '\\'"  # type: ignore[operator]


def filter_to_sql(f: Filter) -> str | None:
    """One pushed filter as a SQL condition, or None when it does not translate."""
    if isinstance(f, Not):
        inner = filter_to_sql(f.child)
        return None if inner is None else f"NOT ({inner})"
    path = getattr(f, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1 or not isinstance(path[0], str):
        return None  # a nested field: statistics are kept for top-level columns only
    column = quote_identifier(path[0])
    if isinstance(f, IsNull):
        return f"{column} IS NULL"
    if isinstance(f, IsNotNull):
        return f"{column} IS NOT NULL"
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return f"{column} IS NULL"
        literal = sql_literal(f.value)
        # Two-valued, as <=> is: FALSE (not NULL) for a null column, also under NOT.
        return None if literal is None else f"({column} IS NOT NULL AND {column} = {literal})"
    if type(f) in _COMPARISONS:
        literal = sql_literal(f.value)  # type: ignore[attr-defined]
        return None if literal is None else f"{column} {_COMPARISONS[type(f)]} {literal}"
    if isinstance(f, In):
        literals = [sql_literal(v) for v in f.value if v is not None]
        if not literals or any(lit is None for lit in literals):
            return None
        return f"{column} IN ({', '.join(literals)})"  # type: ignore[arg-type]
    if isinstance(f, StringStartsWith | StringEndsWith | StringContains) and isinstance(
        f.value, str
    ):
        prefix = "%" if isinstance(f, StringEndsWith | StringContains) else ""
        suffix = "%" if isinstance(f, StringStartsWith | StringContains) else ""
        return f"{column} LIKE {_like_pattern(prefix, f.value, suffix)}"
    return None


def pruning_condition(table: TableMeta, filters: Iterable[Filter]) -> str | None:
    """The conjunction of the filters that translate and bind against ``table``.

    Each conjunct is checked on its own, so one filter mere cannot bind (a
    comparison between incompatible types, say) drops only itself.
    """
    usable: list[str] = []
    for f in filters:
        sql = filter_to_sql(f)
        if sql is None:
            continue
        try:
            plan_scan(table, [], sql)
        except MereError:
            continue
        usable.append(sql)
    return combine(usable)


def combine(conditions: Sequence[str]) -> str | None:
    """AND several SQL conditions (None for none)."""
    if not conditions:
        return None
    if len(conditions) == 1:
        return conditions[0]
    return " AND ".join(f"({c})" for c in conditions)
