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
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING

from mere.errors import (  # noqa: F401 (re-exported)
    DataFileMissing,
    InvalidArgument,
    MereError,
    RetentionTooShort,
    VersionNotFound,
)
from mere.log.log import Log
from mere.properties import (  # re-exported: maintenance is where users meet them
    MIN_RETENTION_PROPERTY,
    minimum_retention,
)

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext


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
