"""Helpers for the SQL tests: comparing rows, and a store that counts what is read."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from mere.storage import MemoryStore, ObjectStore
from mere.storage.base import ObjectMeta


def _norm(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return round(value, 6)
    return value


def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """The rows as a multiset (NaN comparable, floats to 6 decimals)."""
    return Counter(tuple(_norm(v) for v in r.values()) for r in table.to_pylist())


def ordered_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(_norm(v) for v in r.values()) for r in table.to_pylist()]


class _CountingFile:
    """A file-like reader over a buffer that counts the bytes read."""

    def __init__(self, data: bytes, store: CountingStore) -> None:
        self._data = data
        self._pos = 0
        self._store = store
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n is None or n < 0 else min(len(self._data), self._pos + n)
        chunk = self._data[self._pos : end]
        self._pos = end
        self._store.add_bytes(len(chunk))
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._data)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class CountingStore(ObjectStore):
    """A memory store that records which data files are opened and how many bytes are read."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.uri = self.inner.uri
        self.opened: list[str] = []
        self.bytes_read = 0
        self._lock = threading.Lock()

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n

    def reset(self) -> None:
        with self._lock:
            self.opened.clear()
            self.bytes_read = 0

    def put_if_absent(self, key: str, data: Any) -> None:
        self.inner.put_if_absent(key, data)

    def put(self, key: str, data: Any) -> None:
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def open_input(self, key: str) -> pa.NativeFile:
        with self._lock:
            self.opened.append(key)
        return pa.PythonFile(_CountingFile(self.inner.get(key), self), mode="r")
