"""The commit history: one entry per commit, from the commits' ``commitInfo``.

Every commit records its operation, parameters and metrics (docs/format.md
§2.1), so the history needs no other bookkeeping. After expiry the history
starts at the oldest readable version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mere.errors import InvalidArgument, VersionNotFound
from mere.log.actions import Commit
from mere.snapshot.snapshot import ms_to_datetime

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext


def history(db: DatabaseContext, limit: int | None = None) -> list[dict[str, Any]]:
    """One entry per commit, newest first (at most ``limit`` entries).

    Each entry holds the keys ``version``, ``timestamp`` (ISO 8601, UTC),
    ``operation``, ``parameters``, ``metrics`` (the raw ``operationMetrics``),
    ``isolation``, ``read_version``, ``commit_id``, and, taken from the
    metrics: ``tables`` (names touched), ``rows_added``, ``rows_removed``,
    ``files_added``, ``files_removed``, ``bytes_added``, ``bytes_removed``,
    ``app_transactions`` (app id -> version) and ``blind_append``.

    Raises:
        ValueError: ``limit`` is not a positive int.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InvalidArgument(f"limit must be a positive int, not {limit!r}")
    latest = db.latest_state().version
    first = 0 if limit is None else max(0, latest - limit + 1)
    try:
        commits = db.log.read_commits(first, latest)
    except VersionNotFound:
        oldest = db.log.oldest_version()  # the oldest commits were expired
        if oldest is None or oldest <= first:
            raise
        commits = db.log.read_commits(oldest, latest)
    return [history_entry(commit) for commit in reversed(commits)]


def history_entry(commit: Commit) -> dict[str, Any]:
    """The history entry of one commit (see :func:`history`)."""
    info = commit.info
    metrics = info.metrics
    return {
        "version": commit.version,
        "timestamp": ms_to_datetime(info.timestamp).isoformat(),
        "operation": info.operation,
        "parameters": info.parameters,
        "metrics": metrics,
        "isolation": info.isolation,
        "read_version": info.read_version,
        "commit_id": info.commit_id,
        "tables": list(metrics.get("tables", [])),
        "rows_added": _int(metrics.get("numAddedRows")),
        "rows_removed": _int(metrics.get("numRemovedRows")),
        "files_added": _int(metrics.get("numAddedFiles")),
        "files_removed": _int(metrics.get("numRemovedFiles")),
        "bytes_added": _int(metrics.get("numAddedBytes")),
        "bytes_removed": _int(metrics.get("numRemovedBytes")),
        "app_transactions": dict(metrics.get("appTransactions") or {}),
        "blind_append": info.is_blind_append,
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
