"""Moving inlined data files out of the log into ordinary data files.

A small write inlines its Parquet bytes in its commit (docs/format.md §2.5),
which saves a request per commit but makes every state, and every checkpoint,
carry those bytes. When a table's inlined bytes pass the database property
``inlineFlushBytes`` (default 8 MiB), the writer that checkpoints writes them
as ordinary data files with the *same bytes* under fresh paths and swaps them
in, in one commit whose removes and adds carry ``dataChange=false`` and which
runs at isolation ``snapshot`` (like compaction: it conflicts only with a
concurrent removal of the same files or a change of the table). A writer that
dies between writing the files and committing leaves orphans for vacuum; the
inlined rows stay where they were.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from mere.data.writer import new_data_file_path, upload
from mere.errors import ConflictError
from mere.log.actions import AddFile
from mere.log.columns import INLINE, SIZE
from mere.properties import inline_flush_bytes
from mere.snapshot.state import DatabaseState

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

log = logging.getLogger("mere")


def inlined_bytes(state: DatabaseState) -> dict[str, int]:
    """The inlined bytes each table (by id) holds at ``state`` (tables without any left out)."""
    found = {}
    for table_id, table in state.tables.items():
        columns = table.live.columns([SIZE, INLINE])
        inlined = pc.is_valid(columns.column(INLINE))
        total = pc.sum(pc.if_else(inlined, columns.column(SIZE), 0)).as_py() or 0
        if total:
            found[table_id] = total
    return found


def needs_flush(state: DatabaseState, bound: int | None = None) -> bool:
    """Whether some table holds more inlined bytes than ``bound`` (default: the property)."""
    limit = inline_flush_bytes(state.properties) if bound is None else bound
    return any(total > limit for total in inlined_bytes(state).values())


def flush_inlined(db: DatabaseContext, bound: int | None = None) -> int | None:
    """Write the inlined files of tables over ``bound`` bytes as data files; the version, or None.

    ``bound`` defaults to the database property ``inlineFlushBytes``; 0 moves
    every inlined file. Returns None when no table was over it.

    Raises:
        ConflictError: a concurrent commit removed one of the same files or
            altered the table (nothing was committed; the files written are deleted).
    """
    tx = db.begin("snapshot")
    stage = tx.stage
    state = tx.read_state
    limit = inline_flush_bytes(state.properties) if bound is None else bound
    over = {t: n for t, n in inlined_bytes(state).items() if n > limit}
    written: list[AddFile] = []  # files written and not yet handed to the transaction
    table_id = ""
    try:
        for table_id in sorted(over):
            meta = state.tables[table_id].meta
            old = _inlined_files(state, table_id)
            for add in old:
                assert add.inline is not None
                path = new_data_file_path(add.partition_values)
                upload(db.store, meta.prefix + path, pa.py_buffer(add.inline))
                written.append(replace(add, path=path, inline=None))
            stage.replace_files(table_id, old, written)
            written = []
            stage.record_operation("FLUSH INLINED", table_id, bytes=over[table_id])
        if not over:
            tx.abort()
            return None
        return tx.commit()
    except Exception:
        # (A BaseException, e.g. a simulated crash, leaves the files to vacuum.)
        if written:
            stage.add_files(table_id, written, owned=True)  # so that the abort deletes them
        tx.abort()
        raise


def _inlined_files(state: DatabaseState, table_id: str) -> list[AddFile]:
    live = state.tables[table_id].live
    inlined = pc.is_valid(live.columns([INLINE]).column(0))
    indices = pc.indices_nonzero(inlined)
    return live.take(indices)


def flush_after_checkpoint(db: DatabaseContext, state: DatabaseState) -> None:
    """The checkpointing writer's part: flush when a table is over the bound at ``state``.

    Never raises for a conflict or a storage failure: the commit that made the
    checkpoint due stands, and a later checkpoint tries again.
    """
    if not needs_flush(state):
        return
    try:
        flush_inlined(db)
    except ConflictError as exc:
        log.info("inlined files were not flushed (a concurrent commit won): %s", exc)
    except Exception as exc:
        log.warning("could not flush inlined files at version %d: %s", state.version, exc)


__all__ = ["flush_after_checkpoint", "flush_inlined", "inlined_bytes", "needs_flush"]
