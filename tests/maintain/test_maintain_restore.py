"""Restore: rolling tables back by committing their old state forward."""

from __future__ import annotations

import importlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from maintain_helpers import EVENTS, events, ids_of, wait_a_little

import mere
from mere.maintain import DataFileMissing, vacuum

restore_module = importlib.import_module("mere.maintain.restore")


def state(snapshot: mere.Snapshot) -> dict[str, tuple[str, list[int], list[str]]]:
    """Each table's id, rows (ids) and schema, at a snapshot."""
    return {
        name: (
            snapshot.table(name).id,
            ids_of(snapshot.table(name)),
            snapshot.table(name).schema.names,
        )
        for name in snapshot.tables()
    }


def test_restore_every_table(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS, partition_by=["part"])
    db.create_table("doomed", EVENTS)
    db.table("events").append(events([1, 2, 3]))
    db.table("doomed").append(events([7]))
    target = db.version
    before = state(db.snapshot())

    db.table("events").append(events([4]))
    db.table("events").delete("id = 1")
    db.table("events").compact()
    db.drop_table("doomed")
    db.create_table("newcomer", EVENTS)
    db.table("newcomer").append(events([9]))
    rolled_back = list(range(target + 1, db.version + 1))

    result = db.restore(version=target)

    assert result.version == db.version == rolled_back[-1] + 1
    assert result.restored_version == target
    assert result.tables_recreated == ["doomed"] and result.tables_dropped == ["newcomer"]
    assert result.tables_restored == ["events"]
    assert state(db.snapshot()) == before  # same ids: the dropped table came back
    fresh = mere.connect(db_uri, create=False)
    assert state(fresh.snapshot()) == before
    entry = fresh.history(1)[0]
    assert entry["operation"] == "RESTORE" and entry["parameters"]["version"] == target
    assert entry["parameters"]["tables"] == ["doomed", "events", "newcomer"]
    # The rolled-back versions stay in the history and stay readable.
    assert [e["version"] for e in fresh.history()][1 : len(rolled_back) + 1] == rolled_back[::-1]
    assert ids_of(fresh.snapshot(rolled_back[-1]).table("newcomer")) == [9]
    # Re-added files are data changes, even those a compaction wrote first.
    assert all(f.data_change for f in fresh.snapshot().table("events").files)


def test_restore_one_table_leaves_the_others(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.create_table("other", EVENTS)
    db.table("events").append(events([1, 2]))
    target = db.version
    db.table("events").append(events([3]))
    db.table("other").append(events([5]))
    result = db.restore(target, tables=["events"])
    assert result.tables_restored == ["events"] and result.files_removed == 1
    assert ids_of(db.table("events")) == [1, 2]
    assert ids_of(db.table("other")) == [5]
    entry = db.history(1)[0]
    assert entry["parameters"] == {"version": target, "tables": ["events"]}
    assert entry["tables"] == ["events"]


def test_restore_by_timestamp(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    wait_a_little()
    moment = datetime.now(tz=UTC)
    wait_a_little()
    db.table("events").append(events([2]))
    result = db.restore(timestamp=moment)
    assert result.restored_version == 2
    assert ids_of(db.table("events")) == [1]
    with pytest.raises(ValueError):
        db.restore()
    with pytest.raises(ValueError):
        db.restore(1, timestamp=moment)


def test_restore_a_name_taken_by_a_new_table(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    target = db.version
    old_id = db.snapshot().table("events").id
    db.drop_table("events")
    db.create_table("events", EVENTS)
    db.table("events").append(events([2]))
    db.create_table("later", EVENTS)
    result = db.restore(target, tables=["events"])
    assert result.tables_dropped == ["events"] and result.tables_recreated == ["events"]
    assert db.snapshot().table("events").id == old_id
    assert ids_of(db.table("events")) == [1]
    assert db.tables() == ["events", "later"]
    # Restoring a name that did not exist then drops it.
    db.restore(target, tables=["later"])
    assert db.tables() == ["events"]
    with pytest.raises(mere.TableNotFound):
        db.restore(target, tables=["never"])


def test_restore_undoes_a_schema_change(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    target = db.version
    wider = pa.table({"id": [2], "part": ["a"], "amount": [1.0], "note": ["x"]})
    db.table("events").append(wider, schema_mode="merge")
    assert "note" in db.table("events").schema.names
    result = db.restore(target)
    assert result.tables_restored == ["events"]
    assert db.table("events").schema.names == EVENTS.names
    assert ids_of(db.table("events")) == [1]


def test_nothing_to_restore_commits_nothing(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    version = db.version
    result = db.restore(version)
    assert result.version == version == db.version


def test_restore_of_a_vacuumed_version_fails_clearly(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    target = db.version
    db.table("events").delete("id = 1")
    vacuum(db, timedelta(hours=1), now=time.time() + 7200)
    version = db.version
    with pytest.raises(
        DataFileMissing, match=f"cannot restore version {target}.*deleted by vacuum"
    ):
        db.restore(target)
    assert db.version == version  # nothing committed


def test_restore_starts_over_when_a_concurrent_commit_changes_a_table(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    target = db.version
    db.table("events").append(events([2]))
    other = mere.connect(db_uri)
    stage = restore_module._stage
    attempts: list[int] = []

    def append_meanwhile(*args: Any, **kwargs: Any) -> Any:
        result = stage(*args, **kwargs)
        if not attempts:
            other.table("events").append(events([3]))  # lands before the restore commits
        attempts.append(1)
        return result

    monkeypatch.setattr(restore_module, "_stage", append_meanwhile)
    db.restore(target)
    assert len(attempts) == 2  # the first attempt conflicted
    assert ids_of(mere.connect(db_uri, create=False).table("events")) == [1]
