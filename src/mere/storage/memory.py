"""A process-local, in-memory object store for tests and experiments.

Stores are looked up by name in a process-global registry, so every
``MemoryStore("x")`` (and ``open_store("memory://x")``) in one process shares
the same objects, as clients of one bucket would. A named store lives until
:meth:`MemoryStore.forget` drops it. ``MemoryStore()`` without a name makes a
fresh private store with a generated name; it can be reopened by that name
while any instance of it is alive, and is freed once none is.

All operations take the store's lock, so the store is linearizable: the
atomic create-only put, read-after-write and ordered listing of the contract
hold trivially across threads. Nothing is durable, and it is never shared
across processes.
"""

from __future__ import annotations

import builtins
import itertools
import secrets
import threading
import time
import weakref
from collections.abc import Iterator

import pyarrow as pa

from mere.errors import AlreadyExists, ObjectNotFound
from mere.storage.base import ObjectMeta, ObjectStore, check_key, check_prefix

__all__ = ["MemoryStore"]


class _Bucket:
    """The shared state behind every MemoryStore of one name."""

    __slots__ = ("__weakref__", "lock", "objects")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[bytes, float]] = {}


_REGISTRY_LOCK = threading.Lock()
_NAMED: dict[str, _Bucket] = {}
_ANONYMOUS: weakref.WeakValueDictionary[str, _Bucket] = weakref.WeakValueDictionary()
_ANONYMOUS_COUNTER = itertools.count(1)


def _as_bytes(data: bytes | memoryview | pa.Buffer) -> bytes:
    """Copy ``data`` into an immutable bytes object (bytes itself is shared, not copied)."""
    if type(data) is bytes:
        return data
    return bytes(memoryview(data))


class MemoryStore(ObjectStore):
    """An object store held in a dict, shared by name within the process.

    Args:
        name: the registry name; ``None`` makes a fresh private store named
            ``anonymous-<n>-<random>``. ``uri`` is ``"memory://" + name``.
    """

    def __init__(self, name: str | None = None) -> None:
        with _REGISTRY_LOCK:
            if name is None:
                name = f"anonymous-{next(_ANONYMOUS_COUNTER)}-{secrets.token_hex(4)}"
                bucket = _Bucket()
                _ANONYMOUS[name] = bucket
            else:
                found = _NAMED.get(name) or _ANONYMOUS.get(name)
                if found is None:
                    found = _NAMED[name] = _Bucket()
                bucket = found
        #: The registry name of this store.
        self.name = name
        self.uri = "memory://" + name
        self._bucket = bucket

    @classmethod
    def forget(cls, name: str) -> None:
        """Drop the named store from the registry (for test isolation).

        Instances already open keep working on the old objects; the next
        ``MemoryStore(name)`` starts empty. Forgetting an unknown name is fine.
        """
        with _REGISTRY_LOCK:
            _NAMED.pop(name, None)
            _ANONYMOUS.pop(name, None)

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create ``key`` only if absent; atomic under the store's lock.

        Raises:
            AlreadyExists: the key exists; it is unchanged.
            InvalidKey: the key is malformed.
        """
        check_key(key)
        value = _as_bytes(data)
        bucket = self._bucket
        with bucket.lock:
            if key in bucket.objects:
                raise AlreadyExists(key)
            bucket.objects[key] = (value, time.time())

    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create or replace ``key``.

        Raises:
            InvalidKey: the key is malformed.
        """
        check_key(key)
        value = _as_bytes(data)
        bucket = self._bucket
        with bucket.lock:
            bucket.objects[key] = (value, time.time())

    def get(self, key: str) -> bytes:
        """Return the object's bytes.

        Raises:
            ObjectNotFound: the key does not exist.
            InvalidKey: the key is malformed.
        """
        return self._find(key)[0]

    def head(self, key: str) -> ObjectMeta:
        """Return the object's size and the time it was written.

        Raises:
            ObjectNotFound: the key does not exist.
            InvalidKey: the key is malformed.
        """
        data, written = self._find(key)
        return ObjectMeta(key, len(data), written)

    def _find(self, key: str) -> tuple[bytes, float]:
        """The object's bytes and the time it was written (ObjectNotFound if absent)."""
        check_key(key)
        bucket = self._bucket
        with bucket.lock:
            found = bucket.objects.get(key)
        if found is None:
            raise ObjectNotFound(key)
        return found

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Yield the objects whose key starts with ``prefix`` in ascending key order.

        The listing is a snapshot taken when ``list`` is called (which is also
        when the prefix is validated); later writes are not reflected in it.

        Raises:
            InvalidKey: the prefix is malformed (raised by the call itself).
        """
        check_prefix(prefix)
        bucket = self._bucket
        with bucket.lock:
            found: builtins.list[ObjectMeta] = [
                ObjectMeta(key, len(value), modified)
                for key, (value, modified) in bucket.objects.items()
                if key.startswith(prefix) and (start_after is None or key > start_after)
            ]
        found.sort(key=lambda meta: meta.key)
        return iter(found)

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error.

        Raises:
            InvalidKey: the key is malformed.
        """
        check_key(key)
        bucket = self._bucket
        with bucket.lock:
            bucket.objects.pop(key, None)
