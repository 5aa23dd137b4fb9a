"""What the maintenance verbs share: retention rules, durations, errors.

Vacuum (data files) and expire (log entries) follow one retention rule, so
that whatever one keeps readable the other keeps too:

* the **cutoff** is ``now - retention``;
* the **retained versions** are the version that was current at the cutoff
  (the newest committed at or before it) and every later version, the latest
  always included. Keeping the version current at the cutoff, not only the
  versions committed after it, is what makes "time travel to any moment within
  the retention" work: a snapshot as of a time just after the cutoff reads
  that version.

A retention shorter than a minimum is refused unless forced: files younger
than the retention may belong to a transaction that has not committed yet,
and a transaction pinned to an expired version could try to create a commit
slot expiry freed. The minimum must exceed the longest a transaction runs.

**Named exports and tags** (:mod:`mere.maintain.export`) keep more: while a
``minimal``, ``partial`` or ``tag`` export is live, expiry keeps its version
readable (a checkpoint at it) and vacuum keeps the data files it shares,
whatever the retention. Both learn the live exports from the log
(:class:`Protection`).

**Deletion marks** make an export registered while they run safe without any
wait (docs/format.md §11.9). Before each batch of deletions vacuum and expiry
write a mark under ``_deleting/`` naming the keys of the batch, *then* read
the log, spare what the exports registered there keep, delete, and only then
remove the mark. An exporter does the mirror image: it commits its export,
*then* lists the marks. Whichever writes second reads the other's write: a
batch whose log read missed the export was marked before the exporter looked,
so the exporter sees the mark (and waits for it to go, then checks that its
files are still there), or the batch had already ended and the check finds
what it deleted.

**Keep marks** do the same for a restore, which adds old files back: it writes
a mark under ``_keeping/`` naming them, *then* lists the deletion marks (waits
for those naming its files to go), checks its files exist, commits, and
removes its mark. A batch lists the keep marks after its own mark and before
its log read, and spares what they name and what the commits add: a restore
mark it saw is spared, one gone by then was committed before the log read,
and one written later found the batch's mark, waited, and then checked.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from mere.errors import (  # noqa: F401 (re-exported)
    CorruptLog,
    DataFileMissing,
    InvalidArgument,
    MereError,
    ObjectNotFound,
    RetentionTooShort,
    StorageError,
    VersionNotFound,
)
from mere.log.actions import AddFile, Commit, Export, TableMeta, is_external_path
from mere.log.columns import INLINE, PATH
from mere.log.log import Log
from mere.properties import (  # re-exported: maintenance is where users meet them
    MIN_RETENTION_PROPERTY,
    minimum_retention,
)
from mere.snapshot.files import LiveFiles
from mere.snapshot.loader import load_state
from mere.snapshot.state import DatabaseState

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

#: Where vacuum and expiry mark the batch of keys they are about to delete.
DELETING_PREFIX = "_deleting/"
#: Where a restore marks the old data files it is adding back (none may be deleted).
KEEPING_PREFIX = "_keeping/"
#: How long an exporter waits for a marked batch that holds what it keeps to end
#: (it fails cleanly after that: a liveness bound, not a safety one).
MARK_WAIT_SECONDS = 60.0


def check_retention(
    db: DatabaseContext,
    retention: timedelta,
    *,
    force: bool,
    min_retention: timedelta | None,
    verb: str,
) -> None:
    """Refuse a negative retention, or one below the minimum unless ``force``.

    Raises:
        InvalidArgument: a retention (or minimum) that is not a ``timedelta``, or a
            negative one.
        RetentionTooShort: below the minimum, without ``force``.
    """
    if not isinstance(retention, timedelta):
        raise InvalidArgument(
            f"retention must be a datetime.timedelta, not {type(retention).__name__}"
        )
    if retention < timedelta(0):
        raise InvalidArgument("retention cannot be negative")
    if min_retention is not None and not isinstance(min_retention, timedelta):
        raise InvalidArgument(
            f"min_retention must be a datetime.timedelta, not {type(min_retention).__name__}"
        )
    if min_retention is not None and min_retention < timedelta(0):
        raise InvalidArgument("min_retention cannot be negative")
    minimum = minimum_retention(db.latest_state().properties, min_retention)
    if retention < minimum and not force:
        raise RetentionTooShort(
            f"refusing to {verb} with a retention of {retention}, below the minimum of "
            f"{minimum}: files and log entries younger than the minimum may belong to "
            "transactions that have not committed yet, or to readers still using them",
            help="pass force=True (CLI: --force) if no transaction runs longer than the "
            f"retention, or set the database property {MIN_RETENTION_PROPERTY}",
        )


def now_seconds(now: float | None) -> float:
    """The current time in seconds since the epoch (``now`` when given: an injected clock)."""
    return time.time() if now is None else float(now)


def oldest_retained_version(log: Log, oldest: int, latest: int, cutoff_ms: int) -> int:
    """The oldest retained version: the newest version committed at or before the cutoff.

    ``oldest`` is the oldest readable version; when every readable version is
    newer than the cutoff, it is the answer. Commit timestamps strictly
    increase with versions, so a binary search finds it.
    """
    if log.commit_timestamp(oldest) > cutoff_ms:
        return oldest
    return log.version_at_timestamp(cutoff_ms, oldest, latest)


def readable_range(db: DatabaseContext) -> tuple[int, int]:
    """(oldest readable version, latest version) of the database.

    Raises:
        DatabaseNotFound: there is no log any more.
        VersionNotFound: no version can be rebuilt (a damaged log).
    """
    latest = db.latest_state().version
    oldest = db.log.oldest_version()
    if oldest is None:
        raise VersionNotFound(f"no version of the database at {db.uri} can be rebuilt")
    return min(oldest, latest), latest


# --- what live exports keep ----------------------------------------------------------------


def kept_versions(export: Export) -> list[int]:
    """The versions a live export keeps readable: its own, and a partial export's ``since``."""
    if not export.protects:
        return []
    return sorted({export.version, *([export.since] if export.since is not None else [])})


