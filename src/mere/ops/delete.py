"""DELETE: remove the rows matching a SQL condition."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.compute as pc

from mere.errors import InvalidExpression
from mere.ops.rewrite import rewrite_matching

if TYPE_CHECKING:
    from mere.txn.transaction import TxTable


def delete(table: TxTable, where: str) -> int:
    """Delete the rows for which ``where`` is TRUE; return how many were deleted.

    Raises:
        InvalidExpression: ``where`` is not a valid boolean SQL expression.
    """
    if not isinstance(where, str) or not where.strip():
        raise InvalidExpression("delete needs a condition; to empty a table use overwrite")
    deleted = rewrite_matching(
        table, where, lambda rows, mask: rows.filter(pc.invert(mask)), drop_covered=True
    )
    table.stage.record_operation("DELETE", table.table_id, predicate=where, numDeletedRows=deleted)
    return deleted
