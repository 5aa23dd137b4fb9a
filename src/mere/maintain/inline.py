"""Moving inlined data files out of the log into ordinary data files.

A small write inlines its Parquet bytes in its commit (docs/format.md §2.5),
which saves a request per commit but makes every state, and every checkpoint,
carry those bytes. When a table's inlined bytes pass the database property
``inlineFlushBytes`` (default 8 MiB), the writer that checkpoints writes them
into ordinary data files, the rows of each partition's inlined files together
(in their order) in files of the target size, as compaction writes them (a
thousand one-row commits become one file, one request), and swaps them in, in
one commit whose removes and adds carry ``dataChange=false`` (readers are
never invalidated by it).

The new files come after every other file of the table, so to keep the
table's row order, the inlined files appended while the flush ran are moved
after them in the same commit (their bytes under new paths: no upload). The
commit reads the whole table at isolation ``serializable``, so a file that
lands while it races makes it conflict, and it catches up again, a few times;
a stored file appended meanwhile (whose object cannot move), a removal of one
of its files or a change of the table makes it give up, deleting what it
wrote, until a later checkpoint. A writer that dies between writing the files
and committing leaves orphans for vacuum; the inlined rows stay where they
were.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from mere.data.writer import delete_orphans, new_data_file_path
from mere.errors import CommitOutcomeUnknown, ConflictError
from mere.log.actions import AddFile, TableMeta
from mere.log.columns import INLINE, PATH
from mere.maintain.compact import by_partition, rewrite
from mere.properties import inline_flush_bytes
from mere.snapshot.state import DatabaseState

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

log = logging.getLogger("mere")
#: How often a flush tries to commit what it wrote, catching up with appends each time.
CATCH_UP_ATTEMPTS = 8


def inlined_bytes(state: DatabaseState) -> dict[str, int]:
    """The inlined bytes each table (by id) holds at ``state`` (tables without any left out)."""
    found = {}
    for table_id, table in state.tables.items():
        _, size = table.live.inlined()
        if size:
            found[table_id] = size
    return found


def needs_flush(state: DatabaseState, bound: int | None = None) -> bool:
    """Whether some table holds more inlined bytes than ``bound`` (default: the property)."""
    limit = inline_flush_bytes(state.properties) if bound is None else bound
    return any(total > limit for total in inlined_bytes(state).values())


@dataclass
class _Moved:
    """One table's flush: the inlined files it replaces and the data files it wrote."""

    table_id: str
    meta: TableMeta
    inlined: list[AddFile]
    written: list[AddFile] = field(default_factory=list)


def flush_inlined(db: DatabaseContext, bound: int | None = None) -> int | None:
    """Move the inlined files of tables over ``bound`` bytes into data files; the version, or None.

    ``bound`` defaults to the database property ``inlineFlushBytes``; 0 moves
    every inlined file. Returns None when no table was over it.

    Raises:
        ConflictError: concurrent commits kept beating it (files appended that
            are not inlined, removals of the same files, a change of the
            table), or beat it :data:`CATCH_UP_ATTEMPTS` times in a row; the
            files it wrote are deleted.
    """
    state = db.latest_state()
    limit = inline_flush_bytes(state.properties) if bound is None else bound
    over = sorted(t for t, n in inlined_bytes(state).items() if n > limit)
    if not over:
        return None
    moves = [_Moved(t, state.tables[t].meta, _inlined_files(state, t)) for t in over]
    try:
        for move in moves:
            for _, group in by_partition(move.meta, move.inlined):
                rewrite(
                    db,
                    move.meta,
                    group,
                    int(db.target_file_size),
                    sort_by=None,
                    zorder_by=None,
                    written=move.written,
                )
        for attempt in range(1, CATCH_UP_ATTEMPTS + 1):
            try:
                return _commit(db, state, moves)
            except ConflictError:
                if attempt == CATCH_UP_ATTEMPTS:
                    raise
    except CommitOutcomeUnknown:
        raise  # the commit may have landed: its files must stay
    except Exception:
        # (A BaseException, e.g. a simulated crash, leaves the files to vacuum.)
        delete_orphans(db.store, (m.meta.prefix + a.path for m in moves for a in m.written))
        raise
    raise AssertionError("unreachable")


def _commit(db: DatabaseContext, read: DatabaseState, moves: list[_Moved]) -> int:
    """Swap the written files in at the latest version, after what was appended since ``read``.

    The new files come after every other file of their table; inlined files
    appended since ``read`` are moved after them (the same bytes under a new
    path), so the table's rows keep their order. The whole table is read at
    ``serializable``: anything added while this commit races conflicts, and a
    next attempt moves that too.
    """
    tx = db.begin("serializable")
    try:
        stage, now = tx.stage, tx.read_state
        for move in moves:
            table = now.tables.get(move.table_id)

            def beaten(why: str, name: str = move.meta.name) -> ConflictError:
                return ConflictError(why, winning_version=now.version, table=name)

            if table is None or (table.meta is not move.meta and table.meta != move.meta):
                raise beaten("the table changed while its flush ran")
            live = table.live
            paths = live.columns([PATH]).column(0)
            appended = pc.invert(pc.is_in(paths, value_set=_paths(read, move.table_id)))
            since = live.take(pc.indices_nonzero(appended))
            if any(a.inline is None for a in since):
                raise beaten("data files were appended to the table while its flush ran")
            mine = pa.array([a.path for a in move.inlined], pa.string())
            if not pc.all(pc.is_in(mine, value_set=paths)).as_py():
                raise beaten("an inlined file was removed while its flush ran")
            read_paths = [*mine.to_pylist(), *(a.path for a in since)]
            stage.note_whole_table_read(move.table_id, read_paths)
            stage.replace_files(move.table_id, move.inlined, move.written, owned=False)
            again = [replace(a, path=new_data_file_path(a.partition_values)) for a in since]
            stage.replace_files(move.table_id, since, again, owned=False)
            inlined = sum(a.size for a in move.inlined)
            stage.record_operation("FLUSH INLINED", move.table_id, bytes=inlined)
        return tx.commit()
    except BaseException:
        tx.abort()
        raise


def _paths(state: DatabaseState, table_id: str) -> pa.ChunkedArray:
    return state.tables[table_id].live.columns([PATH]).column(0)


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
        log.info("inlined files were not flushed (concurrent commits won): %s", exc)
    except Exception as exc:
        log.warning("could not flush inlined files at version %d: %s", state.version, exc)


__all__ = ["flush_after_checkpoint", "flush_inlined", "inlined_bytes", "needs_flush"]
