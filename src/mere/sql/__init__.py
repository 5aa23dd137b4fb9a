"""SQL over a mere database: DuckDB queries on a consistent snapshot, statements by mere's verbs.

``db.sql(text)``, ``snapshot.sql(text)`` and ``tx.sql(text)`` run here (install
``mere[sql]`` for DuckDB)::

    db.sql("SELECT c.name, sum(o.amount) FROM orders o JOIN customers c USING (cid) "
           "GROUP BY ALL")
    db.sql("SELECT * FROM orders FOR SYSTEM_VERSION AS OF 12 WHERE id = ?", [7])
    db.sql('''BEGIN;
              INSERT INTO orders VALUES (42, 7, 99.5, DATE '2024-05-01');
              UPDATE customers SET last_order = DATE '2024-05-01' WHERE cid = 7;
              COMMIT''')

* :mod:`mere.sql.query` — queries: every table of the snapshot is visible by name
  as a ``pyarrow`` dataset of its live files (projection and filter pushdown,
  files skipped by partition values and statistics); time travel per table
  reference with ``FOR SYSTEM_VERSION AS OF n`` / ``FOR SYSTEM_TIME AS OF
  TIMESTAMP '...'``; parameters (``?``, ``$1``, ``$name``) bound by DuckDB.
* :mod:`mere.sql.statements` — INSERT, UPDATE, DELETE, MERGE, CREATE/DROP/ALTER
  TABLE, each carried out by mere's own verb in a mere transaction.
* :mod:`mere.sql.session` — scripts, ``BEGIN ... COMMIT``, savepoints.
* :mod:`mere.sql.types` — SQL type names to Arrow types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from mere.snapshot.state import DatabaseState
from mere.sql.catalog import SnapshotCatalog, history_of
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.sql.query import run_query
from mere.sql.script import split_script
from mere.sql.session import Session, run_in_transaction, run_script
from mere.storage.base import ObjectStore


def query_snapshot(
    store: ObjectStore,
    state: DatabaseState,
    text: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
) -> pa.Table:
    """Run read-only SQL over the tables of ``state``; the last query's rows.

    Raises:
        UnsupportedSQL: the text holds a statement that is not a query (a
            snapshot is read-only).
    """
    statements = split_script(text, params)
    writes = [s.keyword for s in statements if s.kind != "query"]
    if writes:
        raise UnsupportedSQL(
            f"{writes[0]} on a snapshot: a snapshot is read-only",
            help="run statements with db.sql() or tx.sql()",
        )
    if not statements:
        raise SQLError("the SQL text holds no statement")
    catalog = SnapshotCatalog(store, state, history_of(store, state))
    result = pa.table({})
    for statement in statements:
        result = run_query(catalog, statement)
    return result


__all__ = [
    "SQLError",
    "Session",
    "UnsupportedSQL",
    "query_snapshot",
    "run_in_transaction",
    "run_script",
]
