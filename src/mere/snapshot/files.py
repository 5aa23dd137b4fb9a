"""A table's live data files at one version: columns first, ``AddFile`` objects on demand.

:class:`LiveFiles` holds a table's files as Arrow columns (:mod:`mere.log.columns`):
a *base* (a checkpoint's parts, read column by column when first needed, or a
table in memory) minus the paths later commits touched, plus the files those
commits added. Replaying a commit is a bulk operation on that delta, never a
copy of the base; when the delta grows large it is folded into a new base.

It is also a ``Mapping[str, AddFile]`` (path -> file), so every caller that
wants objects keeps working; objects are built only when asked for, and all of
them only when a caller iterates them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import CorruptLog
from mere.log.actions import AddFile, TableMeta
from mere.log.checkpoint import (
    PartFetcher,
    PartMissing,
    PartRef,
    decode_part,
    has_external_paths,
)
from mere.log.columns import (
    DATA_CHANGE,
    INLINE,
    MODIFIED,
    PATH,
    ROWS,
    SIZE,
    FileLayout,
    adds_to_columns,
    columns_to_adds,
    partition_column,
)

T = TypeVar("T")
#: Reads a table's files anew at a version: (table id, version) -> its files.
Reload = Callable[[str, int], "LiveFiles"]
#: A delta (files added plus paths removed since the base) beyond this many
#: entries, and beyond a quarter of the base, is folded into a new base.
FOLD_MIN = 4096
#: Up to this many rows are picked out of the file columns by slicing, not ``take``.
SLICE_ROWS = 256
#: Files added by commits are kept as objects until columns are asked for, or
#: until this many wait: columns for one file cost about a millisecond, for many
#: a few microseconds each (a commit applied to a cached state is usually one
#: file), and a small table replayed from its commits alone (a thousand of them,
#: no checkpoint) never needs columns to be opened or listed. Applying a commit
#: copies the waiting objects' index (about 6 microseconds per thousand).
PENDING_MAX = 2048
#: Up to this many added files, their paths are also kept as a set, so that a
#: commit is checked against them without a pass over the path column.
PATH_SET_MAX = 65536


class Derived(Protocol):
    """Something worked out from a table's live files that a commit updates in place of a
    rebuild (the primary key's index of file ranges and filters, :mod:`mere.txn.keyindex`).

    Kept on :class:`LiveFiles` by name (:meth:`LiveFiles.derived`); it must depend
    only on the set of live files, since :meth:`LiveFiles.apply` hands it on.
    """

    def applied(self, adds: Sequence[AddFile], touched: frozenset[str]) -> Derived | None:
        """The same for the files after a batch (``touched`` paths left, then ``adds``
        joined, as in :meth:`LiveFiles.apply`); None if it is cheaper to rebuild."""
        ...


class FileSource(Protocol):
    """Where a base of files comes from: all rows of some columns, on request.

    A source keeps the layout it was written in (a checkpoint's parts are not
    rewritten when a column is added or widened later); :class:`LiveFiles`
    conforms what it reads to the table's current layout.
    """

    @property
    def layout(self) -> FileLayout: ...

    @property
    def num_rows(self) -> int: ...

    def read(self, columns: Sequence[str]) -> pa.Table:
        """Exactly ``columns`` (names the source's layout knows, or nulls), every row."""
        ...

    def pieces(self) -> Iterator[pa.Table]:
        """Every column, in pieces of bounded size (without keeping them)."""
        ...


class TableSource:
    """A base already in memory."""

    def __init__(self, layout: FileLayout, table: pa.Table) -> None:
        self._layout = layout
        self._table = table

    @property
    def layout(self) -> FileLayout:
        return self._layout

    @property
    def num_rows(self) -> int:
        return int(self._table.num_rows)

    def read(self, columns: Sequence[str]) -> pa.Table:
        return self._layout.conform(self._table, columns)

    def pieces(self) -> Iterator[pa.Table]:
        yield self._layout.conform(self._table)


class PartsSource:
    """A base in a columnar checkpoint's parts, each column decoded once, when first needed.

    The first read fetches the table's parts whole (a local file is mapped),
    so that expiry deleting the checkpoint later cannot take them away from a
    state that uses them. The first read of ``path`` checks the paths: unique,
    and absolute only where the database allows it (``allow_external``).
    """

    def __init__(
        self,
        layout: FileLayout,
        parts: Sequence[PartRef],
        fetch: PartFetcher,
        *,
        allow_external: bool,
        origin: str,
    ) -> None:
        self._layout = layout
        self._partition_names = frozenset(partition_column(c) for c in layout.partition_columns)
        self._parts = tuple(parts)
        self._fetch = fetch
        self._allow_external = allow_external
        self.origin = origin
        self._lock = threading.Lock()
        self._data: list[pa.Buffer] | None = None
        self._columns: dict[str, pa.ChunkedArray] = {}

    @property
    def layout(self) -> FileLayout:
        return self._layout

    @property
    def num_rows(self) -> int:
        return sum(p.files for p in self._parts)

    @property
    def fetched(self) -> bool:
        return self._data is not None

    def read(self, columns: Sequence[str]) -> pa.Table:
        with self._lock:
            missing = [c for c in columns if c not in self._columns]
            if PATH not in self._columns and PATH not in missing:
                missing.append(PATH)  # checked before anything is used
            if missing:
                self._load(missing)
            arrays = [self._columns[c] for c in columns]
        return pa.Table.from_arrays(arrays, schema=pa.schema([self._field(c) for c in columns]))

    def _field(self, name: str) -> pa.Field:
        return self._layout.schema.field(name)

    def _pinned(self) -> list[pa.Buffer]:
        if self._data is None:
            if len(self._parts) <= 1:
                self._data = [self._fetch(p) for p in self._parts]
            else:
                with ThreadPoolExecutor(max_workers=min(8, len(self._parts))) as pool:
                    self._data = list(pool.map(self._fetch, self._parts))
        return self._data

    def _decode(self, names: list[str] | None) -> list[pa.Table]:
        data = self._pinned()
        if len(self._parts) <= 1:
            return [decode_part(p, d, names) for p, d in zip(self._parts, data, strict=True)]
        with ThreadPoolExecutor(max_workers=min(8, len(self._parts))) as pool:
            return list(
                pool.map(
                    lambda pd: decode_part(pd[0], pd[1], names), zip(self._parts, data, strict=True)
                )
            )

    def _load(self, names: list[str]) -> None:
        pieces = self._decode(names)
        loaded: dict[str, pa.ChunkedArray] = {}
        for name in names:
            target = self._field(name)
            chunks: list[pa.Array] = []
            for part, piece in zip(self._parts, pieces, strict=True):
                if name in piece.column_names:
                    chunks.extend(self._layout.conform(piece, [name]).column(0).chunks)
                elif name in self._partition_names:  # a file's partition is never unknown
                    raise CorruptLog(part.key, f"has no column {name!r}")
                else:
                    chunks.append(pa.nulls(part.files, target.type))
            loaded[name] = pa.chunked_array(chunks, type=target.type)
        if PATH in loaded:
            check_paths_of(loaded[PATH], self._allow_external, self.origin)
        self._columns.update(loaded)

    def pieces(self) -> Iterator[pa.Table]:
        names = self._layout.schema.names
        with self._lock:
            cached = all(n in self._columns for n in names)
        if cached:
            yield self.read(names)
            return
        self.read([PATH])  # fetched, and checked as a whole
        assert self._data is not None
        for part, data in zip(self._parts, self._data, strict=True):
            yield self._layout.conform(decode_part(part, data, None, paths_checked=True))


def check_paths_of(paths: pa.ChunkedArray, allow_external: bool, origin: str) -> None:
    """A checkpoint's paths for one table: absolute only where allowed.

    That no path is listed twice is checked when a checkpoint is read whole
    (``mere check``) and when the files are first used as a mapping, not on
    every open: a sort of a million paths would double its cost.
    """
    if not allow_external and has_external_paths(paths):
        raise CorruptLog(origin, "absolute data paths in a database that does not allow them")


class LiveFiles(Mapping[str, AddFile]):
    """The live files of one table at one version (immutable; caches are filled lazily).

    Rows are the base's rows whose path no later commit touched, then the
    files later commits added, in the order they were added: as columns
    (``added``), then as objects not yet turned into columns (``pending``).
    """

    def __init__(
        self,
        table_id: str,
        layout: FileLayout,
        base: FileSource | None = None,
        removed: frozenset[str] = frozenset(),
        added: pa.Table | None = None,
        *,
        pending: Mapping[str, AddFile] | None = None,
        version: int = -1,
        reload: Reload | None = None,
        meta: TableMeta | None = None,
        added_paths: frozenset[str] | None = None,
    ) -> None:
        self.table_id = table_id
        self.layout = layout
        #: The metadata ``layout`` was derived from, if known: the same object
        #: again needs no new derivation (:meth:`apply`).
        self.meta = meta
        self._base = base if base is not None and base.num_rows else None
        self._removed = removed if self._base is not None else frozenset()
        #: The files later commits added, as columns (None: none; an empty table costs
        #: a fraction of a millisecond to build, a state is built per commit).
        self._added = added if added is not None and added.num_rows else None
        self._pending: dict[str, AddFile] = dict(pending) if pending else {}
        #: The paths of ``_added``, when known (None: not computed, or too many).
        self._added_paths = added_paths
        #: The versions these are the table's files at: from ``version`` to ``_seen``.
        self.version = version
        self._seen = version
        self._reload = reload
        self._lock = threading.RLock()
        self._keep: pa.Array | None = None  # mask of the base's rows still live
        self._cache: dict[str, pa.ChunkedArray] = {}
        self._index: dict[str, int] | None = None
        self._objects: list[AddFile] | None = None
        #: Structures worked out from these files, by name (see :class:`Derived`).
        self._derived: dict[str, Derived] = {}

    # --- construction ---------------------------------------------------------------

    @staticmethod
    def empty(meta: TableMeta) -> LiveFiles:
        return LiveFiles(meta.id, FileLayout.of(meta), meta=meta)

    @staticmethod
    def from_adds(meta: TableMeta, adds: Iterable[AddFile]) -> LiveFiles:
        """Files given as objects: kept as such (columns are built when first asked for)."""
        layout = FileLayout.of(meta)
        pending = {a.path: a for a in adds}
        if len(pending) > PENDING_MAX:
            return LiveFiles(
                meta.id,
                layout,
                added=_joined(layout, None, list(pending.values())),
                meta=meta,
            )
        return LiveFiles(meta.id, layout, pending=pending, meta=meta)

    def _layout_of(self, meta: TableMeta) -> FileLayout:
        """The layout of ``meta``: this one when it is the same (or an equal) one."""
        if meta is self.meta:
            return self.layout
        layout = FileLayout.of(meta)
        return self.layout if layout == self.layout else layout  # its schema is cached

    def with_meta(self, meta: TableMeta, version: int) -> LiveFiles:
        """The same files under new table metadata (new statistics columns, widened types)."""
        layout = self._layout_of(meta)
        with self._lock:
            if layout == self.layout:
                self.meta = meta  # the same layout: the next commit need not derive it again
                return self
            return LiveFiles(
                self.table_id,
                layout,
                self._base,
                self._removed,
                self._added,
                pending=self._pending,
                version=version,
                reload=self._reload,
                meta=meta,
                added_paths=self._added_paths,
            )

    def seen(self, version: int) -> None:
        """These are also the table's files at ``version`` (a later, committed one).

        Only for versions known committed: a state built to validate a commit
        that may still lose its race must not say so.
        """
        with self._lock:
            self._seen = max(self._seen, version)

    def apply(
        self, meta: TableMeta, adds: Sequence[AddFile], touched: Iterable[str], version: int
    ) -> LiveFiles:
        """The files at ``version``, after a batch of commits: ``touched`` paths leave,
        then ``adds`` join.

        ``touched`` holds every path the batch added or removed; ``adds`` the
        files whose last action in the batch added them, in order.
        """
        layout = self._layout_of(meta)
        touched = frozenset(touched)
        with self._lock:
            base, removed, added, pending = self._base, self._removed, self._added, self._pending
            added_paths = self._added_paths
        if touched and added is not None:
            if added_paths is None and added.num_rows <= PATH_SET_MAX:
                added_paths = _path_set(added)
                with self._lock:
                    if self._added is added:
                        self._added_paths = added_paths
            gone = touched & added_paths if added_paths is not None else touched
            if gone:
                mask = pc.is_in(added.column(PATH), value_set=pa.array(list(gone), pa.string()))
                if added_paths is not None or pc.any(mask).as_py():
                    added = added.filter(pc.invert(mask))
                if added_paths is not None:
                    added_paths = added_paths - gone
        pending = dict(pending)  # path -> file, in the order added (a copy: this one is kept)
        if pending:
            for path in touched:
                pending.pop(path, None)
        for a in adds:  # every added path is among those touched: a re-add moves to the end
            pending[a.path] = a
        if len(pending) > PENDING_MAX:
            added_paths = _with_paths(added_paths, pending)
            added = _joined(layout, added, list(pending.values()))
            pending = {}
        removed = removed | touched if base is not None else frozenset()
        result = LiveFiles(
            self.table_id,
            layout,
            base,
            removed,
            added,
            pending=pending,
            version=version,
            reload=self._reload,
            meta=meta,
            added_paths=added_paths,
        )
        base_rows = base.num_rows if base is not None else 0
        delta = len(removed) + _rows(added) + len(pending)
        if base is not None and delta > max(FOLD_MIN, base_rows // 4):
            result = result.folded()
        with self._lock:
            derived = list(self._derived.items())
        for name, value in derived:
            moved = value.applied(adds, touched)
            if moved is not None:
                result._derived[name] = moved
        return result

    def derived(self, name: str, build: Callable[[], Derived] | None = None) -> Derived | None:
        """The structure ``name`` worked out from these files (see :class:`Derived`).

        If there is none, ``build()`` makes it and it is kept (None without ``build``).
        """
        with self._lock:
            found = self._derived.get(name)
        if found is not None or build is None:
            return found
        made = build()
        with self._lock:
            return self._derived.setdefault(name, made)

    def _added_columns(self) -> pa.Table:
        """The added files as columns (of this layout), the pending objects turned into columns."""
        with self._lock:
            stale = self._added is not None and self._added.schema != self.layout.schema
            if self._pending or stale:
                self._added_paths = _with_paths(self._added_paths, self._pending)
                self._added = _joined(self.layout, self._added, list(self._pending.values()))
                self._pending = {}
            return self._added if self._added is not None else self.layout.empty()

    def folded(self) -> LiveFiles:
        """The same files with the delta folded into an in-memory base."""
        table = self.table()
        return LiveFiles(
            self.table_id,
            self.layout,
            TableSource(self.layout, table),
            version=self.version,
            reload=self._reload,
        )

    def _from_base(self, read: Callable[[], T]) -> T:
        """``read()`` of the base; if a part has gone meanwhile, the files are read anew.

        A state keeps a checkpoint's parts unread until it needs them, and
        expiry may delete that checkpoint in between: the files are then read
        again at a committed version they are known to be current at, through
        whatever checkpoint holds that version now.
        """
        try:
            return read()
        except PartMissing:
            if self._reload is None:
                raise
            with self._lock:
                fresh = self._reload(self.table_id, self._seen)
                if fresh.layout != self.layout:
                    raise
                self._base, self._removed = fresh._base, fresh._removed
                self._added, self._pending = fresh._added, fresh._pending
                self._added_paths = fresh._added_paths
                self._keep = None
                self._cache.clear()
        return read()

    # --- columns ----------------------------------------------------------------------

    @property
    def num_files(self) -> int:
        if self._base is None:
            return _rows(self._added) + len(self._pending)
        keep = self._base_keep()
        kept = self._base.num_rows if keep is None else int(pc.sum(keep).as_py() or 0)
        return kept + _rows(self._added) + len(self._pending)

    def columns(self, names: Sequence[str]) -> pa.Table:
        """The live files' ``names`` columns (of :attr:`layout`), one row per file."""
        names = list(names)
        with self._lock:
            missing = [n for n in names if n not in self._cache]
            if missing:
                self._fill(missing)
            arrays = [self._cache[n] for n in names]
        schema = pa.schema([self.layout.schema.field(n) for n in names])
        return pa.Table.from_arrays(arrays, schema=schema)

    def table(self) -> pa.Table:
        """Every column."""
        return self.columns(self.layout.schema.names)

    def _base_read(self, names: Sequence[str]) -> pa.Table:
        """Columns ``names`` of the base, in this layout (its own may be older)."""
        if self._base is None:  # none (any more: files read anew have no base)
            return self.layout.empty().select(list(names))
        if self._base.layout == self.layout:
            return self._base.read(names)
        known = set(self._base.layout.schema.names)
        return self.layout.conform(self._base.read([n for n in names if n in known]), names)

    def _fill(self, names: list[str]) -> None:
        table = self._stored(names, pending=True)
        for name in names:
            self._cache[name] = _normalized(name, table.column(name))

    def _stored(self, names: Sequence[str], *, pending: bool) -> pa.Table:
        """Columns ``names`` of the files held as columns (the base's live rows, then the
        added ones); with ``pending``, the files waiting as objects are turned into columns
        first and come last."""
        base = self._from_base(lambda: self._base_read(names))  # first: may read anew
        keep = self._base_keep()
        if keep is not None:
            base = base.filter(keep)
        if pending:
            added = self._added_columns().select(names)
        elif self._added is not None:
            added = self.layout.conform(self._added, names)
        else:
            return base
        arrays = [
            pa.chunked_array(
                base.column(name).chunks + added.column(name).chunks,
                type=self.layout.schema.field(name).type,
            )
            for name in names
        ]
        return pa.Table.from_arrays(
            arrays, schema=pa.schema([self.layout.schema.field(n) for n in names])
        )

    def _objects_only(self) -> bool:
        """Every file is an object waiting to become columns (a small table's usual state)."""
        return self._base is None and self._added is None

    def _base_keep(self) -> pa.Array | None:
        """The mask of the base's rows still live (None: all of them)."""
        if self._base is None or not self._removed:
            return None
        with self._lock:
            if self._keep is None:
                paths = self._from_base(lambda: self._base_read([PATH])).column(PATH)
                removed = pa.array(list(self._removed), pa.string())
                self._keep = pc.invert(pc.is_in(paths, value_set=removed))
                if isinstance(self._keep, pa.ChunkedArray):
                    self._keep = self._keep.combine_chunks()
            return self._keep

    def pieces(self) -> Iterator[pa.Table]:
        """Every column, a bounded piece at a time (what a checkpoint writes)."""
        with self._lock:
            whole = all(n in self._cache for n in self.layout.schema.names)
        if not whole and self._base is not None:
            self._from_base(lambda: self._base_read([PATH]))  # fetched (or read anew) first
        if whole or self._base is None:
            yield self.table()
            return
        removed = pa.array(list(self._removed), pa.string()) if self._removed else None
        for piece in self._base.pieces():
            if self._base.layout != self.layout:
                piece = self.layout.conform(piece)
            if removed is not None:
                piece = piece.filter(pc.invert(pc.is_in(piece.column(PATH), value_set=removed)))
            yield _normalize_table(piece)
        yield _normalize_table(self._added_columns())

    def total(self, column: str) -> int:
        """The sum of an integer column (``rows``, ``size``) over the live files."""
        if self.num_files == 0:
            return 0
        with self._lock:
            if self._objects_only() and column in (ROWS, SIZE):
                return sum(getattr(a, column) for a in self._pending.values())
        return int(pc.sum(self.columns([column]).column(0)).as_py() or 0)

    @property
    def rows(self) -> int:
        return self.total(ROWS)

    @property
    def size(self) -> int:
        return self.total(SIZE)

    def inlined(self) -> tuple[int, int]:
        """How many live files are inlined in the log (format §2.5), and their bytes."""
        if self.num_files == 0:
            return 0, 0
        with self._lock:
            if self._objects_only():
                sizes = [a.size for a in self._pending.values() if a.inline is not None]
                return len(sizes), sum(sizes)
        columns = self.columns([SIZE, INLINE])
        inlined = pc.is_valid(columns.column(INLINE))
        count = pc.sum(inlined.cast(pa.int64())).as_py() or 0
        size = pc.sum(pc.if_else(inlined, columns.column(SIZE), 0)).as_py() or 0
        return int(count), int(size)

    # --- objects ----------------------------------------------------------------------

    def take(
        self, indices: Sequence[int] | pa.Array, columns: Sequence[str] | None = None
    ) -> list[AddFile]:
        """AddFile objects for some rows; built from ``columns`` (default: all).

        Objects built from fewer columns hold only those statistics, and a
        modification time of 0 unless it is among them: enough to read the
        files, not to write them into a commit.
        """
        with self._lock:
            if self._objects is not None or self._objects_only():
                objects = self._all()  # more than ``columns`` hold, at no cost
                if isinstance(indices, pa.Array | pa.ChunkedArray):
                    indices = indices.to_pylist()
                return [objects[i] for i in indices]
        names = list(self.layout.schema.names if columns is None else columns)
        needed = [
            PATH,
            SIZE,
            ROWS,
            INLINE,
            *(partition_column(p) for p in self.layout.partition_columns),
        ]
        names += [n for n in needed if n not in names]
        table = self.columns(names)
        if isinstance(indices, range) and len(indices) == table.num_rows and indices.step == 1:
            chosen = table
        else:
            chosen = _take_rows(table, indices)
        if MODIFIED not in names:
            chosen = chosen.append_column(
                self.layout.schema.field(MODIFIED), pa.array([0] * chosen.num_rows, pa.int64())
            )
        return columns_to_adds(self.layout, self.table_id, chosen)

    def _all(self) -> list[AddFile]:
        """Every file as an object, in row order; the files waiting as objects are those."""
        self._paths()  # checked: no path twice
        with self._lock:
            if self._objects is None:
                if self._objects_only():
                    self._objects = list(self._pending.values())
                elif self._pending:
                    stored = self._stored(self.layout.schema.names, pending=False)
                    self._objects = columns_to_adds(self.layout, self.table_id, stored)
                    self._objects += self._pending.values()
                else:
                    self._objects = columns_to_adds(self.layout, self.table_id, self.table())
            return self._objects

    def _paths(self) -> dict[str, int]:
        with self._lock:
            if self._index is None:
                if self._objects_only():
                    paths = list(self._pending)
                elif self._pending and PATH not in self._cache:
                    paths = self._stored([PATH], pending=False).column(0).to_pylist()
                    paths += self._pending
                else:
                    paths = self.columns([PATH]).column(0).to_pylist()
                index = {p: i for i, p in enumerate(paths)}
                if len(index) != len(paths):
                    raise CorruptLog(_origin(self._base), "a data file is listed twice")
                self._index = index
            return self._index

    def __getitem__(self, path: str) -> AddFile:
        i = self._paths()[path]
        with self._lock:
            if self._objects is not None:
                return self._objects[i]
            found = self._pending.get(path)
            if found is not None:
                return found
        return self.take([i])[0]

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and path in self._paths()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths())

    def __len__(self) -> int:
        return self.num_files

    def values(self) -> ValuesView[AddFile]:
        return _Values(self)

    def items(self) -> ItemsView[str, AddFile]:
        return _Items(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LiveFiles) and other.layout == self.layout:
            if self.num_files != other.num_files:
                return False
            mine = self.table().sort_by(PATH)
            theirs = other.table().sort_by(PATH)
            return bool(mine.equals(theirs))
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<LiveFiles table={self.table_id} files={self.num_files}>"


class _Values(ValuesView[AddFile]):
    _mapping: LiveFiles

    def __iter__(self) -> Iterator[AddFile]:
        return iter(self._mapping._all())


class _Items(ItemsView[str, AddFile]):
    _mapping: LiveFiles

    def __iter__(self) -> Iterator[tuple[str, AddFile]]:
        return ((a.path, a) for a in self._mapping._all())


def _joined(layout: FileLayout, added: pa.Table | None, pending: Sequence[AddFile]) -> pa.Table:
    """``added`` (conformed to ``layout``) followed by ``pending`` as columns, in few chunks."""
    if added is not None and added.schema != layout.schema:
        added = layout.conform(added)
    if not pending:
        return added if added is not None else layout.empty()
    fresh = adds_to_columns(layout, list(pending))
    joined = pa.concat_tables([added, fresh]) if added is not None and added.num_rows else fresh
    if joined.column(PATH).num_chunks > 64:
        joined = joined.combine_chunks()
    return joined


def _rows(table: pa.Table | None) -> int:
    return 0 if table is None else int(table.num_rows)


def _path_set(added: pa.Table) -> frozenset[str]:
    return frozenset(added.column(PATH).to_pylist())


def _with_paths(paths: frozenset[str] | None, more: Iterable[str]) -> frozenset[str] | None:
    """``paths`` and ``more``; None (unknown) when ``paths`` is, or when the set grows too large."""
    if paths is None:
        return None
    joined = paths.union(more)
    return joined if len(joined) <= PATH_SET_MAX else None


def _take_rows(table: pa.Table, indices: Sequence[int] | pa.Array) -> pa.Table:
    """Rows ``indices`` of ``table``, in that order.

    Arrow's ``take`` on a table of many chunks concatenates each column first
    (a million paths copied to pick one: tens of milliseconds); a few rows are
    sliced out instead, which copies nothing but the rows.
    """
    if isinstance(indices, pa.Array | pa.ChunkedArray):
        indices = pc.cast(indices, pa.int64())
        if len(indices) > SLICE_ROWS:
            return table.take(indices)
        indices = indices.to_pylist()
    rows = list(indices)
    if len(rows) > SLICE_ROWS:
        return table.take(pa.array(rows, pa.int64()))
    for i in rows:
        if not 0 <= i < table.num_rows:
            raise IndexError(f"file {i} of {table.num_rows}")
    if not rows:
        return table.slice(0, 0)
    return pa.concat_tables([table.slice(i, 1) for i in rows]).combine_chunks()


def _origin(base: FileSource | None) -> str:
    return getattr(base, "origin", "") or "the checkpoint of a table's files"


def _normalized(name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A missing ``data_change`` (format-1 checkpoints do not keep it) reads as true."""
    if name == DATA_CHANGE and column.null_count:
        return pc.fill_null(column, True)
    return column


def _normalize_table(table: pa.Table) -> pa.Table:
    i = table.schema.get_field_index(DATA_CHANGE)
    column = table.column(i)
    if column.null_count:
        table = table.set_column(i, table.schema.field(i), pc.fill_null(column, True))
    return table


def sum_column(files: Mapping[str, AddFile], column: str) -> int:
    """``rows`` or ``size`` summed over ``files`` (columns when they are LiveFiles)."""
    if isinstance(files, LiveFiles):
        return files.total(column)
    return sum(getattr(a, column) for a in files.values())
