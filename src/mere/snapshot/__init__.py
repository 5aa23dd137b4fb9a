"""The snapshot layer: the state of every table at one version, and reads of it."""

from mere.snapshot.snapshot import Snapshot, TableSnapshot
from mere.snapshot.state import DatabaseState, TableState

__all__ = ["DatabaseState", "Snapshot", "TableSnapshot", "TableState"]
