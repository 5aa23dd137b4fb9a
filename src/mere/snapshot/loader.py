"""Building the database state at a version, from a cached state or a checkpoint."""

from __future__ import annotations

from mere.errors import CorruptLog, VersionNotFound
from mere.log.keys import LOG_PREFIX, parse_log_key
from mere.log.log import Log
from mere.snapshot.files import LiveFiles, Reload
from mere.snapshot.state import DatabaseState

#: Replay from a cached state when it is at most this many versions behind.
MAX_INCREMENTAL_REPLAY = 1000


def load_state(log: Log, version: int, cached: DatabaseState | None = None) -> DatabaseState:
    """The state at ``version``, replaying as few commits as it can.

    Uses ``cached`` when it is at or not far below the target and the commits
    after it still exist, else the newest checkpoint at or below the target,
    else replays from version 0.

    Raises:
        VersionNotFound: a commit needed for the replay does not exist; when
            the version was expired, the message names the oldest readable one.
        CorruptLog: a commit or checkpoint cannot be decoded.
    """
    if cached is not None and cached.version == version:
        return cached
    try:
        if cached is not None and 0 <= version - cached.version <= MAX_INCREMENTAL_REPLAY:
            try:
                return replay(log, cached, version)
            except VersionNotFound:
                pass  # commits after it were expired (or it is a tag's island): a checkpoint
            except CorruptLog:
                # A damaged commit after it: a checkpoint above it reads on, as it does
                # for a handle that never read below the damage.
                above = log.checkpoint_at_or_below(version, _interval(cached))
                if above is None or above <= cached.version:
                    raise
        checkpoint = log.checkpoint_at_or_below(version, _interval(cached))
        if checkpoint is not None:
            return _replay_from(log, _open(log, checkpoint), version)
        try:
            first = log.read_commit(0)
        except VersionNotFound:
            raise VersionNotFound(
                f"version {version} cannot be rebuilt: version 0 is missing and no checkpoint "
                f"at or below {version} exists"
            ) from None
        return replay(log, DatabaseState.initial(first), version)
    except VersionNotFound as exc:
        oldest = log.oldest_version()
        if oldest is not None and version < oldest:
            raise VersionNotFound(
                f"version {version} was expired; the oldest readable version is {oldest}",
                help=f"read a version from {oldest} on, or one a tag or export keeps "
                "(db.exports() lists them)",
            ) from exc
        raise


def replay(log: Log, state: DatabaseState, version: int) -> DatabaseState:
    """Apply commits ``state.version + 1 .. version`` to ``state`` (committed ones: confirmed)."""
    if version > state.version:
        state = state.apply_many(log.read_commits(state.version + 1, version))
    return state.confirm()


def _open(log: Log, checkpoint: int) -> DatabaseState:
    """The state of a checkpoint, its files read when first needed."""
    return DatabaseState.from_checkpoint(log.open_checkpoint(checkpoint), reload=reloader(log))


def reloader(log: Log) -> Reload:
    """Reads a table's files anew at a committed version (its checkpoint was expired meanwhile)."""

    def reload(table_id: str, version: int) -> LiveFiles:
        try:
            state = load_state(log, version)
        except VersionNotFound as exc:
            raise VersionNotFound(
                f"the checkpoint these files were to be read from was expired, and version "
                f"{version} with it ({exc})",
                help="open the database again to read a retained version",
            ) from exc
        table = state.tables.get(table_id)
        if table is None:
            raise VersionNotFound(f"table {table_id} does not exist at version {version}")
        return table.live

    return reload


def _replay_from(log: Log, start: DatabaseState, version: int) -> DatabaseState:
    """Replay from a checkpoint; past one kept below the oldest commit, from a newer one.

    Expiry keeps the checkpoints of versions named exports keep, below the
    oldest commit (docs/format.md §11.3). Found by the interval probe for a
    later version, such a checkpoint cannot be replayed forward: the newest
    checkpoint at or below the version (by listing) is used instead.
    """
    try:
        return replay(log, start, version)
    except VersionNotFound:
        newest = None
        for meta in log.store.list(LOG_PREFIX):
            parsed = parse_log_key(meta.key)
            if parsed and parsed[1] == "checkpoint" and start.version < parsed[0] <= version:
                newest = parsed[0] if newest is None else max(newest, parsed[0])
        if newest is None:
            raise
        return replay(log, _open(log, newest), version)


def _interval(state: DatabaseState | None) -> int | None:
    """The checkpoint interval a known state records, if any."""
    try:
        return int(state.properties["checkpointInterval"]) if state is not None else None
    except (KeyError, ValueError):
        return None
