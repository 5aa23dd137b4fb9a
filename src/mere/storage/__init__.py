"""Object stores: the only thing mere talks to.

``open_store(uri)`` maps a URI scheme to a backend:

* a plain path or ``file://`` — :class:`LocalStore` (durable, atomic create via link)
* ``memory://name`` — :class:`MemoryStore` (process-local, for tests and experiments)
* ``s3://bucket/prefix`` (or ``s3a://``) — :class:`S3Store`
* ``az://container/prefix``, ``azure://...``, ``abfs[s]://container@account.dfs.core.windows.net/prefix``
  — :class:`AzureStore`
* ``gs://bucket/prefix`` (or ``gcs://``) — :class:`GCSStore`

The cloud stores need the optional obstore dependency (``pip install
mere[s3]``, ``mere[azure]``, ``mere[gcs]`` or ``mere[cloud]``), imported only
when a cloud store is opened. They take their configuration from the cloud's
environment variables and credential chain, overridden by ``storage_options``
(see :mod:`mere.storage.cloud`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

from mere.errors import InvalidArgument, StorageError
from mere.storage.base import ObjectMeta, ObjectStore, check_key, check_prefix
from mere.storage.cloud import (
    AzureStore,
    GCSStore,
    MissingDependency,
    ObstoreStore,
    RetryPolicy,
    S3Store,
    open_cloud_store,
)
from mere.storage.faults import Fault, FaultyStore, InjectedFault, SimulatedCrash
from mere.storage.local import LocalStore
from mere.storage.memory import MemoryStore

__all__ = [
    "AzureStore",
    "Fault",
    "FaultyStore",
    "GCSStore",
    "InjectedFault",
    "LocalStore",
    "MemoryStore",
    "MissingDependency",
    "ObjectMeta",
    "ObjectStore",
    "ObstoreStore",
    "RetryPolicy",
    "S3Store",
    "SimulatedCrash",
    "check_key",
    "check_prefix",
    "open_store",
]

_CLOUD_SCHEMES = {"s3", "s3a", "az", "abfs", "abfss", "azure", "gs", "gcs"}


def open_store(
    uri: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    create: bool = True,
) -> ObjectStore:
    """Open the object store a URI names.

    Args:
        uri: a local path (not empty), ``file://``, ``memory://name``, or a cloud URI
            (``s3://``, ``s3a://``, ``az://``, ``azure://``, ``abfs://``,
            ``abfss://``, ``gs://``, ``gcs://``).
        storage_options: cloud configuration overriding the environment
            (credentials, region, endpoint, client options); see
            :mod:`mere.storage.cloud`. Not accepted for local or memory stores.
        create: whether a missing local root directory may be created.

    Raises:
        MissingDependency: a cloud URI, but obstore is not installed (an
            ImportError; the message names the extra to install).
        InvalidArgument: an empty URI.
        StorageError: an unknown scheme, a malformed cloud URI, an invalid
            cloud configuration, or storage_options for a non-cloud store.
    """
    text = os.fspath(uri)
    if not text.strip():
        # An empty path would mean the working directory: never a database by accident.
        raise InvalidArgument(
            f"a database URI must not be empty (got {text!r})",
            help="pass a path, a file:// URI, memory://name or a cloud URI",
        )
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme in _CLOUD_SCHEMES:
        return open_cloud_store(text, storage_options)
    if storage_options:
        raise StorageError(
            f"storage_options are for cloud stores (s3://, az://, gs://), not {text!r}"
        )
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = unquote(parsed.path) if scheme == "file" else text
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise StorageError(f"file URI with a remote host is not supported: {text!r}")
        if not path.strip():  # file:// names no path: the working directory, as above
            raise InvalidArgument(
                f"a database URI must name a path (got {text!r})",
                help="file:///absolute/path, or a plain path",
            )
        return LocalStore(path, create=create)
    if scheme == "memory":
        return MemoryStore((parsed.netloc + parsed.path).strip("/"))
    raise StorageError(f"unknown storage scheme {scheme!r} in {text!r}")
