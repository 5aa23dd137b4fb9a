"""The object-store contract every backend honours.

mere coordinates writers through a single primitive, an atomic create-only
write (:meth:`ObjectStore.put_if_absent`). Every backend must give:

* **Atomic create-only put.** ``put_if_absent`` either creates the object with
  its full contents or raises :class:`~mere.errors.AlreadyExists` and changes
  nothing. Of several concurrent creators of one key, exactly one succeeds. A
  reader never observes a partially written object under its final key, even
  if the writing process is killed at any instruction.
* **Read-after-write consistency.** Once a put returns, every ``get``, ``head``
  and ``list`` from any client sees the object.
* **Ordered listing.** ``list`` yields keys in ascending byte order, so the
  zero-padded commit names come back in version order.

Keys are relative, ``/``-separated paths (``_log/00000000000000000007.json``).
They never start or end with ``/``, never contain empty, ``.`` or ``..``
segments, backslashes or NUL: :func:`check_key` enforces that, so no key can
name anything outside the store's root.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from mere.errors import InvalidKey, ObjectNotFound

MAX_KEY_LENGTH = 1024


@dataclass(frozen=True)
class ObjectMeta:
    """What ``head`` and ``list`` report about one object."""

    key: str
    size: int
    modified: float  # seconds since the epoch (UTC), as the store reports it


def check_key(key: str) -> str:
    """Return ``key`` if it is a well-formed relative key, else raise InvalidKey."""
    if not isinstance(key, str) or not key:
        raise InvalidKey(f"invalid object key {key!r}: must be a non-empty string")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(f"invalid object key: longer than {MAX_KEY_LENGTH} characters")
    if "\x00" in key or "\\" in key:
        raise InvalidKey(f"invalid object key {key!r}: contains NUL or backslash")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKey(
                f"invalid object key {key!r}: empty, '.' or '..' segment "
                "(keys are relative and may not escape the database root)"
            )
    return key


def check_prefix(prefix: str) -> str:
    """Validate a listing prefix: empty, or a key optionally ending with ``/``."""
    if prefix == "":
        return prefix
    check_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


class Turns(abc.ABC):
    """One writer's handle on the turns of a key prefix (:meth:`ObjectStore.turns`).

    The committer takes a turn before it catches up with the log and puts
    the next version, and gives it back right after the put: writers on one
    machine then queue instead of racing, and lose no race to one another.
    """

    @abc.abstractmethod
    def try_take(self) -> bool:
        """Take the turn if no other writer holds it; never waits."""

    def note(self, version: int) -> None:
        """Record, while holding the turn, the version its put just created.

        Advisory, like the turns themselves: a store that cannot keep it
        records nothing (then ``last_noted`` says None).
        """
        return None

    def last_noted(self) -> int | None:
        """The version the latest holder noted, if known (read while holding the turn).

        A writer whose state is at that version has seen every commit made
        in a turn, so it may put the next version without reading forward:
        a writer that commits without turns can still have put it, which
        costs a lost race, never a wrong commit.
        """
        return None

    @abc.abstractmethod
    def give_back(self) -> None:
        """Give the turn back (a no-op unless taken).

        A store may finish the puts made during the turn here, after the
        next writer's turn began (a local store syncs the directory of a new
        name): only once this returned is such a put durable.

        Raises:
            StorageError: a put made during the turn may not be durable.
        """


class ObjectStore(abc.ABC):
    """A flat namespace of immutable-by-convention objects under one root."""

    #: The URI this store was opened from (never contains credentials).
    uri: str
    #: Whether fetching many objects at once is faster than one by one (network
    #: stores); local and memory stores are faster read sequentially.
    concurrent_reads: bool = False

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create ``key`` holding ``data``, atomically, only if it does not exist.

        Raises:
            AlreadyExists: the key exists; the existing object is unchanged.
            StorageError: the outcome is unknown (the object may or may not have
                been created); callers that must know read the key back.
        """

    @abc.abstractmethod
    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create or replace ``key`` atomically (readers see old or new bytes).

        Only used for hints, which are never trusted for correctness; a backend
        need not make an overwrite durable before returning.
        """

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Return the object's bytes.

        Raises:
            ObjectNotFound: the key does not exist.
            StorageError: any other failure.
        """

    @abc.abstractmethod
    def head(self, key: str) -> ObjectMeta:
        """Return the object's metadata.

        Raises:
            ObjectNotFound: the key does not exist.
        """

    def exists(self, key: str) -> bool:
        """True if the key exists."""
        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Yield objects whose key starts with ``prefix``, in ascending key order.

        With ``start_after``, only keys strictly greater than it are yielded.
        A prefix is a plain string prefix (``_log/`` or ``tables/ab``), not a
        directory: backends must not assume it ends at a ``/``.
        """

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete the object; deleting a missing key is not an error."""

    def turns(self, prefix: str) -> Turns | None:
        """Turns among this machine's writers of keys under ``prefix``, if the store has them.

        Advisory only: correctness rests on :meth:`put_if_absent` alone, and a
        writer that cannot get a turn goes on without one. Stores shared
        across machines have none (None, the default).
        """
        return None

    def noted_version(self, prefix: str) -> int | None:
        """The version the latest holder of ``prefix``'s turns noted (:meth:`Turns.note`).

        Read without taking a turn and without creating anything; None where
        the store has no turns or nothing was noted yet.
        """
        return None

    def open_input(self, key: str) -> pa.NativeFile:
        """Return a seekable Arrow input file for the object (for Parquet reads).

        The default reads the whole object into memory; backends with a
        cheaper random-access path (local files) override it.
        """
        return pa.BufferReader(arrow_owned(self.get(key)))

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release any resources (connections, threads) the store holds."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


def arrow_owned(data: bytes) -> pa.Buffer:
    """A copy of ``data`` in memory Arrow allocated, for Arrow readers to hold.

    A Parquet read may drop its last reference to its source on one of
    Arrow's threads after it returns. Releasing a buffer that wraps Python
    bytes takes the GIL there; if the interpreter is finalizing by then,
    CPython ends that thread with ``pthread_exit``, whose unwinding through
    Arrow's C++ frames aborts the process ("terminate called without an
    active exception", exit 134). An Arrow-owned buffer is released without
    the GIL.
    """
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()
