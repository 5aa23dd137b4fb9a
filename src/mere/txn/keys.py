"""Primary keys: finding keys already present, and telling which keys collide.

A table's primary key is the table property ``mere.primaryKey`` (a JSON list
of column names, docs/format.md §5; see :func:`mere.constraints.primary_key`).
The stage checks every statement's new keys here when the statement ends
(SQL checks constraints per statement, so an update that shifts keys by one
does not trip over itself), and the committer's conflict check asks a
:class:`KeyProbe` whether a winning commit added one of the keys this
transaction inserts.

Reading is pruned by the files' statistics on the first key column (for
integer keys: the files whose range holds one of the keys looked for, kept
from commit to commit with where their filters sit in a
:class:`~mere.txn.keyindex.KeyIndex`; else the range of all of them), then
by each committed file's key filter (:mod:`mere.data.keyfilter`: a file whose
filter holds none of the keys is not read; the cached filters of all
candidates are probed at once, files of one size through unions of their
filters), and only the key columns are read. The keys are hashed once for
all of it (:func:`mere.data.keyfilter.key_hashes`). A committed file without a filter has its whole
key columns read once, and its filter built and saved as a sidecar for every
later check. The transaction's own files are read only when the stage does
not hold their key rows (it keeps those of the files it writes, and builds
their filters from them: :func:`remember_filter`); the keys a commit inserts
are worked out only when a winner adds files to the table (:class:`KeyProbe`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Container, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.constraints import PRIMARY_KEY_PROPERTY, primary_key
from mere.data import keyfilter
from mere.errors import DuplicateKey, InvalidExpression
from mere.expr.ast import referenced_columns
from mere.log.actions import AddFile, TableMeta, is_external_path
from mere.log.columns import INLINE, PATH, ROWS, SIZE, partition_column
from mere.schema import physical_name
from mere.snapshot.files import LiveFiles
from mere.snapshot.planning import select_files, table_facts
from mere.snapshot.scan import READ_THREADS, ScanPlan, plan_scan, scan_files
from mere.snapshot.state import TableState
from mere.snapshot.vectorized import may_match_all
from mere.storage import ObjectStore
from mere.txn.keyindex import key_index

#: Per candidate file, from the cached key filters: 1 (read it), 0 (its filter holds none
#: of the keys), -1 (no filter cached); given the store, the table's prefix, the filter
#: signature and the keys (see :meth:`mere.txn.keyindex.KeyIndex.filter_status`).
FilterStatus = Callable[[ObjectStore, str, list[list[str]], keyfilter.Probe], np.ndarray]


@dataclass(frozen=True)
class Candidates:
    """Committed files a key check may have to read: their paths, and objects on demand.

    ``take(indices)`` builds the :class:`AddFile` objects of some of them
    (enough to read the files): a check over a snapshot's columns of files
    builds objects only for the few files it reads. ``status``, if given,
    probes their cached filters where an index already located them (else
    the filters are looked up by path).
    """

    paths: list[str]
    take: Callable[[Sequence[int]], list[AddFile]]
    status: FilterStatus | None = None

    @staticmethod
    def of(files: Sequence[AddFile]) -> Candidates:
        chosen = list(files)
        return Candidates([a.path for a in chosen], lambda picked: [chosen[i] for i in picked])


#: Picks the committed files whose statistics admit a scan plan (of the keys given).
Selector = Callable[[ScanPlan, pa.Table], Candidates]

#: How many key values an error names.
SHOWN_KEYS = 10
#: Past this many keys looked for, files are read without consulting their filters (at
#: about 5e-7 false positives per key, 20,000 absent keys pass a filter 1% of the time,
#: but probing costs about what reading the key columns does).
FILTER_MAX_KEYS = 20_000


def key_columns(meta: TableMeta) -> list[str]:
    """The table's primary key columns ([] when it has none)."""
    text = meta.properties.get(PRIMARY_KEY_PROPERTY)
    return list(_parsed_key(text)) if text else []


@lru_cache(maxsize=256)
def _parsed_key(text: str) -> tuple[str, ...]:
    """The key columns a ``mere.primaryKey`` value names (parsed once per value)."""
    return tuple(primary_key({PRIMARY_KEY_PROPERTY: text}))


