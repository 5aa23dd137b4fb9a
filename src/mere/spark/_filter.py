"""mere's filters on Spark DataFrames: the rows mere's own engine keeps, not Spark SQL's.

A condition in mere's dialect means what it means in mere's scans and in
DuckDB: ``f32 = 0.1`` is the REAL 0.1, ``LIKE`` has no escape character,
text compared with a zoned timestamp is a wall time in the column's zone,
``/`` by zero is NULL. Spark's SQL answers differently for each (a transpiled
condition picked other rows). So the condition is bound by mere, and its
top-level conjuncts that Spark reads exactly as mere does (a column of an
integer, float, string, date, boolean or decimal type compared with a literal
of its own type, ``IN`` such literals, ``IS [NOT] NULL``, ``LIKE`` a pattern
without a backslash, Spark's escape character) are handed to Spark as
Column expressions: its Parquet reader skips row groups and partitions by
them, and no Python runs for them. The other conjuncts are evaluated by
mere's engine on the DataFrame's Arrow batches (``mapInArrow``), after
Spark's. Files the condition rules out are skipped before Spark reads them
(the caller selects them by statistics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere import expr as sqlexpr

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The column that carries a batch's row count when a condition reads no column.
_ROWS = "__mere_rows"


def where(df: DataFrame, schema: pa.Schema, condition: str) -> DataFrame:
    """The rows of ``df`` (columns of a table of ``schema``, by name) where ``condition``
    is TRUE as mere evaluates it.

    Raises:
        InvalidExpression: the condition does not parse or bind (raised here, on
            the driver, before any job runs).
    """
    bound = sqlexpr.bind(sqlexpr.parse(condition), schema)
    conjuncts = list(bound.items) if isinstance(bound, sqlexpr.And) else [bound]
    handed = [(c, _spark_column(c)) for c in conjuncts]
    spark_side = [column for _, column in handed if column is not None]
    rest = [c for c, column in handed if column is None]
    if spark_side:
        df = df.where(reduce(lambda a, b: a & b, spark_side))
    if not rest:
        return df
    kept = rest[0] if len(rest) == 1 else sqlexpr.And(tuple(rest), pa.bool_())
    by_name = {f.name: f for f in schema}
    fields = [by_name[name] for name in sorted(sqlexpr.referenced_columns(kept))]
    return df.mapInArrow(_Keep(kept, fields), df.schema)


def _spark_column(condition: sqlexpr.Expr) -> Column | None:
    """``condition`` as a Spark Column expression when Spark reads it exactly as mere
    does, else None."""
    from pyspark.sql import functions as F

    if isinstance(condition, sqlexpr.IsNull) and isinstance(condition.operand, sqlexpr.Column):
        column = F.col(_quoted(condition.operand.name))
        return column.isNotNull() if condition.negated else column.isNull()
    if isinstance(condition, sqlexpr.In) and not condition.negated:
        if _exact(condition.operand) and all(
            _same_literal(v, condition.operand) for v in condition.values
        ):
            assert isinstance(condition.operand, sqlexpr.Column)
            return F.col(_quoted(condition.operand.name)).isin([v.value for v in condition.values])
        return None
    if (
        isinstance(condition, sqlexpr.Like)
        and not (condition.negated or condition.case_insensitive or condition.escape)
        and "\\" not in condition.pattern  # Spark's LIKE escapes with a backslash
        and isinstance(condition.operand, sqlexpr.Column)
        and _exact(condition.operand)
    ):
        return F.col(_quoted(condition.operand.name)).like(condition.pattern)
    if isinstance(condition, sqlexpr.Compare) and condition.op in _COMPARISONS:
        left, right, op = condition.left, condition.right, condition.op
        if isinstance(left, sqlexpr.Literal):
            left, right, op = right, left, _FLIPPED.get(op, op)
        if _exact(left) and isinstance(right, sqlexpr.Literal) and _same_literal(right, left):
            assert isinstance(left, sqlexpr.Column)
            return _COMPARISONS[op](F.col(_quoted(left.name)), F.lit(right.value))
    return None


def _exact(node: sqlexpr.Expr) -> bool:
    """A column of a type Spark compares with a literal of that type as mere does: bytes
    for strings, exact values for numbers (NaN equal to NaN and above every number, in
    Spark too; a REAL's literal is the REAL's value, which a DOUBLE holds exactly), not
    timestamps (Spark reads a literal in the session's zone) or unsigned 64-bit."""
    if not isinstance(node, sqlexpr.Column) or node.type is None:
        return False
    t = node.type
    return bool(
        (pat.is_integer(t) and t != pa.uint64())
        or t in (pa.float32(), pa.float64())
        or pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_date32(t)
        or pat.is_boolean(t)
        or pat.is_decimal128(t)
    )


def _same_literal(literal: sqlexpr.Literal, column: sqlexpr.Expr) -> bool:
    return literal.value is not None and literal.type == column.type


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_COMPARISONS: dict[str, Callable[[Column, Column], Column]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class _Keep:
    """The function each Spark task runs on its Arrow batches (pickled to the executors)."""

    condition: sqlexpr.Expr
    fields: list[pa.Field]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            # Spark's Arrow types (LongType for UINT32, the session's zone) back to the
            # table's, so that binding's reading of literals holds.
            columns = {f.name: batch.column(f.name).cast(f.type) for f in self.fields}
            columns[_ROWS] = pa.nulls(batch.num_rows, pa.bool_())
            mask = sqlexpr.evaluate(self.condition, pa.table(columns))
            if isinstance(mask, pa.ChunkedArray):
                mask = mask.combine_chunks()
            yield batch.filter(pc.fill_null(mask, False))
