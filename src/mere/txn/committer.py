"""The committer: the one path from staged actions to a version in the log.

::

    take a turn among this machine's writers and catch up with the log in it
    (a store with turns: ObjectStore.turns), else pause if other writers were
    racing lately (mere.txn.pacing)
       │
       ▼
    actions ──► encode, decode and apply to the base state, as a reader would
                (a commit a reader would reject is refused, never published)
       │
       ▼
    put _log/<base + 1>.json create-only, give the turn back
       │
       ├──WON──► after-commit hooks (state cache, hint, checkpoint) ──► version
       │
       │ LOST (ambiguous outcomes resolved by commit id: mere.log.Log.put_commit)
       ▼
    read the winners ──► conflict with our footprint? ──► ConflictError
       │ no              (the one whose put we lost, then, after a short random
       ▼                  wait, every commit up to the latest: Log.read_forward)
    rebase onto them, apply again, retry (bounded: max_attempts lost races,
    and COMMIT_PATIENCE_SECONDS while others keep committing). The retry puts
    the same bytes (encoded and decoded once: Prepared) unless a winner's
    timestamp forces a later one.

Catching up inside the turn checks the same conflicts as a lost race does.

Version 0 (a new database, an export's first commit) goes through
:meth:`Committer.create`, with the same validation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mere.errors import (
    CommitOutcomeUnknown,
    CorruptLog,
    InvalidArgument,
    InvalidCommit,
    RetriesExhausted,
    StorageError,
)
from mere.log.actions import (
    Action,
    AddFile,
    AppTxn,
    Commit,
    CommitInfo,
    RemoveFile,
    decode_commit,
    encode_commit,
)
from mere.log.keys import LOG_PREFIX, commit_key
from mere.log.log import Log, PutOutcome
from mere.snapshot.state import DatabaseState
from mere.storage.base import Turns
from mere.txn.conflicts import TxFootprint, check_winner
from mere.txn.pacing import Pacing, pacing_of

#: A transaction older than this moves to the latest version before its first commit try.
STALE_SNAPSHOT_SECONDS = 60.0
DEFAULT_MAX_COMMIT_ATTEMPTS = 100
#: A commit that lost ``max_attempts`` races keeps trying while it has been trying for
#: less than this (seconds): with many writers taking turns, it loses about one race
#: per other writer before its turn comes, and every race it loses is another's commit.
COMMIT_PATIENCE_SECONDS = 30.0

#: How long a commit waits for its turn among this machine's writers (ObjectStore.turns)
#: before it goes on without one (seconds) ...
TURN_PATIENCE_SECONDS = 1.0
#: ... polling first after this long, then twice as long each time, up to the maximum.
TURN_POLL_SECONDS = 50e-6
TURN_POLL_MAX_SECONDS = 1e-3

#: Builds the commitInfo for a commit id, base state, actions and commit timestamp.
DescribeCommit = Callable[[str, DatabaseState, Sequence[Action], int], CommitInfo]
#: Runs after a commit landed, with the state at the new version.
AfterCommit = Callable[[DatabaseState], None]


@dataclass(frozen=True)
class Committed:
    """A commit that landed: its version, the state it made, and its commitInfo."""

    version: int
    state: DatabaseState
    info: CommitInfo


@dataclass(frozen=True)
class Prepared:
    """A commit's bytes and what a reader decodes from them, good for any version > 0.

    A commit retried after a lost race puts the same bytes at the next
    version whenever its commitInfo did not change (mere.txn.committer's
    module docstring): it is encoded and decoded once, and only applied to
    each new base.
    """

    info: CommitInfo
    data: bytes
    decoded: Commit

    def apply_to(self, base: DatabaseState | None) -> DatabaseState:
        """The state the commit makes on ``base`` (None: as version 0), as a reader applies it.

        Raises:
            InvalidCommit: a reader would reject the commit there.
        """
        version = 0 if base is None else base.version + 1
        try:
            if base is None:
                return DatabaseState.initial(self.decoded)
            decoded = self.decoded
            if decoded.version != version:  # tried first on an older base
                decoded = replace(decoded, version=version)
            return base.apply(decoded)
        except CorruptLog as exc:
            raise _refused(version, exc) from None


def prepare(version: int, info: CommitInfo, actions: Sequence[Action]) -> Prepared:
    """Encode a commit for ``version`` and decode it back exactly as a reader would.

    Raises:
        InvalidCommit: a reader would reject the commit (nothing was published).
    """
    data = encode_commit(info, list(actions))
    try:
        return Prepared(info, data, decode_commit(commit_key(version), version, data))
    except CorruptLog as exc:
        raise _refused(version, exc) from None


def _refused(version: int, exc: CorruptLog) -> InvalidCommit:
    return InvalidCommit(
        f"refused to publish version {version}: readers would reject it ({exc.reason})",
        help="this is a bug in mere or in the engine writing through it; nothing was committed",
    )


def validate(
    base: DatabaseState | None, version: int, info: CommitInfo, actions: Sequence[Action]
) -> tuple[bytes, DatabaseState]:
    """Encode a commit and apply it to ``base`` exactly as a reader would.

    Returns the bytes to put and the state they make; ``base`` None means
    version 0.

    Raises:
        InvalidCommit: a reader would reject the commit (nothing was published).
    """
    prepared = prepare(version, info, actions)
    return prepared.data, prepared.apply_to(base)


def commit_timestamp(base: DatabaseState) -> int:
    """The timestamp of a commit on ``base``: now, but always after ``base``'s (format §3)."""
    return max(int(time.time() * 1000), base.timestamp + 1)


