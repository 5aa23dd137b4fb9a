"""A table's live files as a ``pyarrow.dataset``: what engines (DuckDB, polars) scan.

How the files are read depends on the store, and never calls back into
Python from pyarrow's I/O threads (an engine scanning the dataset may hold
the GIL while it waits for them):

Each file is read from the store that holds it (an export's target may name
its source's files by absolute URI, docs/format.md §11.6):

* a :class:`~mere.storage.LocalStore`: pyarrow's own local file system reads
  the files in place, only the column chunks a scan needs (each path is
  checked to resolve inside the store's root, as the store itself does);
* any other store (memory, cloud): each file is fetched whole through
  :meth:`ObjectStore.get` when the dataset is built, and pyarrow decodes only
  the columns a scan needs from memory.

Each file is a Parquet fragment whose *partition expression* tells pyarrow
what the log knows about it:

* the file's partition values, as ``column == value`` (``is_null`` for NULL):
  pyarrow fills the partition columns from them and skips files whose values
  a filter rules out;
* its per-column min/max statistics, as ``min <= column <= max`` (with
  ``OR column IS NULL`` when the column holds nulls): pyarrow skips files
  whose range a filter rules out. Floating-point columns get none (their
  statistics leave NaN out), nor do types without statistics.

Data files store columns under their *physical* names (a renamed column
keeps its old name in files). :func:`physical_dataset` exposes those names;
the SQL layer renames them in a view. :func:`table_dataset` gives the table's
own column names, lazily when no column is renamed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.types as pat

from mere.data.external import data_file_location, data_file_name
from mere.data.reader import read_parts
from mere.data.values import from_text
from mere.errors import DataFileMissing, InvalidKey, ObjectNotFound
from mere.log.actions import AddFile, TableMeta
from mere.schema import physical_name
from mere.storage.base import ObjectStore, check_key
from mere.storage.local import LocalStore

_FORMAT = ds.ParquetFileFormat()
#: Files fetched at once from a network store.
FETCH_THREADS = 8


def physical_schema(meta: TableMeta) -> pa.Schema:
    """The table's columns in table order, data columns under their physical names."""
    fields = []
    for f in meta.schema:
        name = f.name if f.name in meta.partition_columns else physical_name(f)
        fields.append(pa.field(name, f.type, f.nullable))
    return pa.schema(fields)


def physical_dataset(store: ObjectStore, meta: TableMeta, files: Sequence[AddFile]) -> ds.Dataset:
    """The files as one dataset in :func:`physical_schema`, with what the log knows of each.

    Each file is read where :func:`~mere.data.external.data_file_location`
    says it lives: in ``store``, or (an absolute path of an export's target)
    in its source's store. Inlined files are in memory already: their rows
    join as one in-memory dataset (:func:`inlined_table`), not as a Parquet
    fragment each (which cost about 0.5 ms a file on every query).
    """
    inlined = [add for add in files if add.inline is not None]
    if not inlined:
        return _stored_dataset(store, meta, files)
    memory = ds.dataset(inlined_table(store, meta, inlined))
    if len(inlined) == len(files):
        return memory
    stored = [add for add in files if add.inline is None]
    return ds.dataset([_stored_dataset(store, meta, stored), memory])


def inlined_table(store: ObjectStore, meta: TableMeta, files: Sequence[AddFile]) -> pa.Table:
    """The rows of the inlined ``files``, in :func:`physical_schema`.

    Decoded once per process and assembled a run of files at a time
    (:func:`mere.data.reader.read_parts`).
    """
    parts = read_parts(store, meta, files, meta.schema.names)
    rows = pa.concat_tables(parts) if parts else meta.schema.empty_table()
    return rows.rename_columns(physical_schema(meta).names)


def _stored_dataset(
    store: ObjectStore, meta: TableMeta, files: Sequence[AddFile]
) -> ds.FileSystemDataset:
    local = pafs.LocalFileSystem()
    fragments: list[ds.ParquetFileFragment | None] = [None] * len(files)
    remote: dict[int, tuple[ObjectStore, list[tuple[int, str]]]] = {}
    for i, add in enumerate(files):
        holder, key = data_file_location(store, meta, add)
        if isinstance(holder, LocalStore):
            fragments[i] = _FORMAT.make_fragment(
                local_path(holder, key),
                local,
                partition_expression=file_guarantee(meta, add),
                file_size=add.size,
            )
        else:
            remote.setdefault(id(holder), (holder, []))[1].append((i, key))
    for holder, jobs in remote.values():
        names = [data_file_name(meta, files[i]) for i, _ in jobs]
        fetched = _fetch(holder, [key for _, key in jobs], names)
        for (i, _), data in zip(jobs, fetched, strict=True):
            fragments[i] = _FORMAT.make_fragment(
                pa.BufferReader(data), partition_expression=file_guarantee(meta, files[i])
            )
    made = [f for f in fragments if f is not None]
    return ds.FileSystemDataset(made, physical_schema(meta), _FORMAT, local)


