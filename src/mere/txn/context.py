"""What maintenance and Spark verbs may ask of a database: a narrow, public context.

``mere.maintain`` and ``mere.spark`` receive a :class:`DatabaseContext`
(a :class:`mere.Database` is one) instead of reaching into the database's
private state, and never import :mod:`mere.database` for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from mere.log.log import Log
from mere.snapshot.state import DatabaseState
from mere.storage import ObjectStore

if TYPE_CHECKING:
    from mere.snapshot.snapshot import Snapshot
    from mere.timestamps import Moment
    from mere.txn.stage import Stage
    from mere.txn.transaction import Isolation, Transaction

T = TypeVar("T")


class DatabaseContext(Protocol):
    """A database as the verbs see it: its store and log, its states, new transactions."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def log(self) -> Log: ...

    @property
    def uri(self) -> str: ...

    @property
    def target_file_size(self) -> int: ...

    def latest_state(self) -> DatabaseState:
        """The state at the latest version (found with O(1) requests)."""
        ...

    def state_at(self, version: int) -> DatabaseState:
        """The state at ``version`` (from the nearest checkpoint and cache)."""
        ...

    def snapshot(
        self, version: int | str | None = None, timestamp: Moment | None = None
    ) -> Snapshot:
        """Every table at one version: the latest, a given one or named one, or as of a time."""
        ...

    def after_commit(self, state: DatabaseState) -> None:
        """What follows a commit this client made (state cache, hint, checkpoint when due)."""
        ...

    def begin(
        self,
        isolation: Isolation = ...,
        *,
        state: DatabaseState | None = None,
        max_commit_attempts: int | None = None,
    ) -> Transaction:
        """A transaction reading ``state`` (default: the latest)."""
        ...


def run_statement(tx: Transaction, work: Callable[[Stage], T], *, autocommit: bool) -> T:
    """Run one statement in ``tx``; with ``autocommit``, the transaction is its own.

    The one way every verb that may own its transaction — ``db.table(name)``'s
    verbs, a ``Table.merge`` builder, Spark's MERGE and DML — runs: the
    statement applies entirely or not at all; an owned transaction commits
    when the statement succeeds and is aborted (its files deleted) when
    anything raises.
    """
    try:
        with tx.statement() as stage:
            result = work(stage)
        if autocommit:
            tx.commit()
        return result
    finally:
        if autocommit:
            tx.abort()  # a no-op once the commit settled the transaction


__all__ = ["DatabaseContext", "run_statement"]