def changes_metadata(commit: Commit) -> bool:
    """Whether ``commit`` holds anything but data files and application markers."""
    return not all(isinstance(a, AddFile | RemoveFile | AppTxn) for a in commit.actions)


def _give_back(turns: Turns, version: int, commit_id: str) -> None:
    """Give the turn back, which makes a put made in it durable (ObjectStore.turns).

    Raises:
        CommitOutcomeUnknown: the put landed but may not survive a crash.
    """
    try:
        turns.give_back()
    except StorageError as exc:
        raise CommitOutcomeUnknown(
            f"the commit of version {version} landed but may not be durable: {exc}",
            version=version,
            commit_id=commit_id,
        ) from exc


@dataclass
class _Draft:
    """A commit being published: described anew for each base it is tried on.

    Encoded (and decoded back) again only when its commitInfo changed, that
    is when a winner took a timestamp at or after ours (format §3: they
    strictly increase).
    """

    commit_id: str
    actions: Sequence[Action]
    describe: DescribeCommit
    timestamp: int = 0
    prepared: Prepared | None = None

    def on(self, base: DatabaseState) -> Prepared:
        """The commit to put at ``base.version + 1``."""
        if self.timestamp <= base.timestamp:
            self.timestamp = commit_timestamp(base)
        info = self.describe(self.commit_id, base, self.actions, self.timestamp)
        if self.prepared is None or self.prepared.info != info:
            self.prepared = prepare(base.version + 1, info, self.actions)
        return self.prepared


