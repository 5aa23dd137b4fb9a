"""A table's data files as columns: the ``add`` actions of one table as one Arrow table.

A million live files are a million ``add`` actions; as Python objects they cost
gigabytes and seconds. As columns they cost what their values do, load without
a Python object per file, and filter in one vectorized pass. This module is the
columnar form of ``add`` (docs/format.md §2.5, §4.2, §7): the layout of one
table's file columns, and the conversions between :class:`AddFile` objects, the
JSON text of format-1 checkpoints and the columns.

The columns of a table (its :class:`FileLayout`):

* ``path`` (string, never null), ``size``, ``rows``, ``modification_time``
  (int64, never null), ``data_change`` (bool; null reads as true), ``inline``
  (binary: the bytes of an inlined file, null for a file stored as an object);
* ``partition:<column>`` (string): the canonical text of each partition column
  (§6), null for NULL;
* ``num_records`` (int64): ``stats.numRecords``;
* ``min:<physical name>`` / ``max:<physical name>`` in the column's own type
  (float64 for every floating-point type), for every non-partition column of
  a type with statistics (§7); ``nulls:<physical name>`` (int64) for every
  non-partition column; ``nans:<physical name>`` (int64) for floating-point
  ones: the statistics, null where unknown;
* ``stats_extra`` (string): the JSON text of whatever else the statistics
  held (keys and columns the layout has no column for), null when nothing.

A file with no statistics at all (``stats`` null) has every statistics column
null. Statistics are hints: a value that does not fit its column's type is
unknown (null), never an error. Floating-point bounds that are not finite are
unknown as well (JSON cannot spell them, so no writer records them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.types as pat

from mere.log.actions import AddFile, TableMeta
from mere.schema import has_statistics, physical_name

PATH, SIZE, ROWS, MODIFIED, DATA_CHANGE, INLINE, NUM_RECORDS, STATS_EXTRA = (
    "path",
    "size",
    "rows",
    "modification_time",
    "data_change",
    "inline",
    "num_records",
    "stats_extra",
)
#: The statistics sections (§7) with a column per table column.
SECTIONS = ("minValues", "maxValues", "nullCount", "nanCount")
CORE_FIELDS = (
    pa.field(PATH, pa.string(), nullable=False),
    pa.field(SIZE, pa.int64(), nullable=False),
    pa.field(ROWS, pa.int64(), nullable=False),
    pa.field(MODIFIED, pa.int64(), nullable=False),
    pa.field(DATA_CHANGE, pa.bool_()),
    pa.field(INLINE, pa.binary()),
)
#: The columns every file table has, whatever the table's schema.
CORE = tuple(f.name for f in CORE_FIELDS)
#: The core columns a stored file table may lack (null: true / not inlined).
OPTIONAL_CORE = frozenset((DATA_CHANGE, INLINE))


def partition_column(name: str) -> str:
    return f"partition:{name}"


def min_column(physical: str) -> str:
    return f"min:{physical}"


def max_column(physical: str) -> str:
    return f"max:{physical}"


def nulls_column(physical: str) -> str:
    return f"nulls:{physical}"


def nans_column(physical: str) -> str:
    return f"nans:{physical}"


def _as_text(type_: pa.DataType) -> bool:
    """Statistics of these types are canonical text in JSON (§7)."""
    return bool(pat.is_date(type_) or pat.is_timestamp(type_) or pat.is_decimal(type_))


@dataclass(frozen=True)
class StatColumn:
    """One table column's statistics: its name in data files and its min/max type."""

    physical: str
    type: pa.DataType | None  # None: the type keeps no min/max (null counts only)
    floating: bool = False  # a NaN count too