def local_path(store: LocalStore, key: str) -> str:
    """The file path of ``key`` in a local store, refusing one that resolves outside its root.

    Raises:
        InvalidKey: the key is malformed or resolves (through a symbolic link) outside the root.
    """
    path = os.path.join(store.root, *check_key(key).split("/"))
    root = os.path.join(os.path.realpath(store.root), "")
    if not os.path.realpath(path).startswith(root):
        raise InvalidKey(f"invalid object key {key!r}: resolves outside the store root")
    return path


def _fetch(store: ObjectStore, keys: Sequence[str], names: Sequence[str]) -> list[pa.Buffer]:
    """The objects at ``keys`` (``names``: how an error names each one)."""

    def one(job: tuple[str, str]) -> pa.Buffer:
        key, name = job
        try:
            return pa.py_buffer(store.get(key))
        except ObjectNotFound:
            raise DataFileMissing(f"data file {name} does not exist (deleted by vacuum?)") from None

    jobs = list(zip(keys, names, strict=True))
    if not store.concurrent_reads or len(jobs) <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(FETCH_THREADS, len(jobs))) as pool:
        return list(pool.map(one, jobs))


def has_renamed_columns(meta: TableMeta) -> bool:
    """Whether some data column is stored under another name than its own."""
    return any(physical_name(f) != f.name for f in meta.schema)


def table_dataset(store: ObjectStore, meta: TableMeta, files: Sequence[AddFile]) -> ds.Dataset:
    """The files as a reusable dataset with the table's schema and column names.

    It is lazy (files are read, and skipped, at each scan) unless a column
    was renamed: pyarrow cannot read a column under another name, so such a
    table is read once into an in-memory dataset.
    """
    if not has_renamed_columns(meta):
        return physical_dataset(store, meta, files).replace_schema(meta.schema)
    physical = physical_dataset(store, meta, files).to_table()
    return ds.dataset(physical.rename_columns(meta.schema.names).cast(meta.schema))


def file_guarantee(meta: TableMeta, add: AddFile) -> pc.Expression:
    """What holds for every row of the file: its partition values and statistics ranges."""
    terms: list[pc.Expression] = []
    for col in meta.partition_columns:
        value = from_text(add.partition_values.get(col), meta.schema.field(col).type)
        terms.append(pc.field(col).is_null() if not value.is_valid else pc.field(col) == value)
    stats = add.stats if isinstance(add.stats, dict) else {}
    mins, maxs, nulls = (_mapping(stats.get(k)) for k in ("minValues", "maxValues", "nullCount"))
    for f in meta.schema:
        if f.name in meta.partition_columns or not _ranges_apply(f.type):
            continue
        stored = physical_name(f)
        lo, hi = _stat(mins.get(stored), f.type), _stat(maxs.get(stored), f.type)
        null_count = nulls.get(stored)
        if lo is None or hi is None or not isinstance(null_count, int):
            continue
        column = pc.field(stored)
        if null_count == 0:
            terms += [column >= lo, column <= hi]
        else:
            terms += [(column >= lo) | column.is_null(), (column <= hi) | column.is_null()]
    if not terms:
        return pc.scalar(True)
    guarantee = terms[0]
    for term in terms[1:]:
        guarantee = guarantee & term
    return guarantee


def _ranges_apply(t: pa.DataType) -> bool:
    # Floats are left out: min/max skip NaN, which engines order above every number.
    return bool(
        pat.is_integer(t)
        or pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_date(t)
        or pat.is_timestamp(t)
        or pat.is_decimal(t)
    )


def _stat(value: object, t: pa.DataType) -> pa.Scalar | None:
    """A JSON statistic as a scalar of the column type, or None when it does not decode."""
    try:
        if pat.is_integer(t):
            ok = isinstance(value, int) and not isinstance(value, bool)
            return pa.scalar(value, type=t) if ok else None
        if pat.is_string(t) or pat.is_large_string(t):
            return pa.scalar(value, type=t) if isinstance(value, str) else None
        if isinstance(value, str):  # dates, timestamps, decimals: canonical text
            scalar = from_text(value, t)
            return scalar if scalar.is_valid else None
    except (pa.ArrowException, ValueError, OverflowError, TypeError):
        return None
    return None


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


__all__ = [
    "file_guarantee",
    "has_renamed_columns",
    "local_path",
    "inlined_table",
    "physical_dataset",
    "physical_schema",
    "table_dataset",
]
