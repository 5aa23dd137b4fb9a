"""Checkpoints: the full state at one version, so readers need not replay every commit.

A checkpoint is written create-only next to the commits. Since checkpoint
format 2 (docs/format.md §4.2) it is columnar and in parts:

* ``_log/<version>.checkpoint.parquet``, the **manifest**: one row per live
  action that is not a data file (protocol, database, table metadata,
  application markers, exports), its JSON body in ``payload``, and one row per
  **part** naming it;
* ``_log/<version>.checkpoint.<writer id>.<n>.parquet``, the parts: the live
  files of one table (at most :data:`PART_FILES` per part), one row each, with
  typed statistics columns (:mod:`mere.log.columns`).

The manifest is written last: a checkpoint exists once its manifest does.
A reader opens the manifest and reads a table's parts only when it needs that
table's files, and only the columns it needs (a point lookup reads ``path``,
``size``, ``rows`` and the statistics of one column).

Format 1 (one Parquet file, statistics as JSON text) is still read: its rows
are turned into the same columns in one vectorized pass.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mere.errors import AlreadyExists, CorruptLog, FormatVersionError, ObjectNotFound, StorageError
from mere.log.actions import (
    ARROW_INLINE_FORMAT_VERSION,
    FORMAT_VERSION,
    INLINE_FORMAT_VERSION,
    INT64_MAX,
    Action,
    AddFile,
    AppTxn,
    DatabaseMeta,
    Export,
    Protocol,
    TableMeta,
    _Bad,
    _data_path,
    action_from_json,
    action_to_json,
)
from mere.log.columns import (
    CORE,
    INLINE,
    MODIFIED,
    OPTIONAL_CORE,
    PATH,
    ROWS,
    SIZE,
    FileLayout,
    adds_to_columns,
    json_rows_to_columns,
)
from mere.log.inlined import ARROW_STREAM_MAGIC, PARQUET_MAGIC
from mere.log.keys import LOG_PREFIX, checkpoint_part_key, parse_checkpoint_part_key
from mere.storage.base import MAX_KEY_LENGTH, ObjectStore

#: The newest checkpoint format this mere reads and writes (docs/format.md §4).
CHECKPOINT_FORMAT = 2
#: The most files one part of a columnar checkpoint holds.
PART_FILES = 100_000

CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("table_id", pa.string()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("modification_time", pa.int64()),
        pa.field("partition_values", pa.string()),
        pa.field("stats", pa.string()),
        pa.field("payload", pa.string()),
    ]
)
_KINDS = {
    Protocol: "protocol",
    DatabaseMeta: "database",
    TableMeta: "metadata",
    AppTxn: "txn",
    Export: "export",
}


@dataclass(frozen=True)
class PartRef:
    """One part of a columnar checkpoint: the files of one table, or a slice of them."""

    key: str
    table_id: str
    files: int
    size: int
    #: The checkpoint's format version: which kinds of inlined bytes its files may hold.
    format_version: int


#: Fetches the bytes of one part (:func:`fetch_part`); raises PartMissing.
PartFetcher = Callable[[PartRef], pa.Buffer]


@dataclass(frozen=True)
class CheckpointData:
    """A decoded checkpoint: the state's actions, and its data files as columns.

    ``actions`` holds everything but the data files. The files of a table are
    either decoded already (``files``: format 1, or a checkpoint read whole)
    or named by ``parts`` and fetched on demand through ``fetch``.
    """

    version: int
    timestamp: int  # the commit timestamp of ``version``
    actions: list[Action]
    files: dict[str, pa.Table] = field(default_factory=dict)
    parts: dict[str, tuple[PartRef, ...]] = field(default_factory=dict)
    fetch: PartFetcher | None = None
    format: int = 1

    def layouts(self) -> dict[str, FileLayout]:
        """The file layout of each table (by id), from its metadata."""
        return {a.id: FileLayout.of(a) for a in self.actions if isinstance(a, TableMeta)}


# --- format 2: the manifest and its parts ---------------------------------------------------


def encode_manifest(
    version: int, timestamp: int, actions: Iterable[Action], parts: Sequence[PartRef]
) -> bytes:
    """The manifest of a columnar checkpoint: the non-file actions and the parts."""
    cols: dict[str, list[object]] = {f.name: [] for f in CHECKPOINT_SCHEMA}
    fmt = FORMAT_VERSION
    for a in actions:
        if isinstance(a, Protocol):
            fmt = a.format_version  # a database still at an older format keeps it readable
        _append(cols, _payload_row(a))
    for part in parts:
        name = part.key[len(LOG_PREFIX) :]
        _append(
            cols,
            {
                "kind": "part",
                "table_id": part.table_id,
                "path": name,
                "size": part.size,
                "rows": part.files,
            },
        )
    return _parquet(cols, version, timestamp, fmt, CHECKPOINT_FORMAT)


def _append(cols: dict[str, list[object]], row: dict[str, object]) -> None:
    for name, values in cols.items():
        values.append(row.get(name))


def _payload_row(a: Action) -> dict[str, object]:
    kind = _KINDS.get(type(a))
    if kind is None:
        raise TypeError(f"a checkpoint does not hold {type(a).__name__} actions")
    row: dict[str, object] = {
        "kind": kind,
        "payload": json.dumps(action_to_json(a)[kind], ensure_ascii=False),
    }
    if isinstance(a, TableMeta):
        row["table_id"] = a.id
    return row


def _parquet(
    cols: dict[str, list[object]], version: int, timestamp: int, fmt: int, layout: int
) -> bytes:
    meta = {
        "mere.version": str(version),
        "mere.timestamp": str(timestamp),
        "mere.formatVersion": str(fmt),
    }
    if layout > 1:
        meta["mere.checkpointFormat"] = str(layout)
    table = pa.Table.from_pydict(cols, schema=CHECKPOINT_SCHEMA).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return bytes(sink.getvalue())


def encode_part(table_id: str, files: pa.Table) -> pa.Buffer:
    """One part: the files of ``table_id`` in ``files`` (columns of its layout)."""
    sink = pa.BufferOutputStream()
    table = files.replace_schema_metadata({"mere.tableId": table_id})
    # Paths and statistics are mostly distinct: dictionaries only cost (5x to read).
    pq.write_table(table, sink, compression="zstd", use_dictionary=False)
    return sink.getvalue()


class PartMissing(CorruptLog):
    """A part a manifest names does not exist (removed by expiry since, or lost)."""


def fetch_part(store: ObjectStore, part: PartRef) -> pa.Buffer:
    """The bytes of one part, held from then on (a local file is mapped, not copied).

    Once fetched, a part reads whatever happens to its object: expiry may
    delete it while a state built from its checkpoint still needs columns.

    Raises:
        PartMissing: the part does not exist.
    """
    try:
        with store.open_input(part.key) as source:
            return source.read_buffer()
    except ObjectNotFound:
        raise PartMissing(part.key, "a part the checkpoint names does not exist") from None


def decode_part(
    part: PartRef, data: pa.Buffer, columns: Sequence[str] | None, *, paths_checked: bool = False
) -> pa.Table:
    """Columns of one part (all when None), checked: CorruptLog naming the part on any defect.

    The core columns read are validated (paths are keys under the table, unless
    ``paths_checked`` says a previous read did; sizes, row counts and times
    are non-negative integers).
    """
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        meta = parquet.schema_arrow.metadata or {}
        if meta.get(b"mere.tableId") != part.table_id.encode():
            raise CorruptLog(part.key, f"is not a part of table {part.table_id}")
        names = parquet.schema_arrow.names
        missing = [c for c in CORE if c not in names and c not in OPTIONAL_CORE]
        if missing:
            raise CorruptLog(part.key, f"has no column {missing[0]!r}")
        wanted = names if columns is None else [c for c in columns if c in names]
        table = parquet.read(columns=wanted, use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptLog(part.key, f"unreadable Parquet: {exc}") from None
    if table.num_rows != part.files:
        raise CorruptLog(part.key, f"holds {table.num_rows} files, the manifest says {part.files}")
    try:
        check_file_columns(part.table_id, table, part.format_version, paths=not paths_checked)
    except _Bad as exc:
        raise CorruptLog(part.key, str(exc)) from None
    return table


def read_part(store: ObjectStore, part: PartRef, columns: Sequence[str] | None) -> pa.Table:
    """:func:`fetch_part`, then :func:`decode_part`."""
    return decode_part(part, fetch_part(store, part), columns)


#: A relative data path with an empty, ``.`` or ``..`` segment, a backslash or a NUL (§1).
_BAD_PATH = r"(^|/)\.{0,2}(/|$)|[\\\x00]"
#: What needs a closer look: a bad path, or an absolute one (§11.6).
_SUSPECT_PATH = _BAD_PATH + "|://"


def check_file_columns(
    table_id: str, table: pa.Table, format_version: int, *, paths: bool = True
) -> None:
    """Validate the core file columns present in ``table`` (raises _Bad).

    Paths must be keys under the table's prefix (or absolute data paths, whose
    use the state checks), sizes, row counts and modification times
    non-negative integers, inlined bytes of a kind ``format_version`` allows.
    """
    for name in (SIZE, ROWS, MODIFIED):
        if name not in table.column_names:
            continue
        column = table.column(name)
        if column.type != pa.int64():
            raise _Bad(f"column {name!r} has type {column.type}, not int64")
        if column.null_count or (len(column) and pc.min(column).as_py() < 0):
            raise _Bad(f"a file has a missing or negative {name}")
    if paths and PATH in table.column_names:
        check_paths(table_id, table.column(PATH))
    if INLINE in table.column_names and table.column(INLINE).null_count < table.num_rows:
        check_inline(table, format_version)


def check_inline(table: pa.Table, format_version: int) -> None:
    """Inlined bytes are binary, as long as their file's size, and start as a
    Parquet file or an Arrow IPC stream does, each in a format version that
    has it (raises _Bad)."""
    inline = table.column(INLINE)
    if not pa.types.is_binary(inline.type):
        raise _Bad(f"column 'inline' has type {inline.type}, not binary")
    if format_version < INLINE_FORMAT_VERSION:
        raise _Bad(f"inlined data files need format version {INLINE_FORMAT_VERSION}")
    starts = pc.binary_slice(inline.drop_null(), 0, 4)
    magic = pa.array([PARQUET_MAGIC, ARROW_STREAM_MAGIC], pa.binary())
    if not pc.all(pc.is_in(starts, value_set=magic)).as_py():
        raise _Bad("an inlined file's bytes are neither a Parquet file nor an Arrow IPC stream")
    if (
        format_version < ARROW_INLINE_FORMAT_VERSION
        and pc.any(pc.equal(starts, pa.scalar(ARROW_STREAM_MAGIC, pa.binary()))).as_py()
    ):
        raise _Bad(
            f"an inlined Arrow IPC stream needs format version {ARROW_INLINE_FORMAT_VERSION}"
        )
    if SIZE in table.column_names:
        lengths = pc.cast(pc.binary_length(inline), pa.int64())
        if pc.any(pc.not_equal(lengths, table.column(SIZE))).as_py():
            raise _Bad("an inlined file's bytes differ in length from its size")


def check_paths(table_id: str, paths: pa.ChunkedArray | pa.Array) -> None:
    """Every path is a valid data path of the table (format.md §1, §2.5); raises _Bad."""
    if paths.type != pa.string():
        raise _Bad(f"column 'path' has type {paths.type}, not string")
    if paths.null_count:
        raise _Bad("a file has no path")
    if len(paths) == 0:
        return
    limit = MAX_KEY_LENGTH - len(f"tables/{table_id}/")
    too_long = pc.greater(pc.utf8_length(paths), limit)
    if not pc.any(pc.match_substring_regex(paths, _SUSPECT_PATH)).as_py() and not (
        pc.any(too_long).as_py()
    ):
        return  # the usual case: one pass over the paths
    external = pc.match_substring(paths, "://")
    bad = pc.or_(pc.match_substring_regex(paths, _BAD_PATH), too_long)
    bad = pc.and_(bad, pc.invert(external))
    if pc.any(bad).as_py():
        first = paths.filter(bad)[0].as_py()
        raise _Bad(f"invalid data file path {first!r}")
    if pc.any(external).as_py():
        for path in paths.filter(external).to_pylist():
            _data_path(table_id, path)


# --- format 1: one file, statistics as JSON text -------------------------------------------


def encode_checkpoint(version: int, timestamp: int, actions: Iterable[Action]) -> bytes:
    """A checkpoint in format 1 (docs/format.md §4.1): one file, statistics as JSON text.

    mere writes format 2 (:meth:`mere.log.log.Log.write_checkpoint`); this
    writer is kept for tests and tools that need a checkpoint of the older format.
    """
    cols: dict[str, list[object]] = {f.name: [] for f in CHECKPOINT_SCHEMA}
    fmt = FORMAT_VERSION
    for a in actions:
        if isinstance(a, Protocol):
            fmt = a.format_version
        if isinstance(a, AddFile):
            if a.inline is not None:
                raise ValueError(
                    f"a format-1 checkpoint cannot hold the inlined data file {a.path!r}"
                )
            row: dict[str, object] = {
                "kind": "add",
                "table_id": a.table_id,
                "path": a.path,
                "size": a.size,
                "rows": a.rows,
                "modification_time": a.modification_time,
                "partition_values": json.dumps(a.partition_values, ensure_ascii=False),
                "stats": None if a.stats is None else json.dumps(a.stats, ensure_ascii=False),
            }
        else:
            row = _payload_row(a)
        _append(cols, row)
    return _parquet(cols, version, timestamp, fmt, 1)


# --- decoding either format ---------------------------------------------------------------


def decode_checkpoint(key: str, data: bytes) -> CheckpointData:
    """Parse a checkpoint file (a format-2 manifest, or a whole format-1 checkpoint).

    Raises:
        CorruptLog: naming ``key``, on any defect.
        FormatVersionError: the checkpoint needs a newer mere.
    """
    try:
        table = pq.read_table(pa.BufferReader(_arrow_owned(data)))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptLog(key, f"unreadable Parquet: {exc}") from None
    meta = table.schema.metadata or {}
    try:
        version = int(meta[b"mere.version"])
        timestamp = int(meta[b"mere.timestamp"])
        fmt = int(meta[b"mere.formatVersion"])
        layout = int(meta.get(b"mere.checkpointFormat", b"1"))
    except (KeyError, ValueError):
        raise CorruptLog(key, "missing or invalid mere.* metadata") from None
    if fmt > FORMAT_VERSION:
        raise FormatVersionError(
            f"checkpoint {key} has format version {fmt}; this mere reads up to {FORMAT_VERSION}",
            help="upgrade mere",
        )
    if layout > CHECKPOINT_FORMAT or layout < 1:
        raise FormatVersionError(
            f"checkpoint {key} has checkpoint format {layout}; this mere reads up to "
            f"{CHECKPOINT_FORMAT}",
            help="upgrade mere",
        )
    if not table.schema.equals(CHECKPOINT_SCHEMA.with_metadata(table.schema.metadata)):
        raise CorruptLog(key, "unexpected checkpoint columns")
    try:
        kinds = table.column("kind")
        files_kind = "add" if layout == 1 else "part"
        is_file = pc.equal(kinds, files_kind)
        actions = _decode_actions(table.filter(pc.invert(is_file)), files_kind)
        for action in actions:
            if isinstance(action, Protocol) and action.format_version != fmt:
                raise _Bad(
                    f"its protocol row says format version {action.format_version}, "
                    f"its metadata {fmt}"
                )
        rows = table.filter(is_file)
        checkpoint = CheckpointData(version, timestamp, actions, format=layout)
        if layout == 1:
            checkpoint.files.update(_decode_adds(checkpoint.layouts(), rows, fmt))
        else:
            checkpoint.parts.update(_decode_parts(version, checkpoint.layouts(), rows, fmt))
    except (_Bad, ValueError, TypeError, pa.ArrowException) as exc:
        raise CorruptLog(key, str(exc)) from None
    return checkpoint


def _decode_actions(table: pa.Table, files_kind: str) -> list[Action]:
    actions: list[Action] = []
    payloads = table.column("payload").to_pylist()
    for i, kind in enumerate(table.column("kind").to_pylist()):
        if kind not in _KINDS.values():
            raise _Bad(f"unknown kind {kind!r}" if kind != "add" else "an add row in a manifest")
        action = action_from_json({kind: json.loads(payloads[i] or "null")})
        if isinstance(action, AddFile) or not isinstance(action, tuple(_KINDS)):
            raise _Bad(f"unexpected {kind} row")
        actions.append(action)  # type: ignore[arg-type]
    return actions


def _table_ids(rows: pa.Table, layouts: Mapping[str, FileLayout]) -> list[str]:
    ids = rows.column("table_id")
    if ids.null_count:
        raise _Bad("a file row without a table id")
    found = pc.unique(ids).to_pylist()
    for table_id in found:
        if table_id not in layouts:
            raise _Bad(f"files of unknown table id {table_id}")
    return found


def _decode_adds(
    layouts: Mapping[str, FileLayout], rows: pa.Table, format_version: int
) -> dict[str, pa.Table]:
    out: dict[str, pa.Table] = {}
    for table_id in _table_ids(rows, layouts):
        mine = rows.filter(pc.equal(rows.column("table_id"), table_id))
        core = mine.select([PATH, SIZE, ROWS, MODIFIED])
        check_file_columns(table_id, core, format_version)
        out[table_id] = json_rows_to_columns(
            layouts[table_id],
            core,
            mine.column("partition_values"),
            mine.column("stats"),
        )
    return out


def _decode_parts(
    version: int, layouts: Mapping[str, FileLayout], rows: pa.Table, format_version: int
) -> dict[str, tuple[PartRef, ...]]:
    _table_ids(rows, layouts)
    out: dict[str, list[PartRef]] = {}
    for row in rows.select(["table_id", "path", "size", "rows"]).to_pylist():
        name, size, files = row["path"], row["size"], row["rows"]
        key = f"{LOG_PREFIX}{name}"
        if not isinstance(name, str) or parse_checkpoint_part_key(key) != version:
            raise _Bad(f"invalid part name {name!r}")
        for what, value in (("size", size), ("rows", files)):
            if not isinstance(value, int) or not 0 <= value <= INT64_MAX:
                raise _Bad(f"part {name} has a missing or negative {what}")
        part = PartRef(key, row["table_id"], files, size, format_version)
        out.setdefault(row["table_id"], []).append(part)
    return {table_id: tuple(parts) for table_id, parts in out.items()}


def _arrow_owned(data: bytes) -> pa.Buffer:
    """A copy of ``data`` in memory Arrow allocated.

    ``pq.read_table`` may drop its last reference to its source on one of
    Arrow's threads after it returns. Releasing a buffer that wraps Python
    bytes takes the GIL there; if the interpreter is finalizing by then,
    CPython ends that thread with ``pthread_exit``, whose unwinding through
    Arrow's C++ frames aborts the process ("terminate called without an
    active exception"). An Arrow-owned buffer is released without the GIL.
    """
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


# --- writing --------------------------------------------------------------------------------


def checkpoint_parts(
    store: ObjectStore,
    version: int,
    actions: Iterable[Action],
    tables: Mapping[str, Iterable[pa.Table]] | None = None,
) -> tuple[list[Action], list[PartRef]]:
    """Write the parts of a checkpoint of ``version``; returns the manifest's actions and parts.

    The files come from ``tables`` (table id -> its file columns, in pieces
    of any size: they are cut into parts of at most :data:`PART_FILES`, so
    memory stays bounded by a part when the pieces are) and from any
    :class:`AddFile` in ``actions``. Parts are created with fresh names (a
    writer id of their own), so a failed or losing writer only leaves
    objects nothing names; on an error the parts written so far are deleted.
    """
    actions = list(actions)
    kept: list[Action] = [a for a in actions if not isinstance(a, AddFile)]
    fmt = next((a.format_version for a in kept if isinstance(a, Protocol)), FORMAT_VERSION)
    layouts = {a.id: FileLayout.of(a) for a in kept if isinstance(a, TableMeta)}
    sources: dict[str, list[Iterable[pa.Table]]] = {}
    for table_id, pieces in (tables or {}).items():
        sources.setdefault(table_id, []).append(pieces)
    loose: dict[str, list[AddFile]] = {}
    for a in actions:
        if isinstance(a, AddFile):
            loose.setdefault(a.table_id, []).append(a)
    for table_id, adds in loose.items():
        if table_id not in layouts:
            raise ValueError(f"files of table id {table_id}, which the checkpoint does not hold")
        sources.setdefault(table_id, []).append([adds_to_columns(layouts[table_id], adds)])
    writer = uuid.uuid4().hex
    parts: list[PartRef] = []
    try:
        for table_id, groups in sources.items():
            if table_id not in layouts:
                raise ValueError(
                    f"files of table id {table_id}, which the checkpoint does not hold"
                )
            for piece in _cut((t for g in groups for t in g), PART_FILES):
                key = checkpoint_part_key(version, writer, len(parts))
                data = encode_part(table_id, piece)
                try:
                    store.put_if_absent(key, data)
                except AlreadyExists:
                    pass  # a fresh name: only our own put, retried by the store, made it
                parts.append(PartRef(key, table_id, piece.num_rows, data.size, fmt))
    except BaseException:
        delete_parts(store, parts)
        raise
    return kept, parts


def delete_parts(store: ObjectStore, parts: Iterable[PartRef]) -> None:
    """Best effort: parts no manifest names are garbage (expiry removes leftovers)."""
    for part in parts:
        try:
            store.delete(part.key)
        except StorageError:
            pass


def _cut(pieces: Iterable[pa.Table], size: int) -> Iterator[pa.Table]:
    """The rows of ``pieces`` in tables of exactly ``size`` rows (the last one: the rest)."""
    held: list[pa.Table] = []
    count = 0
    for piece in pieces:
        while piece.num_rows:
            take = min(size - count, piece.num_rows)
            held.append(piece.slice(0, take))
            piece = piece.slice(take)
            count += take
            if count == size:
                yield pa.concat_tables(held).combine_chunks()
                held, count = [], 0
    if count:
        yield pa.concat_tables(held).combine_chunks()


def has_duplicates(values: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a value occurs twice (sorting is faster than hashing long strings here)."""
    if len(values) < 2:
        return False
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    ordered = values.take(pc.sort_indices(values))
    return bool(pc.any(pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))).as_py())


def has_external_paths(paths: pa.ChunkedArray | pa.Array) -> bool:
    """Whether any path is an absolute URI (§11.6)."""
    if len(paths) == 0:
        return False
    return bool(pc.any(pc.match_substring(paths, "://")).as_py())


__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_SCHEMA",
    "PART_FILES",
    "CheckpointData",
    "PartFetcher",
    "PartMissing",
    "PartRef",
    "check_paths",
    "checkpoint_parts",
    "decode_checkpoint",
    "delete_parts",
    "encode_checkpoint",
    "encode_manifest",
    "encode_part",
    "decode_part",
    "fetch_part",
    "read_part",
]
