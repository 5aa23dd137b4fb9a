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
(:class:`Protection`), and both read the log again before any deletion once
their last look is older than :data:`LOG_RECHECK_SECONDS`, so an export
registered while they run is honoured within that time; the exporter waits
:data:`EXPORT_SETTLE_SECONDS` before it checks that what it shares is still
there.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from mere.errors import (  # noqa: F401 (re-exported)
    DataFileMissing,
    InvalidArgument,
    MereError,
    RetentionTooShort,
    VersionNotFound,
)
from mere.log.actions import AddFile, Commit, Export, TableMeta, is_external_path
from mere.log.log import Log
from mere.properties import (  # re-exported: maintenance is where users meet them
    MIN_RETENTION_PROPERTY,
    minimum_retention,
)

if TYPE_CHECKING:
    from mere.snapshot.state import DatabaseState
    from mere.txn.context import DatabaseContext

#: Vacuum and expiry read the log again before a deletion when their last look
#: at it is older than this (seconds): an export registered meanwhile is honoured.
LOG_RECHECK_SECONDS = 0.5
#: How long an exporter waits, after registering an export that shares what a
#: running vacuum or expiry may not know to keep, before it checks that all of it
#: is still there: longer than :data:`LOG_RECHECK_SECONDS` plus a deletion.
EXPORT_SETTLE_SECONDS = 1.5


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
        ValueError: a negative retention.
        RetentionTooShort: below the minimum, without ``force``.
    """
    if not isinstance(retention, timedelta):
        raise TypeError(f"retention must be a datetime.timedelta, not {type(retention).__name__}")
    if retention < timedelta(0):
        raise InvalidArgument("retention cannot be negative")
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
    export): those the same table already had at version ``since``.
    """
    shared = []
    for meta in tables:
        earlier = since.tables.get(meta.id) if since is not None else None
        for path, add in state.tables[meta.id].files.items():
            if since is None or (earlier is not None and path in earlier.files):
                shared.append((meta, add))
    return shared


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
        if not export.protects or self.exports.get(export.name) == export:
            return
        try:
            state = self.db.state_at(export.version)
            since = self.db.state_at(export.since) if export.since is not None else None
            tables = exported_tables(state, export)
        except VersionNotFound as exc:
            raise VersionNotFound(
                f"cannot tell which data files export {export.name!r} keeps: {exc}",
                help=f"drop the export (drop_export({export.name!r})) if it is no longer needed",
            ) from exc
        self.exports[export.name] = export
        for meta, add in shared_files(state, since, tables):
            if not is_external_path(add.path):
                self.by_key.setdefault(meta.prefix + add.path, set()).add(export.name)

    def add_state(self, state: DatabaseState) -> None:
        for export in state.exports.values():
            self.add(export)

    def add_commits(self, commits: Iterable[Commit]) -> None:
        for commit in commits:
            for action in commit.actions:
                if isinstance(action, Export):
                    self.add(action)

    def keeping(self, key: str) -> set[str]:
        """The names of the exports that keep ``key`` (empty: none)."""
        return self.by_key.get(key, set())


class LogWatch:
    """Reads the commits that land while a maintenance verb runs.

    ``stale`` says when the last look is older than :data:`LOG_RECHECK_SECONDS`:
    a deletion must not be issued then before looking again.
    """

    def __init__(self, db: DatabaseContext, seen: int, looked: float) -> None:
        self.db = db
        self.seen = seen
        self.looked = looked  # monotonic time the last look started

    @property
    def stale(self) -> bool:
        return time.monotonic() - self.looked > LOG_RECHECK_SECONDS

    def new_commits(self) -> list[Commit]:
        """The commits after the last one seen (read now)."""
        started = time.monotonic()
        newest = self.db.log.latest_version()
        commits: list[Commit] = []
        if newest is not None and newest > self.seen:
            commits = self.db.log.read_commits(self.seen + 1, newest)
            self.seen = newest
        self.looked = started
        return commits