@dataclass(frozen=True)
class FileLayout:
    """The columns holding one table's files, derived from its metadata."""

    partition_columns: tuple[str, ...]
    stats: tuple[StatColumn, ...]

    @staticmethod
    def of(meta: TableMeta) -> FileLayout:
        parts = set(meta.partition_columns)
        stats = tuple(
            StatColumn(physical_name(f), _stat_type(f.type), bool(pat.is_floating(f.type)))
            for f in meta.schema
            if f.name not in parts
        )
        return FileLayout(tuple(meta.partition_columns), stats)

    @cached_property
    def schema(self) -> pa.Schema:
        fields = list(CORE_FIELDS)
        fields += [pa.field(partition_column(p), pa.string()) for p in self.partition_columns]
        fields.append(pa.field(NUM_RECORDS, pa.int64()))
        for s in self.stats:
            if s.type is not None:
                fields.append(pa.field(min_column(s.physical), s.type))
                fields.append(pa.field(max_column(s.physical), s.type))
            fields.append(pa.field(nulls_column(s.physical), pa.int64()))
            if s.floating:
                fields.append(pa.field(nans_column(s.physical), pa.int64()))
        fields.append(pa.field(STATS_EXTRA, pa.string()))
        return pa.schema(fields)

    @cached_property
    def known(self) -> dict[str, frozenset[str]]:
        """The physical names each statistics section has a column for."""
        ranged = frozenset(s.physical for s in self.stats if s.type is not None)
        return {
            "minValues": ranged,
            "maxValues": ranged,
            "nullCount": frozenset(s.physical for s in self.stats),
            "nanCount": frozenset(s.physical for s in self.stats if s.floating),
        }

    @cached_property
    def stat_columns(self) -> tuple[str, ...]:
        """Every statistics column (num_records included)."""
        return tuple(
            n
            for n in self.schema.names
            if n in (NUM_RECORDS, STATS_EXTRA) or n.startswith(("min:", "max:", "nulls:", "nans:"))
        )

    def columns_for(self, physical: str) -> tuple[str, ...]:
        """The statistics columns of one table column (by its physical name)."""
        names = (
            min_column(physical),
            max_column(physical),
            nulls_column(physical),
            nans_column(physical),
        )
        return tuple(n for n in names if n in self.schema.names)

    def empty(self) -> pa.Table:
        """A table of no files in this layout (built once: tables are immutable)."""
        return self._empty

    @cached_property
    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    def conform(self, table: pa.Table, names: Sequence[str] | None = None) -> pa.Table:
        """``table`` with exactly the layout's columns (or ``names`` of them), in order.

        Missing columns are null; a statistics column of another type (a
        checkpoint written before the column was widened) is cast, or unknown
        where the cast fails. Columns the layout does not know are dropped.
        """
        wanted = self.schema.names if names is None else list(names)
        have = set(table.column_names)
        arrays = []
        fields = []
        for name in wanted:
            target = self.schema.field(name)
            fields.append(target)
            if name not in have:
                arrays.append(pa.nulls(table.num_rows, target.type))
                continue
            column = table.column(name)
            if column.type != target.type:
                column = _cast_or_null(column, target.type)
            arrays.append(column)
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _stat_type(type_: pa.DataType) -> pa.DataType | None:
    """The type of a column's min/max statistics: its own (float64 for any float); None: none."""
    if not has_statistics(type_):
        return None
    return pa.float64() if pat.is_floating(type_) else type_


