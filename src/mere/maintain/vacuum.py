"""Vacuum: deleting data files nothing needs any more.

A data file under ``tables/`` is deleted only when BOTH hold:

* no retained version references it (see :mod:`mere.maintain.common`: the
  version current at the cutoff and every later one, the latest included), and
* its object was last modified before the cutoff (``now - retention``).

The second rule protects transactions that have not committed yet: their data
files exist before any commit references them, and are younger than the
retention as long as no transaction runs longer than that. This is why a
retention below the minimum is refused unless forced (the race delta-rs fixed
in PR #3835). The first rule is computed from the log itself, never from a
cached or hinted state, so a file a retained version reads is never deleted
(delta-rs #3392).

Files are referenced again only by commits, so the set of referenced files is
the live files of the oldest retained version plus every file added by a later
commit. Commits that land while vacuum runs are read before each batch of
deletions, and files they add are spared; that also covers a concurrent
restore re-adding an old file: a restore marks the files it adds back under
``_keeping/`` before it checks them, and each batch spares what those marks
name (:func:`~mere.maintain.common.marked_keeping`).

Files a live ``minimal``, ``partial`` or ``tag`` export shares
(:mod:`mere.maintain.export`) are kept whatever the retention, until the
export is dropped; the result names them with the exports keeping them. An
export registered while vacuum runs is honoured or finds out: each batch is
first marked under ``_deleting/`` (:func:`~mere.maintain.common.marked_deletion`),
then the log is read, then the batch is deleted and the mark removed; the
exporter commits first and looks for marks second (docs/format.md §11.9).

A primary key's filter sidecar (``<data file>.keys``, :mod:`mere.data.keyfilter`)
is kept exactly as long as its data file.

Vacuum never touches ``_log/`` (see :mod:`mere.maintain.expire`) and nothing
outside the database root: it only lists and deletes keys of its own store
(the absolute data paths of an export's target name its source's files, never
deleted from there).
On a local store it also sweeps ``.mere-tmp-*`` leftovers of killed writers
older than the retention; on every store, deletion marks of killed runs older
than the minimum retention.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from mere.data.keyfilter import data_key_of
from mere.log.actions import Action, AddFile, is_external_path
from mere.maintain.common import (
    LogWatch,
    Protection,
    check_retention,
    kept_keys,
    marked_deletion,
    minimum_retention,
    now_seconds,
    oldest_retained_version,
    readable_range,
    sweep_stale_marks,
)
from mere.maintain.progress import progress
from mere.snapshot.state import TableState
from mere.storage.local import LocalStore

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

#: Default retention: a week, as Delta Lake's ``deletedFileRetentionDuration``.
DEFAULT_RETENTION = timedelta(days=7)
#: Deletions between two looks at the log for new commits.
DELETE_BATCH = 100
DATA_PREFIX = "tables/"


@dataclass
class VacuumResult:
    """What vacuum deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool
    retention_seconds: float
    latest_version: int
    #: The oldest version whose files were all kept.
    oldest_retained_version: int
    files_deleted: int
    bytes_deleted: int
    #: Unreferenced files kept because they are younger than the retention.
    files_kept_young: int
    temp_files_deleted: int
    keys: list[str] = field(default_factory=list)
    #: Files no retained version needs, kept because live exports share them:
    #: export name -> the keys it keeps.
    kept_for_exports: dict[str, list[str]] = field(default_factory=dict)
    #: Deletion marks left by killed vacuum or expiry runs, removed.
    stale_marks_deleted: int = 0

    @property
    def files_kept_for_exports(self) -> int:
        """How many distinct files exports kept."""
        return len({key for keys in self.kept_for_exports.values() for key in keys})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return {**asdict(self), "files_kept_for_exports": self.files_kept_for_exports}


