"""What a transaction has staged, and the only interface the verbs use to change it.

A :class:`Stage` holds, per table, the changes a transaction has made so far
(new metadata, creation, drop, added and removed data files) plus the
database-wide ones (properties, application transaction markers) and the
operations to name in ``commitInfo``. Every verb — in ``mere.ops``,
``mere.maintain`` and ``mere.spark`` — reads and writes through its public
methods; nothing outside ``mere.txn`` touches its fields.

**Statements and savepoints.** :meth:`Stage.savepoint` opens a frame; if the
body raises, every staged change made inside it is undone and every data
file written inside it is deleted, so a failed statement leaves the
transaction exactly as before it. Each table's staged changes are saved the
first time a frame touches them (copy on first write), so a statement costs
what it touches, not what the transaction holds. The reads a rolled-back
statement made stay in the footprint: the caller saw them.

**Files this transaction wrote** are tracked by the stage. Data files are
only deleted by it when they can no longer be referenced: on rollback (the
frame's files), on abort (all), and after a successful commit (those the
commit does not reference: superseded by a later statement, or written for a
table dropped again). Files handed in with :meth:`add_files` (written by
Spark executors, or old files re-added by restore) belong to their caller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mere.constraints import enforce
from mere.data.writer import DataFileWriter, delete_orphans
from mere.errors import (
    InvalidName,
    MereError,
    SchemaMismatch,
    TableExists,
    TableNotFound,
)
from mere.log.actions import (
    ARROW_INLINE_FORMAT_VERSION,
    INLINE_FORMAT_VERSION,
    Action,
    AddFile,
    AppTxn,
    DropTable,
    Protocol,
    RemoveFile,
    TableMeta,
)
from mere.names import check_table_name, name_key
from mere.properties import INLINE_LIMIT_PROPERTY, check_database_properties, inline_limit
from mere.snapshot.planning import select_files
from mere.snapshot.scan import ScanPlan, plan_scan, scan_files
from mere.snapshot.state import DatabaseState
from mere.storage import ObjectStore
from mere.txn.conflicts import ReadRecord, TxFootprint
from mere.txn.keys import (
    Candidates,
    KeyProbe,
    Selector,
    added_keys,
    canonical_floats,
    duplicates_within,
    key_columns,
    key_counts,
    key_signature,
    live_candidates,
    present_keys,
    refuse_duplicates,
    remember_filter,
    semi_join,
)

log = logging.getLogger("mere.txn")

#: A transaction keeps the key rows of the files it writes in memory, up to this
#: many bytes in all, so that its key checks need not read those files back (a
#: statement holds the rows it writes in memory anyway, of which keys are a part).
KEPT_KEY_BYTES = 256 * 1024 * 1024


@dataclass
class TableStage:
    """One table's staged changes.

    ``meta`` is the table's metadata as the transaction sees it when it
    created or changed it (None: unchanged). A created table has no removes;
    a dropped one has no adds, removes or metadata.
    """

    meta: TableMeta | None = None
    created: bool = False
    dropped: DropTable | None = None
    adds: dict[str, AddFile] = field(default_factory=dict)  # path -> add
    removes: dict[str, RemoveFile] = field(default_factory=dict)  # path -> remove

    def copy(self) -> TableStage:
        return TableStage(
            self.meta, self.created, self.dropped, dict(self.adds), dict(self.removes)
        )


@dataclass
class _Frame:
    """One open savepoint: what to restore, and what was written inside it."""

    tables: dict[str, TableStage | None] = field(default_factory=dict)  # saved on first touch
    app_txns: dict[str, AppTxn] = field(default_factory=dict)
    database_properties: dict[str, str] | None = None
    operations: int = 0
    rewrites: bool = False
    writers: dict[str, DataFileWriter] = field(default_factory=dict)
    written: list[tuple[str, str]] = field(default_factory=list)  # (table id, path)
    new_keys: dict[str, list[pa.Table]] = field(default_factory=dict)  # keyed tables' new rows
    new_key_files: dict[str, list[AddFile]] = field(default_factory=dict)  # added, keyed
    writer_keys: dict[str, _WriterKeys] = field(default_factory=dict)  # of keyed tables' writers


@dataclass
class _WriterKeys:
    """The key rows given to one writer, and the files of writers it absorbed."""

    keys: list[pa.Table] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    pure: bool = True  # only rows its own frame wrote (it absorbed no other writer)


@dataclass(frozen=True, eq=False)
class _HeldKeys:
    """Files this transaction wrote, and the key rows they hold between them.

    ``signature`` is the key they are rows of (physical columns and hash
    families, as a key filter's): a later rename or another key makes them
    rows of another column. ``owner`` is the frame whose statement wrote
    exactly these rows (None: rows of several statements).
    """

    paths: frozenset[str]
    keys: pa.Table
    signature: list[list[str]]
    owner: _Frame | None = None


class Stage:
    """A transaction's staged changes over the snapshot ``read_state``.

    Args:
        store: where data files are written.
        read_state: the pinned snapshot the transaction reads.
        isolation: the transaction's isolation level (for its footprint).
        target_file_size: the size data files are cut at.
    """

    def __init__(
        self,
        store: ObjectStore,
        read_state: DatabaseState,
        isolation: str,
        *,
        target_file_size: int,
    ) -> None:
        self.store = store
        self.read_state = read_state
        self.target_file_size = target_file_size
        self.inline_limit = (
            inline_limit(read_state.properties)
            if read_state.protocol.format_version >= INLINE_FORMAT_VERSION
            else 0
        )
        self.inline_arrow = read_state.protocol.format_version >= ARROW_INLINE_FORMAT_VERSION
        self.reads = TxFootprint(isolation)  # reads only; writes are derived from the stage
        self._tables: dict[str, TableStage] = {}
        self._app_txns: dict[str, AppTxn] = {}
        self._database_properties: dict[str, str] | None = None
        self._operations: list[dict[str, Any]] = []
        self._rewrites = False  # anything other than a plain append
        self._frames: list[_Frame] = [_Frame()]  # the bottom frame is the transaction itself
        self._held: dict[str, list[_HeldKeys]] = {}  # table id -> key rows of files written
        self._held_bytes = 0

    # --- the namespace, as this transaction sees it -------------------------------

    def lookup(self, name: str) -> TableMeta | None:
        """The table named ``name`` as this transaction sees it; the lookup is recorded."""
        key = name_key(check_table_name(name))
        self.reads.looked_up.add(key)
        for table in self._tables.values():
            if table.meta is not None and name_key(table.meta.name) == key:
                return table.meta
        state = self.read_state.table_by_name(name)
        if state is None:
            return None
        staged = self._tables.get(state.meta.id)
        if staged is not None and (staged.dropped is not None or staged.meta is not None):
            return None  # dropped, or renamed (found above under its new name otherwise)
        return state.meta

    def require(self, name: str) -> TableMeta:
        """Like :meth:`lookup`, raising TableNotFound for a missing table."""
        meta = self.lookup(name)
        if meta is None:
            raise TableNotFound(name, self.read_state.version)
        return meta

    def meta(self, table_id: str) -> TableMeta:
        """The metadata of table ``table_id`` as this transaction sees it."""
        staged = self._tables.get(table_id)
        if staged is not None and staged.dropped is not None:
            raise TableNotFound(staged.dropped.name, self.read_state.version)
        if staged is not None and staged.meta is not None:
            return staged.meta
        state = self.read_state.tables.get(table_id)
        if state is None:
            raise TableNotFound(table_id, self.read_state.version)
        return state.meta

    def table_names(self) -> list[str]:
        """Names of the tables this transaction sees, sorted; the listing is recorded."""
        self.reads.listed_tables = True
        names = {i: t.meta.name for i, t in self.read_state.tables.items()}
        for table_id, staged in self._tables.items():
            if staged.dropped is not None:
                names.pop(table_id, None)
            elif staged.meta is not None:
                names[table_id] = staged.meta.name
        return sorted(names.values())

    def is_created(self, table_id: str) -> bool:
        """Whether this transaction created the table."""
        staged = self._tables.get(table_id)
        return staged is not None and staged.created

    # --- reads -------------------------------------------------------------------

    def live_files(self, table_id: str) -> tuple[list[AddFile], list[AddFile]]:
        """(files of the snapshot still live, files this transaction added)."""
        own = self.own_files(table_id)
        staged = self._tables.get(table_id)
        base: list[AddFile] = []
        if staged is None or not staged.created:
            removed = staged.removes if staged is not None else {}
            base = [
                f for p, f in self.read_state.tables[table_id].files.items() if p not in removed
            ]
        return base, own

    def own_files(self, table_id: str) -> list[AddFile]:
        """The files this transaction added to the table (buffered rows written out first)."""
        self.meta(table_id)
        self._flush(table_id)
        staged = self._tables.get(table_id)
        return list(staged.adds.values()) if staged is not None else []

    def plan_read(
        self, table_id: str, columns: Sequence[str] | None, filter: str | None
    ) -> tuple[ScanPlan, list[AddFile]]:
        """The files a scan of ``columns`` where ``filter`` reads; recorded as a read.

        With a filter, the snapshot's files are chosen over the table's file
        columns at once, as a plain scan chooses them: the cost follows the
        files chosen, not the table's, and their objects hold the statistics
        the filter reads (enough to read and to remove them, not to add them
        again). Without one, every file is read, whole (SQL's views read their
        statistics).
        """
        plan = plan_scan(self.meta(table_id), columns, filter)
        if plan.predicate is None:
            chosen, own = self.live_files(table_id)
        else:
            own = self.own_files(table_id)
            staged = self._tables.get(table_id)
            chosen = []
            if staged is None or not staged.created:
                removed = staged.removes if staged is not None else {}
                table = self.read_state.tables[table_id]
                chosen = [f for f in select_files(plan, table) if f.path not in removed]
        if not self.is_created(table_id):
            self.reads.reads.append(
                ReadRecord(
                    table_id,
                    plan.table.name,
                    frozenset(f.path for f in chosen),
                    None if plan.predicate is None else plan.matches,
                )
            )
        return plan, chosen + plan.select(own)

    def note_whole_table_read(self, table_id: str, paths: Iterable[str]) -> None:
        """Record a read of every row of a table, ``paths`` being the files that held them.

        At isolation ``serializable`` every file a concurrent commit adds to
        the table then conflicts (a flush of inlined files keeps the table's
        row order so: it never lands after rows appended while it ran).
        """
        meta = self.meta(table_id)
        self.reads.reads.append(ReadRecord(table_id, meta.name, frozenset(paths), None))

    # --- table-level changes ---------------------------------------------------------

    def create(self, meta: TableMeta) -> None:
        """Stage a new table (or re-create a dropped one under its old id, for restore).

        Raises:
            TableExists: the name is taken in this transaction's view.
            InvalidName: the id is in use in the snapshot or already staged.
        """
        existing = self.lookup(meta.name)
        if existing is not None:
            raise TableExists(meta.name, existing.name)
        if meta.id in self._tables or meta.id in self.read_state.tables:
            raise InvalidName(f"table id {meta.id} is already in use")
        self._touch(meta.id)
        self._tables[meta.id] = TableStage(meta=meta, created=True)
        self._rewrites = True

    def recreate(self, meta: TableMeta) -> None:
        """Stage ``meta`` as is for a table dropped before the snapshot (restore)."""
        self.create(meta)

    def set_metadata(self, table_id: str, meta: TableMeta) -> None:
        """Replace a table's metadata (schema, properties, constraints, name).

        Data files already written keep the schema they were written with:
        buffered rows are written out first.
        """
        self.meta(table_id)
        if meta.id != table_id:
            raise InvalidName(f"metadata for table {meta.id} staged as {table_id}")
        self._flush(table_id)
        staged = self._touch(table_id)
        staged.meta = meta
        self._rewrites = True

    def drop(self, table_id: str) -> None:
        """Drop a table: its staged changes are discarded with it.

        A table this transaction created disappears without a trace (the
        files it wrote for it are deleted once the transaction ends); an
        existing one gets a drop action.
        """
        meta = self.meta(table_id)
        # Buffered rows become files first, so a rolled-back drop gets them back.
        self._flush(table_id)
        staged = self._touch(table_id)
        if staged.created:
            del self._tables[table_id]
        else:
            self._tables[table_id] = TableStage(dropped=DropTable(table_id, meta.name))
        self._rewrites = True

    # --- data changes ----------------------------------------------------------------

    def write_rows(self, table_id: str, rows: pa.Table) -> None:
        """Write rows already conformed to the table schema, after checking its constraints."""
        meta = self.meta(table_id)
        enforce(meta.schema, meta.properties, rows, f"the rows written to {meta.name!r}")
        if rows.num_rows == 0:
            return
        self._touch(table_id)
        frame = self._frames[-1]
        columns = key_columns(meta)
        if columns:  # one zero and one NaN per key: equal keys are equal bits
            rows = canonical_floats(rows, columns)
        writer = frame.writers.get(table_id)
        if writer is None:
            writer = DataFileWriter(
                self.store,
                meta,
                target_file_size=self.target_file_size,
                inline_limit=self.inline_limit,
                inline_arrow=self.inline_arrow,
            )
            frame.writers[table_id] = writer
            if columns:
                frame.writer_keys[table_id] = _WriterKeys()
        if columns:
            keys = rows.select(columns)
            frame.new_keys.setdefault(table_id, []).append(keys)
            held = frame.writer_keys.get(table_id)
            if held is not None:
                held.keys.append(keys)
        writer.write(rows)

    def add_files(self, table_id: str, adds: Sequence[AddFile], *, owned: bool = False) -> None:
        """Publish data files written elsewhere with this commit.

        ``owned``: this transaction wrote them (they are deleted if the
        statement or transaction fails); otherwise their writer owns them.

        Raises:
            SchemaMismatch: a file belongs to another table.
        """
        self.meta(table_id)
        for add in adds:
            if add.table_id != table_id:
                raise SchemaMismatch(f"data file {add.path} was written for another table")
        staged = self._touch(table_id)
        for add in adds:
            staged.adds[add.path] = add
        if owned:
            frame = self._frames[-1]
            frame.written.extend((table_id, a.path) for a in adds if a.inline is None)
            if key_columns(self.meta(table_id)) and any(a.data_change for a in adds):
                frame.new_key_files.setdefault(table_id, []).extend(adds)

    def remove_files(self, table_id: str, adds: Sequence[AddFile]) -> None:
        """Take live files out of the table (copy-on-write: their rows go elsewhere)."""
        self._remove(table_id, adds, data_change=True)
        if adds:
            self._rewrites = True

    def replace_files(
        self, table_id: str, old: Sequence[AddFile], new: Sequence[AddFile], *, owned: bool = True
    ) -> None:
        """Swap files without changing the table's rows (compaction).

        Removes and adds carry ``dataChange=false``: concurrent readers are not
        invalidated by them, and only a concurrent removal of the same files
        conflicts.
        """
        self._remove(table_id, old, data_change=False)
        self.add_files(table_id, [replace(a, data_change=False) for a in new], owned=owned)

    def _remove(self, table_id: str, adds: Sequence[AddFile], *, data_change: bool) -> None:
        self.meta(table_id)
        if not adds:
            return
        self._flush(table_id)
        staged = self._touch(table_id)
        now = int(time.time() * 1000)
        for add in adds:
            if staged.adds.pop(add.path, None) is not None:
                continue  # our own file: it simply stops being added
            if staged.created:
                raise MereError(f"data file {add.path} is not part of table {table_id}")
            staged.removes[add.path] = RemoveFile(
                table_id, add.path, now, data_change, add.size, add.rows
            )

    # --- database-level changes -------------------------------------------------------

    def set_database_properties(self, properties: dict[str, str]) -> None:
        """Stage the database's complete new properties (validated)."""
        check_database_properties(properties)
        self._database_properties = dict(properties)
        self._rewrites = True

    @property
    def database_properties(self) -> Mapping[str, str]:
        """The database properties as this transaction sees them."""
        if self._database_properties is not None:
            return self._database_properties
        return self.read_state.properties

    def set_app_transaction(self, app: AppTxn) -> None:
        self._app_txns[app.app_id] = app

    def app_version(self, app_id: str) -> int | None:
        """The version recorded for ``app_id`` as this transaction sees it."""
        if app_id in self._app_txns:
            return self._app_txns[app_id].version
        txn = self.read_state.app_txns.get(app_id)
        return None if txn is None else txn.version

    @property
    def app_transactions(self) -> Mapping[str, AppTxn]:
        return self._app_txns

    # --- operations (commitInfo) ------------------------------------------------------

    def record_operation(self, operation: str, table_id: str | None, **parameters: Any) -> None:
        """Name an operation in the commit's ``operationParameters``."""
        if operation != "APPEND":
            self._rewrites = True
        entry: dict[str, Any] = {"operation": operation}
        if table_id is not None:
            entry["table"] = self._name_of(table_id)
        self._operations.append({**entry, **parameters})

    def set_operations(self, operations: list[dict[str, Any]]) -> None:
        """Replace the operations recorded so far (a verb that names the commit as a whole)."""
        self._operations = [dict(op) for op in operations]

    @property
    def operations(self) -> list[dict[str, Any]]:
        return self._operations

    @property
    def rewrites(self) -> bool:
        """Whether anything other than plain appends was staged."""
        return self._rewrites

    def _name_of(self, table_id: str) -> str:
        staged = self._tables.get(table_id)
        if staged is not None and staged.dropped is not None:
            return staged.dropped.name
        return self.meta(table_id).name

    # --- savepoints ------------------------------------------------------------------

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Run the body as one unit: if it raises, undo everything it staged.

        The data files written inside it are deleted on rollback. Frames nest;
        a released frame's changes belong to the enclosing one.
        """
        frame = _Frame(
            app_txns=dict(self._app_txns),
            database_properties=self._database_properties,
            operations=len(self._operations),
            rewrites=self._rewrites,
        )
        self._frames.append(frame)
        try:
            yield
            self._check_keys(frame)
        except BaseException as exc:
            if self._frames[-1] is frame:
                self._frames.pop()
                if isinstance(exc, Exception):
                    self._rollback(frame)
            raise
        else:
            if self._frames[-1] is frame:
                self._frames.pop()
                self._release(frame)

    def _touch(self, table_id: str) -> TableStage:
        """The table's stage, saved in the top frame before its first change there."""
        frame = self._frames[-1]
        staged = self._tables.get(table_id)
        if len(self._frames) > 1 and table_id not in frame.tables:
            frame.tables[table_id] = None if staged is None else staged.copy()
        if staged is None:
            staged = self._tables[table_id] = TableStage()
        return staged

    def _release(self, frame: _Frame) -> None:
        parent = self._frames[-1]
        if len(self._frames) > 1:
            for table_id, saved in frame.tables.items():
                parent.tables.setdefault(table_id, saved)
        parent.written.extend(frame.written)
        for table_id, writer in frame.writers.items():
            mine = parent.writers.get(table_id)
            theirs = frame.writer_keys.get(table_id)
            if mine is None:
                parent.writers[table_id] = writer
                if theirs is not None:
                    parent.writer_keys[table_id] = theirs
                continue
            # Rows still in memory join the enclosing writer (no extra small file).
            absorbed = mine.absorb(writer)
            for add in absorbed:
                self._stage_written(table_id, add, parent, frames_above=len(self._frames))
            ours = parent.writer_keys.get(table_id)
            if ours is None or theirs is None:
                parent.writer_keys.pop(table_id, None)  # the keys of the files are unknown
            else:
                ours.keys += theirs.keys
                ours.paths += theirs.paths + [a.path for a in absorbed]
                ours.pure = False

    def _rollback(self, frame: _Frame) -> None:
        for table_id, writer in frame.writers.items():
            frame.written.extend((table_id, a.path) for a in writer.finish() if a.inline is None)
        for table_id, saved in frame.tables.items():
            if saved is None:
                self._tables.pop(table_id, None)
            else:
                self._tables[table_id] = saved
        self._app_txns = frame.app_txns
        self._database_properties = frame.database_properties
        del self._operations[frame.operations :]
        self._rewrites = frame.rewrites
        _delete(self.store, frame.written)

    # --- primary keys ----------------------------------------------------------------

    def _check_keys(self, frame: _Frame) -> None:
        """At the end of a statement: each key it wrote must be held by exactly one live row.

        Rows still in memory are written out first, so every live row is in a
        file. The key rows of the files this transaction wrote are held in
        memory (:meth:`_hold_keys`); of the committed files only the key
        columns of those whose statistics and key filters may hold a new key
        are read. Checking at the statement's end (not per write) lets an
        update move keys through values other rows still hold.
        """
        for table_id in dict.fromkeys([*frame.new_keys, *frame.new_key_files]):
            staged = self._tables.get(table_id)
            if staged is None or staged.dropped is not None:
                continue
            meta = self.meta(table_id)
            columns = key_columns(meta)
            if not columns:
                continue
            parts = [t.select(columns) for t in frame.new_keys.get(table_id, [])]
            written = list({a.path: a for a in frame.new_key_files.get(table_id, [])}.values())
            if written:  # published files (Spark, merge): their keys are read once, here
                published = added_keys(self.store, meta, written).select(columns)
                parts.append(published)
                self._hold_keys(table_id, [], written, published, owner=frame)
            new = pa.concat_tables(parts, promote_options="permissive") if parts else None
            if new is None or new.num_rows == 0:
                continue
            refuse_duplicates(meta, duplicates_within(new), "among the rows written")
            duplicates = self._duplicates(table_id, meta, new, frame)
            refuse_duplicates(meta, duplicates, "already held by a row")

    def _duplicates(self, table_id: str, meta: TableMeta, new: pa.Table, frame: _Frame) -> pa.Table:
        """The keys of ``new`` (the statement's, each once) that two live rows hold.

        Every live row is counted once, the new ones too. When the files this
        statement wrote hold exactly its rows (the usual case), the new rows
        need not be counted: a new key is a duplicate when any other row holds it.
        """
        own, held, select = self._key_sources(table_id)
        mine = [h for h in held if h.owner is frame]
        if mine and sum(h.keys.num_rows for h in mine) == new.num_rows:
            others = [h.keys for h in held if h.owner is not frame]
            found = present_keys(self.store, meta, [], new, own=own, select=select, held=others)
        else:
            every = [h.keys for h in held]
            counts = key_counts(self.store, meta, [], new, own=own, select=select, held=every)
            found = counts.filter(pc.greater(counts["count_all"], 1)).select(new.column_names)
        self._note_key_read(table_id, found, select)  # the statement fails on what it found
        return found

    def keys_present(self, table_id: str, keys: pa.Table) -> pa.Table:
        """The values of ``keys`` (the table's key columns) that live rows of the table hold.

        Finding them in committed rows is recorded as a read (:meth:`_note_key_read`).
        """
        own, held, select = self._key_sources(table_id)
        meta = self.meta(table_id)
        rows = [h.keys for h in held]
        found = present_keys(self.store, meta, [], keys, own=own, select=select, held=rows)
        self._note_key_read(table_id, found, select)
        return found

    def _note_key_read(self, table_id: str, found: pa.Table, select: Selector | None) -> None:
        """Record that a statement's outcome turned on keys ``found`` that rows hold.

        Those the snapshot's rows hold were read from the files their statistics
        admit: a concurrent commit removing one conflicts, as for any read. Keys
        only this transaction's rows hold, and rows added concurrently, are not
        such a read (a key found absent is inserted, and a concurrent insert of
        it is the inserted keys' conflict). Looked up again only when a key was
        found, which is rare.
        """
        if found.num_rows == 0 or select is None:
            return
        meta = self.meta(table_id)
        paths: list[str] = []
        if present_keys(self.store, meta, [], found, select=select, seen=paths).num_rows:
            self.reads.reads.append(
                ReadRecord(table_id, meta.name, frozenset(paths), _adds_nothing)
            )

    def _key_sources(self, table_id: str) -> tuple[list[AddFile], list[_HeldKeys], Selector | None]:
        """Where a table's live keys are: files this transaction wrote whose keys are not
        held (to read), the key rows it holds, and the snapshot's files (a selector)."""
        self.meta(table_id)
        self._flush(table_id)
        staged = self._tables.get(table_id)
        own = staged.adds if staged is not None else {}
        held, covered = self._held_keys(table_id, own)
        return [a for p, a in own.items() if p not in covered], held, self._key_selector(table_id)

    def _hold_keys(
        self,
        table_id: str,
        paths: Sequence[str],
        adds: Sequence[AddFile],
        keys: pa.Table,
        *,
        owner: _Frame | None,
    ) -> None:
        """Remember that the files ``paths`` and ``adds`` hold exactly the key rows ``keys``.

        A file written alone also gets its key filter, cached for the checks
        that meet it committed. Rows are held up to :data:`KEPT_KEY_BYTES` per
        transaction; past that, the files are read when a check needs them.
        """
        staged = self._tables.get(table_id)
        every = [*paths, *(a.path for a in adds)]
        if staged is None or staged.dropped is not None or not every:
            return
        if any(p not in staged.adds for p in every):
            return
        if sum(staged.adds[p].rows for p in every) != keys.num_rows:
            return  # not the rows we think: leave the files to be read
        if len(every) == 1 and len(adds) == 1:
            remember_filter(self.store, self.meta(table_id), adds[0], keys)
        if self._held_bytes + keys.nbytes > KEPT_KEY_BYTES:
            return
        self._held_bytes += keys.nbytes
        held = _HeldKeys(frozenset(every), keys, key_signature(self.meta(table_id)), owner)
        self._held.setdefault(table_id, []).append(held)

    def _held_keys(
        self, table_id: str, live: Mapping[str, AddFile]
    ) -> tuple[list[_HeldKeys], set[str]]:
        """The held key rows of files that are all in ``live``, and the paths they cover.

        Rows held under another key than the table's now (the key was set or
        a column renamed since) are not used: those files are read. Rows of
        the same key are named as its columns are now.
        """
        usable: list[_HeldKeys] = []
        covered: set[str] = set()
        meta = self.meta(table_id)
        signature, columns = key_signature(meta), key_columns(meta)
        for held in self._held.get(table_id, ()):
            if held.signature != signature or held.paths & covered:
                continue
            if all(p in live for p in held.paths):
                if held.keys.column_names != columns:
                    held = replace(held, keys=held.keys.rename_columns(columns))
                usable.append(held)
                covered |= held.paths
        return usable, covered

    def _key_selector(self, table_id: str) -> Selector | None:
        """The snapshot's live files a plan admits, chosen at once over its file columns.

        None when the table has no files in the snapshot (created by this transaction).
        """
        staged = self._tables.get(table_id)
        if table_id not in self.read_state.tables or (staged is not None and staged.created):
            return None
        table = self.read_state.tables[table_id]
        removed: Mapping[str, RemoveFile] = staged.removes if staged is not None else {}

        def choose(plan: ScanPlan, keys: pa.Table) -> Candidates:
            return live_candidates(plan, keys, table, removed)

        return choose

    def _keys_of(self, meta: TableMeta, files: Sequence[AddFile], columns: list[str]) -> pa.Table:
        plan = plan_scan(meta, columns, None)
        return scan_files(self.store, plan, list(files)).select(columns)

    def inserted_keys(self) -> dict[str, KeyProbe]:
        """Per keyed table of the snapshot: the keys this transaction adds that it did not remove.

        These are the keys whose absence the transaction relies on: a
        concurrent commit adding one of them conflicts (see mere.txn.conflicts).
        They are worked out only if a concurrent commit adds files to the table.
        """
        probes: dict[str, KeyProbe] = {}
        for table_id, staged in self._tables.items():
            if staged.created or staged.dropped is not None:
                continue
            meta = self.meta(table_id)
            added = {p: a for p, a in staged.adds.items() if a.data_change}
            if not key_columns(meta) or not added:
                continue
            removes = list(staged.removes)
            probes[table_id] = KeyProbe(
                self.store, meta, partial(self._inserted, table_id, meta, added, removes)
            )
        return probes

    def _inserted(
        self, table_id: str, meta: TableMeta, added: Mapping[str, AddFile], removes: list[str]
    ) -> pa.Table:
        """The keys of ``added`` (held, else read) less those of the files ``removes``."""
        columns = key_columns(meta)
        held, covered = self._held_keys(table_id, added)
        parts = [h.keys.select(columns) for h in held]
        rest = [a for p, a in added.items() if p not in covered]
        if rest or not parts:
            parts.append(added_keys(self.store, meta, rest).select(columns))
        keys = pa.concat_tables(parts, promote_options="permissive")
        if removes:
            files = self.read_state.tables[table_id].files
            removed = [files[p] for p in removes if p in files]
            old = self._keys_of(meta, removed, columns).cast(keys.schema)
            keys = semi_join(keys, old, anti=True)
        return keys

    # --- writers -------------------------------------------------------------------

    def _flush(self, table_id: str) -> None:
        """Write out every buffered row of the table, so its files can be listed."""
        for level, frame in enumerate(self._frames):
            writer = frame.writers.pop(table_id, None)
            held = frame.writer_keys.pop(table_id, None)
            if writer is not None:
                adds = self._finish_writer(table_id, writer, frames_above=level + 1, frame=frame)
                if held is not None and held.keys:
                    keys = pa.concat_tables(held.keys)
                    owner = frame if held.pure else None
                    self._hold_keys(table_id, held.paths, adds, keys, owner=owner)

    def _finish_writer(
        self,
        table_id: str,
        writer: DataFileWriter,
        *,
        frames_above: int,
        frame: _Frame | None = None,
    ) -> list[AddFile]:
        """Stage a writer's files as adds of the frame it belongs to; returns them.

        Frames above that frame saved the table before these rows existed in
        files; their saved copies get the files too, since the rows were
        written before them.
        """
        owner = frame if frame is not None else self._frames[frames_above - 1]
        adds = writer.finish()
        for add in adds:
            self._stage_written(table_id, add, owner, frames_above=frames_above)
        return adds

    def _stage_written(
        self, table_id: str, add: AddFile, owner: _Frame, *, frames_above: int
    ) -> None:
        if add.inline is None:  # an inlined file has no object to delete
            owner.written.append((table_id, add.path))
        staged = self._tables.get(table_id)
        if staged is None:  # dropped since: nothing references the file
            return
        staged.adds[add.path] = add
        for above in self._frames[frames_above:]:
            saved = above.tables.get(table_id)
            if saved is not None:
                saved.adds[add.path] = add

    # --- the end of the transaction ----------------------------------------------------

    def actions(self) -> list[Action]:
        """The commit's actions: drops, metadata (renames before creations), adds, removes.

        Raises:
            MereError: a savepoint is still open.
        """
        if len(self._frames) != 1:
            raise MereError("a savepoint is still open")
        for table_id in list(self._frames[0].writers):
            self._flush(table_id)
        drops: list[Action] = []
        altered: list[Action] = []
        created: list[Action] = []
        files: list[Action] = []
        for staged in self._tables.values():
            if staged.dropped is not None:
                drops.append(staged.dropped)
                continue
            if staged.meta is not None:
                (created if staged.created else altered).append(staged.meta)
            files += staged.adds.values()
            files += staged.removes.values()
        actions = drops + altered + created + files
        actions += self._app_txns.values()
        database = self.read_state.database
        if self._database_properties is not None and database is not None:
            actions.append(replace(database, properties=self._database_properties))
            if self._sets_inline_limit(database.properties) and (
                self.read_state.protocol.format_version < ARROW_INLINE_FORMAT_VERSION
            ):
                actions.insert(0, Protocol(ARROW_INLINE_FORMAT_VERSION))  # inlining Arrow streams
        return actions

    def _sets_inline_limit(self, before: Mapping[str, str]) -> bool:
        """Whether this transaction sets ``inlineLimit`` to a non-zero value: names it
        in a property change or changes its value (a database already inlining under
        format 3 keeps inlining Parquet until then, §2.2)."""
        after = self._database_properties or {}
        if not inline_limit(after):
            return False
        named = any(
            op["operation"] == "SET DATABASE PROPERTIES"
            and op.get("properties", {}).get(INLINE_LIMIT_PROPERTY) is not None
            for op in self._operations
        )
        return (
            named
            or after.get(INLINE_LIMIT_PROPERTY) != before.get(INLINE_LIMIT_PROPERTY)
            or self.read_state.protocol.format_version < INLINE_FORMAT_VERSION
        )

    def footprint(self) -> TxFootprint:
        """What this transaction read and wrote, for conflict checks against winners."""
        fp = replace(self.reads)
        fp.created_names = set()
        fp.written, fp.altered, fp.removed = set(), set(), {}
        for table_id, staged in self._tables.items():
            if staged.created:
                assert staged.meta is not None
                fp.created_names.add(name_key(staged.meta.name))
                continue
            if staged.dropped is not None or staged.meta is not None:
                fp.altered.add(table_id)
            if staged.adds or staged.removes:
                fp.written.add(table_id)
            if staged.removes:
                fp.removed[table_id] = set(staged.removes)
            if staged.meta is not None and staged.meta.name != self.meta_before(table_id).name:
                fp.created_names.add(name_key(staged.meta.name))
        fp.inserted_keys = self.inserted_keys()
        fp.app_ids = set(self._app_txns)
        fp.database_changed = self._database_properties is not None
        return fp

    def meta_before(self, table_id: str) -> TableMeta:
        """The table's metadata in the snapshot."""
        return self.read_state.tables[table_id].meta

    def has_changes(self) -> bool:
        return bool(self._tables or self._app_txns or self._database_properties is not None)

    def written_files(self) -> list[tuple[str, str]]:
        """Every data file this transaction wrote and still owns: (table id, path)."""
        written = [w for frame in self._frames for w in frame.written]
        for frame in self._frames:
            for table_id, writer in frame.writers.items():
                written += [(table_id, a.path) for a in writer.finish()]
            frame.writers.clear()
        return written

    def delete_unreferenced(self, committed: Sequence[Action]) -> None:
        """After a commit: delete the files this transaction wrote that it does not add."""
        live = {(a.table_id, a.path) for a in committed if isinstance(a, AddFile)}
        _delete(self.store, [w for w in self.written_files() if w not in live])
        self._release_keys()

    def delete_written(self) -> None:
        """After an abort or a definite failure: delete every file this transaction wrote."""
        _delete(self.store, self.written_files())
        self._release_keys()

    def _release_keys(self) -> None:
        """The transaction is over: the key rows it held are no longer needed."""
        self._held.clear()
        self._held_bytes = 0


def _delete(store: ObjectStore, files: Sequence[tuple[str, str]]) -> None:
    delete_orphans(store, (f"tables/{table_id}/{path}" for table_id, path in files))


def _adds_nothing(add: AddFile) -> bool:
    """A read's test for concurrently added files that no added file can meet."""
    return False


__all__ = ["Stage", "TableStage"]
