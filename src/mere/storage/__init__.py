"""Object stores: the only thing mere talks to.

``open_store(uri)`` maps a URI scheme to a backend:

* a plain path or ``file://`` — :class:`LocalStore` (durable, atomic create via link)
* ``memory://name`` — :class:`MemoryStore` (process-local, for tests and experiments)
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlparse

from mere.errors import StorageError
from mere.storage.base import ObjectMeta, ObjectStore, check_key, check_prefix
from mere.storage.faults import Fault, FaultyStore, InjectedFault, SimulatedCrash
from mere.storage.local import LocalStore
from mere.storage.memory import MemoryStore

__all__ = [
    "Fault",
    "FaultyStore",
    "InjectedFault",
    "LocalStore",
    "MemoryStore",
    "ObjectMeta",
    "ObjectStore",
    "SimulatedCrash",
    "check_key",
    "check_prefix",
    "open_store",
]

_CLOUD_SCHEMES = {"s3", "s3a", "az", "abfs", "abfss", "azure", "gs", "gcs"}


def open_store(
    uri: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> ObjectStore:
    """Open the object store a URI names.

    Raises:
        NotImplementedError: a cloud scheme (s3://, az://, gs://): not built yet.
        StorageError: an unknown scheme.
    """
    text = os.fspath(uri)
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = unquote(parsed.path) if scheme == "file" else text
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise StorageError(f"file URI with a remote host is not supported: {text!r}")
        return LocalStore(path)
    if scheme == "memory":
        return MemoryStore((parsed.netloc + parsed.path).strip("/"))
    if scheme in _CLOUD_SCHEMES:
        raise NotImplementedError(
            f"the {scheme}:// store is not built yet; mere supports local paths, file:// "
            "and memory:// URIs for now"
        )
    raise StorageError(f"unknown storage scheme {scheme!r} in {text!r}")
