"""What the Spark layer asks of the core, in one place.

Spark executors write data files themselves and the driver publishes them,
so this layer needs a table's full metadata (id, physical column names,
CHECK constraints), the files a filter selects inside a transaction (with
the read recorded for conflict detection), and copy-on-write removal of
files: all through the transaction's stage (:mod:`mere.txn.stage`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from mere.data.reader import READ_BATCH_ROWS, iter_file
from mere.database import connect
from mere.errors import MereError
from mere.log.actions import AddFile, TableMeta
from mere.schema import normalize_schema
from mere.snapshot.scan import ScanPlan
from mere.snapshot.snapshot import Snapshot, TableSnapshot
from mere.storage import ObjectStore
from mere.txn.transaction import Transaction


def table_meta(table: TableSnapshot) -> TableMeta:
    """The full metadata of a table at a snapshot."""
    return table.meta


def tx_table_meta(tx: Transaction, name: str) -> TableMeta:
    """The full metadata of a table as a transaction sees it (its own changes included)."""
    return tx.table(name).meta


def tx_uri(tx: Transaction) -> str:
    """The URI of the database a transaction belongs to."""
    return tx.uri


def find_table(snapshot: Snapshot, table_id: str) -> TableSnapshot | None:
    """The table with id ``table_id`` at a snapshot, whatever its name now."""
    for name in snapshot.tables():
        table = snapshot.table(name)
        if table.id == table_id:
            return table
    return None


def new_table_meta(
    name: str, schema: pa.Schema, partition_by: Sequence[str], properties: dict[str, str]
) -> TableMeta:
    """Metadata for a table to be created by a later commit (validated like create_table)."""
    return TableMeta(
        id=uuid.uuid4().hex,
        name=name,
        schema=normalize_schema(schema, list(partition_by)),
        partition_columns=tuple(partition_by),
        properties=dict(properties),
        created_time=int(time.time() * 1000),
    )


def create_table_with_id(tx: Transaction, meta: TableMeta) -> None:
    """Create the table ``meta`` describes, under its id, in ``tx``."""
    tx.create_table(
        meta.name,
        meta.schema,
        partition_by=list(meta.partition_columns),
        properties=dict(meta.properties),
        table_id=meta.id,
    )


def evolve_schema(tx: Transaction, name: str, schema: pa.Schema) -> None:
    """Give a table the schema a ``mergeSchema`` write extended, in ``tx``."""
    table = tx.table(name)
    with tx.statement() as stage:
        stage.set_metadata(table.table_id, replace(table.meta, schema=schema))
        stage.record_operation("MERGE SCHEMA", table.table_id)


def plan_tx_read(tx: Transaction, name: str, where: str | None) -> tuple[ScanPlan, list[AddFile]]:
    """The files of a table a condition may match, recorded as a read of ``tx``."""
    return tx.stage.plan_read(tx.table(name).table_id, None, where)


def remove_files(tx: Transaction, name: str, adds: Iterable[AddFile]) -> None:
    """Take live files out of a table in ``tx`` (their rows were rewritten elsewhere)."""
    tx.stage.remove_files(tx.table(name).table_id, list(adds))


def record_operation(tx: Transaction, name: str, operation: str, **parameters: Any) -> None:
    """Name an operation in the commit's ``operationParameters``."""
    tx.stage.record_operation(operation, tx.table(name).table_id, **parameters)


def iter_row_groups(
    store: ObjectStore,
    table: TableMeta,
    add: AddFile,
    columns: Sequence[str],
    part: int,
    parts: int,
    batch_rows: int = READ_BATCH_ROWS,
) -> Iterator[pa.Table]:
    """Read part ``part`` of ``parts`` of one data file: a contiguous run of its row groups.

    Like ``mere.data.reader.iter_file`` (same columns, partition values and
    nulls for missing columns), for splitting a large file across tasks.
    """
    yield from iter_file(store, table, add, columns, batch_rows, part=(part, parts))


def commit_added(uri: str, table_id: str, paths: set[str], since: int) -> bool | None:
    """Whether a commit after version ``since`` added one of ``paths`` to the table.

    None when the log cannot be read (the outcome is unknown: delete nothing).
    """
    try:
        with connect(uri, create=False) as db:
            latest = db.version
            if latest <= since:
                return False
            for commit in db.log.read_commits(since + 1, latest):
                for action in commit.actions:
                    if isinstance(action, AddFile) and action.table_id == table_id:
                        if action.path in paths:
                            return True
    except MereError:
        return None
    return False
