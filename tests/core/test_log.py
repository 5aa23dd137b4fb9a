"""The log: format, discovery, checkpoints."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import mere
from mere.log import encode_commit
from mere.log.actions import AddFile, CommitInfo, decode_commit
from mere.log.keys import checkpoint_key, commit_key
from mere.storage import MemoryStore

KV = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])


def test_version_zero_carries_the_format_version(db: mere.Database) -> None:
    lines = db.store.get(commit_key(0)).decode().splitlines()
    first, *rest = (json.loads(line) for line in lines)
    assert "commitInfo" in first
    assert {"protocol": {"formatVersion": 1}} in rest


def test_commit_file_layout(db: mere.Database) -> None:
    db.create_table("t", KV, partition_by=["v"])
    db.table("t").append([{"k": 1, "v": "a/b"}])
    objs = [json.loads(line) for line in db.store.get(commit_key(2)).decode().splitlines()]
    assert list(objs[0]) == ["commitInfo"]
    assert objs[0]["commitInfo"]["operation"] == "APPEND"
    assert objs[0]["commitInfo"]["readVersion"] == 1
    add = objs[1]["add"]
    assert add["partitionValues"] == {"v": "a/b"}
    assert add["path"].startswith("v=a%2Fb/part-") and add["path"].endswith(".parquet")
    assert db.store.exists(f"tables/{add['tableId']}/{add['path']}")


def test_commit_round_trip() -> None:
    info = CommitInfo("c1", 5, 0, "serializable", "APPEND", {"x": 1}, {"n": 2})
    add = AddFile("0" * 32, "part-1.parquet", 10, 2, {}, {"numRecords": 2}, 7)
    commit = decode_commit("k", 1, encode_commit(info, [add]))
    assert commit.info == info and commit.actions == (add,)


def test_checkpoints_are_written_and_used(tmp_path: pytest.TempPathFactory) -> None:
    store = MemoryStore()
    db = mere.connect(store, checkpoint_interval=5)
    db.create_table("t", KV)
    for i in range(12):
        db.table("t").append([{"k": i, "v": str(i)}])
    assert db.version == 13
    assert store.exists(checkpoint_key(5)) and store.exists(checkpoint_key(10))
    assert json.loads(store.get("_log/_last_checkpoint")) == {"version": 10}

    # Remove the commits the checkpoint covers: a fresh client must not need them.
    for v in range(1, 10):
        store.delete(commit_key(v))
    fresh = mere.connect(store)
    assert sorted(fresh.table("t").scan().column("k").to_pylist()) == list(range(12))
    assert fresh.snapshot(10).table("t").scan().num_rows == 9


def test_snapshot_from_checkpoint_equals_replay() -> None:
    store = MemoryStore()
    db = mere.connect(store, checkpoint_interval=3)
    with db.transaction() as tx:
        tx.create_table("a", KV, partition_by=["v"])
        tx.create_table("b", KV)
    db.table("a").append([{"k": 1, "v": "x"}, {"k": 2, "v": None}])
    with db.transaction() as tx:
        tx.set_app_transaction("job", 7)
        tx.table("b").append([{"k": 3, "v": "y"}])
    assert store.exists(checkpoint_key(3))
    from mere.snapshot.loader import load_state

    from_checkpoint = load_state(db.log, 3)
    store.delete(checkpoint_key(3))
    replayed = load_state(db.log, 3)
    assert from_checkpoint.tables == replayed.tables
    assert from_checkpoint.app_txns == replayed.app_txns
    assert from_checkpoint.timestamp == replayed.timestamp


def test_latest_version_falls_back_to_listing_without_hint(db: mere.Database) -> None:
    db.create_table("t", KV)
    db.store.delete("_log/_latest")
    assert mere.connect(db.uri if db.uri.startswith("memory") else db.store).version == 1


def test_racing_creators_share_one_database() -> None:
    store = MemoryStore()
    a = mere.connect(store)
    b = mere.connect(store)
    assert a.version == b.version == 0


@pytest.mark.parametrize(
    "type_",
    [
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.int8(),
        pa.uint64(),
        pa.bool_(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("ns"),
        pa.timestamp("us", tz="Europe/Paris"),
        pa.time64("us"),
        pa.duration("ms"),
        pa.decimal128(38, 9),
        pa.binary(16),
        pa.list_(pa.int32()),
        pa.struct([("a", pa.string()), ("b", pa.list_(pa.float64()))]),
        pa.map_(pa.string(), pa.int64()),
    ],
)
def test_every_type_round_trips_through_the_schema_json(type_: pa.DataType) -> None:
    from mere.schema import schema_from_json, schema_to_json

    schema = pa.schema([pa.field("c", type_, nullable=False)])
    assert schema_from_json(json.loads(json.dumps(schema_to_json(schema)))) == schema


def test_time_travel_finds_the_checkpoint_below_without_listing_the_log() -> None:
    from mere.storage import FaultyStore

    store = FaultyStore(MemoryStore())
    db = mere.connect(store, checkpoint_interval=5)
    db.create_table("t", KV)
    for i in range(12):
        db.table("t").append([{"k": i, "v": str(i)}])
    listings = store.calls["list"]
    assert db.snapshot(7).table("t").scan().num_rows == 6  # from checkpoint 5, not 10
    assert store.calls["list"] == listings