def exported_tables(state: DatabaseState, export: Export) -> list[TableMeta]:
    """The tables an export covers, as of its version (every table when it names none)."""
    if export.tables is None:
        return sorted((t.meta for t in state.tables.values()), key=lambda m: m.name)
    found = []
    for name in export.tables:
        table = state.table_by_name(name)
        if table is None:
            raise VersionNotFound(
                f"export {export.name!r} names table {name!r}, which does not exist at "
                f"version {state.version}"
            )
        found.append(table.meta)
    return found


def shared_files(
    state: DatabaseState,
    since: DatabaseState | None,
    tables: Iterable[TableMeta],
) -> list[tuple[TableMeta, AddFile]]:
    """The live files of ``tables`` at ``state`` that an export shares with its source.

    Without ``since`` (a minimal export, a tag): every one. With it (a partial
    export): those the same table already had at version ``since``. An
    inlined file is never shared: its bytes travel in the target's log.
    """
    shared = []
    for meta in tables:
        earlier = since.tables.get(meta.id) if since is not None else None
        for path, add in state.tables[meta.id].files.items():
            if add.inline is not None:
                continue
            if since is None or (earlier is not None and path in earlier.files):
                shared.append((meta, add))
    return shared


def states_ascending(
    db: DatabaseContext, versions: Iterable[int]
) -> Iterator[tuple[int, DatabaseState | VersionNotFound | CorruptLog]]:
    """The states at ``versions``, in ascending order, each replayed on from the one before.

    Rebuilding each version on its own costs a checkpoint open and a replay per
    version (what live tags keep: one version each, possibly thousands); walking
    them in order replays only the commits between two of them (from a checkpoint
    when they are far apart, or one of them is an island below the oldest commit:
    :func:`~mere.snapshot.loader.load_state`). Only the last state is held.
    A version that cannot be rebuilt comes with its error instead.
    """
    previous: DatabaseState | None = None
    for version in sorted(set(versions)):
        try:
            if previous is None:
                state = db.state_at(version)
            else:
                state = load_state(db.log, version, previous)
        except (VersionNotFound, CorruptLog) as exc:
            yield version, exc
            continue
        previous = state
        yield version, state


#: An export's states as :func:`exported_states` finds them: the state at its version,
#: at its ``since`` (None for other modes) and the tables it covers; or why not.
ExportedState = tuple[DatabaseState, DatabaseState | None, list[TableMeta]]


def exported_states(
    db: DatabaseContext, exports: Sequence[Export]
) -> Iterator[tuple[Export, ExportedState | VersionNotFound | CorruptLog]]:
    """Each of ``exports`` (distinct names) with its states, walked in ascending version
    order (:func:`states_ascending`); an export whose version, ``since`` or tables
    cannot be rebuilt comes with that error instead (in that order of precedence)."""
    at_version: dict[int, list[Export]] = {}
    for export in exports:
        at_version.setdefault(export.version, []).append(export)
    since_versions = {e.since for e in exports if e.since is not None}
    failed: dict[int, VersionNotFound | CorruptLog] = {}
    since_states: dict[int, DatabaseState] = {}
    wanted = {v for e in exports for v in kept_versions(e)}
    for version, state in states_ascending(db, wanted):
        if not isinstance(state, DatabaseState):
            failed[version] = state
            for export in at_version.get(version, []):
                yield export, state
            continue
        if version in since_versions:
            since_states[version] = state
        for export in at_version.get(version, []):
            if export.since is not None and export.since in failed:
                yield export, failed[export.since]
                continue
            try:
                tables = exported_tables(state, export)
            except VersionNotFound as exc:
                yield export, exc
                continue
            since = since_states[export.since] if export.since is not None else None
            yield export, (state, since, tables)