def key_rows(keys: pa.Table) -> list[dict[str, object]]:
    """The rows of ``keys`` as dicts of Python values.

    A value Python cannot hold (a duration past ``timedelta``'s range, a zoned
    timestamp whose local time is past year 9999) is given as Arrow's text of
    it, as is every value of its column: an error naming keys never fails itself.
    """
    columns: dict[str, list[object]] = {}
    for name, column in zip(keys.column_names, keys.columns, strict=True):
        try:
            columns[name] = column.to_pylist()
        except (OverflowError, ValueError):
            columns[name] = pc.cast(column, pa.string()).to_pylist()
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def describe_keys(keys: pa.Table, limit: int = SHOWN_KEYS) -> str:
    """Up to ``limit`` key values, for a message: ``(1), (2)`` or ``(1, 'a')``."""
    rows = key_rows(keys.slice(0, limit))
    shown = ", ".join("(" + ", ".join(repr(v) for v in row.values()) + ")" for row in rows)
    more = f" and {keys.num_rows - limit} more" if keys.num_rows > limit else ""
    return shown + more


def canonical_floats(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """``table`` with one zero and one NaN in its floating-point ``columns`` (default: all).

    Hashing kernels (``is_in``, joins, group-bys) compare bits, where SQL holds
    -0.0 = 0.0 and NaN = NaN whatever its sign bit or payload (``-x`` of a
    NaN, ``inf - inf``); the key filters hash them so too (format §6.1).
    """
    for i, column in enumerate(table.schema):
        if pa.types.is_floating(column.type) and (columns is None or column.name in columns):
            values = table.column(i)
            zero, nan = pa.scalar(0.0, column.type), pa.scalar(math.nan, column.type)
            canonical = pc.if_else(pc.is_nan(values), nan, pc.add(values, zero))
            table = table.set_column(i, column, canonical)
    return table


def _counted(keys: pa.Table) -> pa.Table:
    """Each distinct key value of ``keys`` with ``count_all``, how often it occurs."""
    keys = canonical_floats(keys)
    names = keys.column_names
    if len(names) == 1:  # hash counting, much faster than a group-by for one column
        counts = pc.value_counts(keys.column(0).combine_chunks())
        return pa.table({names[0]: counts.field("values"), "count_all": counts.field("counts")})
    return keys.group_by(names, use_threads=False).aggregate([([], "count_all")])


def duplicates_within(keys: pa.Table) -> pa.Table:
    """The key values that occur more than once in ``keys``.

    Equal keys hash alike (:func:`mere.data.keyfilter.key_hashes`), so keys
    whose hashes are all distinct are distinct: the usual answer needs no
    counting, and the hashes serve the key check that follows.
    """
    if keys.num_rows < 2:
        return keys.slice(0, 0)
    if keys.num_rows <= keyfilter.MEMO_ROWS:
        hashes = np.sort(keyfilter.key_hashes(keys))
        if not (hashes[1:] == hashes[:-1]).any():
            return keys.slice(0, 0)
    counted = _counted(keys)
    return counted.filter(pc.greater(counted["count_all"], 1)).select(keys.column_names)


def semi_join(left: pa.Table, right: pa.Table, *, anti: bool = False) -> pa.Table:
    """The rows of ``left`` whose key is (``anti``: is not) among ``right``'s (same columns).

    Keys compare as SQL does (:func:`canonical_floats`); the rows are ``left``'s own.
    """
    names = left.column_names
    keys, others = canonical_floats(left), canonical_floats(right.select(names))
    if len(names) == 1:
        inside = pc.is_in(keys.column(0), value_set=pc.unique(others.column(0).combine_chunks()))
        return left.filter(pc.invert(inside) if anti else inside)
    kind = "left anti" if anti else "left semi"
    if keys is left:  # no floating-point column: the rows are the keys
        return left.join(others, names, join_type=kind, use_threads=False)
    numbered = keys.append_column("__mere_row", pa.array(range(left.num_rows), pa.int64()))
    rows = numbered.join(others, names, join_type=kind, use_threads=False)["__mere_row"]
    return left.take(pc.take(rows, pc.sort_indices(rows)))


def intersect(left: pa.Table, right: pa.Table) -> pa.Table:
    """The distinct key values present in both tables (same columns and types).

    The smaller table is the one hashed: a key check meets a file read for
    a false positive of its filter (100,000 keys) with 1,000 new keys.
    """
    if left.num_rows == 0 or right.num_rows == 0:
        return left.slice(0, 0)
    if right.num_rows > left.num_rows:
        found = _counted(semi_join(right.select(left.column_names), left))
        return found.select(left.column_names).cast(left.schema)
    return _counted(semi_join(left, right)).select(left.column_names)


def key_counts(
    store: ObjectStore,
    meta: TableMeta,
    files: Sequence[AddFile],
    keys: pa.Table,
    *,
    own: Sequence[AddFile] = (),
    select: Selector | None = None,
    held: Sequence[pa.Table] = (),
    seen: list[str] | None = None,
) -> pa.Table:
    """How many rows of ``files`` (committed), ``own`` and ``held`` hold each value of ``keys``.

    Values no row holds are left out. ``select`` and ``seen``: see
    :func:`candidate_keys`; ``held``: key rows already in memory (files this
    transaction wrote).
    """
    columns = keys.column_names
    if keys.num_rows == 0:
        return pa.table({**{c: keys.column(c).slice(0, 0) for c in columns}, "count_all": []})
    found = [candidate_keys(store, meta, files, keys, own=own, select=select, seen=seen)]
    found += [h.select(columns).cast(keys.schema) for h in held]
    return _counted(semi_join(pa.concat_tables(found), keys))


def present_keys(
    store: ObjectStore,
    meta: TableMeta,
    files: Sequence[AddFile],
    keys: pa.Table,
    *,
    own: Sequence[AddFile] = (),
    select: Selector | None = None,
    held: Sequence[pa.Table] = (),
    seen: list[str] | None = None,
) -> pa.Table:
    """The values of ``keys`` that rows of ``files`` (committed), ``own`` or ``held`` hold."""
    if keys.num_rows == 0:
        return keys.slice(0, 0)
    found = [candidate_keys(store, meta, files, keys, own=own, select=select, seen=seen)]
    found += [h.select(keys.column_names).cast(keys.schema) for h in held if h.num_rows]
    if not any(f.num_rows for f in found):
        return keys.slice(0, 0)
    return intersect(keys, pa.concat_tables(found))


def candidate_keys(
    store: ObjectStore,
    meta: TableMeta,
    files: Sequence[AddFile],
    keys: pa.Table,
    *,
    own: Sequence[AddFile] = (),
    select: Selector | None = None,
    seen: list[str] | None = None,
) -> pa.Table:
    """Key columns of the rows of ``files`` and ``own`` that may hold one of ``keys``.

    A superset of the matching rows (the caller joins): files that statistics
    or key filters rule out are not read, and a committed file without a
    filter gets one (see the module docstring). ``select``, if given, picks
    the committed files the plan's statistics admit in place of checking
    ``files`` one by one (the stage's vectorized choice over the snapshot).
    The cached filters of all admitted files are probed at once
    (:func:`mere.data.keyfilter.probe`). ``seen``, if given, gets the paths of
    the committed files statistics admitted: those a row holding one of
    ``keys`` may be in (a reader records them, mere.txn.conflicts).
    """
    if keys.num_rows == 0:
        return keys.slice(0, 0)
    ranged = _KeyPlans(meta, keys)
    read = ranged.plan.select(own) if own else []
    if select is not None:
        admitted = select(ranged.for_candidates(), keys)
    else:
        admitted = Candidates.of(ranged.plan.select(files))
    if seen is not None:
        seen.extend(admitted.paths)
    every = range(len(admitted.paths))
    if keys.num_rows > FILTER_MAX_KEYS:  # most files would pass their filters anyway
        return _scan_keys(store, ranged.plan, read + admitted.take(every), keys)
    signature = key_signature(meta)
    wanted = keyfilter.Probe.of(keyfilter.key_hashes(keys))
    if admitted.status is not None:
        status = admitted.status(store, meta.prefix, signature, wanted)
    else:
        data_keys = [meta.prefix + p for p in admitted.paths]
        status = keyfilter.probe(store, data_keys, signature, wanted)
        for i, path in enumerate(admitted.paths):
            if is_external_path(path):
                status[i] = 1  # another database's file: read it, never write beside it
    read += admitted.take(np.flatnonzero(status == 1).tolist())
    unfiltered: list[tuple[AddFile, str]] = []
    unknown = np.flatnonzero(status < 0).tolist()
    stored: list[tuple[AddFile, str]] = []
    for i, add in zip(unknown, admitted.take(unknown), strict=True):
        # An inlined file has no object, so no sidecar either: read it.
        (unfiltered if add.inline is not None else stored).append(
            (add, meta.prefix + admitted.paths[i])
        )
    loaded = keyfilter.load_many(store, [key for _, key in stored], threads=READ_THREADS)
    fresh: list[tuple[AddFile, str, keyfilter.KeyFilter]] = []
    for (add, key), found in zip(stored, loaded, strict=True):
        if found is None:
            unfiltered.append((add, key))
        elif found.signature != signature:
            read.append(add)  # built for other key columns or types: read the file
        else:
            fresh.append((add, key, found))
    if fresh:  # the filters just loaded, probed at once like the others
        again = keyfilter.probe(store, [key for _, key, _ in fresh], signature, wanted)
        for (add, _, found), state in zip(fresh, again.tolist(), strict=True):
            if state == 1 or (state < 0 and found.may_contain(wanted).any()):
                read.append(add)
    parts = [_scan_keys(store, ranged.plan, read, keys)] if read else []
    if unfiltered:
        parts.append(_read_and_index(store, meta, unfiltered, signature).cast(keys.schema))
    if not parts:
        return keys.slice(0, 0)
    return pa.concat_tables(parts)


class _KeyPlans:
    """The scans of a key check: of the key columns within the range of ``keys``' first
    column (made only when a file is read), and the plan candidates are chosen by."""

    def __init__(self, meta: TableMeta, keys: pa.Table) -> None:
        self.meta = meta
        self.keys = keys

    @cached_property
    def plan(self) -> ScanPlan:
        return _key_plan(self.meta, self.keys)

    def for_candidates(self) -> ScanPlan:
        """The plan a :data:`Selector` gets: without a filter when it chooses integer keys'
        files by their ranges (:func:`live_candidates`), which is all it needs."""
        if _ranged_column(self.meta, self.keys) is not None:
            return plan_scan(self.meta, self.keys.column_names, None)
        return self.plan


def _scan_keys(
    store: ObjectStore, plan: ScanPlan, files: Sequence[AddFile], keys: pa.Table
) -> pa.Table:
    """The key columns of ``files``' rows the plan's range admits, typed as ``keys``."""
    return scan_files(store, plan, list(files)).select(keys.column_names).cast(keys.schema)


def live_candidates(
    plan: ScanPlan, keys: pa.Table, table: TableState, removed: Container[str]
) -> Candidates:
    """The files of ``table`` whose statistics admit ``plan``'s filter, less ``removed``.

    Decided over the snapshot's columns of files at once, like
    :func:`mere.snapshot.planning.select_files`, but objects are built only
    for the files a key check then reads. For an integer first key column, a
    file is admitted when one of ``keys`` lies within its range (not only the
    range of all of them).
    """
    files = table.files
    if not isinstance(files, LiveFiles):
        return Candidates.of([f for f in select_files(plan, table) if f.path not in removed])
    column = _ranged_column(plan.table, keys)
    if column is not None:
        return _indexed_candidates(plan.table, files, column, keys, removed)
    names = sorted(referenced_columns(plan.predicate)) if plan.predicate is not None else []
    files.columns(_candidate_columns(plan.table, files, names))  # decoded together, once
    used: list[str] = []
    if plan.predicate is None:
        rows: pa.Array = pa.array(range(files.num_files), pa.int64())
    else:
        found, used = table_facts(plan.table, files, names)
        chosen = may_match_all(plan.predicate, found)
        if chosen is None:  # a filter the vectorized analysis does not cover
            return Candidates.of([f for f in select_files(plan, table) if f.path not in removed])
        rows = pc.indices_nonzero(chosen)
    paths = files.columns([PATH]).column(0).take(rows).to_pylist()
    if removed:
        kept = [i for i, p in enumerate(paths) if p not in removed]
        rows, paths = rows.take(pa.array(kept, pa.int64())), [paths[i] for i in kept]
    live_rows = rows

    def take(picked: Sequence[int]) -> list[AddFile]:
        if not picked:
            return []
        return files.take(live_rows.take(pa.array(picked, pa.int64())), columns=used)

    return Candidates(paths, take)


def _indexed_candidates(
    meta: TableMeta, files: LiveFiles, column: str, keys: pa.Table, removed: Container[str]
) -> Candidates:
    """The files whose range of the integer first key column holds one of ``keys``, by
    the files' :class:`~mere.txn.keyindex.KeyIndex` (kept from commit to commit)."""
    index = key_index(meta, files, column)
    wanted = np.sort(np.asarray(keys.column(0).to_numpy()).astype(index.dtype))
    rows, paths = index.admitted(wanted)
    if removed:
        kept = [i for i, p in enumerate(paths) if p not in removed]
        rows, paths = rows[kept], [paths[i] for i in kept]

    def take(picked: Sequence[int]) -> list[AddFile]:
        wanted = [paths[i] for i in picked]
        if len(wanted) <= TAKE_BY_PATH:
            return [files[p] for p in wanted]
        # Many (a fresh process meets every file unfiltered): one pass over the paths.
        where = pc.index_in(pa.array(wanted, pa.string()), value_set=files.columns([PATH])[0])
        return files.take(where, columns=_candidate_columns(meta, files, [column]))

    def status(
        store: ObjectStore, prefix: str, signature: list[list[str]], probe: keyfilter.Probe
    ) -> np.ndarray:
        return index.filter_status(store, prefix, signature, rows, probe)

    return Candidates(paths, take, status)


#: Up to this many files a key check reads are looked up by path one by one.
TAKE_BY_PATH = 4


def _ranged_column(meta: TableMeta, keys: pa.Table) -> str | None:
    """The first key column, if files are chosen by its ranges: an integer column (not a
    partition column) that ``keys`` hold in its own type."""
    name = keys.column_names[0]
    type_ = meta.schema.field(name).type
    if name in meta.partition_columns or not pa.types.is_integer(type_):
        return None
    return name if keys.column(0).type == type_ else None


def key_signature(meta: TableMeta) -> list[list[str]]:
    """The key filter signature of the table's key: physical column names and hash families."""
    with _SIGNATURES_LOCK:
        found = _SIGNATURES.get(id(meta))
    if found is not None and found[0] is meta and found[1] == key_columns(meta):
        return found[2]
    columns = key_columns(meta)
    fields = [meta.schema.field(c) for c in columns]
    signature = keyfilter.signature(fields, [physical_name(f) for f in fields])
    with _SIGNATURES_LOCK:
        _SIGNATURES[id(meta)] = (meta, columns, signature)  # meta kept: its id stays its own
        while len(_SIGNATURES) > 64:
            _SIGNATURES.pop(next(iter(_SIGNATURES)))
    return signature


#: The signatures of the last tables' metadata objects, by identity (a check asks for one
#: several times; the schema lookups cost about what probing ten files does).
_SIGNATURES: dict[int, tuple[TableMeta, list[str], list[list[str]]]] = {}
_SIGNATURES_LOCK = threading.Lock()


def added_keys(store: ObjectStore, meta: TableMeta, adds: Sequence[AddFile]) -> pa.Table:
    """The key columns of files this transaction wrote, remembering each file's filter.

    Their filters are cached (not saved: the files are not committed yet), so
    a later check in this process need not read them again; the first check
    that meets them committed writes their sidecars.
    """
    signature = key_signature(meta)
    plan = plan_scan(meta, key_columns(meta), None)

    def one(add: AddFile) -> pa.Table:
        keys = scan_files(store, plan, [add])
        remember_filter(store, meta, add, keys, signature)
        return keys

    if len(adds) <= 1:
        return one(adds[0]) if adds else scan_files(store, plan, [])
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(adds))) as pool:
        return pa.concat_tables(list(pool.map(one, adds)))