class Committer:
    """Publishes commits to one log; see the module docstring for the steps.

    Args:
        log: the database's log.
        after_commit: hooks to run once a commit landed (never raise into the caller).
        max_attempts: how often a commit losing races to non-conflicting
            commits is rebased and retried.
    """

    def __init__(self, log: Log, after_commit: AfterCommit, *, max_attempts: int) -> None:
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise InvalidArgument("max_commit_attempts must be a whole number of at least 1")
        self.log = log
        self.after_commit = after_commit
        self.max_attempts = max_attempts

    def commit(
        self,
        base: DatabaseState,
        actions: Sequence[Action],
        footprint: TxFootprint,
        describe: DescribeCommit,
        *,
        began: float,
    ) -> Committed:
        """Publish ``actions`` on top of ``base`` (or a later version they rebase onto).

        ``began`` is the monotonic time the transaction began.

        Raises:
            InvalidCommit: a reader would reject the commit.
            ConflictError: a winner conflicts with ``footprint``.
            RetriesExhausted: lost ``max_attempts`` races in a row, and (unless
                ``max_attempts`` is 1) kept losing for ``COMMIT_PATIENCE_SECONDS``.
            CommitOutcomeUnknown: the outcome could not be established.
        """
        commit_id = uuid.uuid4().hex
        if time.monotonic() - began > STALE_SNAPSHOT_SECONDS:
            # The commits after an old snapshot may have been expired: trying the next
            # version could re-create an expired slot behind a checkpoint, so move to the
            # latest version (never expired) first, validating what lies in between.
            latest = self.log.latest_version()
            if latest is not None and latest > base.version:
                base = self.rebase(base, latest, footprint)
        pacing = pacing_of(self.log)
        turns = self.log.store.turns(LOG_PREFIX)
        if turns is None:
            pause = pacing.pause()
            if pause:
                time.sleep(pause)
        lost_at: float | None = None
        first_put: float | None = None
        attempt = 0
        draft = _Draft(commit_id, actions, describe)
        try:
            while True:
                attempt += 1
                if turns is not None:
                    base = self._take_turn(turns, base, footprint, pacing)
                try:
                    version = base.version + 1
                    commit = draft.on(base)
                    state = commit.apply_to(base)
                    put_at = time.monotonic()
                    if lost_at is None:
                        first_put = put_at
                    else:
                        pacing.caught_up(put_at - lost_at)
                    outcome = self.log.put_commit(version, commit.data, commit_id)
                    if turns is not None and outcome is PutOutcome.WON:
                        turns.note(version)
                finally:
                    if turns is not None:
                        _give_back(turns, version, commit_id)
                if outcome is PutOutcome.WON:
                    pacing.won(time.monotonic() - put_at)
                    self.after_commit(state)
                    return Committed(version, state, commit.info)
                pacing.lost()
                lost_at = put_at
                # The lost put read the winner back: move onto it. Then wait a random
                # time up to our catch-up (so that losers do not all race for the next
                # version again) and read forward to the latest (Log.read_forward).
                # With nothing to go by yet, try the next version at once, and read
                # forward only after a second loss in a row.
                winners = [self.log.read_commit(version)]
                wait = pacing.after_loss()
                if wait:
                    time.sleep(wait)
                    lost_at += wait
                if wait or attempt % 2 == 0:
                    winners += self.log.read_forward(version + 1)
                base = self.rebase_onto(base, winners, footprint)
                assert first_put is not None
                if attempt >= self.max_attempts and (
                    self.max_attempts == 1
                    or time.monotonic() - first_put >= COMMIT_PATIENCE_SECONDS
                ):
                    break
        finally:
            if turns is not None:  # still taken if catching up in the turn raised
                turns.give_back()
        raise RetriesExhausted(
            f"gave up after {attempt} attempts to commit",
            winning_version=base.version,
            table=None,
        )

    def _take_turn(
        self, turns: Turns, base: DatabaseState, footprint: TxFootprint, pacing: Pacing
    ) -> DatabaseState:
        """Wait for our turn (catching up with the log first), then catch up to the latest.

        Returns the base to commit on. After ``TURN_PATIENCE_SECONDS`` without a
        turn (its holder stopped, say), goes on without one: put_if_absent still
        decides, so a missed turn costs at most a lost race. For
        ``STALLED_TURN_SECONDS`` after that, this client does not wait for a
        turn it cannot take at once, so a stopped holder does not cost each
        commit a second.
        """
        held = turns.try_take()
        if not held:
            base = self.rebase_onto(base, self.log.read_forward(base.version + 1), footprint)
            if not pacing.turns_stalled():
                deadline = time.monotonic() + TURN_PATIENCE_SECONDS
                poll = TURN_POLL_SECONDS
                while not (held := turns.try_take()):
                    if time.monotonic() >= deadline:
                        pacing.stalled_turn()
                        break
                    time.sleep(poll)
                    poll = min(2 * poll, TURN_POLL_MAX_SECONDS)
        noted = turns.last_noted() if held else None
        if noted == base.version:
            return base  # no commit was made in a turn since base (Turns.last_noted)
        base = self.rebase_onto(base, self.log.read_forward(base.version + 1), footprint)
        self.log.check_end(base.version, noted)  # never fill a gap
        return base

    def rebase(self, base: DatabaseState, latest: int, footprint: TxFootprint) -> DatabaseState:
        """Check every commit after ``base`` up to ``latest`` and move onto it.

        Winners are applied in runs (one bulk change of each table's files per
        run, not one per winner: applying is most of a lost race's cost when
        many writers share the log). A winner is checked against the state
        below it only for table metadata (names, creations), so a run ends
        after each commit that changes metadata.
        """
        return self.rebase_onto(base, self.log.read_commits(base.version + 1, latest), footprint)

    def rebase_onto(
        self, base: DatabaseState, winners: Sequence[Commit], footprint: TxFootprint
    ) -> DatabaseState:
        """Check ``winners`` (the commits right after ``base``, in order) and move onto them."""
        run: list[Commit] = []
        for commit in winners:
            check_winner(footprint, base, commit)  # base's metadata is the winner's `before`
            run.append(commit)
            if changes_metadata(commit):
                base, run = base.apply_many(run), []
        return base.apply_many(run)

    def create(self, info: CommitInfo, actions: Sequence[Action]) -> Committed | None:
        """Publish version 0 (a new database). None when another client created it first.

        Raises:
            InvalidCommit: a reader would reject the commit.
        """
        data, state = validate(None, 0, info, actions)
        if self.log.put_commit(0, data, info.commit_id) is not PutOutcome.WON:
            return None
        self.after_commit(state)
        return Committed(0, state, info)


def first_commit_info(operation: str, timestamp: int, **parameters: object) -> CommitInfo:
    """The commitInfo of a version 0."""
    return CommitInfo(
        commit_id=uuid.uuid4().hex,
        timestamp=timestamp,
        read_version=None,
        isolation="serializable",
        operation=operation,
        parameters=dict(parameters),
    )


__all__ = [
    "COMMIT_PATIENCE_SECONDS",
    "DEFAULT_MAX_COMMIT_ATTEMPTS",
    "STALE_SNAPSHOT_SECONDS",
    "Committed",
    "Committer",
    "Prepared",
    "commit_timestamp",
    "first_commit_info",
    "prepare",
    "validate",
]
