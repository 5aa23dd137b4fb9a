"""UPDATE: set columns of the rows matching a SQL condition."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.errors import InvalidExpression, SchemaMismatch
from mere.expr.bind import blob_from_text, category
from mere.names import name_key
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
    change = UpdateRows(table.schema, dict(set) if isinstance(set, Mapping) else set)
    change.assignments()  # every mistake is raised before any file is read
    updated = rewrite_matching(table, where, change)
    table.stage.record_operation(
        "UPDATE",
        table.table_id,
        predicate=where,
        set={k: str(v) for k, v in set.items()},
        numUpdatedRows=updated,
    )
    return updated


@dataclass(frozen=True)
class UpdateRows:
    """The change an UPDATE makes to one file's rows (picklable, for Spark executors).

    Only matching rows are evaluated (a value that would not fit in an
    excluded row must not fail), every assignment sees the row as it was,
    values are cast with SQL assignment rules, and setting a partition column
    moves the row to its new partition (the file writer splits by partition).
    """

    schema: pa.Schema
    set: Mapping[str, Any]

    def assignments(self) -> dict[str, sqlexpr.Expr | pa.Scalar]:
        """Bind the assignments against the schema (raises on any mistake)."""
        if not isinstance(self.set, Mapping) or not self.set:
            raise InvalidExpression("update needs at least one column to set")
        bound: dict[str, sqlexpr.Expr | pa.Scalar] = {}
        by_key = {name_key(n): n for n in self.schema.names}
        for given, value in self.set.items():
            column = by_key.get(name_key(given)) if isinstance(given, str) else None
            if column is None:
                raise SchemaMismatch(
                    f"update sets unknown column {given!r}; the table has {self.schema.names}"
                )
            if column in bound:
                raise SchemaMismatch(f"update sets column {column!r} twice (names ignore case)")
            if isinstance(value, str):
                bound[column] = _bind_assignment(column, value, self.schema)
            else:
                bound[column] = literal_value(column, self.schema.field(column).type, value)
        return bound

    def __call__(self, rows: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
        selected = rows.filter(mask)
        updated = selected
        for column, value in self.assignments().items():
            index = selected.schema.get_field_index(column)
            field = selected.schema.field(index)
            if isinstance(value, pa.Scalar):
                new = pa.chunked_array([pa.repeat(value, selected.num_rows)], field.type)
            else:
                new = assign_values(column, field.type, sqlexpr.evaluate(value, selected))
            updated = updated.set_column(index, field, new)
        kept = rows.filter(pc.invert(mask))
        return conform(pa.concat_tables([kept, updated]), self.schema, what="updated rows")


def _bind_assignment(column: str, text: str, schema: pa.Schema) -> sqlexpr.Expr:
    """A SQL expression for ``column``; a bare word that names no column gets a quoting hint."""
    try:
        return sqlexpr.bind(sqlexpr.parse(text), schema)
    except (InvalidExpression, SchemaMismatch) as exc:
        quoted = "'" + text.replace("'", "''") + "'"
        raise type(exc)(
            f"cannot set column {column!r} to {text!r}: {exc}",
            help=f"a string value is SQL; write a text constant in quotes: {{{column!r}: "
            f"{quoted!r}}}",
        ) from None


def assign_values(
    column: str, target: pa.DataType, values: pa.Array | pa.ChunkedArray
) -> pa.ChunkedArray:
    """SQL assignment: cast to the column type as DuckDB does, refusing overflow.

    The cast is the one a user-written CAST evaluates (:func:`~mere.expr.cast_values`):
    decimals and floats round as in DuckDB, a timestamp rounds to a coarser unit,
    text becomes a BLOB as DuckDB reads BLOB text (``\\xHH`` escapes), and a value
    beyond the column type's range is a SchemaMismatch, as is a float or BLOB
    stored as text (DuckDB's text of them differs from Arrow's).
    """
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    if values.type == target:
        return values
    source, into = category(values.type), category(target)
    if (source, into) in (("float", "string"), ("binary", "string")):
        raise SchemaMismatch(
            f"values for column {column!r} ({values.type}) are not stored as text: DuckDB and "
            "Arrow write them differently (1e+10 against 10000000000.0; bytes as \\xHH)",
            help="store the value in a column of its own type",
        )
    if (source, into) == ("string", "binary"):  # BLOB text, as DuckDB reads it
        try:
            blobs = [None if v is None else blob_from_text(v) for v in values.to_pylist()]
        except ValueError as exc:
            raise SchemaMismatch(f"values for column {column!r}: {exc}") from None
        return pa.chunked_array([pa.array(blobs, target)])
    try:
        cast = sqlexpr.cast_values(values, values.type, target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatch(
            f"values for column {column!r} ({values.type}) do not fit its type {target}: {exc}"
        ) from None
    return cast if isinstance(cast, pa.ChunkedArray) else pa.chunked_array([cast])


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
