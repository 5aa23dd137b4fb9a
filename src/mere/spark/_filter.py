"""mere's filters on Spark DataFrames: the rows mere's own engine keeps, not Spark SQL's.

A condition in mere's dialect means what it means in mere's scans and in
DuckDB: ``f32 = 0.1`` is the REAL 0.1, ``LIKE`` has no escape character,
text compared with a zoned timestamp is a wall time in the column's zone,
``/`` by zero is NULL. Spark's SQL answers differently for each (a transpiled
condition picked other rows), so the rows are kept by evaluating the bound
condition with mere's engine on the DataFrame's Arrow batches
(``mapInArrow``): the answer is mere's whatever Spark would say. Files the
condition rules out are still skipped before Spark reads them (the caller
selects them by statistics).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
    by_name = {f.name: f for f in schema}
    fields = [by_name[name] for name in sorted(sqlexpr.referenced_columns(bound))]
    return df.mapInArrow(_Keep(bound, fields), df.schema)


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
