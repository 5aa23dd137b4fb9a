"""What losing a commit race costs: the winner's commit is read once, not twice.

A put that finds its version taken reads the object back to compare commit
ids (a client's own retry can report "already exists" for a create that
landed); the rebase that follows uses those bytes instead of getting the
winner's commit again.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import mere
from mere.log.keys import commit_key
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
