"""The copy-on-write loop shared by delete, update and overwrite."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.data.reader import at_version, iter_read_files

if TYPE_CHECKING:
    from mere.txn.transaction import TxTable

#: Given a file's rows and the mask of rows matching the condition, the rows to keep.
Change = Callable[[pa.Table, pa.ChunkedArray], pa.Table]


def rewrite_matching(
    table: TxTable, where: str | None, change: Change, *, drop_covered: bool = False
) -> int:
    """Rewrite every file holding rows that match ``where``; return how many matched.

    Files the statistics rule out are not read; files read but holding no
    matching row are left alone. A NULL condition does not match (SQL). With
    ``drop_covered`` (a delete), a file whose partition values or statistics
    show that every row matches is removed without being read.
    """
    stage, table_id = table.stage, table.table_id
    plan, files = stage.plan_read(table_id, None, where)
    matched = 0
    to_read = []
    for add in files:
        if drop_covered and plan.covers(add):
            stage.remove_files(table_id, [add])
            matched += add.rows
        else:
            to_read.append(add)
    pieces = iter_read_files(stage.store, plan.table, to_read, plan.table.schema.names)
    with at_version(table.transaction.read_version):  # named by a missing or damaged file
        for add, rows in pieces:
            mask = match_mask(plan.predicate, rows)
            count = pc.sum(mask).as_py() or 0
            if count == 0:
                continue
            replacement = change(rows, mask)
            stage.remove_files(table_id, [add])
            if replacement.num_rows:
                stage.write_rows(table_id, replacement)
            matched += count
    return matched


def match_mask(predicate: sqlexpr.Expr | None, rows: pa.Table) -> pa.ChunkedArray:
    """True where the predicate is TRUE; FALSE and NULL give False."""
    if predicate is None:
        return pa.chunked_array([pa.repeat(pa.scalar(True), rows.num_rows)])
    result = sqlexpr.evaluate(predicate, rows)
    if isinstance(result, pa.Array):
        result = pa.chunked_array([result])
    return pc.fill_null(result, False)
