"""Finding the latest version: the requests a commit costs, and what discovery may trust.

A client that keeps committing knows a version exists (it read or wrote it a
moment ago), so discovery starts probing there instead of asking the store
again; the hint is used only when it is ahead of that and exists. A one-row
append through ``db.table(name)`` finds the latest version once, not twice.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import mere
from mere.log.keys import LATEST_HINT, commit_key
from mere.log.log import HINT_INTERVAL, Log
from mere.storage import FaultyStore, MemoryStore

KV = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])


@pytest.fixture
def counted() -> tuple[mere.Database, FaultyStore]:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", KV)
    db.table("t").append([{"k": 0, "v": "a"}])
    return db, store


def requests_of(store: FaultyStore, action: object) -> dict[str, int]:
    before = dict(store.calls)
    assert callable(action)
    action()
    return {op: n - before.get(op, 0) for op, n in store.calls.items() if n - before.get(op, 0)}


def test_a_warm_one_row_append_costs_two_requests(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    cost = requests_of(store, lambda: db.table("t").append([{"k": 1, "v": "b"}]))
    # The data file and the commit: a client that committed a moment ago puts at
    # the next version directly, and the hint is refreshed only every HINT_INTERVAL.
    assert cost == {"put_if_absent": 2}
    assert sorted(db.table("t").scan().column("k").to_pylist()) == [0, 1]


def test_a_warm_append_that_loses_the_race_rebases() -> None:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", KV)
    db.table("t").append([{"k": 0, "v": "a"}])
    other = mere.connect(store.inner, create=False)
    theirs = other.table("t").append([{"k": 1, "v": "b"}])  # db does not know this version
    assert db.table("t").append([{"k": 2, "v": "c"}]) == theirs + 1
    assert sorted(db.table("t").scan().column("k").to_pylist()) == [0, 1, 2]


def test_a_warm_append_after_another_client_altered_the_table_starts_over() -> None:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", KV)
    db.table("t").append([{"k": 0, "v": "a"}])
    other = mere.connect(store.inner, create=False)
    with other.transaction() as tx:
        tx.alter_table("t").add_column("w", pa.int64())
    db.table("t").append([{"k": 1, "v": "b", "w": 7}])  # the new column: no stale error
    assert db.table("t").scan(filter="k = 1").column("w").to_pylist() == [7]


def test_a_new_client_checks_the_hint_before_trusting_it() -> None:
    store = FaultyStore(MemoryStore())
    writer = mere.connect(store)
    writer.create_table("t", KV)
    cost = requests_of(store, lambda: mere.connect(store, create=False))
    # The hint (version 0) exists; version 1 exists; version 2 does not.
    assert cost == {"get": 1, "head": 3}


def test_discovery_stays_bounded_while_hints_are_sparse() -> None:
    store = FaultyStore(MemoryStore())
    writer = mere.connect(store)
    writer.create_table("t", KV)
    for k in range(3 * HINT_INTERVAL):
        writer.table("t").append([{"k": k, "v": "x"}])
    cost = requests_of(store, lambda: mere.connect(store, create=False))
    assert cost["get"] == 1 and cost["head"] <= HINT_INTERVAL + 2 and "list" not in cost


def test_a_reader_that_probed_far_refreshes_the_hint() -> None:
    store = FaultyStore(MemoryStore())
    writer = mere.connect(store)
    writer.create_table("t", KV)
    for k in range(HINT_INTERVAL + 4):
        writer.table("t").append([{"k": k, "v": "x"}])
    store.put(LATEST_HINT, json.dumps({"version": 1}).encode())  # as if hint writes failed
    mere.connect(store, create=False)
    assert json.loads(store.get(LATEST_HINT))["version"] == writer.version


def test_a_hint_beyond_the_log_is_ignored_when_a_version_is_known(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    store.put(LATEST_HINT, json.dumps({"version": 50}).encode())
    assert db.version == 2
    db.table("t").append([{"k": 1, "v": "b"}])
    assert db.version == 3 and not store.exists(commit_key(50))


def test_a_stale_hint_below_a_known_version_costs_nothing(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    store.put(LATEST_HINT, json.dumps({"version": 0}).encode())
    cost = requests_of(store, lambda: db.version)
    assert cost == {"get": 1, "head": 1}  # probing starts at 2, not at the hint's 0


def test_commits_by_others_are_found_from_the_known_version(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    other = mere.connect(store.inner, create=False)
    for i in range(3):
        other.table("t").append([{"k": 10 + i, "v": "x"}])
    store.inner.delete(LATEST_HINT)  # no help from the hint
    assert db.version == 5
    assert sorted(db.table("t").scan().column("k").to_pylist()) == [0, 10, 11, 12]


def test_a_known_version_goes_stale_after_a_minute(
    counted: tuple[mere.Database, FaultyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    db, _ = counted
    assert db.known_version() == 2
    later = time.monotonic() + 61
    monkeypatch.setattr("mere.database.time.monotonic", lambda: later)
    assert db.known_version() is None


def test_discovery_without_a_known_version_or_hint_lists_the_log() -> None:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", KV)
    store.inner.delete(LATEST_HINT)
    listings = store.calls["list"]
    assert Log(store).latest_version() == 1
    assert store.calls["list"] == listings + 1
    assert Log(store).latest_version(known=1) == 1
    assert store.calls["list"] == listings + 1
