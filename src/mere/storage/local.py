"""A durable object store on a local (POSIX) filesystem.

Each key is a file under the store's root; ``/`` in a key is a directory
separator. The one operation mere's correctness rests on, ``put_if_absent``,
is built from steps that are each atomic on a local filesystem:

1. write the bytes to a fresh temporary file in the target's directory and
   ``fsync`` it, so the data is on disk before any name points at it;
2. ``os.link`` the temporary file to the final name. ``link`` fails with
   ``EEXIST`` if the name exists, so of several concurrent creators exactly one
   wins, and the final name only ever points at a complete file;
3. unlink the temporary name and ``fsync`` the directory (and the parents of
   any directories this call created), so the new name survives a power loss.

``O_CREAT | O_EXCL`` alone is *not* enough: a writer killed mid-write leaves a
partial file holding the name forever, and concurrent readers were measured
seeing partly written files.

Temporary files are named ``.mere-tmp-<random hex>``. No key may contain a
segment starting with that prefix (such keys raise :class:`InvalidKey`), and
:meth:`LocalStore.list` never reports those files, so a temp file left behind
by a killed writer can never be mistaken for an object. They can be swept with
:meth:`LocalStore.remove_temp_files`.

Turns: writers of one machine queue for each new version of the log instead
of racing for it (:meth:`LocalStore.turns`): an exclusive ``flock`` on the
file ``.mere-turns`` of the log's directory, which the kernel releases when
its holder dies. Advisory only: the link above still decides every race,
writers on other machines (a shared filesystem) take no part, and a turn
held too long is not waited for (``mere.txn.committer``). While a thread
holds the turn, its put's directory fsync is done when the turn is given
back, so the next writer does not wait for it: a directory's fsync covers
every name made in it before, so no later version can outlive an earlier one.

Symbolic links: every key is resolved with :func:`os.path.realpath` (each
directory once per store, then only the last component) and must land
strictly inside the (resolved) root, otherwise the operation raises
:class:`InvalidKey` and touches nothing. So a symlink inside the root that
points outside it is never followed, for reads or writes. Symlinks whose
target stays inside the root work for reads, but ``list`` reports only regular
files and does not descend into symlinked directories: mere never creates
symlinks, and listing them could report one object under two keys.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import threading
import time
import weakref
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path

import pyarrow as pa

from mere.errors import (
    AlreadyExists,
    InvalidKey,
    NotDurable,
    NotWritten,
    ObjectNotFound,
    StorageError,
)
from mere.storage.base import ObjectMeta, ObjectStore, Turns, check_key, check_prefix

try:
    import fcntl
except ImportError:  # Windows: no turns
    fcntl = None  # type: ignore[assignment]

__all__ = ["TEMP_PREFIX", "TURNS_FILE", "LocalStore"]

#: The file in a directory whose ``flock`` orders this machine's writers (LocalStore.turns).
TURNS_FILE = ".mere-turns"

#: How many resolved directories a store remembers (LocalStore._check_inside).
_REAL_DIRS_KEPT = 4096

#: Name prefix of the temporary files ``put`` and ``put_if_absent`` write.
TEMP_PREFIX = ".mere-tmp-"

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC
_TEMP_FLAGS |= getattr(os, "O_BINARY", 0)  # Windows: no newline translation


class _FileTurns(Turns):
    """Turns held as an exclusive ``flock`` on a file (released by the kernel if we die).

    Each thread has a handle of its own (its own open file), so threads of
    one process queue too; the file stays open for the thread's next commit.
    Its first 8 bytes hold the version the latest holder noted (a
    little-endian signed integer; shorter: none yet).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._fd = os.open(
            os.path.join(directory, TURNS_FILE), os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o666
        )
        try:  # a filesystem without flock (some network mounts) has no turns
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        except BlockingIOError:
            pass  # another writer's turn: flock works
        except OSError:
            os.close(self._fd)
            raise
        self.held = False
        self.unsynced = False  # a name made in the directory during the turn awaits its fsync
        #: The process that opened the file: a forked child shares the open file,
        #: and so the lock, with its parent, and opens one of its own.
        self.pid = os.getpid()
        weakref.finalize(self, os.close, self._fd)

    def try_take(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by another (BlockingIOError), or no flock here: no turn
            return False
        self.held = True
        return True

    def note(self, version: int) -> None:
        if not self.held:
            return
        try:  # no fsync: a note lost in a crash only costs the next writer a lost race
            os.pwrite(self._fd, version.to_bytes(8, "little", signed=True), 0)
        except OSError:
            pass

    def last_noted(self) -> int | None:
        try:
            return _noted(os.pread(self._fd, 8, 0))
        except OSError:
            return None

    def give_back(self) -> None:
        """Give the turn back, then make the names created during it durable.

        The directory fsync comes after the unlock: the next writer's link
        need not wait for it. That is safe, as a later name in the directory
        cannot outlive an earlier one (a directory's fsync covers every entry
        made before it), and the put is reported only once this returns.

        Raises:
            StorageError: the fsync failed; the names may not survive a crash.
        """
        try:
            if self.held:
                self.held = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            if self.unsynced:
                self.unsynced = False
                try:
                    _fsync_dir(self.directory)
                except OSError as exc:
                    raise StorageError(
                        f"could not make the commit durable in {self.directory!r}: {exc}"
                    ) from exc


def _noted(data: bytes) -> int | None:
    """The version in a turns file's first 8 bytes (:class:`_FileTurns`), or None."""
    return int.from_bytes(data, "little", signed=True) if len(data) == 8 else None


def _fsync_dir(path: str) -> None:
    """Make the directory entries of ``path`` durable (no-op where unsupported)."""
    if os.name == "nt":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_new_name(parent: str, created: list[str]) -> None:
    """Make a new name in ``parent`` durable, with the directories ``created`` for it."""
    _fsync_dir(parent)
    for directory in reversed(created):
        _fsync_dir(os.path.dirname(directory))


def _unlink_quietly(path: str) -> None:
    """Remove ``path`` if possible; used on cleanup paths that must not mask an error."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _newest_mtime(directory: str) -> float:
    """The latest modification time of ``directory`` and everything below it."""
    try:
        newest = os.lstat(directory).st_mtime
    except FileNotFoundError:  # removed meanwhile (by its writer): nothing to sweep
        return float("inf")
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except FileNotFoundError:
                continue
    return newest


def _write_all(fd: int, data: bytes | memoryview | pa.Buffer) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less)."""
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LocalStore(ObjectStore):
    """Objects stored as files under a root directory.

    Args:
        root: the directory holding the objects; created (with parents) if
            missing, unless ``create`` is False. Relative paths are made
            absolute at construction.
        turns: whether this machine's writers take turns to commit
            (:meth:`turns`). Turned off, they race for each version as
            writers on different machines do: only useful to test that.

    Raises:
        ObjectNotFound: the root does not exist and ``create`` is False.
        StorageError: the root cannot be created or is not a directory.
    """

    def __init__(
        self, root: str | os.PathLike[str], *, create: bool = True, turns: bool = True
    ) -> None:
        path = os.path.abspath(os.fspath(root))
        if create:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create store root {path!r}: {exc}") from exc
        elif not os.path.exists(path):
            raise ObjectNotFound(path)
        if not os.path.isdir(path):
            raise StorageError(f"store root {path!r} is not a directory")
        #: The absolute root directory (as given, symlinks not resolved).
        self.root = path
        self._real_root = os.path.realpath(path)
        self._real_root_slash = os.path.join(self._real_root, "")
        self.uri = Path(path).as_uri()
        # directory -> its resolved path and its (device, inode) when resolved
        self._real_dirs: dict[str, tuple[str, tuple[int, int]]] = {}
        self._turns = threading.local()  # prefix -> this thread's _FileTurns
        self._takes_turns = turns and fcntl is not None

    # --- paths -----------------------------------------------------------------

    def _path(self, key: str) -> str:
        """Map a key to its file path, rejecting anything that could leave the root.

        Raises:
            InvalidKey: the key is malformed, uses the reserved temp-file prefix
                in a segment, or resolves (through symlinks) outside the root.
        """
        check_key(key)
        segments = key.split("/")
        for segment in segments:
            if segment.startswith(TEMP_PREFIX):
                raise InvalidKey(
                    f"invalid object key {key!r}: segments starting with {TEMP_PREFIX!r} "
                    "are reserved for the local store's temporary files"
                )
            if segment == TURNS_FILE:
                raise InvalidKey(
                    f"invalid object key {key!r}: {TURNS_FILE!r} is reserved for the "
                    "local store's turns (LocalStore.turns)"
                )
        path = os.path.join(self.root, *segments)
        self._check_inside(key, path)
        return path

    def _directory(self, prefix: str) -> str:
        """The directory holding the keys under ``prefix`` (the root for ``""``)."""
        return self._path(prefix.strip("/")) if prefix.strip("/") else self.root

    def _check_inside(self, what: str, path: str) -> None:
        """Raise InvalidKey unless ``path`` resolves to somewhere strictly inside the root.

        The resolved form of a directory is remembered with its identity
        (device and inode, as ``lstat`` of its path finds them): every get
        and put of a commit resolves the same ``_log`` directory. A directory
        found to be another one since (it, or a directory above it, swapped
        for a symlink) is resolved again. The last component is resolved
        whenever it is a symlink.
        """
        parent, name = os.path.split(path)
        try:
            found = os.lstat(parent)
        except OSError:  # missing (a new table's directory): resolve, remember nothing
            found = None
        remembered = self._real_dirs.get(parent)
        if (
            found is not None
            and remembered is not None
            and remembered[1] == (found.st_dev, found.st_ino)
            and stat.S_ISDIR(found.st_mode)
        ):
            real_parent = remembered[0]
        else:
            real_parent = os.path.realpath(parent)
            if found is not None and stat.S_ISDIR(found.st_mode):
                if len(self._real_dirs) >= _REAL_DIRS_KEPT:
                    self._real_dirs.clear()
                self._real_dirs[parent] = (real_parent, (found.st_dev, found.st_ino))
        real = os.path.join(real_parent, name)
        if os.path.islink(real):
            real = os.path.realpath(real)
        if not real.startswith(self._real_root_slash):
            raise InvalidKey(
                f"invalid object key {what!r}: resolves to {real!r}, outside the store root "
                f"{self._real_root!r} (a symbolic link points out of the store)"
            )

    def _error(self, op: str, key: str, exc: OSError) -> StorageError:
        """Translate an unexpected OSError into the StorageError a caller sees."""
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidKey(f"invalid object key {key!r}: too long for the local filesystem")
        return StorageError(f"{op} of {key!r} in {self.root!r} failed: {exc}")

    def _make_dirs(self, key: str, parent: str) -> list[str]:
        """Create the missing directories up to ``parent``; return the ones created.

        Directories another writer created concurrently count as created too,
        so the caller fsyncs their parents as well (cheap, and it makes this
        call's object durable without relying on the other writer).

        Raises:
            StorageError: a path component is an object (a file), or the root
                itself has disappeared.
        """
        missing: list[str] = []
        current = parent
        while current != self.root:
            if os.path.isdir(current):
                break
            missing.append(current)
            current = os.path.dirname(current)
        else:
            if not os.path.isdir(self.root):
                raise StorageError(f"store root {self.root!r} no longer exists (writing {key!r})")
        created: list[str] = []
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise StorageError(
                        f"cannot store {key!r}: {directory!r} is an object, so it cannot "
                        "also be a directory on the local filesystem"
                    ) from None
            except NotADirectoryError:
                raise StorageError(
                    f"cannot store {key!r}: a prefix of the key is an object, so it cannot "
                    "also be a directory on the local filesystem"
                ) from None
            created.append(directory)
        return created

    def _write_temp(
        self, key: str, parent: str, data: bytes | memoryview | pa.Buffer, *, sync: bool
    ) -> tuple[str, list[str]]:
        """Write ``data`` to a new temp file in ``parent``; return it and the dirs created.

        On any failure (including BaseException) the temp file is removed
        before the exception propagates.
        """
        created: list[str] = []
        while True:
            tmp = os.path.join(parent, TEMP_PREFIX + secrets.token_hex(8))
            try:
                fd = os.open(tmp, _TEMP_FLAGS, 0o666)
                break
            except FileExistsError:
                continue  # 64 random bits collided; pick another name
            except FileNotFoundError:
                if created:
                    raise
                created = self._make_dirs(key, parent)
            except NotADirectoryError:
                raise StorageError(
                    f"cannot store {key!r}: a prefix of the key is an object, so it cannot "
                    "also be a directory on the local filesystem"
                ) from None
        try:
            try:
                _write_all(fd, data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return tmp, created

    # --- the contract ------------------------------------------------------------

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create ``key`` durably and atomically, only if it does not exist.

        Temp file + fsync + ``os.link`` + unlink temp + fsync directory (see
        the module docstring). When this returns, the object and its name are
        on disk -- except while this thread holds the turn of the key's
        directory (:meth:`turns`): the directory's fsync then waits for the
        turn's ``give_back``.

        Raises:
            AlreadyExists: the key exists; nothing was changed.
            InvalidKey: the key is malformed or would leave the root.
            NotDurable: the object was created, but the directory's fsync failed.
            StorageError: anything else; the object may or may not exist, and a
                key that names an existing directory (``a`` when ``a/b`` is an
                object) cannot be stored.
        """
        path = self._path(key)
        parent = os.path.dirname(path)
        if os.path.isfile(path):
            # Taken already (a commit race lost): spare the temp file and its fsync, the
            # slowest step of a put. The link below still decides every other case.
            raise AlreadyExists(key)
        try:
            tmp, created = self._write_temp(key, parent, data, sync=True)
        except OSError as exc:
            # Before the link nothing is under the key: a definite failure, not one of
            # unknown outcome (a read-only or full filesystem).
            error = self._error("put_if_absent", key, exc)
            raise (NotWritten(str(error)) if type(error) is StorageError else error) from exc
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                if os.path.isdir(path):
                    raise StorageError(
                        f"cannot store {key!r}: it is a directory (other objects have "
                        "keys starting with it plus '/')"
                    ) from None
                raise AlreadyExists(key) from None
            finally:
                _unlink_quietly(tmp)
        except OSError as exc:
            # The link's own failure may not be what happened (NFS can lose the reply of
            # a link it made): of unknown outcome, settled by reading the key back.
            raise self._error("put_if_absent", key, exc) from exc
        if created or not self._sync_at_give_back(parent):
            try:
                _fsync_new_name(parent, created)
            except OSError as exc:
                raise NotDurable(
                    f"put_if_absent of {key!r} in {self.root!r} landed, but its directory "
                    f"could not be synced: {exc}"
                ) from exc

    def _sync_at_give_back(self, directory: str) -> bool:
        """Leave a new name in ``directory`` to be made durable when our turn is given back.

        Only while this thread holds the turn of ``directory``: the next
        writer's turn then need not wait for our directory fsync
        (:class:`_FileTurns`).
        """
        for handle in self._turns.__dict__.values():
            if handle.directory == directory and handle.held:
                handle.unsynced = True
                return True
        return False

    def turns(self, prefix: str) -> Turns | None:
        """Turns among this machine's writers under ``prefix`` (``flock`` on :data:`TURNS_FILE`).

        None where ``flock`` does not exist (Windows), the directory cannot
        hold the file, or the store was made with ``turns=False``. The file is
        no object: ``list`` skips it, and no key may name it.
        """
        if not self._takes_turns:
            return None
        handles: dict[str, _FileTurns] = self._turns.__dict__
        handle = handles.get(prefix)
        if handle is None or handle.pid != os.getpid():
            try:
                handle = _FileTurns(self._directory(prefix))
            except OSError:
                return None
            handles[prefix] = handle
        return handle

    def noted_version(self, prefix: str) -> int | None:
        if not self._takes_turns:
            return None
        try:
            fd = os.open(os.path.join(self._directory(prefix), TURNS_FILE), os.O_RDONLY | _CLOEXEC)
        except OSError:  # no writer took a turn here yet
            return None
        try:
            return _noted(os.pread(fd, 8, 0))
        except OSError:
            return None
        finally:
            os.close(fd)

    def temp_directory(self, prefix: str, label: str) -> str:
        """Create and return a fresh temp directory under the key prefix ``prefix``.

        For files written by another program (Spark's Parquet writer) before
        :meth:`link_if_absent` makes them objects. Its name starts with
        :data:`TEMP_PREFIX`, so ``list`` never reports what it holds and
        :meth:`remove_temp_files` sweeps it once abandoned; the caller removes it.
        """
        check_prefix(prefix)
        parent = self._directory(prefix)
        name = f"{TEMP_PREFIX}{label}-{secrets.token_hex(8)}"
        path = os.path.join(parent, name)
        try:
            # The directories made for the prefix (a new table's) will hold linked
            # objects: their entries are made durable now, as put_if_absent does.
            created = self._make_dirs(prefix + name, parent)
            os.mkdir(path)
            _fsync_new_name(parent, created)
        except OSError as exc:
            raise self._error("temp_directory", prefix, exc) from exc
        return path

    def link_if_absent(self, key: str, source: str) -> None:
        """Make the file at ``source`` the object ``key``, durably, only if ``key`` is absent.

        ``put_if_absent`` for bytes that are already in a file on this file
        system (written by another program into a :meth:`temp_directory`):
        ``fsync`` the file, ``os.link`` it to the key's path (which fails if
        the name exists), remove the source name and ``fsync`` the directory.
        No byte is copied.

        Raises:
            AlreadyExists: the key exists; nothing was changed.
            InvalidKey: the key is malformed or would leave the root.
            StorageError: anything else, e.g. ``source`` is on another file system.
        """
        path = self._path(key)
        parent = os.path.dirname(path)
        self._check_inside(source, source)
        if TEMP_PREFIX not in source:
            raise InvalidKey(f"{source!r} is not in a temp directory of this store")
        try:
            fd = os.open(source, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            created = self._make_dirs(key, parent)
            try:
                os.link(source, path)
            except FileExistsError:
                raise AlreadyExists(key) from None
            _unlink_quietly(source)
            _fsync_new_name(parent, created)
        except OSError as exc:
            raise self._error("link_if_absent", key, exc) from exc

    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Create or replace ``key`` atomically (temp file + ``os.replace``).

        Readers see the old or the new bytes, never a mix. Not fsynced: only
        hints are overwritten, and a lost hint is harmless.

        Raises:
            InvalidKey: the key is malformed or would leave the root.
            StorageError: the write failed, or the key names a directory.
        """
        path = self._path(key)
        try:
            tmp, _ = self._write_temp(key, os.path.dirname(path), data, sync=False)
            try:
                os.replace(tmp, path)
            except BaseException:
                _unlink_quietly(tmp)
                raise
        except OSError as exc:
            raise self._error("put", key, exc) from exc

    def get(self, key: str) -> bytes:
        """Return the file's bytes.

        Raises:
            ObjectNotFound: no such file (a directory is not an object either).
            InvalidKey: the key is malformed or would leave the root.
            StorageError: any other read failure.
        """
        path = self._path(key)
        try:
            with open(path, "rb") as file:
                return file.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            raise self._error("get", key, exc) from exc

    def head(self, key: str) -> ObjectMeta:
        """Return the file's size and modification time.

        Raises:
            ObjectNotFound: no such regular file.
            InvalidKey: the key is malformed or would leave the root.
            StorageError: any other failure.
        """
        path = self._path(key)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            raise self._error("head", key, exc) from exc
        if not stat.S_ISREG(st.st_mode):
            raise ObjectNotFound(key)
        return ObjectMeta(key, st.st_size, st.st_mtime)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Yield the objects whose key starts with ``prefix``, in ascending key order.

        The prefix is a plain string prefix: ``_log/000`` matches
        ``_log/00000000000000000001.json``. Only the deepest directory the
        prefix fully names (``_log``) is read, with ``os.scandir``; entries are
        filtered by the rest of the prefix, sorted, and subdirectories are
        walked lazily in key order (a directory ``d`` sorts as ``d/``, which
        keeps the global order byte-wise even next to names like ``d-x``).
        ``start_after`` prunes whole subdirectories that sort before it, and
        only yielded files are ``stat``-ed, so listing the tail of a directory
        of 100k commits costs one ``scandir`` and a sort.

        The prefix is validated (and resolved against symlinks) when ``list``
        is called, not on the first ``next()``. Temp files, symlinks and
        anything else that is not a regular file are skipped. A file deleted
        while the listing runs is silently left out.

        Raises:
            InvalidKey: the prefix is malformed or resolves outside the root.
            StorageError: a directory cannot be read (raised while iterating).
        """
        check_prefix(prefix)
        dir_part, _, name_prefix = prefix.rpartition("/")
        if dir_part:
            segments = dir_part.split("/")
            if any(s.startswith(TEMP_PREFIX) for s in segments):
                return iter(())
            directory = os.path.join(self.root, *segments)
            self._check_inside(prefix, directory)
            key_prefix = dir_part + "/"
        else:
            directory = self.root
            key_prefix = ""
        return self._walk(directory, key_prefix, name_prefix, start_after)

    def _walk(
        self, directory: str, key_prefix: str, name_prefix: str, start_after: str | None
    ) -> Iterator[ObjectMeta]:
        """Yield the objects under ``directory`` (keys ``key_prefix + name...``) in order."""
        entries: list[tuple[str, os.DirEntry[str], bool]] = []
        try:
            with os.scandir(directory) as scan:
                for entry in scan:
                    name = entry.name
                    if (
                        not name.startswith(name_prefix)
                        or name.startswith(TEMP_PREFIX)
                        or name == TURNS_FILE
                        or "\\" in name
                    ):
                        continue
                    try:
                        if entry.is_file(follow_symlinks=False):
                            entries.append((name, entry, False))
                        elif entry.is_dir(follow_symlinks=False):
                            entries.append((name + "/", entry, True))
                    except OSError:
                        continue  # vanished while we looked
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise self._error("list", key_prefix + name_prefix, exc) from exc
        entries.sort(key=itemgetter(0))
        for sort_name, entry, is_dir in entries:
            key = key_prefix + sort_name
            if is_dir:
                # Every key below starts with ``key`` (ending in '/'); skip the
                # directory if all of them sort at or before start_after.
                if (
                    start_after is not None
                    and start_after >= key
                    and not start_after.startswith(key)
                ):
                    continue
                yield from self._walk(entry.path, key, "", start_after)
            else:
                if start_after is not None and key <= start_after:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted since scandir
                except OSError as exc:
                    raise self._error("list", key, exc) from exc
                yield ObjectMeta(key, st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        """Delete the file; a missing key (or one naming a directory) is not an error.

        Empty parent directories are left in place.

        Raises:
            InvalidKey: the key is malformed or would leave the root.
            StorageError: the file exists but cannot be removed.
        """
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return
        except PermissionError as exc:  # macOS reports unlink(directory) as EPERM
            if os.path.isdir(path):
                return
            raise self._error("delete", key, exc) from exc
        except OSError as exc:
            raise self._error("delete", key, exc) from exc

    def open_input(self, key: str) -> pa.NativeFile:
        """Return a memory-mapped, seekable Arrow file of the object.

        The mapping stays valid if the object is deleted meanwhile (POSIX).

        Raises:
            ObjectNotFound: no such regular file.
            InvalidKey: the key is malformed or would leave the root.
            StorageError: any other failure.
        """
        path = self._path(key)
        try:
            return pa.memory_map(path, "r")
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            if os.path.isdir(path):
                raise ObjectNotFound(key) from None
            raise self._error("open_input", key, exc) from exc

    # --- maintenance -------------------------------------------------------------

    def remove_temp_files(self, older_than: float = 3600.0, *, dry_run: bool = False) -> int:
        """Delete leftovers of killed writers older than ``older_than`` seconds.

        Leftovers are temp files, and temp directories (a Spark job's staging
        directory, see :meth:`link_if_absent`) whose newest entry is that old.
        Writes in flight are younger than any sane threshold; the default of an
        hour leaves them alone. Returns how many leftovers were removed (with
        ``dry_run``, how many would be). Never raises for files that vanish
        concurrently.
        """
        cutoff = time.time() - older_than
        removed = 0
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in [d for d in dirnames if d.startswith(TEMP_PREFIX)]:
                dirnames.remove(name)  # not walked: removed whole, or left whole
                path = os.path.join(dirpath, name)
                if _newest_mtime(path) <= cutoff:
                    if not dry_run:
                        shutil.rmtree(path, ignore_errors=True)
                    removed += 1
            for name in filenames:
                if not name.startswith(TEMP_PREFIX):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    if os.lstat(path).st_mtime <= cutoff:
                        if not dry_run:
                            os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed
