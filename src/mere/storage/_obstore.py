"""The ObjectStore contract on cloud object stores, through obstore.

:class:`ObstoreStore` adapts any obstore store (S3, Azure Blob, GCS) to
mere's :class:`~mere.storage.base.ObjectStore`. It is the one place that
decides what a cloud failure *means*, because mere's correctness rests on
telling three outcomes of a create-only put apart:

* **created** — the put returned;
* **already exists** — the service said so (S3 and GCS: 412, Azure: 409
  ``BlobAlreadyExists``) *and no earlier attempt of this call may have
  landed*. Only then is :class:`~mere.errors.AlreadyExists` raised;
* **unknown** — anything else: :class:`~mere.errors.StorageError`. The log
  reads the commit back and compares commit ids (``Log.put_commit``).

obstore's own retries are therefore switched off (``max_retries=0``): they
re-send a create whose first attempt landed and then report the resulting
412 as "already exists", which would be a lie. This module retries instead,
with a bounded number of attempts and jittered exponential backoff, and keeps
track of whether an attempt *may* have landed:

=================================  ==============================  ===========
failure                            meaning                         retried
=================================  ==============================  ===========
409 on S3 (``ConditionalRequest    a concurrent request raced;     yes
Conflict``) or GCS; on Azure a     the put was not applied
409 other than BlobAlreadyExists
429, 503 (``SlowDown``,            throttled; not applied          yes
``ServerBusy``), refused connect
500, 502, 504, 408, dropped or     may have been applied           yes; a later
reset connection, timeout                                          "exists" then
                                                                   means unknown
401, 403, other 4xx, bad config,   permanent                       no
a request that cannot be built
=================================  ==============================  ===========

Reads (``get``, ``head``, ``list``, ranged reads), overwrites (``put``, only
used for hints) and deletes are idempotent and retried on every transient
failure. A listing interrupted by a transient failure resumes after the last
key it yielded.

Errors never carry credentials: messages are rebuilt from the HTTP status and
the service's error code, URL query strings (SAS tokens, presigned
signatures) are cut, every configured secret is masked, and the obstore
exception is not chained (``raise ... from None`` outside the ``except``).
"""

from __future__ import annotations

import io
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa

from mere.errors import (
    AlreadyExists,
    InvalidKey,
    MissingDependency,
    ObjectNotFound,
    StorageError,
)
from mere.storage.base import ObjectMeta, ObjectStore, arrow_owned, check_key, check_prefix

if TYPE_CHECKING:
    from types import ModuleType

    from obstore.store import ObjectStore as ObstoreBackend

__all__ = [
    "Backend",
    "MissingDependency",
    "ObstoreStore",
    "Redactor",
    "RetryPolicy",
    "import_obstore",
]

Backend = Literal["s3", "azure", "gcs"]

_T = TypeVar("_T")

#: Characters object_store refuses in a path (Unicode control characters).
_ILLEGAL_KEY_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]{1,80})</Code>")
_QUERY = re.compile(r"(https?://[^\s?\"'<>]*)\?[^\s\"'<>]*")
_SECRETISH = re.compile(
    r"(?i)(authorization|x-amz-security-token|x-ms-copy-source-authorization|sig|signature"
    r"|x-amz-signature|x-amz-credential)\s*[:=]\s*[^\s,&\"']+"
)
_CONNECT_REFUSED = re.compile(r"(?i)connection refused|tcp connect error|dns error")
_NOT_SENT = re.compile(r"(?i)builder error|relative url|invalid url|url scheme")

#: Objects up to this size are fetched whole by ``open_input``; larger ones
#: are read with ranged GETs (Parquet readers fetch only the footer and the
#: column chunks they need).
DEFAULT_WHOLE_OBJECT_LIMIT = 16 * 1024 * 1024


def import_obstore(extra: str) -> ModuleType:
    """Import obstore lazily, or explain which extra installs it.

    Raises:
        MissingDependency: obstore is not installed (an ImportError too).
    """
    try:
        import obstore
    except ImportError:
        raise MissingDependency(
            f"cloud object stores need the obstore package: install mere[{extra}]",
            help=f"pip install 'mere[{extra}]' (or mere[cloud] for every cloud)",
        ) from None
    return obstore


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed request is retried.

    Attempt ``n`` (from 1) that fails transiently sleeps a random time in
    ``[d/2, d]`` with ``d = min(max_delay, base_delay * 2**(n-1))`` before the
    next one; no attempt starts after ``deadline`` seconds from the first.
    """

    attempts: int = 8
    base_delay: float = 0.05
    max_delay: float = 5.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")

    def delay(self, attempt: int) -> float:
        """The jittered sleep after failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


_FailureKind = Literal["not_found", "exists", "rejected", "maybe_applied", "permanent", "bad_key"]