def shared_paths(
    state: DatabaseState, since: DatabaseState | None, meta: TableMeta
) -> tuple[list[str], list[int]]:
    """The paths (and their rows in the table's files) of what :func:`shared_files` gives
    for one table, without building an ``AddFile`` per file."""
    files = state.tables[meta.id].files
    if isinstance(files, LiveFiles):
        columns = files.columns([PATH, INLINE])
        all_paths = columns.column(PATH).to_pylist()
        inlined = pc.is_valid(columns.column(INLINE))
        if pc.any(inlined).as_py():
            stored = pc.invert(inlined).to_pylist()
            rows = [i for i, keep in enumerate(stored) if keep]
        else:
            rows = list(range(len(all_paths)))
    else:
        all_paths = list(files)
        rows = [i for i, path in enumerate(all_paths) if files[path].inline is None]
    if since is not None:
        earlier = since.tables.get(meta.id)
        earlier_files = earlier.files if earlier is not None else {}
        rows = [i for i in rows if all_paths[i] in earlier_files]
    return [all_paths[i] for i in rows], rows


class Protection:
    """The data files live exports keep, by key, with the names of the exports keeping them.

    Built from the log: :meth:`add_state` takes the exports live in a state,
    :meth:`add_commits` those that commits register (an export dropped later
    stays protected for the rest of the run: erring on keeping).
    """

    def __init__(self, db: DatabaseContext) -> None:
        self.db = db
        self.by_key: dict[str, set[str]] = {}
        self.exports: dict[str, Export] = {}

    def add(self, export: Export) -> None:
        """Keep what ``export`` shares (a no-op for a full export, or one seen before).

        Raises:
            VersionNotFound: a version the export needs cannot be rebuilt; the
                caller must delete nothing then.
        """
        self.add_all([export])

    def add_all(self, exports: Iterable[Export]) -> None:
        """Keep what each of ``exports`` (distinct names) shares, their versions rebuilt in
        ascending order (:func:`states_ascending`), the files' keys read from columns.

        Raises:
            VersionNotFound: a version one of them needs cannot be rebuilt (the first
                such export, in the order given, is named); the caller must delete
                nothing then.
        """
        todo = [e for e in exports if e.protects and self.exports.get(e.name) != e]
        if not todo:
            return
        errors: dict[str, VersionNotFound | CorruptLog] = {}
        done: list[tuple[Export, list[str]]] = []
        # The keys of a table's files, while they stay the same object (no commit between
        # two exported versions touched the table): worked out once.
        keys_of: dict[str, tuple[object, list[str]]] = {}
        for export, found in exported_states(self.db, todo):
            if not isinstance(found, tuple):
                errors[export.name] = found
                continue
            state, since, tables = found
            keys: list[str] = []
            for meta in tables:
                files = state.tables[meta.id].files
                cached = keys_of.get(meta.id) if since is None else None
                if cached is not None and cached[0] is files:
                    keys += cached[1]
                    continue
                paths, _ = shared_paths(state, since, meta)
                table_keys = [meta.prefix + p for p in paths if not is_external_path(p)]
                if since is None:
                    keys_of[meta.id] = (files, table_keys)
                keys += table_keys
            done.append((export, keys))
        for export in todo:
            error = errors.get(export.name)
            if isinstance(error, CorruptLog):
                raise error
            if error is not None:
                raise VersionNotFound(
                    f"cannot tell which data files export {export.name!r} keeps: {error}",
                    help=f"drop the export (drop_export({export.name!r})) if it is no "
                    "longer needed",
                ) from error
        by_key = self.by_key
        for export, keys in done:
            self.exports[export.name] = export
            name = export.name
            for key in keys:
                names = by_key.get(key)
                if names is None:
                    by_key[key] = {name}
                else:
                    names.add(name)

    def add_state(self, state: DatabaseState) -> None:
        self.add_all(state.exports.values())

    def add_commits(self, commits: Iterable[Commit]) -> None:
        for commit in commits:
            for action in commit.actions:
                if isinstance(action, Export):
                    self.add(action)

    def keeping(self, key: str) -> set[str]:
        """The names of the exports that keep ``key`` (empty: none)."""
        return self.by_key.get(key, set())


