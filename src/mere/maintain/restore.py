"""Restore: roll back by rolling forward.

``restore(version=V)`` commits ONE new version whose state of the chosen
tables equals their state at V. Nothing is deleted from the log: the
rolled-back versions stay in the history, and the restore itself can be
restored away. For each table in scope:

* it exists at V and now (same table id): its metadata is reset to V's if it
  changed, files live now but not at V are removed, files live at V but not now
  are added back (the data files are immutable, so they are simply
  referenced again);
* it existed at V but was dropped since: it is re-created with the same id and
  metadata, and V's files are added back; a table that took its name since is
  dropped first;
* it did not exist at V: it is dropped.

With ``tables=None`` every table is in scope, so tables created since V go
away. Application transaction markers (``txn``) and database properties are
not rolled back (as in Delta Lake): a marker records what a pipeline
committed, and the pipeline decides what to redo after a restore.

The commit runs at isolation ``serializable`` and records a read of every
table it restores (and the table listing when restoring all), so a concurrent
commit that changes any of them makes it conflict instead of producing a mix;
restore then starts over from the new latest version (a few times).

Every file to add back is checked first: if vacuum deleted it, the restore
fails with :class:`~mere.maintain.common.DataFileMissing` and commits nothing.
A vacuum running concurrently never deletes a file the restore commits: the
restore marks the files under ``_keeping/`` first (which every later batch of
deletions spares), waits for the batches already marked that name one of them,
and only then checks that they exist and commits (docs/format.md §11.9).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mere.data.external import data_file_location, data_file_name
from mere.errors import ConflictError, InvalidArgument, ObjectNotFound, TableNotFound
from mere.log.actions import AddFile, TableMeta
from mere.maintain.common import (
    MARK_WAIT_SECONDS,
    DataFileMissing,
    await_marks,
    marked_keeping,
)
from mere.maintain.progress import progress
from mere.names import check_table_name
from mere.snapshot.state import DatabaseState, TableState
from mere.timestamps import Moment
from mere.txn.transaction import Transaction

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

#: How often a restore that conflicts with concurrent commits starts over.
RESTORE_ATTEMPTS = 3
#: Concurrent existence checks of the files to add back.
CHECK_THREADS = 16


@dataclass
class RestoreResult:
    """What a restore committed."""

    #: The version whose state was restored.
    restored_version: int
    #: The version the restore committed (equal to the read version if nothing changed).
    version: int
    tables_restored: list[str] = field(default_factory=list)
    tables_recreated: list[str] = field(default_factory=list)
    tables_dropped: list[str] = field(default_factory=list)
    files_added: int = 0
    files_removed: int = 0
    rows_added: int = 0
    rows_removed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return asdict(self)


def restore(
    db: DatabaseContext,
    version: int | None = None,
    *,
    timestamp: Moment | None = None,
    tables: Sequence[str] | None = None,
) -> RestoreResult:
    """Commit the state of ``tables`` (default: all) as of ``version`` or ``timestamp``.

    Raises:
        InvalidArgument: neither or both of ``version`` and ``timestamp``, or
            ``tables`` given as one string.
        VersionNotFound: the version does not exist or was expired.
        TableNotFound: a named table exists neither at that version nor now.
        DataFileMissing: a file the old version needs was deleted by vacuum.
        ConflictError: concurrent commits kept changing the restored tables.
    """
    if (version is None) == (timestamp is None):
        raise InvalidArgument("pass the version or the timestamp to restore")
    if isinstance(tables, str):
        raise InvalidArgument("tables must be a list of table names, not a string")
    old = db.snapshot(version=version, timestamp=timestamp).state
    for attempt in range(1, RESTORE_ATTEMPTS + 1):
        tx = db.begin("serializable")
        try:
            result, to_add = _stage(db, tx, old, tables)
            keys = _own_keys(db, to_add)
            with marked_keeping(db, "restore", keys) if keys else nullcontext():
                _await_deletions(db, old.version, keys)
                _check_files_exist(db, old.version, to_add)
                result.version = tx.commit()
            return result
        except ConflictError:
            tx.abort()
            if attempt == RESTORE_ATTEMPTS:
                raise
        except Exception:
            tx.abort()
            raise
    raise AssertionError("unreachable")


def _stage(
    db: DatabaseContext, tx: Transaction, old: DatabaseState, tables: Sequence[str] | None
) -> tuple[RestoreResult, list[tuple[TableMeta, list[AddFile]]]]:
    """Stage in ``tx`` the changes that make the chosen tables equal to ``old``.

    Returns the result so far and the files added back (by table), which the
    caller checks before it commits.
    """
    now = tx.read_state
    result = RestoreResult(restored_version=old.version, version=tx.read_version)
    if tables is None:
        tx.tables()  # record the listing: a concurrent create or drop conflicts
        old_ids = list(old.tables)
        drop_ids = [i for i in now.tables if i not in old.tables]
    else:
        old_ids, drop_ids = [], []
        for name in dict.fromkeys(check_table_name(n) for n in tables):
            was, cur = old.table_by_name(name), now.table_by_name(name)
            tx.has_table(name)  # record the lookup
            if was is None and cur is None:
                raise TableNotFound(name, old.version)
            if was is not None:
                old_ids.append(was.meta.id)
            if cur is not None and (was is None or cur.meta.id != was.meta.id):
                drop_ids.append(cur.meta.id)
        # A table restored under a name another table now holds: that one goes.
        for table_id in old_ids:
            holder = now.table_by_name(old.tables[table_id].meta.name)
            if holder is not None and holder.meta.id != table_id and holder.meta.id not in drop_ids:
                drop_ids.append(holder.meta.id)

    for table_id in drop_ids:
        dropped = now.tables[table_id]
        _record_read(tx, dropped)
        tx.drop_table(dropped.meta.name)
        result.tables_dropped.append(dropped.meta.name)
        result.files_removed += len(dropped.files)
        result.rows_removed += dropped.rows

    to_add: list[tuple[TableMeta, list[AddFile]]] = []
    for table_id in old_ids:
        was = old.tables[table_id]
        cur = now.tables.get(table_id)
        if cur is None:
            tx.stage.create(was.meta)
            result.tables_recreated.append(was.meta.name)
            to_add.append((was.meta, list(was.files.values())))
            continue
        _record_read(tx, cur)
        changed = False
        if not _same_meta(was.meta, cur.meta):
            tx.stage.set_metadata(table_id, was.meta)
            changed = True
        removed = [f for p, f in cur.files.items() if p not in was.files]
        tx.stage.remove_files(table_id, removed)
        added = [f for p, f in was.files.items() if p not in cur.files]
        if added:
            to_add.append((was.meta, added))
        if changed or removed or added:
            result.tables_restored.append(was.meta.name)
        result.files_removed += len(removed)
        result.rows_removed += sum(f.rows for f in removed)

    for meta, adds in to_add:
        # Re-added files change the table's rows, even if a compaction first wrote them.
        # Files of an older version: never deleted by this transaction, whatever happens.
        tx.add_files(
            meta.name,
            [replace(a, data_change=True) for a in adds],
            operation="RESTORE",
            owned=False,
        )
        result.files_added += len(adds)
        result.rows_added += sum(a.rows for a in adds)

    names = sorted({*result.tables_restored, *result.tables_recreated, *result.tables_dropped})
    # One operation for the whole commit: commitInfo says RESTORE {version, tables}.
    tx.stage.set_operations([{"operation": "RESTORE", "version": old.version, "tables": names}])
    return result, to_add


def _own_keys(db: DatabaseContext, to_add: list[tuple[TableMeta, list[AddFile]]]) -> set[str]:
    """The keys in this database's store of the files to add back (not inlined, not an
    export's files in its source)."""
    keys = set()
    for meta, adds in to_add:
        for add in adds:
            if add.inline is None:
                holder, key = data_file_location(db.store, meta, add)
                if holder is db.store:
                    keys.add(key)
    return keys