@dataclass(frozen=True)
class _Failure:
    """One classified obstore failure; ``summary`` is already free of credentials."""

    kind: _FailureKind
    reason: str  # short label for counting: "409", "503", "connection", ...
    summary: str


class Redactor:
    """Removes credentials from text destined for an error message."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret containing another is masked whole.
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = _QUERY.sub(r"\1?<redacted>", text)
        text = _SECRETISH.sub(lambda m: f"{m.group(1)}=<redacted>", text)
        for secret in self._secrets:
            text = text.replace(secret, "<redacted>")
        return text


class ObstoreStore(ObjectStore):
    """An :class:`ObjectStore` over an obstore store, under a key prefix.

    Most users get one from :func:`mere.storage.open_store` (``s3://``,
    ``az://``, ``abfss://``, ``gs://``) or the :class:`~mere.storage.S3Store`,
    :class:`~mere.storage.AzureStore` and :class:`~mere.storage.GCSStore`
    constructors, which build ``inner`` with obstore's retries disabled.

    Args:
        inner: the obstore store. Build it with ``retry_config={"max_retries":
            0}``: this class retries itself, knowing which failures may hide a
            create that landed.
        backend: which service ``inner`` talks to; decides how a 409 reads.
        uri: the store's URI, without credentials (``s3://bucket/prefix``).
        prefix: keys are stored under ``prefix + "/"`` (empty: the bucket root).
        retry: the retry policy for transient failures.
        redactor: masks credentials in error messages.
        whole_object_limit: ``open_input`` fetches objects up to this size in
            one GET and reads larger ones with ranged GETs.

    Raises:
        InvalidKey: ``prefix`` is not a valid key.
    """

    concurrent_reads = True

    def __init__(
        self,
        inner: ObstoreBackend,
        *,
        backend: Backend,
        uri: str,
        prefix: str = "",
        retry: RetryPolicy | None = None,
        redactor: Redactor | None = None,
        whole_object_limit: int = DEFAULT_WHOLE_OBJECT_LIMIT,
    ) -> None:
        self._obstore = import_obstore({"azure": "azure", "gcs": "gcs"}.get(backend, "s3"))
        self._inner = inner
        self.backend: Backend = backend
        self.uri = uri
        prefix = prefix.strip("/")
        if prefix:
            check_key(prefix)
            _check_chars(prefix)
        #: Prepended to every key ("" or "some/prefix/").
        self.root = prefix + "/" if prefix else ""
        self.retry = retry or RetryPolicy()
        self.whole_object_limit = whole_object_limit
        self._redact = redactor or Redactor()
        self._lock = threading.Lock()
        #: Transient failures retried so far, by ``"<op>:<reason>"`` (for tests and tuning).
        self.retries: Counter[str] = Counter()

    # --- keys -------------------------------------------------------------------

    def _path(self, key: str) -> str:
        """The obstore path of ``key``; raises InvalidKey for malformed keys."""
        check_key(key)
        _check_chars(key)
        return self.root + key

    # --- the contract ------------------------------------------------------------

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create ``key`` only if absent (``If-None-Match: *`` / generation 0).

        Retries transient failures (see the module docstring). "Already
        exists" after an attempt that may have landed is reported as a
        StorageError: the object exists, but it may be this call's own.

        Raises:
            AlreadyExists: the key existed before this call; nothing was written.
            InvalidKey: the key is malformed or has control characters.
            StorageError: the outcome is unknown, or the request was refused.
        """
        path = self._path(key)
        payload = _as_buffer(data)

        def create() -> None:
            self._obstore.put(self._inner, path, payload, mode="create", use_multipart=False)

        self._run("put_if_absent", key, create, create=True)

    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create or replace ``key`` with one (non-multipart) PUT: atomic for readers.

        Raises:
            InvalidKey: the key is malformed.
            StorageError: the write failed (it may or may not have happened).
        """
        path = self._path(key)
        payload = _as_buffer(data)

        def overwrite() -> None:
            self._obstore.put(self._inner, path, payload, mode="overwrite", use_multipart=False)

        self._run("put", key, overwrite)

    def get(self, key: str) -> bytes:
        """Return the object's bytes.

        Raises:
            ObjectNotFound: the key does not exist.
            InvalidKey: the key is malformed.
            StorageError: any other failure, after retries.
        """
        path = self._path(key)
        return self._run("get", key, lambda: bytes(self._obstore.get(self._inner, path).bytes()))

    def head(self, key: str) -> ObjectMeta:
        """Return the object's size and last-modified time.

        Raises:
            ObjectNotFound: the key does not exist.
            InvalidKey: the key is malformed.
            StorageError: any other failure, after retries.
        """
        path = self._path(key)
        meta = self._run("head", key, lambda: self._obstore.head(self._inner, path))
        return self._meta(meta)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Yield the objects whose key starts with ``prefix``, in ascending key order.

        obstore lists by path segment, so this lists the deepest "directory"
        the prefix names and filters by the rest of it. ``start_after`` is
        sent to the service (S3 ``start-after``); Azure applies it on the
        client, after listing the whole directory. Keys are compared and
        filtered here too, so every backend honours the contract.

        Raises:
            InvalidKey: the prefix is malformed (raised by the call itself).
            StorageError: listing failed after retries (raised while iterating).
        """
        check_prefix(prefix)
        _check_chars(prefix)
        return self._list(prefix, start_after)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectMeta]:
        full_prefix = self.root + prefix
        directory = full_prefix.rpartition("/")[0] or None
        after = None if start_after is None else self.root + start_after
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                stream = self._obstore.list(self._inner, directory, offset=after, chunk_size=1000)
                for page in stream:
                    for meta in page:
                        path = meta["path"]
                        if path.startswith(full_prefix) and (after is None or path > after):
                            after = path
                            attempt, started = 0, time.monotonic()  # progress: fresh budget
                            yield self._meta(meta)
                return
            except Exception as exc:  # obstore raises builtins and its own errors
                failure = self._classify(exc)
            attempt += 1
            if not self._backoff("list", failure, attempt, started):
                raise self._error(
                    "list", prefix, failure, attempt=attempt, create=False, landed=False
                )
            # The next round resumes after the last key yielded: nothing repeats or is skipped.

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is fine (Azure's 404 is swallowed).

        Raises:
            InvalidKey: the key is malformed.
            StorageError: the delete failed after retries.
        """
        path = self._path(key)
        try:
            self._run("delete", key, lambda: self._obstore.delete(self._inner, path))
        except ObjectNotFound:
            pass

    def open_input(self, key: str) -> pa.NativeFile:
        """A seekable Arrow file for the object.

        One GET fetches the object; if it is larger than
        ``whole_object_limit`` the body is abandoned and the returned file
        issues ranged GETs instead (Parquet reads the footer, then only the
        column chunks it needs).

        Raises:
            ObjectNotFound: the key does not exist.
            InvalidKey: the key is malformed.
            StorageError: any other failure, after retries.
        """
        path = self._path(key)

        def fetch() -> pa.Buffer | int:
            result = self._obstore.get(self._inner, path)
            size = int(result.meta["size"])
            if size > self.whole_object_limit:
                return size
            return arrow_owned(bytes(result.bytes()))

        fetched = self._run("open_input", key, fetch)
        if isinstance(fetched, int):
            return pa.PythonFile(_RangedFile(self, key, path, fetched), mode="r")
        return pa.BufferReader(fetched)

    def _get_range(self, key: str, path: str, start: int, end: int) -> bytes:
        """Bytes ``start..end`` of the object (retried like every read)."""
        return self._run(
            "get_range",
            key,
            lambda: bytes(self._obstore.get_range(self._inner, path, start=start, end=end)),
        )

    # --- failures ------------------------------------------------------------------

    def _run(self, op: str, key: str, call: Callable[[], _T], *, create: bool = False) -> _T:
        """Run ``call``, retrying transient failures; translate the final one.

        Raises:
            ObjectNotFound, AlreadyExists, InvalidKey, StorageError: see the
            module docstring. Never chains the obstore exception.
        """
        started = time.monotonic()
        maybe_landed = False
        attempt = 0
        while True:
            try:
                return call()
            except Exception as exc:  # obstore raises builtins and its own errors
                failure = self._classify(exc)
            attempt += 1
            if create and failure.kind == "maybe_applied":
                maybe_landed = True
            if not self._backoff(op, failure, attempt, started):
                raise self._error(
                    op, key, failure, attempt=attempt, create=create, landed=maybe_landed
                )

    def _backoff(self, op: str, failure: _Failure, attempt: int, started: float) -> bool:
        """Sleep before retrying a transient failure; False when it must not be retried."""
        pause = self.retry.delay(attempt)
        if (
            failure.kind not in ("rejected", "maybe_applied")
            or attempt >= self.retry.attempts
            or time.monotonic() - started + pause > self.retry.deadline
        ):
            return False
        with self._lock:
            self.retries[f"{op}:{failure.reason}"] += 1
        time.sleep(pause)
        return True

    def _error(
        self, op: str, key: str, failure: _Failure, *, attempt: int, create: bool, landed: bool
    ) -> StorageError:
        """The mere error a final failure becomes."""
        where = f"{op} of {key!r} in {self.uri}"
        if failure.kind == "not_found":
            if op in ("put", "put_if_absent"):
                return StorageError(
                    f"{where} failed: the bucket or container does not exist ({failure.summary})"
                )
            return ObjectNotFound(key)
        if failure.kind == "exists" and create:
            if not landed:
                return AlreadyExists(key)
            return StorageError(
                f"{where}: outcome unknown: an earlier attempt failed in a way that may "
                f"have created the object, and a retry found it existing ({failure.summary})"
            )
        if failure.kind == "bad_key":
            return InvalidKey(f"invalid object key {key!r} for {self.uri}: {failure.summary}")
        tries = f" after {attempt} attempts" if attempt > 1 else ""
        unknown = " (the object may or may not have been created)" if create and landed else ""
        return StorageError(f"{where} failed{tries}{unknown}: {failure.summary}")

    def _classify(self, exc: Exception) -> _Failure:
        """Decide what an obstore exception means (see the module docstring)."""
        from obstore import exceptions as oe

        text = str(exc)
        status_match = _STATUS.search(text)
        status = int(status_match.group(1)) if status_match else None
        code_match = _CODE.search(text)
        code = code_match.group(1) if code_match else None
        summary = self._summary(exc, status, code)
        reason = str(status) if status else type(exc).__name__
        if isinstance(exc, FileNotFoundError):
            return _Failure("not_found", reason, summary)
        if isinstance(exc, oe.AlreadyExistsError | oe.PreconditionError | oe.NotModifiedError):
            if status == 409 and (
                self.backend != "azure" or (code is not None and code != "BlobAlreadyExists")
            ):
                # S3's ConditionalRequestConflict: a concurrent request raced;
                # this one was not applied and should be retried.
                return _Failure("rejected", reason, summary)
            return _Failure("exists", reason, summary)
        if isinstance(
            exc,
            oe.PermissionDeniedError
            | oe.UnauthenticatedError
            | oe.NotSupportedError
            | oe.UnknownConfigurationKeyError,
        ):
            return _Failure("permanent", reason, summary)
        if isinstance(exc, oe.InvalidPathError) or (
            isinstance(exc, ValueError) and "path" in text.lower()
        ):
            return _Failure("bad_key", reason, summary)
        if status is None:
            if _NOT_SENT.search(text):
                if "http://" in text:
                    summary += " (a plain http:// endpoint needs the allow_http=True option)"
                return _Failure("permanent", "request", summary)
            if _CONNECT_REFUSED.search(text):
                return _Failure("rejected", "connect", summary)
            if isinstance(exc, oe.BaseError | OSError):
                # Reset, dropped or timed-out connection: the request may have landed.
                return _Failure("maybe_applied", "connection", summary)
            return _Failure("permanent", reason, summary)
        if status in (429, 503) or (status == 409 and self.backend != "azure"):
            return _Failure("rejected", reason, summary)
        if status == 408 or status >= 500:
            return _Failure("maybe_applied", reason, summary)
        return _Failure("permanent", reason, summary)

    def _summary(self, exc: Exception, status: int | None, code: str | None) -> str:
        """A one-line, credential-free description of an obstore failure."""
        kind = type(exc).__name__
        if status is not None:
            label = f"HTTP {status}" + (f" {code}" if code else "")
            return f"{kind}: {label}"
        first = str(exc).split("\n\nDebug source", 1)[0].strip().splitlines()
        line = first[0] if first else ""
        line = self._redact(line)
        if len(line) > 300:
            line = line[:300] + "..."
        return f"{kind}: {line}" if line else kind

    # --- helpers -------------------------------------------------------------------

    def _meta(self, meta: Any) -> ObjectMeta:
        path: str = meta["path"]
        key = path[len(self.root) :] if path.startswith(self.root) else path
        return ObjectMeta(key, int(meta["size"]), meta["last_modified"].timestamp())

    def __getstate__(self) -> None:
        raise TypeError(
            f"{type(self).__name__} cannot be pickled (it holds credentials); "
            "open the store again in the other process"
        )


class _RangedFile(io.RawIOBase):
    """A read-only, seekable file over ranged GETs (wrapped in ``pa.PythonFile``)."""

    def __init__(self, store: ObstoreStore, key: str, path: str, size: int) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._path = path
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        position = base + offset
        if position < 0:
            raise ValueError("negative seek position")
        self._pos = position
        return position

    def size(self) -> int:
        return self._size

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._store._get_range(self._key, self._path, self._pos, end)
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)


def _check_chars(key: str) -> None:
    """Reject control characters, which object stores (and object_store) cannot name."""
    if _ILLEGAL_KEY_CHARS.search(key):
        raise InvalidKey(
            f"invalid object key {key!r}: control characters cannot be stored in a cloud "
            "object store"
        )


def _as_buffer(data: bytes | memoryview | pa.Buffer) -> bytes | memoryview:
    """A one-dimensional unsigned-byte view of ``data`` (obstore's accepted shape)."""
    if isinstance(data, bytes):
        return data
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view
