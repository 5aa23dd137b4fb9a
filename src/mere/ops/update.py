"""UPDATE: set columns of the rows matching a SQL condition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere import expr as sqlexpr
from mere.errors import InvalidExpression, SchemaMismatch
from mere.ops.rewrite import rewrite_matching
from mere.schema import conform

if TYPE_CHECKING:
    from mere.txn.transaction import TxTable


def update(table: TxTable, where: str | None, set: Mapping[str, Any]) -> int:
    """Set columns of the rows where ``where`` is TRUE (all rows if None); return the count.

    Each value of ``set`` is a SQL expression over the row when it is a string
    (``"amount * 1.1"``; a string constant is written ``"'text'"``), else a
    Python literal. Values are cast to the column type; a cast that would
    lose data raises SchemaMismatch.

    Raises:
        InvalidExpression: a bad condition or expression.
        SchemaMismatch: an unknown column or a lossy value. Setting a partition
            column is allowed: the rows move to their new partition.
        ConstraintViolation: a NULL written into a NOT NULL column.
    """
    schema = table.schema
    if not isinstance(set, Mapping) or not set:
        raise InvalidExpression("update needs at least one column to set")
    assignments: dict[str, sqlexpr.Expr | pa.Scalar] = {}
    for column, value in set.items():
        if column not in schema.names:
            raise SchemaMismatch(
                f"update sets unknown column {column!r}; the table has {schema.names}"
            )
        target = schema.field(column).type
        if isinstance(value, str):
            assignments[column] = sqlexpr.bind(sqlexpr.parse(value), schema)
        else:
            assignments[column] = literal_value(column, target, value)

    def change(rows: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
        # Only the matching rows are evaluated: a value that would not fit in a row
        # the condition excludes must not fail the update (SQL evaluates SET per row).
        selected = rows.filter(mask)
        updated = selected
        for column, value in assignments.items():  # every assignment sees the old row
            index = selected.schema.get_field_index(column)
            field = selected.schema.field(index)
            if isinstance(value, pa.Scalar):
                new = pa.chunked_array([pa.repeat(value, selected.num_rows)], field.type)
            else:
                new = assign_values(column, field.type, sqlexpr.evaluate(value, selected))
            updated = updated.set_column(index, field, new)
        kept = rows.filter(pc.invert(mask))
        return conform(pa.concat_tables([kept, updated]), schema, what="updated rows")

    updated = rewrite_matching(table, where, change)
    table._tx._record_operation(
        "UPDATE",
        table._id,
        predicate=where,
        set={k: str(v) for k, v in set.items()},
        numUpdatedRows=updated,
    )
    return updated


def assign_values(
    column: str, target: pa.DataType, values: pa.Array | pa.ChunkedArray
) -> pa.ChunkedArray:
    """SQL assignment: cast to the column type, rounding decimals, refusing overflow."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    if values.type == target:
        return values
    try:
        return values.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as first:
        if pat.is_decimal(target) and (pat.is_floating(values.type) or pat.is_decimal(values.type)):
            try:
                return pc.round(values, target.scale).cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        if pat.is_integer(target) and pat.is_floating(values.type):
            try:
                return pc.round(values).cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        raise SchemaMismatch(
            f"values for column {column!r} ({values.type}) do not fit its type {target}: {first}"
        ) from None


def literal_value(column: str, target: pa.DataType, value: Any) -> pa.Scalar:
    """A Python value for ``column``: of a matching kind, and converted without loss.

    ``pa.scalar(value, type=target)`` alone checks the kind but truncates
    (1.5 into an integer column gives 1), so the value's natural type must also
    cast safely.

    Raises:
        SchemaMismatch: the value has the wrong kind, overflows or would lose precision.
    """
    errors = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError)
    try:
        scalar = pa.scalar(value, type=target)
        natural = pa.array([value])
    except errors as exc:
        raise SchemaMismatch(
            f"cannot set column {column!r} ({target}) to {value!r}: {exc}"
        ) from None
    try:
        natural.cast(target, safe=True)
    except pa.ArrowInvalid as exc:
        raise SchemaMismatch(
            f"cannot set column {column!r} ({target}) to {value!r} without loss: {exc}"
        ) from None
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass  # no cast from the natural type (a date into a timestamp...): pa.scalar decided
    return scalar