def _candidate_columns(meta: TableMeta, files: LiveFiles, names: Sequence[str]) -> list[str]:
    """The file columns :func:`live_candidates` reads: statistics of ``names``, and what
    :meth:`LiveFiles.take` builds objects from."""
    layout = files.layout
    wanted = [PATH, SIZE, ROWS, INLINE, *(partition_column(p) for p in layout.partition_columns)]
    for name in names:
        if name not in meta.partition_columns:
            wanted += layout.columns_for(physical_name(meta.schema.field(name)))
    return [n for n in dict.fromkeys(wanted) if n in layout.schema.names]


def remember_filter(
    store: ObjectStore,
    meta: TableMeta,
    add: AddFile,
    keys: pa.Table,
    signature: list[list[str]] | None = None,
) -> None:
    """Cache the filter of a file this transaction wrote, from its key rows ``keys``.

    A later check in this process then need not read the file; the first
    check that meets it committed writes its sidecar (none for an inlined file).
    """
    if is_external_path(add.path):
        return
    data_key = meta.prefix + add.path
    if not keyfilter.known(store, data_key):
        built = keyfilter.KeyFilter.build(
            key_signature(meta) if signature is None else signature, keyfilter.key_hashes(keys)
        )
        keyfilter.remember(store, data_key, built, sidecar=add.inline is None)