def _cast_or_null(column: pa.ChunkedArray | pa.Array, type_: pa.DataType) -> pa.ChunkedArray:
    try:
        return pc.cast(column, type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return pa.chunked_array([pa.nulls(len(column), type_)])


# --- AddFile objects -> columns ----------------------------------------------------------


def adds_to_columns(layout: FileLayout, adds: Sequence[AddFile]) -> pa.Table:
    """The files of ``adds`` (all of one table) as columns of ``layout``."""
    n = len(adds)
    columns: dict[str, pa.Array] = {
        PATH: pa.array([a.path for a in adds], pa.string()),
        SIZE: pa.array([a.size for a in adds], pa.int64()),
        ROWS: pa.array([a.rows for a in adds], pa.int64()),
        MODIFIED: pa.array([a.modification_time for a in adds], pa.int64()),
        DATA_CHANGE: pa.array([a.data_change for a in adds], pa.bool_()),
        INLINE: pa.array([a.inline for a in adds], pa.binary()),
    }
    for p in layout.partition_columns:
        values = [a.partition_values.get(p) for a in adds]
        columns[partition_column(p)] = pa.array(
            [v if isinstance(v, str) else None for v in values], pa.string()
        )
    stats = [a.stats if isinstance(a.stats, dict) else {} for a in adds]
    columns[NUM_RECORDS] = _counts([s.get("numRecords") for s in stats])
    sections = {key: [_mapping(s.get(key)) for s in stats] for key in SECTIONS}
    for s in layout.stats:
        if s.type is not None:
            for key, name in (("minValues", min_column), ("maxValues", max_column)):
                values = [m.get(s.physical) for m in sections[key]]
                columns[name(s.physical)] = stat_array(values, s.type)
        nulls = [m.get(s.physical) for m in sections["nullCount"]]
        columns[nulls_column(s.physical)] = _counts(nulls)
        if s.floating:
            nans = [m.get(s.physical) for m in sections["nanCount"]]
            columns[nans_column(s.physical)] = _counts(nans)
    columns[STATS_EXTRA] = pa.array([_extra(layout, a.stats) for a in adds], pa.string())
    assert all(len(c) == n for c in columns.values())
    return pa.Table.from_pydict(columns, schema=layout.schema)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_TOP = frozenset(("numRecords", *SECTIONS))


def _extra(layout: FileLayout, stats: object) -> str | None:
    """The JSON text of what a file's statistics hold beyond the layout's columns."""
    if type(stats) is not dict:
        return None
    known = layout.known
    if stats.keys() <= _TOP and all(
        type(stats.get(key, {})) is dict and stats.get(key, {}).keys() <= known[key]
        for key in SECTIONS
    ):
        return None  # the common case: everything has a column
    extra: dict[str, Any] = {k: v for k, v in stats.items() if k not in _TOP}
    for key in SECTIONS:
        section = stats.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            extra[key] = section
            continue
        rest = {k: v for k, v in section.items() if k not in known[key]}
        if rest:
            extra[key] = rest
    if not extra:
        return None
    return json.dumps(extra, ensure_ascii=False, default=str)


def _ints(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """Integers of ``type_``; anything else (or out of range) is null."""
    clean = [v if isinstance(v, int) and not isinstance(v, bool) else None for v in values]
    try:
        return pa.array(clean, type_)
    except (pa.ArrowInvalid, OverflowError):
        lo, hi = _int_range(type_)
        return pa.array([v if v is not None and lo <= v <= hi else None for v in clean], type_)


def _counts(values: Sequence[Any]) -> pa.Array:
    """Non-negative int64 counts; anything else is unknown (null)."""
    return _ints([v if isinstance(v, int) and v >= 0 else None for v in values], pa.int64())


def _int_range(type_: pa.DataType) -> tuple[int, int]:
    bits = type_.bit_width
    if pat.is_unsigned_integer(type_):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def stat_array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """JSON statistics values as an array of the column's type; what does not fit is null.

    The same decoding as ``mere.data.values.stat_from_json``, for many values at once.
    """
    if pat.is_integer(type_):
        return _ints(values, type_)
    if pat.is_floating(type_):
        floats = [
            float(v)
            if isinstance(v, int | float) and not isinstance(v, bool) and _finite(v)
            else None
            for v in values
        ]
        array = pa.array(floats, pa.float64())
        return array if type_ == pa.float64() else _finite_cast(array, type_)
    if pat.is_boolean(type_):
        return pa.array([v if isinstance(v, bool) else None for v in values], pa.bool_())
    if pat.is_string(type_) or pat.is_large_string(type_):
        return pa.array([v if isinstance(v, str) else None for v in values], type_)
    if _as_text(type_):
        texts = pa.array([v if isinstance(v, str) else None for v in values], pa.string())
        return text_to_values(texts, type_)
    return pa.nulls(len(values), type_)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float
        return False


def _finite_cast(array: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> Any:
    """Floats cast to a narrower float type; what overflows to infinity is unknown."""
    cast = pc.cast(array, type_, safe=False)
    return pc.if_else(pc.is_finite(cast), cast, pa.scalar(None, type_))


def text_to_values(texts: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> Any:
    """Canonical texts (§6) as values of ``type_``; a text that does not parse is null."""
    try:
        return pc.cast(texts, type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = []
    for text in texts.to_pylist():
        try:
            out.append(None if text is None else pc.cast(pa.scalar(text), type_).as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            out.append(None)
    return pa.array(out, type_)


# --- columns -> AddFile objects ----------------------------------------------------------


def columns_to_adds(layout: FileLayout, table_id: str, table: pa.Table) -> list[AddFile]:
    """One :class:`AddFile` per row of ``table`` (columns of ``layout``; missing ones are null)."""
    table = layout.conform(table)
    n = table.num_rows
    if n == 0:
        return []
    paths = table.column(PATH).to_pylist()
    sizes = table.column(SIZE).to_pylist()
    rows = table.column(ROWS).to_pylist()
    modified = table.column(MODIFIED).to_pylist()
    change = table.column(DATA_CHANGE).to_pylist()
    inline = table.column(INLINE)
    inlined = inline.to_pylist() if inline.null_count < n else [None] * n
    partitions = [
        (p, table.column(partition_column(p)).to_pylist()) for p in layout.partition_columns
    ]
    records = table.column(NUM_RECORDS).to_pylist()
    mins: list[tuple[str, list[Any]]] = []
    maxs: list[tuple[str, list[Any]]] = []
    nulls: list[tuple[str, list[Any]]] = []
    nans: list[tuple[str, list[Any]]] = []
    present = pc.is_valid(table.column(NUM_RECORDS))
    for s in layout.stats:
        if s.type is not None:
            for target, name in ((mins, min_column), (maxs, max_column)):
                column = table.column(name(s.physical))
                present = pc.or_(present, pc.is_valid(column))
                target.append((s.physical, _json_values(column, s.type)))
        column = table.column(nulls_column(s.physical))
        present = pc.or_(present, pc.is_valid(column))
        nulls.append((s.physical, column.to_pylist()))
        if s.floating:
            column = table.column(nans_column(s.physical))
            present = pc.or_(present, pc.is_valid(column))
            nans.append((s.physical, column.to_pylist()))
    extras = table.column(STATS_EXTRA)
    present = pc.or_(present, pc.is_valid(extras))
    extra_texts = extras.to_pylist()
    has_stats = present.to_pylist()
    out = []
    for i in range(n):
        stats: dict[str, Any] | None = None
        if has_stats[i]:
            stats = {}
            if records[i] is not None:
                stats["numRecords"] = records[i]
            stats["minValues"] = {p: v[i] for p, v in mins if v[i] is not None}
            stats["maxValues"] = {p: v[i] for p, v in maxs if v[i] is not None}
            stats["nullCount"] = {p: v[i] for p, v in nulls if v[i] is not None}
            counted = {p: v[i] for p, v in nans if v[i] is not None}
            if counted:
                stats["nanCount"] = counted
            if extra_texts[i] is not None:
                _merge(stats, json.loads(extra_texts[i]))
        out.append(
            AddFile(
                table_id=table_id,
                path=paths[i],
                size=sizes[i],
                rows=rows[i],
                partition_values={p: v[i] for p, v in partitions},
                stats=stats,
                modification_time=modified[i],
                data_change=change[i] is not False,
                inline=inlined[i],
            )
        )
    return out


def _merge(stats: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key in SECTIONS and isinstance(value, dict) and isinstance(stats.get(key), dict):
            stats[key] = {**stats[key], **value}
        else:
            stats[key] = value


def _json_values(column: pa.ChunkedArray, type_: pa.DataType) -> list[Any]:
    """Statistics values as JSON values (§7): canonical text for dates, timestamps, decimals."""
    if _as_text(type_):
        return list(pc.cast(column, pa.string()).to_pylist())
    return list(column.to_pylist())


# --- format-1 checkpoints: JSON text -> columns ------------------------------------------


def json_rows_to_columns(
    layout: FileLayout,
    core: pa.Table,
    partition_values: pa.ChunkedArray,
    stats: pa.ChunkedArray,
) -> pa.Table:
    """Format-1 checkpoint rows (JSON ``partition_values`` and ``stats`` text) as columns.

    ``core`` holds path, size, rows and modification_time. The JSON is parsed
    in one vectorized pass; a table whose text the vectorized parser refuses
    (a value of another JSON type than its column's) is parsed row by row.

    Raises:
        ValueError: a ``partition_values`` entry that is not an object of
            strings or nulls, or a ``stats`` entry that is not an object.
    """
    columns = {name: core.column(name) for name in core.column_names}
    columns.setdefault(DATA_CHANGE, pa.chunked_array([pa.nulls(core.num_rows, pa.bool_())]))
    try:
        columns.update(_parse_partitions(layout, partition_values))
        columns.update(_parse_stats(layout, stats))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        columns.update(_rows_to_columns(layout, partition_values, stats))
    table = pa.table(columns)
    return layout.conform(table)


def _ndjson(texts: pa.ChunkedArray, fill: str) -> pa.BufferReader:
    """The texts one per line (nulls as ``fill``), as one buffer for the vectorized JSON reader."""
    lines = pc.binary_join_element_wise(
        pc.cast(pc.fill_null(texts, fill), pa.large_string()),
        pa.scalar("", pa.large_string()),
        pa.scalar("\n", pa.large_string()),
    )
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = pa.Array.from_buffers(
        pa.int64(), len(lines) + 1, [None, lines.buffers()[1]], offset=lines.offset
    )
    first, last = offsets[0].as_py(), offsets[len(lines)].as_py()
    return pa.BufferReader(lines.buffers()[2].slice(first, last - first))


def _read_ndjson(
    texts: pa.ChunkedArray, schema: pa.Schema, fill: str, *, exact: bool = False
) -> pa.Table:
    """Parse one JSON object per text with ``schema``.

    With ``exact``, an object holding anything the schema does not name raises
    (ArrowInvalid), so the caller can take the slow path that keeps it.
    """
    if len(texts) == 0:
        return schema.empty_table()
    if pc.any(pc.match_substring(pc.fill_null(texts, ""), "\n")).as_py():
        raise pa.ArrowInvalid("a JSON text spans lines")
    parsed = pa_json.read_json(
        _ndjson(texts, fill),
        read_options=pa_json.ReadOptions(block_size=1 << 22),
        parse_options=pa_json.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="infer" if exact else "ignore"
        ),
    )
    if parsed.num_rows != len(texts):
        raise pa.ArrowInvalid("a JSON text is not one object")
    if exact and not parsed.schema.equals(schema):
        raise pa.ArrowInvalid("the JSON holds fields the columns do not")
    return parsed


def _parse_partitions(layout: FileLayout, texts: pa.ChunkedArray) -> dict[str, Any]:
    if not layout.partition_columns:
        return {}
    schema = pa.schema([(p, pa.string()) for p in layout.partition_columns])
    parsed = _read_ndjson(texts, schema, "{}")
    return {partition_column(p): parsed.column(p) for p in layout.partition_columns}


def _parse_stats(layout: FileLayout, texts: pa.ChunkedArray) -> dict[str, Any]:
    def json_type(t: pa.DataType) -> pa.DataType:
        if _as_text(t):
            return pa.string()
        if pat.is_floating(t):
            return pa.float64()
        return t

    ranged = [s for s in layout.stats if s.type is not None]
    fields = [pa.field("numRecords", pa.int64())]
    for key in ("minValues", "maxValues"):
        inner = [pa.field(s.physical, json_type(s.type)) for s in ranged if s.type is not None]
        fields.append(pa.field(key, pa.struct(inner)))
    fields.append(
        pa.field("nullCount", pa.struct([pa.field(s.physical, pa.int64()) for s in layout.stats]))
    )
    floating = [s for s in layout.stats if s.floating]
    fields.append(
        pa.field("nanCount", pa.struct([pa.field(s.physical, pa.int64()) for s in floating]))
    )
    parsed = _read_ndjson(texts, pa.schema(fields), "{}", exact=True)
    out: dict[str, Any] = {NUM_RECORDS: _non_negative(parsed.column("numRecords"))}
    for key, name in (("minValues", min_column), ("maxValues", max_column)):
        section = parsed.column(key)
        for s in ranged:
            assert s.type is not None
            values = pc.struct_field(section, s.physical)
            if _as_text(s.type):
                values = text_to_values(values, s.type)
            elif pat.is_floating(s.type):
                values = _finite_cast(values, s.type)
            out[name(s.physical)] = values
    counts = parsed.column("nullCount")
    for s in layout.stats:
        out[nulls_column(s.physical)] = _non_negative(pc.struct_field(counts, s.physical))
    nan_counts = parsed.column("nanCount")
    for s in floating:
        out[nans_column(s.physical)] = _non_negative(pc.struct_field(nan_counts, s.physical))
    return out


def _non_negative(column: Any) -> Any:
    """Counts; a negative one is unknown (null)."""
    return pc.if_else(pc.less(column, 0), pa.scalar(None, pa.int64()), column)


def _rows_to_columns(
    layout: FileLayout, partition_values: pa.ChunkedArray, stats: pa.ChunkedArray
) -> dict[str, Any]:
    """The slow path of :func:`json_rows_to_columns`: one ``json.loads`` per row."""
    parts = []
    for text in partition_values.to_pylist():
        value = json.loads(text or "{}")
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in value.items()
        ):
            raise ValueError("partitionValues must map names to strings")
        parts.append(value)
    decoded = []
    for text in stats.to_pylist():
        value = None if text is None else json.loads(text)
        if value is not None and not isinstance(value, dict):
            raise ValueError("stats must be an object")
        decoded.append(value)
    fake = [
        AddFile("0" * 32, "x", 0, 0, p, s, 0)  # only partition values and stats are read
        for p, s in zip(parts, decoded, strict=True)
    ]
    table = adds_to_columns(layout, fake)
    skip = set(CORE)
    return {name: table.column(name) for name in table.column_names if name not in skip}


def concat(layout: FileLayout, tables: Iterable[pa.Table]) -> pa.Table:
    """Tables of one layout, one after the other (an empty table for none)."""
    parts = [layout.conform(t) if t.schema != layout.schema else t for t in tables]
    if not parts:
        return layout.empty()
    return pa.concat_tables(parts)
