"""Changing database properties after creation: validated, committed, conflicting, durable."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere
from mere.log.keys import checkpoint_key
from mere.storage import MemoryStore

KV = pa.schema([pa.field("k", pa.int64())])


def test_a_new_checkpoint_interval_takes_effect_and_survives() -> None:
    store = MemoryStore()
    db = mere.connect(store, checkpoint_interval=100)
    db.create_table("t", KV)
    version = db.set_properties({"checkpointInterval": "3", "team": "data"})
    assert db.properties == {"checkpointInterval": "3", "team": "data"}
    while db.version < 6:
        db.table("t").append([{"k": db.version}])
    assert store.exists(checkpoint_key(3)) and store.exists(checkpoint_key(6))
    fresh = mere.connect(store, create=False)  # from the checkpoint at 6
    assert fresh.properties == {"checkpointInterval": "3", "team": "data"}
    assert fresh.snapshot(version - 1)._state.database.properties == {  # type: ignore[union-attr]
        "checkpointInterval": "100"
    }
    history = {e["version"]: e for e in fresh.history()}
    assert history[version]["operation"] == "SET DATABASE PROPERTIES"
    db.set_properties({"team": None})
    assert mere.connect(store, create=False).properties == {"checkpointInterval": "3"}


@pytest.mark.parametrize(
    "properties",
    [
        {"checkpointInterval": "0"},
        {"checkpointInterval": "-1"},
        {"checkpointInterval": "ten"},
        {"checkpointInterval": "²"},
        {"vacuumMinRetention": "soon"},
        {"": "x"},
        {"team": 5},
    ],
)
def test_invalid_properties_are_refused_and_change_nothing(properties: dict) -> None:
    db = mere.connect(MemoryStore(), checkpoint_interval=7)
    before = db.version
    with pytest.raises(ValueError):
        db.set_properties(properties)
    assert db.version == before
    assert db.properties == {"checkpointInterval": "7"}


def test_concurrent_property_changes_conflict() -> None:
    store = MemoryStore()
    db = mere.connect(store)
    db.create_table("t", KV)
    first = db.transaction()
    first.set_database_properties({"owner": "a"})
    db.set_properties({"owner": "b"})
    with pytest.raises(mere.ConflictError, match="database properties"):
        first.commit()
    assert db.properties["owner"] == "b"


def test_a_property_change_does_not_disturb_writers() -> None:
    db = mere.connect(MemoryStore())
    db.create_table("t", KV)
    writer = db.transaction()
    writer.table("t").append([{"k": 1}])
    db.set_properties({"owner": "a"})
    writer.commit()  # rebases over the property change
    assert db.properties["owner"] == "a"
    assert db.table("t").scan().column("k").to_pylist() == [1]
