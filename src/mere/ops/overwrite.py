"""OVERWRITE: replace the whole table, or only the rows matching a condition."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.errors import ConstraintViolation, InvalidExpression
from mere.ops.rewrite import match_mask, rewrite_matching
from mere.schema import conform, to_arrow_table

if TYPE_CHECKING:
    from mere.txn.transaction import TxTable


def overwrite(table: TxTable, data: Any, where: str | None = None) -> int:
    """Replace the table's rows (or those matching ``where``) with ``data``.

    With ``where``, every new row must satisfy it, as in Delta Lake's
    ``replaceWhere``: otherwise ConstraintViolation and nothing changes.
    Returns the number of rows removed.
    """
    stage = table.stage
    schema = table.schema
    rows = conform(to_arrow_table(data, schema), schema)
    if where is not None:
        predicate = sqlexpr.bind(sqlexpr.parse(where), schema)
        if not sqlexpr.is_boolean(predicate):
            raise InvalidExpression(f"overwrite condition {where!r} is not a boolean expression")
        outside = rows.num_rows - (pc.sum(match_mask(predicate, rows)).as_py() or 0)
        if outside:
            raise ConstraintViolation(
                f"{outside} row(s) of the new data do not satisfy the overwrite condition {where!r}"
            )
    if where is None:
        removed = _remove_all(table)
    else:
        removed = rewrite_matching(table, where, lambda old, mask: old.filter(pc.invert(mask)))
    stage.write_rows(table.table_id, rows)
    stage.record_operation(
        "OVERWRITE",
        table.table_id,
        predicate=where,
        numRemovedRows=removed,
        numAddedRows=rows.num_rows,
    )
    return removed


def _remove_all(table: TxTable) -> int:
    """Remove every live file without reading it (they are all replaced)."""
    _, files = table.stage.plan_read(table.table_id, None, None)
    table.stage.remove_files(table.table_id, files)
    return sum(add.rows for add in files)