def _read_and_index(
    store: ObjectStore,
    meta: TableMeta,
    files: Sequence[tuple[AddFile, str]],
    signature: list[list[str]],
) -> pa.Table:
    """The whole key columns of committed files, saving each one's key filter as it goes."""
    plan: ScanPlan = plan_scan(meta, key_columns(meta), None)

    def one(item: tuple[AddFile, str]) -> pa.Table:
        add, data_key = item
        keys = scan_files(store, plan, [add])
        built = keyfilter.KeyFilter.build(signature, keyfilter.key_hashes(keys))
        if add.inline is None:
            keyfilter.save(store, data_key, built)
        else:  # an inlined file has no object to put a sidecar beside
            keyfilter.remember(store, data_key, built, sidecar=False)
        return keys

    if len(files) == 1:
        return one(files[0])
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(files))) as pool:
        return pa.concat_tables(list(pool.map(one, files)))


def _key_plan(meta: TableMeta, keys: pa.Table) -> ScanPlan:
    """A scan of the key columns of the rows whose first key column is in ``keys``' range.

    For integer keys the range is bound directly (no text to parse: a check
    costs a millisecond less); other types go through the filter's text,
    which must read back.
    """
    columns = keys.column_names
    values = keys.column(0)
    if pa.types.is_integer(values.type):
        lo, hi = pc.min_max(values).values()
        if lo.is_valid and hi.is_valid:
            col = sqlexpr.Column(columns[0])
            expr = sqlexpr.And(
                (
                    sqlexpr.Compare(">=", col, sqlexpr.Literal(lo.as_py(), values.type)),
                    sqlexpr.Compare("<=", col, sqlexpr.Literal(hi.as_py(), values.type)),
                )
            )
            return replace(
                plan_scan(meta, columns, None), predicate=sqlexpr.bind(expr, meta.schema)
            )
    return plan_scan(meta, columns, _range_filter(columns[0], values))


