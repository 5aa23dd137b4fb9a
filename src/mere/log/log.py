"""The database-wide log on an object store: discovery, reads and create-only commits.

The log is the only shared mutable state, and it only grows by creating new
objects. Finding the latest version is O(1) requests in the common case: read
the best-effort ``_log/_latest`` hint and probe forward until a version does
not exist; listing with a start-after key is the fallback.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from enum import Enum

import pyarrow as pa

from mere.errors import (
    AlreadyExists,
    CommitOutcomeUnknown,
    CorruptLog,
    MereError,
    NotDurable,
    NotWritten,
    ObjectNotFound,
    StorageError,
    VersionNotFound,
)
from mere.log.actions import Action, Commit, decode_commit
from mere.log.checkpoint import (
    CheckpointData,
    PartRef,
    checkpoint_parts,
    decode_checkpoint,
    delete_parts,
    encode_manifest,
    fetch_part,
    has_duplicates,
    read_part,
)
from mere.log.keys import (
    CHECKPOINT_HINT,
    LATEST_HINT,
    LOG_PREFIX,
    checkpoint_key,
    commit_key,
    parse_log_key,
)
from mere.storage.base import ObjectStore

log = logging.getLogger("mere.log")

#: Forward probes before falling back to a listing (a very stale hint).
MAX_PROBES = 16
#: Writers refresh the latest-version hint at versions that are multiples of this,
#: and a reader that had to probe further than this past the hint refreshes it:
#: discovery then costs one get and at most HINT_INTERVAL + 1 heads (docs/format.md §3).
HINT_INTERVAL = 8
#: Winners' commits read back by lost puts, kept until a rebase reads them.
WINNERS_KEPT = 8
#: The largest number of commits :meth:`Log.read_forward` asks for at once.
FORWARD_WINDOW = 16
#: How often an ambiguous commit put is re-tried with the same bytes.
AMBIGUOUS_PUT_ATTEMPTS = 3


class PutOutcome(Enum):
    """What a create-only commit attempt established."""

    WON = "won"  # our bytes are at that version
    LOST = "lost"  # another commit is at that version


class Log:
    """Reads and writes one database's log through an object store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        # Commit files never change: the winner a lost put read back serves the
        # rebase that follows (read_commit), which would otherwise get it again.
        self._winners: dict[int, bytes] = {}
        self._winners_lock = threading.Lock()

    # --- discovery -------------------------------------------------------------

    def latest_version(self, known: int | None = None) -> int | None:
        """The newest committed version, or None if the database does not exist.

        ``known`` is a version the caller saw committed recently (within
        ``STALE_SNAPSHOT_SECONDS``, so it cannot have been expired since): probing
        starts there without checking that it exists, which saves a request per
        discovery for a client that keeps committing. The hint is only trusted
        after its version is seen to exist.
        """
        start = known
        hint = self._read_hint(LATEST_HINT)
        if hint is not None and (known is None or hint > known):
            if self.store.exists(commit_key(hint)):
                start = hint
        if start is None:
            latest = self._latest_by_listing(None)
            if latest is not None:
                self.write_latest_hint(latest)
            return latest
        version = start
        for _ in range(MAX_PROBES):
            if not self.store.exists(commit_key(version + 1)):
                try:
                    self.check_end(version, self.store.noted_version(LOG_PREFIX))
                except VersionNotFound:
                    if known is None:
                        raise
                    return self.latest_version()  # ``known`` was expired: discover afresh
                if version - start > HINT_INTERVAL and (hint is None or hint < version):
                    self.write_latest_hint(version)  # the next reader need not probe as far
                return version
            version += 1
        latest = self._latest_by_listing(version)
        if latest is not None:
            self.write_latest_hint(latest)
        return latest

    def check_end(self, version: int, noted: int | None) -> None:
        """Raise the gap error if ``version + 1``, found missing, is a gap, not the end.

        ``noted`` is a version the turns say was committed (:meth:`ObjectStore.noted_version`):
        beyond ``version``, ``version + 1`` was created before it, so if it is
        still missing, damage removed it. Taking such a gap for the end of the
        log would hide the versions above it, and a writer would fill it with
        a commit those versions do not build on. A note from elsewhere (a copy
        of the database taken while writers went on) is told apart by listing
        the log, only then.

        Raises:
            CorruptLog: a gap at ``version + 1``.
            VersionNotFound: ``version + 1`` was expired since this client saw
                ``version`` (a transaction older than a forced expiry).
        """
        missing = version + 1
        if noted is None or noted <= version or self.store.exists(commit_key(missing)):
            return
        later = self._first_commit_after(missing)  # listed first, then ``missing`` checked
        if later is None or self.store.exists(commit_key(missing)):
            return  # a note from elsewhere, or committed meanwhile: ``version`` was the end
        if self._has_commit_below(missing):
            raise _gap(missing, later)
        raise VersionNotFound(
            f"version {missing} was expired (the oldest commit is now version "
            f"{later} or below it): this client's state, at version {version}, is older "
            "than the log; a commit on top of it would land where no reader looks",
            help="start the transaction again; expire and vacuum with a retention longer "
            "than any transaction runs (force=True skips that minimum)",
        )

    @staticmethod
    def hint_due(version: int) -> bool:
        """Whether the writer of ``version`` refreshes the latest-version hint."""
        return version % HINT_INTERVAL == 0

    def _latest_by_listing(self, known: int | None) -> int | None:
        after = commit_key(known) if known is not None else None
        latest = known
        for meta in self.store.list(LOG_PREFIX, start_after=after):
            parsed = parse_log_key(meta.key)
            if parsed and parsed[1] == "commit" and (latest is None or parsed[0] > latest):
                latest = parsed[0]
        return latest

    def _read_hint(self, key: str) -> int | None:
        """A hint's version, or None when it is missing or unreadable (hints are never trusted)."""
        try:
            value = json.loads(self.store.get(key))["version"]
        except (ObjectNotFound, StorageError, ValueError, KeyError, TypeError):
            return None
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        )

    def move_hint_above(self, oldest: int, version: int) -> None:
        """Point the latest-version hint at ``version`` if it names one below ``oldest``
        (expired: every reader would list the log until a reader rewrote it)."""
        hint = self._read_hint(LATEST_HINT)
        if hint is not None and hint < oldest:
            self.write_latest_hint(version)

    def write_latest_hint(self, version: int) -> None:
        """Best effort: a failure only makes the next reader probe a little further."""
        self._write_hint(LATEST_HINT, version)

    def _write_hint(self, key: str, version: int) -> None:
        try:
            self.store.put(key, json.dumps({"version": version}).encode())
        except StorageError as exc:
            log.debug("could not write hint %s: %s", key, exc)

    # --- commits ---------------------------------------------------------------

    def read_commit(self, version: int) -> Commit:
        """Decode one commit.

        Raises:
            VersionNotFound: no commit at that version, and none below it or
                none above it (beyond the latest, or removed by expiry).
            CorruptLog: the file cannot be decoded, or it is missing while
                versions below and above it exist (a gap in the log).
        """
        data = self._get_commit(version)
        if data is None:
            raise self.missing_commit(version)
        return decode_commit(commit_key(version), version, data)

    def missing_commit(self, version: int) -> MereError:
        """The error for the commit of ``version`` not being there.

        A commit missing while a commit below it and one above it exist is a
        gap in the log (``CorruptLog``): commits are created one after the
        other and expiry only deletes a prefix, so nothing but damage makes
        one. Otherwise the version is beyond the latest or was expired
        (``VersionNotFound``). Costs up to two listings of ``_log/``, only on
        this error path.
        """
        not_found = VersionNotFound(f"version {version} does not exist")
        try:
            later = self._first_commit_after(version)
            if later is None or not self._has_commit_below(version):
                return not_found
        except StorageError:  # cannot tell: the plain answer
            return not_found
        return _gap(version, later)

    def _first_commit_after(self, version: int) -> int | None:
        """The smallest commit version above ``version``, or None."""
        for meta in self.store.list(LOG_PREFIX, start_after=commit_key(version)):
            parsed = parse_log_key(meta.key)
            if parsed is not None and parsed[1] == "commit":
                return parsed[0]
        return None

    def _has_commit_below(self, version: int) -> bool:
        """Whether any commit below ``version`` exists."""
        if version == 0:
            return False
        if self.store.exists(commit_key(version - 1)):
            return True
        for meta in self.store.list(LOG_PREFIX):
            parsed = parse_log_key(meta.key)
            if parsed is not None and parsed[1] == "commit":
                return parsed[0] < version  # keys list in version order
        return False

    def read_commits(self, first: int, last: int) -> list[Commit]:
        """Commits ``first..last`` inclusive, in order (concurrently from network stores)."""
        versions = range(first, last + 1)
        if len(versions) <= 4 or not self.store.concurrent_reads:
            return [self.read_commit(v) for v in versions]
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(self.read_commit, versions))

    def read_forward(self, first: int) -> list[Commit]:
        """The commits from ``first`` on, up to the first version that does not exist.

        For a writer that lost a race at ``first - 1`` and may be several
        versions behind: the commits it needs to rebase are read directly
        (no hint, no existence probes first), in windows of 1, 2, 4, ...
        versions read at once on network stores, so catching up ``k`` versions
        takes about log2(k) round trips and at most about ``k`` wasted misses.
        ``first - 1`` must have been seen committed recently (as ``known`` in
        :meth:`latest_version`); like probing, the read stops at a gap.
        """
        commits: list[Commit] = []
        version, window = first, 1
        while True:
            versions = list(range(version, version + window))
            if window == 1 or not self.store.concurrent_reads:
                found = [self._get_commit(versions[0])]
            else:
                with ThreadPoolExecutor(max_workers=window) as pool:
                    found = list(pool.map(self._get_commit, versions))
            for v, data in zip(versions, found, strict=True):
                if data is None:
                    return commits
                commits.append(decode_commit(commit_key(v), v, data))
            version += window
            if self.store.concurrent_reads:
                window = min(FORWARD_WINDOW, 2 * window)

    def _get_commit(self, version: int) -> bytes | None:
        """The bytes of a commit (a lost put's read-back if kept), or None if it does not exist."""
        if self._winners:  # empty but after a lost race: no lock for a replay's thousand reads
            with self._winners_lock:
                data = self._winners.pop(version, None)
            if data is not None:
                return data
        try:
            return self.store.get(commit_key(version))
        except ObjectNotFound:
            return None

    def put_commit(self, version: int, data: bytes, commit_id: str) -> PutOutcome:
        """Create the commit file for ``version`` and establish whether it is ours.

        "Already exists" and errors of unknown outcome are both resolved by
        reading the version back and comparing commit ids (client libraries
        retry on their own, so a create that landed can be reported as
        existing). An unconfirmed put is re-sent with the same bytes, which
        is safe because the commit id makes it idempotent.

        Raises:
            NotWritten: the put failed before anything was stored.
            CommitOutcomeUnknown: neither the put nor the read-back could
                establish the outcome.
        """
        key = commit_key(version)
        last_error: Exception | None = None
        for _ in range(AMBIGUOUS_PUT_ATTEMPTS):
            try:
                self.store.put_if_absent(key, data)
                return PutOutcome.WON
            except AlreadyExists:
                pass
            except NotWritten:
                raise  # definitely not landed: nothing to establish, and a retry fails alike
            except NotDurable as exc:  # ours landed: read back, it would count as won
                raise CommitOutcomeUnknown(
                    f"the commit of version {version} landed but may not be durable: {exc}",
                    version=version,
                    commit_id=commit_id,
                ) from exc
            except StorageError as exc:
                last_error = exc
            try:
                existing = self.store.get(key)
            except ObjectNotFound:
                continue  # did not land (yet): send the same bytes again
            except StorageError as exc:
                raise CommitOutcomeUnknown(
                    f"could not establish whether the commit of version {version} landed: {exc}",
                    version=version,
                    commit_id=commit_id,
                ) from exc
            if _commit_id_of(existing) == commit_id:
                return PutOutcome.WON
            with self._winners_lock:
                if len(self._winners) >= WINNERS_KEPT:
                    self._winners.clear()
                self._winners[version] = existing
            return PutOutcome.LOST
        raise CommitOutcomeUnknown(
            f"the commit of version {version} neither landed nor failed definitely "
            f"after {AMBIGUOUS_PUT_ATTEMPTS} attempts: {last_error}",
            version=version,
            commit_id=commit_id,
        )

    def commit_timestamp(self, version: int) -> int:
        return self.read_commit(version).info.timestamp

    def version_at_timestamp(self, timestamp_ms: int, oldest: int, latest: int) -> int:
        """The newest version committed at or before ``timestamp_ms`` (binary search).

        Commit timestamps never go backwards, so the search is exact.

        Raises:
            VersionNotFound: every readable version is newer than the timestamp.
        """
        try:
            first = self.commit_timestamp(oldest)
        except VersionNotFound:
            readable = self.oldest_version()  # versions below were expired
            if readable is None or readable <= oldest:
                raise
            oldest = readable
            first = self.commit_timestamp(oldest)
        if first > timestamp_ms:
            when = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat()
            raise VersionNotFound(
                f"no version was committed at or before {when}; the oldest "
                f"readable version is {oldest}"
            )
        lo, hi = oldest, latest
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.commit_timestamp(mid) <= timestamp_ms:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def oldest_version(self) -> int | None:
        """The oldest version that can still be read, or None if no version can be rebuilt.

        Expiry (``mere.maintain.expire``) deletes the commits and checkpoints
        below a version after making sure a checkpoint at that version exists,
        so the oldest readable version is 0 while commit 0 exists, and else the
        oldest checkpoint from which the remaining commits replay (and whose
        commit is still there, so its timestamp and history entry are known).
        Costs one request while commit 0 exists; else one listing of ``_log/``,
        read only as far as that checkpoint's commit (keys list in version order).
        """
        if self.store.exists(commit_key(0)):
            return 0
        first: int | None = None  # the oldest commit
        below: list[
            int
        ] = []  # checkpoints listed before it (islands, and those at first - 1, first)
        usable: int | None = None  # the oldest checkpoint from first - 1 on
        for meta in self.store.list(LOG_PREFIX):
            parsed = parse_log_key(meta.key)
            if parsed is None:
                continue
            version, kind = parsed
            if kind == "checkpoint":
                if first is None:
                    below.append(version)
                elif usable is None:
                    usable = version
            elif first is None:
                first = version
                if first == 0 or any(c >= first - 1 for c in below):
                    return first
            elif usable is not None and version >= usable:
                return usable  # its commit (or a later one) exists
        return None

    # --- checkpoints -----------------------------------------------------------

    def checkpoint_at_or_below(self, version: int, interval: int | None = None) -> int | None:
        """The newest checkpoint version ``<= version``, or None.

        ``interval`` (the database's checkpoint interval, when known) lets time
        travel find the automatic checkpoint below an old version with one
        request instead of a listing of the whole log.
        """
        hinted = self._read_hint(CHECKPOINT_HINT)
        if hinted is not None and hinted <= version and self.store.exists(checkpoint_key(hinted)):
            # A stale hint only costs extra replay; the listing below is for a
            # missing hint or a target older than it (time travel).
            return hinted
        if interval and version >= interval:
            candidate = version - version % interval
            if self.store.exists(checkpoint_key(candidate)):
                return candidate
        best = None
        for meta in self.store.list(LOG_PREFIX):
            parsed = parse_log_key(meta.key)
            if parsed and parsed[1] == "checkpoint" and parsed[0] <= version:
                best = parsed[0] if best is None else max(best, parsed[0])
        return best

    def open_checkpoint(self, version: int) -> CheckpointData:
        """The checkpoint at ``version``, its files' parts left unread (read on demand).

        Raises:
            VersionNotFound: no checkpoint at that version.
            CorruptLog: the manifest cannot be decoded, or claims another version.
        """
        key = checkpoint_key(version)
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            raise VersionNotFound(f"no checkpoint at version {version}") from None
        checkpoint = decode_checkpoint(key, data)
        if checkpoint.version != version:
            raise CorruptLog(key, f"claims version {checkpoint.version}")
        return replace(checkpoint, fetch=self.fetch_part)

    def read_checkpoint(self, version: int) -> CheckpointData:
        """The checkpoint at ``version`` with every part read and checked.

        Raises:
            VersionNotFound: no checkpoint at that version.
            CorruptLog: the manifest or a part cannot be decoded.
        """
        checkpoint = self.open_checkpoint(version)
        files = dict(checkpoint.files)
        layouts = checkpoint.layouts()
        for table_id, parts in checkpoint.parts.items():
            layout = layouts[table_id]
            tables = [layout.conform(t) for t in self.read_parts(parts, None)]
            files[table_id] = pa.concat_tables(tables)
            paths = files[table_id].column("path")
            if has_duplicates(paths):
                raise CorruptLog(checkpoint_key(version), "a data file is listed twice")
        return replace(checkpoint, files=files, parts={})

    def fetch_part(self, part: PartRef) -> pa.Buffer:
        """The bytes of one checkpoint part (:func:`mere.log.checkpoint.fetch_part`)."""
        return fetch_part(self.store, part)

    def read_part(self, part: PartRef, columns: Sequence[str] | None = None) -> pa.Table:
        """Columns (None: all) of one checkpoint part (:func:`mere.log.checkpoint.read_part`)."""
        return read_part(self.store, part, columns)

    def read_parts(self, parts: Sequence[PartRef], columns: Sequence[str] | None) -> list[pa.Table]:
        """Columns of several parts, read concurrently (pyarrow decodes without the GIL)."""
        if len(parts) <= 1:
            return [self.read_part(p, columns) for p in parts]
        with ThreadPoolExecutor(max_workers=min(8, len(parts))) as pool:
            return list(pool.map(lambda p: self.read_part(p, columns), parts))

    def write_checkpoint(
        self,
        version: int,
        timestamp: int,
        actions: Iterable[Action],
        tables: Mapping[str, Iterable[pa.Table]] | None = None,
    ) -> bool:
        """Create the checkpoint for ``version``; False if one already exists.

        ``actions`` are the live actions of the state (data files may be among
        them, as :class:`AddFile`); ``tables`` gives data files as columns
        instead (table id -> pieces of its file table, :mod:`mere.log.columns`).
        The parts are written first, the manifest last: a checkpoint exists
        once its manifest does, and a writer that loses the race deletes its parts.
        """
        kept, parts = checkpoint_parts(self.store, version, actions, tables)
        key = checkpoint_key(version)
        try:
            manifest = encode_manifest(version, timestamp, kept, parts)
        except BaseException:
            delete_parts(self.store, parts)
            raise
        # From here the manifest may land whatever happens, and then it names these
        # parts: they are deleted only once another manifest is known to have won.
        try:
            self.store.put_if_absent(key, manifest)
        except AlreadyExists:
            if self.store.get(key) != manifest:  # ours, if a retry of our put made it
                delete_parts(self.store, parts)
                return False
        hinted = self._read_hint(CHECKPOINT_HINT)
        if hinted is None or hinted < version:
            self._write_hint(CHECKPOINT_HINT, version)
        return True


def _gap(version: int, later: int) -> CorruptLog:
    """The error for the commit of ``version`` missing below ``later``'s: a gap in the log."""
    error = CorruptLog(
        commit_key(version),
        f"the commit of version {version} is missing but later versions exist (the next "
        f"is {later}): a gap in the log",
    )
    error.help = (
        "put the missing commit file back from a backup; `mere check` lists every defect of the log"
    )
    return error


def _commit_id_of(data: bytes) -> str | None:
    """The commit id on a commit file's first line, or None if it has none."""
    try:
        first = json.loads(data.split(b"\n", 1)[0])
        commit_id = first["commitInfo"]["commitId"]
    except (ValueError, KeyError, TypeError):
        return None
    return commit_id if isinstance(commit_id, str) else None
