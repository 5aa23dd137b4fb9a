"""Where a data file lives: under the database's own root, or in another store.

A data path is relative to ``tables/<table id>/`` in the database's own store,
except in the target of a minimal or partial export, where a path may be an
absolute URI naming a file of the source database (docs/format.md §11.6). Such
a file is read through :func:`mere.storage.open_store` of its store root,
opened once per root and kept for the process (configured, like any store
opened from a URI, by the environment). Nothing here writes or deletes: a
database never changes objects outside its own root.
"""

from __future__ import annotations

import threading

import pyarrow as pa

from mere.data.writer import inlined_as_parquet
from mere.errors import DataFileMissing, ObjectNotFound
from mere.log.actions import AddFile, TableMeta, external_location, is_external_path
from mere.storage import ObjectStore, open_store

_STORES: dict[str, ObjectStore] = {}
_LOCK = threading.Lock()


def external_store(root: str) -> ObjectStore:
    """The store at ``root`` (a store URI), opened once per process and cached.

    A local root that does not exist is not created: it reads as missing files.
    """
    with _LOCK:
        store = _STORES.get(root)
    if store is not None:
        return store
    opened = open_store(root, create=False)
    with _LOCK:
        store = _STORES.setdefault(root, opened)
    if store is not opened:
        opened.close()
    return store


def data_file_location(
    store: ObjectStore, table: TableMeta, add: AddFile
) -> tuple[ObjectStore, str]:
    """(the store holding the data file, its key there)."""
    if not is_external_path(add.path):
        return store, table.prefix + add.path
    root, key = external_location(table.id, add.path)
    if root == store.uri:
        return store, key
    try:
        return external_store(root), key
    except ObjectNotFound:
        raise _missing(table, add) from None


def data_file_name(table: TableMeta, add: AddFile) -> str:
    """How errors name a data file: its key, or its absolute URI."""
    return add.path if is_external_path(add.path) else table.prefix + add.path


def open_data_file(store: ObjectStore, table: TableMeta, add: AddFile) -> pa.NativeFile:
    """A seekable input file of a data file, wherever it lives (inlined: in the log).

    Raises:
        DataFileMissing: the file does not exist (vacuum deleted it).
    """
    if add.inline is not None:
        return pa.BufferReader(inlined_as_parquet(add.inline))
    holder, key = data_file_location(store, table, add)
    try:
        return holder.open_input(key)
    except ObjectNotFound:
        raise _missing(table, add) from None


def _missing(table: TableMeta, add: AddFile) -> DataFileMissing:
    where = "in another database (an export's source)" if is_external_path(add.path) else ""
    return DataFileMissing.of(data_file_name(table, add), table.name, reason=where)


__all__ = ["data_file_location", "data_file_name", "external_store", "open_data_file"]
