"""Compaction: bin-packing small files, optionally sorting or z-ordering rows.

Appends make small files; scans pay per file. Compaction rewrites the files of
each partition into files of about the target size, in ONE commit whose
removes and adds carry ``dataChange=false`` and which runs at isolation
``snapshot``. By the conflict rules (docs/format.md §9) it then conflicts only
with a concurrent commit that removes one of the same files (a delete,
update, merge or another compaction) or alters or drops the table: appends
keep flowing while it runs and never fail because of it, and readers of the
compacted files are not invalidated (unlike delta-rs #3820, where compaction
fails against anything but appends).

Without ordering, each partition's files smaller than the target are packed
greedily into bins of at most the target size; a bin of one file is left
alone. With ``sort_by`` or ``zorder_by`` every file of each chosen partition
is rewritten, its rows sorted (this is not incremental, as Delta Lake's
ZORDER BY is not). The rows of one bin (or, when ordering, of one partition)
are held in memory while they are rewritten.

Z-order: each column's values are ranked (dense, nulls last), the ranks are
scaled to the same number of bits, and the bits are interleaved into one
64-bit key that rows are sorted by, so rows close in every column end up in
the same files and statistics skip files on any of the columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.data.reader import read_parts
from mere.data.writer import DataFileWriter
from mere.errors import InvalidArgument, InvalidExpression, SchemaMismatch, TableNotFound
from mere.log.actions import AddFile, TableMeta
from mere.maintain.progress import progress
from mere.properties import TARGET_FILE_SIZE_PROPERTY, check_table_properties

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

#: Bits of the z-order key (shared by its columns).
ZORDER_BITS = 63


@dataclass
class CompactResult:
    """What a compaction committed."""

    table: str
    #: The version compaction read, and the one it committed (equal if nothing was done).
    read_version: int
    version: int
    files_removed: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    bytes_added: int = 0
    rows: int = 0
    partitions: int = 0
    partitions_compacted: list[dict[str, str | None]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return asdict(self)


def compact(
    db: DatabaseContext,
    name: str,
    *,
    target_file_size: int | None = None,
    where: str | None = None,
    sort_by: Sequence[str] | None = None,
    zorder_by: Sequence[str] | None = None,
) -> CompactResult:
    """Rewrite table ``name``'s small files into files of ``target_file_size`` bytes.

    Args:
        target_file_size: the size to pack up to (default: the table property
            ``targetFileSize``, else the database's target file size).
        where: a SQL condition on partition columns: only matching partitions.
        sort_by: sort each rewritten partition's rows by these columns.
        zorder_by: z-order each rewritten partition's rows by these columns.

    Raises:
        TableNotFound: no such table.
        InvalidArgument: both ``sort_by`` and ``zorder_by``, an empty or a string
            column list, or a bad ``target_file_size``.
        InvalidExpression: ``where`` names a column that is not a partition column.
        SchemaMismatch: an ordering column does not exist or cannot be ordered.
        ConflictError: a concurrent commit removed one of the same files, or
            altered or dropped the table (nothing was committed).
    """
    if sort_by is not None and zorder_by is not None:
        raise InvalidArgument("pass sort_by or zorder_by, not both")
    order = _check_columns(sort_by, "sort_by") or _check_columns(zorder_by, "zorder_by")
    tx = db.begin("snapshot")
    stage = tx.stage
    meta = stage.lookup(name)
    if meta is None:
        tx.abort()
        raise TableNotFound(name, tx.read_version)
    written: list[AddFile] = []  # files written and not yet handed to the transaction
    try:
        _check_order_columns(meta, order)
        target = _target_size(db, meta, target_file_size)
        plan, files = stage.plan_read(meta.id, [], where)
        if plan.predicate is not None:
            outside = sqlexpr.referenced_columns(plan.predicate) - set(meta.partition_columns)
            if outside:
                raise InvalidExpression(
                    f"compact's where may only name partition columns of {meta.name!r} "
                    f"({list(meta.partition_columns)}), not {sorted(outside)}"
                )
        partitions = by_partition(meta, files)
        result = CompactResult(meta.name, tx.read_version, tx.read_version)
        result.partitions = len(partitions)
        bins = [
            (values, group)
            for values, part in partitions
            for group in ([part] if order else _bins(sorted(part, key=lambda f: f.size), target))
        ]
        with progress(f"compacting {meta.name}", sum(len(g) for _, g in bins)) as advance:
            for values, group in bins:
                new = rewrite(
                    db,
                    meta,
                    group,
                    target,
                    sort_by=sort_by,
                    zorder_by=zorder_by,
                    written=written,
                )
                stage.replace_files(meta.id, group, new)
                written.clear()
                result.files_removed += len(group)
                result.files_added += len(new)
                result.bytes_removed += sum(f.size for f in group)
                result.bytes_added += sum(f.size for f in new)
                result.rows += sum(f.rows for f in group)
                if values not in result.partitions_compacted:
                    result.partitions_compacted.append(values)
                advance(len(group))
        if not bins:
            tx.abort()
            return result
        parameters: dict[str, Any] = {"targetFileSize": target}
        if where is not None:
            parameters["where"] = where
        if sort_by is not None:
            parameters["sortBy"] = list(sort_by)
        if zorder_by is not None:
            parameters["zorderBy"] = list(zorder_by)
        stage.record_operation("COMPACT", meta.id, **parameters)
        result.version = tx.commit()
        return result
    except Exception:
        # (A BaseException, e.g. a simulated crash, leaves the files to vacuum.)
        stage.add_files(meta.id, written, owned=True)  # so that the abort deletes them
        tx.abort()
        raise


def _check_columns(columns: Sequence[str] | None, what: str) -> list[str]:
    if columns is None:
        return []
    if isinstance(columns, str):
        raise InvalidArgument(f"{what} must be a list of column names, not a string")
    names = list(columns)
    if not names:
        raise InvalidArgument(f"{what} needs at least one column")
    return names


def _check_order_columns(meta: TableMeta, columns: list[str]) -> None:
    for name in columns:
        if name not in meta.schema.names:
            raise SchemaMismatch(
                f"cannot order by unknown column {name!r}; {meta.name!r} has {meta.schema.names}"
            )
        kind = meta.schema.field(name).type
        if pa.types.is_nested(kind) or pa.types.is_null(kind):
            raise SchemaMismatch(f"cannot order by column {name!r} of type {kind}")


def _target_size(db: DatabaseContext, meta: TableMeta, explicit: int | None) -> int:
    if explicit is not None:
        if not isinstance(explicit, int) or isinstance(explicit, bool) or explicit < 1:
            raise InvalidArgument(f"target_file_size must be a positive int, not {explicit!r}")
        return explicit
    text = meta.properties.get(TARGET_FILE_SIZE_PROPERTY)
    if text is not None:
        check_table_properties(meta.properties)  # as where it is set (an older mere took any)
        return int(text)
    return int(db.target_file_size)


def by_partition(
    meta: TableMeta, files: list[AddFile]
) -> list[tuple[dict[str, str | None], list[AddFile]]]:
    """Files grouped by partition, partitions in a stable order."""
    groups: dict[tuple[str | None, ...], list[AddFile]] = {}
    for f in files:
        key = tuple(f.partition_values.get(c) for c in meta.partition_columns)
        groups.setdefault(key, []).append(f)
    ordered = sorted(groups.items(), key=lambda kv: tuple((v is None, v or "") for v in kv[0]))
    return [(dict(zip(meta.partition_columns, k, strict=True)), v) for k, v in ordered]


def _bins(files: list[AddFile], target: int) -> list[list[AddFile]]:
    """Greedy bin-packing of the files smaller than ``target``; bins of one file are dropped."""
    bins: list[list[AddFile]] = []
    current: list[AddFile] = []
    size = 0
    for f in files:
        if f.size >= target:
            continue
        if current and size + f.size > target:
            bins.append(current)
            current, size = [], 0
        current.append(f)
        size += f.size
    if current:
        bins.append(current)
    return [b for b in bins if len(b) > 1]


def rewrite(
    db: DatabaseContext,
    meta: TableMeta,
    group: list[AddFile],
    target: int,
    *,
    sort_by: Sequence[str] | None,
    zorder_by: Sequence[str] | None,
    written: list[AddFile],
) -> list[AddFile]:
    """Read ``group``'s rows, order them if asked, write them as new files of ``target`` size."""
    columns = meta.schema.names
    rows = pa.concat_tables(read_parts(db.store, meta, group, columns))
    if sort_by:
        keys = pa.Table.from_arrays(
            [_orderable(rows.column(c)) for c in sort_by],
            names=[str(i) for i in range(len(sort_by))],
        )
        rows = rows.take(
            pc.sort_indices(keys, [(str(i), "ascending") for i in range(len(sort_by))])
        )
    elif zorder_by:
        rows = rows.take(zorder_indices(rows, list(zorder_by)))
    writer = DataFileWriter(db.store, meta, target_file_size=target)
    try:
        writer.write(rows)
        return writer.finish()
    finally:
        written.extend(writer.written)


def _orderable(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """``values`` in a type Arrow's sort kernels take, in the same order (float16 has no
    kernel: as float32, exactly, NaN above every number as for other floats)."""
    return values.cast(pa.float32()) if pa.types.is_float16(values.type) else values


def zorder_indices(table: pa.Table, columns: list[str]) -> pa.Array:
    """Row indices of ``table`` in z-order over ``columns``.

    Each column is ranked (dense ranks, nulls last), the ranks are scaled to
    ``bits = 63 // len(columns)`` bits, and bit ``b`` of column ``i`` becomes
    bit ``b * len(columns) + (len(columns) - 1 - i)`` of the key, so the first
    column is the most significant at every level.
    """
    n = len(columns)
    bits = max(1, min(32, ZORDER_BITS // n))
    top = (1 << bits) - 1
    scaled: list[pa.Array] = []
    for name in columns:
        ranks = pc.rank(_orderable(table.column(name)), sort_keys="ascending", tiebreaker="dense")
        highest = pc.max(ranks).as_py() or 1
        zero_based = pc.subtract(ranks, pa.scalar(1, pa.uint64()))
        scaled.append(
            pc.divide(
                pc.multiply(zero_based, pa.scalar(top, pa.uint64())),
                pa.scalar(max(1, highest - 1), pa.uint64()),
            )
        )
    key = pa.array([0] * table.num_rows, pa.uint64())
    one = pa.scalar(1, pa.uint64())
    for b in range(bits):
        for i, values in enumerate(scaled):
            bit = pc.bit_wise_and(pc.shift_right(values, pa.scalar(b, pa.uint64())), one)
            position = pa.scalar(b * n + (n - 1 - i), pa.uint64())
            key = pc.bit_wise_or(key, pc.shift_left(bit, position))
    return pc.sort_indices(key)