def vacuum(
    db: DatabaseContext,
    retention: timedelta = DEFAULT_RETENTION,
    *,
    dry_run: bool = False,
    force: bool = False,
    min_retention: timedelta | None = None,
    now: float | None = None,
) -> VacuumResult:
    """Delete the data files no retained version references, once older than ``retention``.

    Args:
        retention: how long unreferenced files and old versions are kept.
        dry_run: only report what would be deleted.
        force: allow a retention below the minimum (risky with concurrent writers).
        min_retention: the minimum (default: the database property
            ``vacuumMinRetention``, else 1 hour).
        now: the current time in seconds since the epoch (an injected clock).

    Raises:
        RetentionTooShort: below the minimum without ``force``.
        VersionNotFound: a live export's version cannot be rebuilt, so what it
            shares is unknown (nothing was deleted).
    """
    check_retention(db, retention, force=force, min_retention=min_retention, verb="vacuum")
    cutoff = now_seconds(now) - retention.total_seconds()
    oldest, latest = readable_range(db)
    keep_from = oldest_retained_version(db.log, oldest, latest, int(cutoff * 1000))
    referenced = _keys(db.state_at(keep_from).tables.values())
    if latest > keep_from:
        for commit in db.log.read_commits(keep_from + 1, latest):
            referenced.update(_added(commit.actions))
    protection = Protection(db)
    protection.add_state(db.state_at(latest))
    watch = LogWatch(db, latest)

    kept: dict[str, set[str]] = {}

    def spared(key: str) -> bool:
        """Whether a retained version or a live export needs ``key`` (noting the export)."""
        key = data_key_of(key)  # a key filter sidecar lives as long as its data file
        if key in referenced:
            return True
        names = protection.keeping(key)
        for name in names:
            kept.setdefault(name, set()).add(key)
        return bool(names)

    candidates: list[tuple[str, int]] = []
    young = 0
    for meta in db.store.list(DATA_PREFIX):
        if spared(meta.key):
            continue
        if meta.modified < cutoff:
            candidates.append((meta.key, meta.size))
        else:
            young += 1

    deleted: list[tuple[str, int]] = []
    with progress("vacuuming data files", 0 if dry_run else len(candidates)) as advance:
        for start in range(0, len(candidates), DELETE_BATCH):
            chunk = candidates[start : start + DELETE_BATCH]
            batch = [job for job in chunk if not spared(job[0])]
            if dry_run or not batch:
                deleted += batch
                advance(len(chunk))
                continue
            with marked_deletion(db, "vacuum", [key for key, _ in batch]):
                # Read the log only now that the mark exists: an export committed before
                # this read is in these commits, one committed after it finds the mark.
                # The keep marks next, before the log: a restore whose mark is gone by
                # then has committed, so the log read below sees what it added back.
                restoring = kept_keys(db)
                commits = watch.new_commits()
                for commit in commits:
                    referenced.update(_added(commit.actions))  # a restore re-adding a file
                protection.add_commits(commits)
                for key, size in batch:
                    if spared(key) or data_key_of(key) in restoring:
                        continue
                    db.store.delete(key)
                    deleted.append((key, size))
            advance(len(chunk))

    minimum = minimum_retention(db.latest_state().properties, min_retention)
    stale_marks = sweep_stale_marks(db, now_seconds(now) - minimum.total_seconds(), dry_run=dry_run)
    temp_files = _sweep_temp_files(db, cutoff, dry_run)
    return VacuumResult(
        dry_run=dry_run,
        retention_seconds=retention.total_seconds(),
        latest_version=latest,
        oldest_retained_version=keep_from,
        files_deleted=len(deleted),
        bytes_deleted=sum(size for _, size in deleted),
        files_kept_young=young,
        temp_files_deleted=temp_files,
        keys=[key for key, _ in deleted],
        kept_for_exports={name: sorted(keys) for name, keys in sorted(kept.items())},
        stale_marks_deleted=stale_marks,
    )


def _keys(tables: Iterable[TableState]) -> set[str]:
    """The keys of the live files of ``tables``."""
    return {
        table.meta.prefix + path
        for table in tables
        for path in table.files
        if not is_external_path(path)
    }


def _added(actions: Iterable[Action]) -> set[str]:
    """The keys of the files ``actions`` add."""
    return {
        f"tables/{a.table_id}/{a.path}"
        for a in actions
        if isinstance(a, AddFile) and not is_external_path(a.path)
    }


def _sweep_temp_files(db: DatabaseContext, cutoff: float, dry_run: bool) -> int:
    """Remove (or count) the local store's temporary-file leftovers older than the cutoff."""
    store = db.store
    if not isinstance(store, LocalStore):
        return 0
    return store.remove_temp_files(older_than=max(0.0, time.time() - cutoff), dry_run=dry_run)
