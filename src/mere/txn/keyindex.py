"""What a primary-key check needs of a table's committed files, kept from version to version.

A keyed append asks which committed files may hold one of its new keys: those
whose range of the first key column holds one (for an integer first key
column), then among those the ones whose key filter may hold one
(:mod:`mere.data.keyfilter`). Worked out afresh, that costs a pass over the
snapshot's file columns and a lookup of every file's filter in the filter
cache on every commit. A :class:`KeyIndex` keeps both, per live file, as
arrays: the files' paths, their ranges and flags, and where their filters sit
in the cache (:meth:`mere.data.keyfilter.FilterCache.locate`, valid for one
cache generation). It hangs on the table's :class:`~mere.snapshot.files.LiveFiles`
(a :class:`~mere.snapshot.files.Derived`): a commit hands it on to the next
version's files with that commit's changes, which it folds in only when next
used. A writer that keeps committing therefore locates only the filter of the
file it added last, and probes all files' filters in one numpy pass.

It depends only on the set of live files, never on a transaction: every
transaction of the process reading the same version shares it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.data import keyfilter
from mere.log.actions import AddFile, TableMeta, is_external_path
from mere.log.columns import INLINE, PATH, max_column, min_column
from mere.schema import physical_name
from mere.snapshot.files import Derived, LiveFiles
from mere.storage import ObjectStore

#: Commits an index is handed on through without being used before it is dropped
#: (rebuilt from the file columns when next needed): bounds its chain of changes.
MAX_PENDING = 64

#: Flags per file: another database's file (always read, never given a sidecar) and
#: an inlined one (no sidecar to load).
EXTERNAL = 1
INLINED = 2


@dataclass(frozen=True)
class _Group:
    """The unions of one filter size: their words one after the other, their members' rows."""

    words: np.ndarray  # (unions * blocks) x 8 uint32
    rows: np.ndarray  # unions x UNION_FILES: members' rows in the index (-1: none)


@dataclass(frozen=True)
class _Unions:
    """An index's unions of filters, by filter size (a size's group is copied only when a
    union of that size is made or lost)."""

    owner: tuple[str, str, str]  # store uri, table prefix, signature
    groups: dict[int, _Group]
    joined: np.ndarray  # per row of the index: a member of a union

    @staticmethod
    def empty(owner: tuple[str, str, str], files: int) -> _Unions:
        return _Unions(owner, {}, np.zeros(files, dtype=np.bool_))

    def moved(self, keep: np.ndarray | None, more: int) -> _Unions:
        """The unions after rows ``~keep`` left the index and ``more`` rows joined at its end.

        A union that lost a member is dissolved (its other members may join new ones).
        """
        if keep is None:
            joined = np.concatenate([self.joined, np.zeros(more, dtype=np.bool_)])
            return replace(self, joined=joined)
        new_row = np.cumsum(keep) - 1
        joined = np.zeros(int(keep.sum()) + more, dtype=np.bool_)
        groups: dict[int, _Group] = {}
        for blocks, group in self.groups.items():
            intact = np.array([bool(keep[r[r >= 0]].all()) for r in group.rows], dtype=np.bool_)
            if not intact.any():
                continue
            rows = np.where(group.rows >= 0, new_row[np.maximum(group.rows, 0)], -1)[intact]
            words = group.words.reshape(len(group.rows), blocks, 8)[intact].reshape(-1, 8)
            groups[blocks] = _Group(words, rows)
            joined[rows[rows >= 0]] = True
        return _Unions(self.owner, groups, joined)

    def grown(
        self, blocks: int, members: Sequence[Sequence[int]], words: Sequence[np.ndarray]
    ) -> _Unions:
        """With new unions of files of ``blocks`` blocks: their rows, and their words."""
        rows = np.array(members, dtype=np.int64).reshape(-1, keyfilter.UNION_FILES)
        joined = self.joined.copy()
        joined[rows.reshape(-1)] = True
        old = self.groups.get(blocks)
        if old is not None:
            rows = np.concatenate([old.rows, rows])
            words = [old.words, *words]
        return _Unions(
            self.owner, {**self.groups, blocks: _Group(np.concatenate(words), rows)}, joined
        )


