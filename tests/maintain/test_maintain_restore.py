"""Restore: rolling tables back by committing their old state forward."""

from __future__ import annotations

import importlib
import threading
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


def _vacuum_candidate(db_uri: str) -> tuple[mere.Database, int]:
    """A database whose version ``old`` reads a file no later version references."""
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events(range(100)))
    old = db.version
    db.table("events").delete("id >= 0")
    db.table("events").append(events([500]))
    return db, old


def test_a_restore_waits_for_a_vacuum_batch_it_raced_and_refuses_what_it_deleted(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch read the log before the restore committed: the restore must not
    commit a version whose file that batch then deletes (it waits for the batch's
    mark, finds the file gone, commits nothing)."""
    db, old = _vacuum_candidate(db_uri)
    vacuum_module = importlib.import_module("mere.maintain.vacuum")
    kept_keys = vacuum_module.kept_keys
    batch_read_log, may_delete = threading.Event(), threading.Event()

    def pause_after_reading_the_log(*args: Any) -> Any:
        kept = kept_keys(*args)  # the log and the keep marks read: no restore in either
        batch_read_log.set()
        assert may_delete.wait(60)
        return kept

    monkeypatch.setattr(vacuum_module, "kept_keys", pause_after_reading_the_log)
    vacuumed: list[Any] = []
    runner = threading.Thread(
        target=lambda: vacuumed.append(vacuum(db, timedelta(hours=1), now=time.time() + 7200))
    )
    runner.start()
    assert batch_read_log.wait(60)
    other = mere.connect(db_uri, create=False)
    outcome: list[BaseException | int] = []

    def restore_now() -> None:
        try:
            outcome.append(other.restore(old).version)
        except BaseException as exc:
            outcome.append(exc)

    restorer = threading.Thread(target=restore_now)
    restorer.start()
    restorer.join(0.5)  # the restore waits for the batch's mark (or has not got there)
    may_delete.set()
    runner.join(60)
    restorer.join(60)
    assert vacuumed and vacuumed[0].files_deleted >= 1
    assert len(outcome) == 1 and isinstance(outcome[0], DataFileMissing), outcome
    fresh = mere.connect(db_uri, create=False)
    assert ids_of(fresh.table("events")) == [500]  # the latest version reads
    assert fresh.check().clean


def test_a_vacuum_spares_what_a_running_restore_is_adding_back(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch marked after the restore started reads its keep mark and spares its files."""
    db, old = _vacuum_candidate(db_uri)
    other = mere.connect(db_uri, create=False)
    check = restore_module._check_files_exist
    runs: list[Any] = []

    def vacuum_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not runs:
            runs.append(vacuum(other, timedelta(hours=1), now=time.time() + 7200))
        return check(*args, **kwargs)

    monkeypatch.setattr(restore_module, "_check_files_exist", vacuum_meanwhile)
    restored = db.restore(old)
    assert runs and runs[0].files_deleted == 0
    fresh = mere.connect(db_uri, create=False)
    assert fresh.version == restored.version
    assert ids_of(fresh.table("events")) == list(range(100))
    assert fresh.check().clean


def test_a_batch_that_lists_keep_marks_after_a_restore_ended_sees_its_commit(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore looked at the deletion marks before the batch marked itself, then
    checked, committed and removed its mark while the batch was between its own mark
    and its look at the keep marks: the batch's log read, after that look, sees the
    restore's commit and spares the file."""
    db, old = _vacuum_candidate(db_uri)
    vacuum_module = importlib.import_module("mere.maintain.vacuum")
    kept_keys = vacuum_module.kept_keys
    check = restore_module._check_files_exist
    restore_looked, batch_marked, restore_done = (threading.Event() for _ in range(3))

    def check_once_the_batch_is_marked(*args: Any) -> Any:
        restore_looked.set()  # the deletion marks are listed: none yet
        assert batch_marked.wait(60)
        return check(*args)

    def look_once_the_restore_is_done(*args: Any) -> Any:
        batch_marked.set()
        assert restore_done.wait(60)
        return kept_keys(*args)

    monkeypatch.setattr(restore_module, "_check_files_exist", check_once_the_batch_is_marked)
    monkeypatch.setattr(vacuum_module, "kept_keys", look_once_the_restore_is_done)
    outcome: list[Any] = []

    def restore_now() -> None:
        try:
            outcome.append(mere.connect(db_uri, create=False).restore(old).version)
        finally:
            restore_done.set()

    restorer = threading.Thread(target=restore_now)
    restorer.start()
    assert restore_looked.wait(60)
    result = vacuum(db, timedelta(hours=1), now=time.time() + 7200)
    restorer.join(60)
    assert outcome and result.files_deleted == 0
    fresh = mere.connect(db_uri, create=False)
    assert fresh.version == outcome[0]
    assert ids_of(fresh.table("events")) == list(range(100))
    assert fresh.check().clean