class LogWatch:
    """Reads the commits that land while a maintenance verb runs."""

    def __init__(self, db: DatabaseContext, seen: int) -> None:
        self.db = db
        self.seen = seen

    def new_commits(self) -> list[Commit]:
        """The commits after the last one seen (read now)."""
        newest = self.db.log.latest_version()
        commits: list[Commit] = []
        if newest is not None and newest > self.seen:
            commits = self.db.log.read_commits(self.seen + 1, newest)
            self.seen = newest
        return commits


# --- deletion and keep marks (docs/format.md §11.9) -------------------------------------------


@dataclass(frozen=True)
class Mark:
    """A batch of keys a run is deleting (vacuum, expire) or keeping (restore), or was, if
    it was killed."""

    key: str
    verb: str
    keys: frozenset[str]
    created_time: int  # ms since the epoch


@contextmanager
def marked_deletion(db: DatabaseContext, verb: str, keys: Iterable[str]) -> Iterator[None]:
    """Mark ``keys`` as being deleted for the duration of the block.

    The caller reads the keep marks (:func:`kept_keys`) *inside* the block,
    after the mark exists, then the log, and only then deletes: an export or a
    restore committed before that read is seen; one committed after it finds
    the mark. The mark is removed only when the block ends normally or with an
    error (a killed run leaves it: it blocks exports of its keys until
    :func:`sweep_stale_marks` removes it).
    """
    with _marked(db, DELETING_PREFIX, verb, keys):
        yield


@contextmanager
def marked_keeping(db: DatabaseContext, verb: str, keys: Iterable[str]) -> Iterator[None]:
    """Mark ``keys`` as being added back (a restore) for the duration of the block: no
    batch of deletions that lists the keep marks after this one exists deletes them."""
    with _marked(db, KEEPING_PREFIX, verb, keys):
        yield


@contextmanager
def _marked(db: DatabaseContext, prefix: str, verb: str, keys: Iterable[str]) -> Iterator[None]:
    mark = f"{prefix}{uuid.uuid4().hex}.json"
    body = {"verb": verb, "createdTime": int(time.time() * 1000), "keys": sorted(keys)}
    db.store.put_if_absent(mark, json.dumps(body).encode())
    try:
        yield
    except StorageError:
        raise  # a deletion's outcome may be unknown: the mark stays, as a killed run's
    except BaseException:
        db.store.delete(mark)
        raise
    db.store.delete(mark)


def deletion_marks(db: DatabaseContext) -> list[Mark]:
    """The deletion marks present now (one listing, one get per mark)."""
    return _marks(db, DELETING_PREFIX)


def kept_keys(db: DatabaseContext) -> set[str]:
    """Every key a keep mark present now names (a restore adding old files back)."""
    return {key for mark in _marks(db, KEEPING_PREFIX) for key in mark.keys}


def _marks(db: DatabaseContext, prefix: str) -> list[Mark]:
    """The marks under ``prefix`` now (a mark gone meanwhile is skipped)."""
    marks = []
    for meta in db.store.list(prefix):
        try:
            body = json.loads(db.store.get(meta.key))
        except ObjectNotFound:
            continue
        except ValueError:  # not a mark mere wrote: it marks nothing
            continue
        marks.append(
            Mark(
                meta.key,
                str(body.get("verb", "")),
                frozenset(str(k) for k in body.get("keys", [])),
                int(body.get("createdTime", 0)),
            )
        )
    return marks


def await_marks(db: DatabaseContext, touches: Callable[[Mark], bool], timeout: float) -> list[Mark]:
    """Wait until no mark that ``touches`` says matters is present; return those seen.

    Returns the marks that mattered (empty when none was there at the first
    look): what they named may be gone, so the caller checks it afterwards.

    Raises:
        TimeoutError: such a mark is still there after ``timeout`` seconds
            (a run still deleting, or one that was killed).
    """
    seen: dict[str, Mark] = {}
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        pending = [m for m in deletion_marks(db) if touches(m)]
        if not pending:
            return list(seen.values())
        seen.update((m.key, m) for m in pending)
        if time.monotonic() > deadline:
            oldest = min(pending, key=lambda m: m.created_time)
            raise TimeoutError(
                f"a {oldest.verb} run is still deleting (mark {oldest.key}, written at "
                f"{oldest.created_time} ms since the epoch)"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def sweep_stale_marks(db: DatabaseContext, older_than: float, *, dry_run: bool) -> int:
    """Remove the marks last modified before ``older_than`` (seconds since the epoch).

    A batch of deletions, or a restore's check and commit, takes far less than
    the minimum retention, which is longer than any transaction runs; a mark
    older than that was left by a killed run.
    """
    stale = [
        m.key
        for prefix in (DELETING_PREFIX, KEEPING_PREFIX)
        for m in db.store.list(prefix)
        if m.modified < older_than
    ]
    if not dry_run:
        for key in stale:
            db.store.delete(key)
    return len(stale)
