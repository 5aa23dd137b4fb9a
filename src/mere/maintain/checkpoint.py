"""Checkpoints on demand.

Writers checkpoint automatically every ``checkpointInterval`` commits
(docs/format.md §4). A checkpoint on demand does the same at the latest
version, e.g. before a burst of readers, or before expiry. It is create-only
like every checkpoint: if one already exists at that version it is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mere.snapshot.state import DatabaseState

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext


def checkpoint(db: DatabaseContext) -> int:
    """Write a checkpoint at the latest version (unless one exists); return that version."""
    state = db.latest_state()
    write_checkpoint(db, state)
    return state.version


def write_checkpoint(db: DatabaseContext, state: DatabaseState) -> bool:
    """Create the checkpoint of ``state``; False if one already existed at its version."""
    return db.log.write_checkpoint(
        state.version, state.timestamp, state.checkpoint_actions(), state.checkpoint_files()
    )
