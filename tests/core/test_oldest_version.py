"""The oldest readable version (docs/format.md §10, §11.3), found without reading the whole log.

While commit 0 exists the answer is 0 and costs one request; after expiry it
is the oldest checkpoint the remaining commits replay from, and the listing
of ``_log/`` stops at that checkpoint's commit. A vacuum or a read of an
expired version asks this of a log of 100,000 commits, which it used to list
to the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.log.keys import checkpoint_key, commit_key, parse_log_key
from mere.log.log import Log
from mere.storage import MemoryStore
from mere.storage.base import ObjectMeta


class ListedStore(MemoryStore):
    """A memory store that counts the keys its listings yield."""

    def __init__(self) -> None:
        super().__init__()
        self.listed = 0

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        for meta in super().list(prefix, start_after):
            self.listed += 1
            yield meta


def by_full_listing(store: MemoryStore) -> int | None:
    """The definition, from every log key: commit 0, else the oldest usable checkpoint."""
    commits, checkpoints = [], []
    for meta in store.list("_log/"):
        parsed = parse_log_key(meta.key)
        if parsed is not None:
            (commits if parsed[1] == "commit" else checkpoints).append(parsed[0])
    if not commits:
        return None
    first = min(commits)
    if first == 0:
        return 0
    usable = [c for c in checkpoints if first - 1 <= c <= max(commits)]
    return max(first, min(usable)) if usable else None


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.integers(0, 12), max_size=10),
    st.sets(st.integers(0, 12), max_size=6),
)
def test_the_oldest_version_is_what_the_whole_log_says(
    commits: set[int], checkpoints: set[int]
) -> None:
    """Any set of commit and checkpoint files, gaps and islands included."""
    store = MemoryStore()
    for v in commits:
        store.put_if_absent(commit_key(v), b"{}")
    for v in checkpoints:
        store.put_if_absent(checkpoint_key(v), b"")
    store.put_if_absent("_log/_latest", b"{}")
    assert Log(store).oldest_version() == by_full_listing(store)


def test_commit_0_answers_without_a_listing() -> None:
    store = ListedStore()
    db = mere.connect(store)
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(20):
        db.table("t").append([{"x": i}])
    store.listed = 0
    assert db.log.oldest_version() == 0
    assert store.listed == 0


def test_after_expiry_the_listing_stops_at_the_oldest_checkpoints_commit() -> None:
    store = ListedStore()
    db = mere.connect(store, checkpoint_interval=1000)
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(30):
        db.table("t").append([{"x": i}])
    result = db.expire(timedelta(0), force=True)
    for i in range(30):  # commits after the oldest readable one
        db.table("t").append([{"x": i}])
    store.listed = 0
    assert result.oldest_version > 0
    assert db.log.oldest_version() == result.oldest_version
    # the checkpoint's parts and manifest, then its commit: not the 30 commits after
    assert store.listed <= 5
    assert mere.connect(store, create=False).table("t").scan().num_rows == 60