@dataclass(frozen=True)
class _Files:
    """The indexed files, in no particular order: paths, first-key-column ranges, flags."""

    paths: list[str]
    positions: dict[str, int]
    low: np.ndarray
    high: np.ndarray
    flags: np.ndarray  # int8


class KeyIndex(Derived):
    """The committed files of one table at one version, for key checks (see the module).

    ``column`` is the physical name of the first key column, ``dtype`` the
    numpy type its range is held in (int64, or uint64 for unsigned columns);
    a file without statistics has the type's whole range.
    """

    def __init__(
        self,
        column: str,
        dtype: np.dtype,
        files: _Files | None,
        *,
        parent: KeyIndex | None = None,
        adds: Sequence[AddFile] = (),
        touched: frozenset[str] = frozenset(),
        depth: int = 0,
        limits: tuple[int, int] = (0, 0),
    ) -> None:
        self.column = column
        self.dtype = dtype
        #: The key type's range: a file's range when its statistics do not give one.
        self.limits = limits
        self._files = files
        self._parent = parent
        self._adds = list(adds)
        self._touched = touched
        self._depth = depth
        self._lock = threading.Lock()
        # Where the files' filters sit in the cache: for one store, table prefix,
        # signature and cache generation (offset -1: not located, or none cached).
        self._located_for: tuple[str, str, str, int] | None = None
        self._offsets = np.zeros(0, dtype=np.int64)
        self._blocks = np.zeros(0, dtype=np.int64)
        # Unions of the filters of files of one size (mere.data.keyfilter.Unions), for one
        # store, table prefix and signature: copies of the filters' bits, so they do not
        # depend on where the cache keeps the filters.
        self._unions: _Unions | None = None

    # --- building and handing on -----------------------------------------------------

    @staticmethod
    def build(meta: TableMeta, files: LiveFiles, column: str) -> KeyIndex:
        """The index of ``files`` from their columns (first key column ``column``, integer)."""
        type_ = meta.schema.field(column).type
        physical = physical_name(meta.schema.field(column))
        dtype = np.dtype(np.uint64 if pa.types.is_unsigned_integer(type_) else np.int64)
        info = np.iinfo(type_.to_pandas_dtype())
        names = files.layout.schema.names
        low, high = min_column(physical), max_column(physical)
        wanted = [PATH, INLINE] + [n for n in (low, high) if n in names]
        table = files.columns(wanted)
        paths = table.column(PATH).to_pylist()
        n = len(paths)

        def bound(name: str, default: int) -> np.ndarray:
            if name not in names:
                return np.full(n, default, dtype=dtype)
            # Statistics of files written before the key was widened hold the narrower type.
            column = table.column(name).cast(pa.from_numpy_dtype(dtype))
            values = column.fill_null(default).to_numpy()
            return np.asarray(values).astype(dtype)

        flags = np.where(pc.is_valid(table.column(INLINE)).to_numpy(), INLINED, 0).astype(np.int8)
        for i, path in enumerate(paths):
            if is_external_path(path):
                flags[i] |= EXTERNAL
        indexed = _Files(
            paths,
            {p: i for i, p in enumerate(paths)},
            bound(low, int(info.min)),
            bound(high, int(info.max)),
            flags,
        )
        return KeyIndex(physical, dtype, indexed, limits=(int(info.min), int(info.max)))

    def applied(self, adds: Sequence[AddFile], touched: frozenset[str]) -> KeyIndex | None:
        """The index after a commit: the change is kept, and folded in when next used."""
        if self._depth >= MAX_PENDING:
            return None
        return KeyIndex(
            self.column,
            self.dtype,
            None,
            parent=self,
            adds=adds,
            touched=touched,
            depth=self._depth + 1,
            limits=self.limits,
        )

    def _ready(self) -> _Files:
        """The indexed files, with the changes handed on so far folded in (under the lock)."""
        if self._files is not None:
            return self._files
        assert self._parent is not None
        parent = self._parent
        with parent._lock:
            base = parent._ready()
            located_for, offsets, blocks = parent._located_for, parent._offsets, parent._blocks
            unions = parent._unions
        gone = [base.positions[p] for p in self._touched if p in base.positions]
        paths, low, high, flags = base.paths, base.low, base.high, base.flags
        keep: np.ndarray | None = None
        if gone:
            keep = np.ones(len(paths), dtype=np.bool_)
            keep[gone] = False
            paths = [p for p, k in zip(paths, keep.tolist(), strict=True) if k]
            low, high, flags = low[keep], high[keep], flags[keep]
            if located_for is not None:
                offsets, blocks = offsets[keep], blocks[keep]
            positions = {p: i for i, p in enumerate(paths)}
        else:
            paths, positions = list(paths), dict(base.positions)
        lowest, highest = self.limits
        lows, highs, marks = [], [], []
        for add in self._adds:
            positions[add.path] = len(paths)
            paths.append(add.path)
            lows.append(_stat(add, "minValues", self.column, self.limits, lowest))
            highs.append(_stat(add, "maxValues", self.column, self.limits, highest))
            mark = (EXTERNAL if is_external_path(add.path) else 0) | (
                INLINED if add.inline is not None else 0
            )
            marks.append(mark)
        if self._adds:
            low = np.concatenate([low, np.array(lows, dtype=self.dtype)])
            high = np.concatenate([high, np.array(highs, dtype=self.dtype)])
            flags = np.concatenate([flags, np.array(marks, dtype=np.int8)])
        self._files = _Files(paths, positions, low, high, flags)
        if unions is not None:
            self._unions = unions.moved(keep, len(self._adds))
        if located_for is not None and len(offsets) + len(self._adds) == len(paths):
            more = len(self._adds)
            self._located_for = located_for
            self._offsets = np.concatenate([offsets, np.full(more, -1, dtype=np.int64)])
            self._blocks = np.concatenate([blocks, np.zeros(more, dtype=np.int64)])
        self._parent, self._adds, self._touched = None, [], frozenset()
        return self._files

    # --- asking -----------------------------------------------------------------------

    def admitted(self, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The files whose range holds one of ``keys`` (sorted, of :attr:`dtype`): their
        rows in this index and their paths (not to be changed: random keys admit every
        file, and then the index's own list is returned)."""
        with self._lock:
            files = self._ready()
        inside = np.searchsorted(keys, files.high, "right") > np.searchsorted(
            keys, files.low, "left"
        )
        rows = np.flatnonzero(inside)
        if len(rows) == len(files.paths):
            return rows, files.paths
        return rows, [files.paths[i] for i in rows.tolist()]

    def filter_status(
        self,
        store: ObjectStore,
        prefix: str,
        signature: list[list[str]],
        rows: np.ndarray,
        probe: keyfilter.Probe,
    ) -> np.ndarray:
        """Per file of ``rows``: 1 if it must be read (its cached filter may hold one of
        ``probe``'s keys, or it is another database's file), 0 if its filter holds
        none, -1 if no filter of ``signature`` is cached for it.

        A cached filter met unsaved (built before its file was committed) gets
        its sidecar written, as :func:`mere.data.keyfilter.probe` does.
        """
        cache = keyfilter.CACHE
        unsaved: list[str] = []
        hits: np.ndarray | None = None
        with self._lock:
            files = self._ready()
            external = (files.flags[rows] & EXTERNAL) != 0
            known = np.zeros(len(rows), dtype=np.bool_)
            while hits is None:
                generation = cache.generation
                where = (store.uri, prefix, repr(signature), generation)
                if self._located_for != where:
                    self._located_for = where
                    self._offsets = np.full(len(files.paths), -1, dtype=np.int64)
                    self._blocks = np.zeros(len(files.paths), dtype=np.int64)
                todo = rows[(self._offsets[rows] < 0) & ~external]
                if len(todo):
                    keys = [prefix + files.paths[i] for i in todo.tolist()]
                    found = cache.locate(store, keys, signature)
                    if found.generation != generation:
                        continue
                    self._offsets[todo] = found.offsets
                    self._blocks[todo] = found.blocks
                    unsaved += [keys[i] for i in found.unsaved]
                known = (self._offsets[rows] >= 0) & ~external
                chosen = rows[known]
                unions = self._probed_unions(store, prefix, signature, chosen, generation)
                hits = cache.probe_at(
                    generation, self._offsets[chosen], self._blocks[chosen], probe, unions
                )
            status = np.full(len(rows), -1, dtype=np.int8)
            status[known] = hits
            status[external] = 1
        for key in unsaved:
            got = cache.get(store, key)
            if got is not None and not got[1]:
                keyfilter.save(store, key, got[0])
        return status

    def _probed_unions(
        self,
        store: ObjectStore,
        prefix: str,
        signature: list[list[str]],
        chosen: np.ndarray,
        generation: int,
    ) -> list[keyfilter.Unions] | None:
        """The unions of the located filters ``chosen`` (rows), made for every
        :data:`~mere.data.keyfilter.UNION_FILES` of one size not in one yet; their
        members as positions in ``chosen``. None: no union (under the lock)."""
        owner = (store.uri, prefix, repr(signature))
        files = self._files
        assert files is not None
        if self._unions is None or self._unions.owner != owner:
            self._unions = _Unions.empty(owner, len(files.paths))
        unions = self._unions
        free = chosen[~unions.joined[chosen]]
        if len(free) >= keyfilter.UNION_FILES:
            sizes = self._blocks[free]
            for size in np.unique(sizes).tolist():
                rows = free[sizes == size]
                count = len(rows) // keyfilter.UNION_FILES * keyfilter.UNION_FILES
                if count == 0:
                    continue
                members = rows[:count].reshape(-1, keyfilter.UNION_FILES)
                words = []
                for group in members:
                    parts = [
                        keyfilter.CACHE.words_at(generation, int(self._offsets[r]), size)
                        for r in group.tolist()
                    ]
                    if any(p is None for p in parts):
                        return None  # the cache moved meanwhile: the caller locates again
                    words.append(keyfilter.Unions.union([p for p in parts if p is not None]))
                unions = unions.grown(size, members.tolist(), words)
            self._unions = unions
        if not unions.groups:
            return None
        position = np.full(len(files.paths), -1, dtype=np.int64)
        position[chosen] = np.arange(len(chosen))
        return [
            keyfilter.Unions(
                blocks,
                group.words,
                np.where(group.rows >= 0, position[np.maximum(group.rows, 0)], -1),
            )
            for blocks, group in unions.groups.items()
        ]

    def entries(self) -> dict[str, tuple[int, int, int]]:
        """Per indexed file: the range of the first key column it is known to lie in, and
        its flags (for checks and tests: an index handed on must equal one built anew)."""
        with self._lock:
            files = self._ready()
        return {
            path: (int(lo), int(hi), int(flag))
            for path, lo, hi, flag in zip(
                files.paths,
                files.low.tolist(),
                files.high.tolist(),
                files.flags.tolist(),
                strict=True,
            )
        }


def _stat(add: AddFile, section: str, column: str, limits: tuple[int, int], default: int) -> int:
    """A file's integer minimum or maximum of ``column`` (``default`` if unknown, or outside
    the key type's ``limits``: the file columns read such a value as unknown too)."""
    stats = add.stats if isinstance(add.stats, dict) else {}
    values = stats.get(section)
    value = values.get(column) if isinstance(values, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and limits[0] <= value <= limits[1]:
        return value
    return default


def key_index(meta: TableMeta, files: LiveFiles, column: str) -> KeyIndex:
    """The index of ``files`` for the integer first key column ``column``: kept, or built."""
    field = meta.schema.field(column)
    name = f"mere.keys {physical_name(field)} {field.type}"

    def build() -> KeyIndex:
        return KeyIndex.build(meta, files, column)

    found = files.derived(name, build)
    assert isinstance(found, KeyIndex)
    return found


__all__ = ["KeyIndex", "key_index"]
