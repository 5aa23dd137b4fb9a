"""Statements are atomic inside a transaction, and no commit can poison the log.

Each test is a sequence a user wrote that broke before the staging API and
the committer: a failed statement that was half-applied, a write followed by
a drop that published a commit every reader rejected, files left behind,
ids staged twice, handles acting on stale state.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.log.actions import AddFile
from mere.storage import FaultyStore, MemoryStore

KV = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.int64())])


def rows(*pairs: tuple[int, int | None]) -> pa.Table:
    return pa.table({"k": [k for k, _ in pairs], "v": [v for _, v in pairs]}, schema=KV)


def keys(table: mere.Table | mere.TxTable) -> list[int]:
    return sorted(table.scan().column("k").to_pylist())


def data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in (root / "tables").rglob("*.parquet")}


@pytest.fixture(params=["memory", "local"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> mere.Database:
    uri = f"memory://atomic-{uuid.uuid4().hex}" if request.param == "memory" else str(tmp_path)
    database = mere.connect(uri)
    database.create_table("t", KV)
    database.table("t").append(rows((1, 10), (2, 20)))
    return database


# --- writing to a table and dropping it in one transaction ----------------------------


@pytest.mark.parametrize("write", ["delete", "append_then_scan", "update", "overwrite"])
def test_a_write_then_a_drop_commits_a_readable_log(db: mere.Database, write: str) -> None:
    with db.transaction() as tx:
        table = tx.table("t")
        if write == "delete":
            table.delete("k = 1")
        elif write == "append_then_scan":
            table.append(rows((3, 30)))
            table.scan()
        elif write == "update":
            table.update("k = 2", {"v": 5})
        else:
            table.overwrite(rows((9, 9)))
        tx.drop_table("t")
    fresh = mere.connect(db.uri, create=False)
    assert fresh.tables() == []
    for version in range(fresh.version + 1):
        fresh.snapshot(version=version)


def test_drop_and_recreate_in_one_transaction(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.table("t").delete("k = 1")
        tx.drop_table("t")
        tx.create_table("t", KV).append(rows((7, 70)))
    assert keys(mere.connect(db.uri, create=False).table("t")) == [7]


# --- a failed statement leaves the transaction as it was --------------------------------


def test_a_failed_update_inside_a_transaction_changes_nothing(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.alter_table("t").add_check("positive", "v > 0")
    with db.transaction() as tx:
        with pytest.raises(mere.ConstraintViolation):
            tx.table("t").update("k = 1", {"v": -5})
    assert sorted(db.table("t").scan().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "v": 10},
        {"k": 2, "v": 20},
    ]


def test_a_failed_merge_and_overwrite_change_nothing(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.alter_table("t").add_check("positive", "v > 0")
    with db.transaction() as tx:
        tx.table("t").append(rows((3, 30)))
        with pytest.raises(mere.ConstraintViolation):
            tx.table("t").merge(rows((1, -1)), "t.k = s.k").when_matched_update_all().execute()
        with pytest.raises(mere.ConstraintViolation):
            tx.table("t").overwrite(rows((5, -5)))
        assert keys(tx.table("t")) == [1, 2, 3]
    assert keys(db.table("t")) == [1, 2, 3]


def test_a_failed_statement_deletes_only_its_own_files(tmp_path: Path) -> None:
    db = mere.connect(tmp_path)
    db.create_table("t", KV)
    db.table("t").append(rows((1, 1)))
    with db.transaction() as tx:
        tx.alter_table("t").add_check("small", "v < 100")
    before = data_files(tmp_path)
    with db.transaction() as tx:
        tx.table("t").append(rows((2, 2)))
        tx.table("t").scan()  # the append's rows are in a file now
        with pytest.raises(mere.ConstraintViolation):
            tx.table("t").update(None, {"v": "v + 1000"})
        assert keys(tx.table("t")) == [1, 2]
    assert keys(db.table("t")) == [1, 2]
    live = {
        f"tables/{db.snapshot().table('t').id}/{f.path}" for f in db.snapshot().table("t").files
    }
    assert data_files(tmp_path) - before == live - before  # nothing else was left behind


def test_savepoint_rolls_back_a_block_and_keeps_what_came_before(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.table("t").append(rows((3, 30)))
        with pytest.raises(RuntimeError):
            with tx.savepoint():
                tx.table("t").delete("k = 1")
                tx.create_table("u", KV).append(rows((1, 1)))
                tx.drop_table("t")
                raise RuntimeError("undo the block")
        assert tx.tables() == ["t"]
        with tx.savepoint():
            tx.table("t").delete("k = 2")
    assert keys(db.table("t")) == [1, 3]
    assert db.tables() == ["t"]


def test_nested_savepoints(db: mere.Database) -> None:
    with db.transaction() as tx:
        with tx.savepoint():
            tx.table("t").append(rows((3, 3)))
            with pytest.raises(ValueError):
                with tx.savepoint():
                    tx.table("t").append(rows((4, 4)))
                    raise ValueError("inner")
            tx.table("t").append(rows((5, 5)))
    assert keys(db.table("t")) == [1, 2, 3, 5]


def test_a_rolled_back_drop_keeps_rows_still_in_memory(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.table("t").append(rows((3, 3)))  # buffered, not yet in a file
        with pytest.raises(RuntimeError):
            with tx.savepoint():
                tx.drop_table("t")
                raise RuntimeError
    assert keys(db.table("t")) == [1, 2, 3]


def test_several_appends_in_a_transaction_make_one_file(tmp_path: Path) -> None:
    db = mere.connect(tmp_path)
    db.create_table("t", KV)
    with db.transaction() as tx:
        for k in range(5):
            tx.table("t").append(rows((k, k)))
    assert len(db.snapshot().table("t").files) == 1


# --- files and ids ------------------------------------------------------------------------


def test_dropping_a_table_created_in_the_transaction_deletes_its_files(tmp_path: Path) -> None:
    db = mere.connect(tmp_path, target_file_size=1)  # every append flushes a file
    with db.transaction() as tx:
        tx.create_table("u", KV).append(rows((1, 1)))
        tx.table("u").scan()
        tx.drop_table("u")
    assert data_files(tmp_path) == set()


def test_a_table_id_cannot_be_staged_twice(db: mere.Database) -> None:
    table_id = uuid.uuid4().hex
    with db.transaction() as tx:
        tx.create_table("a", KV, table_id=table_id)
        with pytest.raises(mere.InvalidName):
            tx.create_table("b", KV, table_id=table_id)
    assert db.tables() == ["a", "t"]


def test_invalid_arguments_are_value_errors(db: mere.Database) -> None:
    with pytest.raises(ValueError):
        db.transaction(isolation="bogus")  # type: ignore[arg-type]
    with pytest.raises(mere.InvalidArgument):
        db.transaction(isolation="bogus")  # type: ignore[arg-type]
    assert issubclass(mere.InvalidName, ValueError)


def test_every_error_a_user_meets_is_exported() -> None:
    for name in ("DataFileMissing", "RetentionTooShort", "ExportTargetExists", "InvalidCommit"):
        assert issubclass(getattr(mere, name), mere.MereError)


def test_the_committer_refuses_an_action_on_an_unknown_table(db: mere.Database) -> None:
    from mere.txn.committer import validate

    state = db.latest_state()
    info = db.log.read_commit(state.version).info
    stray = AddFile(uuid.uuid4().hex, "part-x.parquet", 1, 1, {}, None, 0)
    with pytest.raises(mere.InvalidCommit):
        validate(state, state.version + 1, info, [stray])


# --- handles resolve the latest state on every call ------------------------------------------


def test_a_handle_sees_a_column_added_through_another_handle(db: mere.Database) -> None:
    handle = db.table("t")
    with db.transaction() as tx:
        tx.alter_table("t").add_column("w", pa.string())
    handle.append(pa.table({"k": [3], "v": [3], "w": ["x"]}))
    assert keys(handle) == [1, 2, 3]


def test_a_handle_after_a_drop_and_recreate_writes_the_new_table(db: mere.Database) -> None:
    handle = db.table("t")
    db.drop_table("t")
    db.create_table("t", KV)
    handle.append(rows((9, 9)))
    assert keys(db.table("t")) == [9]


def test_restore_losing_a_race_never_deletes_the_old_versions_files(tmp_path: Path) -> None:
    """Restore re-adds files of an older version: a failed commit must not delete them."""
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", KV)
    db.table("t").append(rows((1, 1)))
    v = db.version
    db.table("t").delete("k = 1")
    tx = db.transaction("serializable")
    from mere.maintain.restore import _stage

    _stage(db, tx, db.snapshot(version=v).state, None)
    other = mere.connect(store.inner, create=False)
    other.table("t").append(rows((2, 2)))  # a concurrent write to the restored table
    with pytest.raises(mere.ConflictError):
        tx.commit()
    assert keys(db.snapshot(version=v).table("t")) == [1]  # the old files are still there


def test_renaming_a_column_renames_it_in_check_constraints(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.alter_table("t").add_check("positive", "v > 0 AND V < 1000")
        tx.alter_table("t").rename_column("v", "amount")
    with pytest.raises(mere.ConstraintViolation):
        db.table("t").append(pa.table({"k": [3], "amount": [-1]}))
    db.table("t").append(pa.table({"k": [3], "amount": [5]}))
    assert keys(db.table("t")) == [1, 2, 3]
