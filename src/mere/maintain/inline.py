"""Moving inlined data files out of the log into ordinary data files.

A small write inlines its Parquet bytes in its commit (docs/format.md §2.5),
which saves a request per commit but makes every state, and every checkpoint,
carry those bytes. When a table's inlined bytes pass the database property
``inlineFlushBytes`` (default 8 MiB), the writer that checkpoints writes them
into ordinary data files, the rows of each partition's inlined files together
(in their order) in files of the target size, as compaction writes them (a
thousand one-row commits become one file, one request), and swaps them in, in
one commit whose removes and adds carry ``dataChange=false``. The new files
come after every other file of the table, so the table's rows keep their
order only if no rows landed after the flush read the table: the flush reads
the whole table at isolation ``serializable``, and a concurrent commit that
adds files to it (or removes one of the same files, or changes the table)
makes it conflict; it is tried again a few times, then left to the next
checkpoint. Readers are never invalidated by it (``dataChange=false``). A
writer that dies between writing the files and committing leaves orphans for
vacuum; the inlined rows stay where they were.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from mere.errors import ConflictError
from mere.log.actions import AddFile
from mere.log.columns import INLINE, SIZE
from mere.maintain.compact import by_partition, rewrite
from mere.properties import inline_flush_bytes
from mere.snapshot.state import DatabaseState

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

log = logging.getLogger("mere")
#: How often the checkpointing writer tries a flush that concurrent commits beat.
FLUSH_ATTEMPTS = 3


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
    """Move the inlined files of tables over ``bound`` bytes into data files; the version, or None.

    ``bound`` defaults to the database property ``inlineFlushBytes``; 0 moves
    every inlined file. Returns None when no table was over it.

    Raises:
        ConflictError: a concurrent commit added files to a table it flushes,
            removed one of the same files or altered the table (nothing was
            committed; the files written are deleted).
    """
    tx = db.begin("serializable")
    stage = tx.stage
    state = tx.read_state
    limit = inline_flush_bytes(state.properties) if bound is None else bound
    over = {t: n for t, n in inlined_bytes(state).items() if n > limit}
    if not over:
        tx.abort()
        return None
    written: list[AddFile] = []  # files written and not yet handed to the transaction
    table_id = ""
    try:
        for table_id in sorted(over):
            meta = state.tables[table_id].meta
            inlined = _inlined_files(state, table_id)
            stage.note_whole_table_read(table_id, (a.path for a in inlined))
            for _, group in by_partition(meta, inlined):
                new = rewrite(
                    db,
                    meta,
                    group,
                    int(db.target_file_size),
                    sort_by=None,
                    zorder_by=None,
                    written=written,
                )
                stage.replace_files(table_id, group, new)
                written.clear()
            stage.record_operation("FLUSH INLINED", table_id, bytes=over[table_id])
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
    for attempt in range(1, FLUSH_ATTEMPTS + 1):
        try:
            flush_inlined(db)
            return
        except ConflictError as exc:
            if attempt == FLUSH_ATTEMPTS:
                log.info("inlined files were not flushed (concurrent commits won): %s", exc)
        except Exception as exc:
            log.warning("could not flush inlined files at version %d: %s", state.version, exc)
            return


__all__ = ["flush_after_checkpoint", "flush_inlined", "inlined_bytes", "needs_flush"]