def _await_deletions(db: DatabaseContext, version: int, keys: set[str]) -> None:
    """Wait until no running batch of deletions names one of ``keys`` (its run may have
    read the log before this restore commits: what it deleted is then found missing).

    Raises:
        DataFileMissing: such a batch is still running after ``MARK_WAIT_SECONDS``.
    """
    if not keys:
        return
    try:
        await_marks(db, lambda mark: not keys.isdisjoint(mark.keys), MARK_WAIT_SECONDS)
    except TimeoutError as exc:
        raise DataFileMissing(
            f"cannot restore version {version}: a vacuum is deleting files it needs ({exc})",
            help="retry when that vacuum has ended (the mark of a killed run is removed by "
            "the next vacuum once older than the minimum retention)",
        ) from None


def _record_read(tx: Transaction, table: TableState) -> None:
    """Record a read of every row of ``table``: a concurrent change to it then conflicts."""
    tx.stage.plan_read(table.meta.id, [], None)


def _same_meta(a: TableMeta, b: TableMeta) -> bool:
    """Equal metadata, including field metadata (physical column names)."""
    return (
        a.name == b.name
        and a.schema.equals(b.schema, check_metadata=True)
        and a.partition_columns == b.partition_columns
        and a.properties == b.properties
        and a.created_time == b.created_time
    )


def _check_files_exist(
    db: DatabaseContext, version: int, to_add: list[tuple[TableMeta, list[AddFile]]]
) -> None:
    """Raise DataFileMissing if any file to add back no longer exists."""
    jobs = [(meta, add) for meta, adds in to_add for add in adds if add.inline is None]
    if not jobs:
        return

    def missing(job: tuple[TableMeta, AddFile]) -> tuple[TableMeta, AddFile] | None:
        meta, add = job
        try:
            holder, key = data_file_location(db.store, meta, add)  # an export's: its source's
            holder.head(key)
        except (ObjectNotFound, DataFileMissing):
            return job
        return None

    with progress("checking data files", len(jobs)) as advance:
        with ThreadPoolExecutor(max_workers=min(CHECK_THREADS, len(jobs))) as pool:
            for found in pool.map(missing, jobs):
                advance(1)
                if found is not None:
                    meta, add = found
                    raise DataFileMissing(
                        f"cannot restore version {version}: data file {data_file_name(meta, add)} "
                        f"of table {meta.name!r} no longer exists (deleted by vacuum)",
                        help="restore a version within the vacuum retention",
                    )