def _range_filter(column: str, values: pa.ChunkedArray) -> str | None:
    """``column BETWEEN min AND max`` of the values, as filter text (None if not expressible)."""
    try:
        lo, hi = pc.min_max(values).values()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if not lo.is_valid or not hi.is_valid:
        return None
    try:
        low, high = lo.as_py(), hi.as_py()
    except (OverflowError, ValueError):
        return None  # a bound Python cannot hold (a zoned timestamp past 9999 locally)
    col = sqlexpr.Column(column)
    expr = sqlexpr.And(
        (
            sqlexpr.Compare(">=", col, sqlexpr.Literal(low, values.type)),
            sqlexpr.Compare("<=", col, sqlexpr.Literal(high, values.type)),
        )
    )
    try:
        text = sqlexpr.to_sql(expr)
        sqlexpr.parse(text)
    except (InvalidExpression, ValueError, TypeError):
        return None  # a key type whose literals do not read back: no pruning
    return text


def refuse_duplicates(meta: TableMeta, duplicates: pa.Table, where: str) -> None:
    """Raise DuplicateKey for ``duplicates`` (if any), naming up to ten of them."""
    if duplicates.num_rows:
        columns = ", ".join(duplicates.column_names)
        raise DuplicateKey(
            f"duplicate primary key ({columns}) {where} of table {meta.name!r}: "
            f"{describe_keys(duplicates)}",
            keys=key_rows(duplicates.slice(0, SHOWN_KEYS)),
        )


@dataclass
class KeyProbe:
    """The keys a transaction inserts into one table, to test a winner's added files.

    ``inserted`` computes them, once, when a winner first adds files to the
    table: a commit that wins its first race never reads them.
    """

    store: ObjectStore
    meta: TableMeta
    inserted: Callable[[], pa.Table]
    _keys: pa.Table | None = field(default=None, repr=False)

    @property
    def keys(self) -> pa.Table:
        if self._keys is None:
            self._keys = self.inserted()
        return self._keys

    def collisions(self, adds: Sequence[AddFile]) -> pa.Table:
        """The inserted keys that rows of ``adds`` also hold."""
        return present_keys(self.store, self.meta, adds, self.keys)


__all__ = [
    "canonical_floats",
    "Candidates",
    "KeyProbe",
    "added_keys",
    "candidate_keys",
    "describe_keys",
    "duplicates_within",
    "intersect",
    "key_columns",
    "key_counts",
    "key_rows",
    "key_signature",
    "live_candidates",
    "Selector",
    "present_keys",
    "refuse_duplicates",
    "remember_filter",
    "semi_join",
]
