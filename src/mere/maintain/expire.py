"""Expiry: dropping log entries and checkpoints older than the retention.

The log only grows; expiry bounds it. It keeps every retained version (see
:mod:`mere.maintain.common`) readable by a fresh client:

1. find the oldest retained version R (the version current at the cutoff);
2. make sure a checkpoint exists at R, writing it (create-only) if needed,
   *before* deleting anything;
3. delete the commits below R, oldest first, then the checkpoints below R.

The latest version's commit is never deleted (R is at most the latest). A
crash at any point leaves a readable log: the remaining commits are a
contiguous suffix, and the checkpoint at R was written first. Afterwards
versions below R raise :class:`~mere.errors.VersionNotFound` naming R.

A live ``minimal``, ``partial`` or ``tag`` export keeps its version (and a
partial export its ``since`` version) readable below R: expiry writes a
checkpoint there first if none exists, and never deletes it until the export
is dropped. Such a version is an island: the commits around it go, the
checkpoint stays, and reading it by version or by the export's name works.
Each batch of deletions is marked under ``_deleting/`` first, then the
commits that landed meanwhile are read and what the exports they register
keep is spared (docs/format.md §11.9).

Why a minimum retention also applies here: a transaction pinned to a version
V tries to create commit V+1. Were V+1 expired, the create would succeed, so
a transaction must not run longer than the minimum retention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from mere.log.actions import Export
from mere.log.keys import LOG_PREFIX, checkpoint_key, parse_checkpoint_part_key, parse_log_key
from mere.maintain.checkpoint import write_checkpoint
from mere.maintain.common import (
    LogWatch,
    VersionNotFound,
    check_retention,
    kept_versions,
    marked_deletion,
    now_seconds,
    oldest_retained_version,
    readable_range,
)
from mere.maintain.progress import progress

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

#: Default log retention (as Delta Lake's ``logRetentionDuration``).
DEFAULT_LOG_RETENTION = timedelta(days=30)
#: Deletions marked, and preceded by a look at the log, together.
DELETE_BATCH = 100


@dataclass
class ExpireResult:
    """What expiry did (or, with ``dry_run``, would do)."""

    dry_run: bool
    retention_seconds: float
    latest_version: int
    #: The oldest version readable afterwards.
    oldest_version: int
    #: The version a checkpoint was written at first, or None if one existed.
    checkpoint_written: int | None
    commits_deleted: int
    checkpoints_deleted: int
    keys: list[str] = field(default_factory=list)
    #: Checkpoints below the oldest retained version kept (or, for the versions
    #: in ``export_checkpoints_written``, written) for live exports: name -> keys.
    kept_for_exports: dict[str, list[str]] = field(default_factory=dict)
    #: Versions of live exports a checkpoint was written at, to keep them readable.
    export_checkpoints_written: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return asdict(self)


def expire(
    db: DatabaseContext,
    retention: timedelta = DEFAULT_LOG_RETENTION,
    *,
    dry_run: bool = False,
    force: bool = False,
    min_retention: timedelta | None = None,
    now: float | None = None,
) -> ExpireResult:
    """Delete commits and checkpoints no retained version needs.

    Args:
        retention: how far back versions stay readable.
        dry_run: report what would be deleted, delete (and write) nothing.
        force: allow a retention below the minimum.
        min_retention: the minimum (default: the database property
            ``vacuumMinRetention``, else 1 hour).
        now: the current time in seconds since the epoch (an injected clock).

    Raises:
        RetentionTooShort: below the minimum without ``force``.
    """
    check_retention(db, retention, force=force, min_retention=min_retention, verb="expire")
    cutoff_ms = int((now_seconds(now) - retention.total_seconds()) * 1000)
    oldest, latest = readable_range(db)
    keep = oldest_retained_version(db.log, oldest, latest, cutoff_ms)

    # Versions below ``keep`` that live exports keep readable: version -> export names.
    islands: dict[int, set[str]] = {}

    def note(export: Export) -> None:
        for version in kept_versions(export):
            if version < keep:
                islands.setdefault(version, set()).add(export.name)

    for export in db.state_at(latest).exports.values():
        note(export)

    written: int | None = None
    if not db.store.exists(checkpoint_key(keep)) and keep > 0:
        written = keep
        if not dry_run:
            write_checkpoint(db, db.state_at(keep))
    islands_written: list[int] = []
    for version in sorted(islands):
        if db.store.exists(checkpoint_key(version)):
            continue
        islands_written.append(version)
        if dry_run:
            continue
        try:
            state = db.state_at(version)
        except VersionNotFound as exc:
            owners = ", ".join(sorted(islands[version]))
            raise VersionNotFound(
                f"export {owners} is at version {version}, which can no longer be rebuilt "
                f"({exc}); nothing was expired",
                help="drop the export if it is no longer needed",
            ) from exc
        write_checkpoint(db, state)

    commits: list[str] = []
    checkpoints: list[str] = []
    parts: list[str] = []  # of columnar checkpoints: deleted after their manifests
    for meta in db.store.list(LOG_PREFIX):
        parsed = parse_log_key(meta.key)
        part = parse_checkpoint_part_key(meta.key)
        if part is not None and part < keep and part not in islands:
            parts.append(meta.key)
        if parsed is None or parsed[0] >= keep:
            continue
        if parsed[1] == "checkpoint" and parsed[0] in islands:
            continue
        (commits if parsed[1] == "commit" else checkpoints).append(meta.key)
    doomed = sorted(commits) + sorted(checkpoints) + sorted(parts)  # oldest commits first
    deleted: list[str] = []
    if dry_run:
        deleted = doomed
    else:
        watch = LogWatch(db, latest)
        with progress("expiring log entries", len(doomed)) as advance:
            for start in range(0, len(doomed), DELETE_BATCH):
                batch = doomed[start : start + DELETE_BATCH]
                with marked_deletion(db, "expire", batch):
                    # Read the log only now that the mark exists: an export committed
                    # before this read keeps its version's checkpoint, one committed
                    # after it finds the mark (docs/format.md §11.9).
                    for commit in watch.new_commits():
                        for action in commit.actions:
                            if isinstance(action, Export):
                                note(action)
                    for key in batch:
                        parsed = parse_log_key(key)
                        if parsed and parsed[1] == "checkpoint" and parsed[0] in islands:
                            continue
                        if parse_checkpoint_part_key(key) in islands:
                            continue
                        db.store.delete(key)
                        deleted.append(key)
                advance(len(batch))
        db.log.move_hint_above(keep, latest)
    commit_keys = set(commits)
    kept: dict[str, list[str]] = {}
    for version, names in islands.items():
        for name in names:
            kept.setdefault(name, []).append(checkpoint_key(version))
    return ExpireResult(
        dry_run=dry_run,
        retention_seconds=retention.total_seconds(),
        latest_version=latest,
        oldest_version=keep,
        checkpoint_written=written,
        commits_deleted=sum(1 for key in deleted if key in commit_keys),
        checkpoints_deleted=sum(
            1 for key in deleted if parse_log_key(key) and key not in commit_keys
        ),
        keys=deleted,
        kept_for_exports={name: sorted(keys) for name, keys in sorted(kept.items())},
        export_checkpoints_written=islands_written,
    )
