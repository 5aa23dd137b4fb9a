"""What losing a commit race costs.

A put that finds its version taken reads the object back to compare commit
ids (a client's own retry can report "already exists" for a create that
landed); the rebase that follows uses those bytes instead of getting the
winner's commit again. The winners are then applied in runs, not one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.log.keys import commit_key
from mere.snapshot.state import DatabaseState
from mere.storage import FaultyStore, MemoryStore
from mere.storage.base import ObjectStore

KV = pa.schema([pa.field("k", pa.int64())])


class KeyCounting(FaultyStore):
    """Counts gets by key."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.gets: dict[str, int] = {}

    def get(self, key: str) -> bytes:
        self.gets[key] = self.gets.get(key, 0) + 1
        return super().get(key)


def test_a_lost_race_reads_the_winners_commit_once() -> None:
    store = KeyCounting(MemoryStore())
    db = mere.connect(store)
    db.create_table("a", KV)
    db.create_table("b", KV)
    db.table("a").append([{"k": 0}])
    other = mere.connect(store.inner, create=False)
    theirs = other.table("b").append([{"k": 1}])  # db does not know this version
    store.gets.clear()
    assert db.table("a").append([{"k": 2}]) == theirs + 1
    assert store.gets.get(commit_key(theirs)) == 1
    assert db.table("a").scan().column("k").to_pylist() == [0, 2]
    fresh: Any = mere.connect(store.inner, create=False)
    assert fresh.table("b").scan().column("k").to_pylist() == [1]


def test_a_rebase_applies_winners_in_runs_and_ends_where_readers_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    db = mere.connect(store)
    for name in ("a", "b"):
        db.create_table(name, KV)
    db.table("a").append([{"k": 0}])
    other = mere.connect(store, create=False)
    for i in range(3):
        other.table("b").append([{"k": i}])
    other.create_table("c", KV)  # metadata: ends a run
    other.table("c").append([{"k": 9}])
    other.table("b").append([{"k": 3}])
    other.drop_table("c")
    other.table("b").append([{"k": 4}])

    runs: list[int] = []
    original = DatabaseState.apply_many

    def recording(self: DatabaseState, commits: Sequence[Any]) -> DatabaseState:
        runs.append(len(commits))
        return original(self, commits)

    monkeypatch.setattr(DatabaseState, "apply_many", recording)
    version = db.table("a").append([{"k": 1}])
    monkeypatch.undo()
    # Our commit checked on the stale base; it loses, moves onto the one winner it
    # read back and is checked again (after a first loss it tries the next version at
    # once); it loses again, so it reads forward: the six other winners in three runs
    # (ended by the create and the drop), then our commit checked again on top of them.
    assert runs == [1, 1, 1, 3, 3, 1, 1]
    fresh = mere.connect(store, create=False)
    assert db.snapshot().version == fresh.snapshot().version == version
    for name in ("a", "b"):
        mine = sorted(f.path for f in db.snapshot().table(name).files)
        assert mine == sorted(f.path for f in fresh.snapshot().table(name).files)
    assert db.tables() == fresh.tables() == ["a", "b"]


def test_a_conflicting_winner_inside_a_run_is_still_found() -> None:
    store = MemoryStore()
    db = mere.connect(store)
    db.create_table("a", KV)
    db.table("a").append([{"k": 0}])
    other = mere.connect(store, create=False)
    other.create_table("b", KV)
    other.table("b").append([{"k": 1}])
    with db.transaction() as tx:
        tx.table("a").delete("k = 0")
        other.table("a").delete("k = 0")  # removes the file tx also removes
        with pytest.raises(mere.ConflictError):
            tx.commit()
