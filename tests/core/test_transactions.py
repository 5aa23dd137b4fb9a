"""Transactions: atomicity across tables, isolation levels, rebase, ambiguous outcomes."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere
from mere.storage import Fault, FaultyStore, MemoryStore

KV = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.int64())])


def kv(*pairs: tuple[int, int]) -> list[dict[str, int]]:
    return [{"k": k, "v": v} for k, v in pairs]


@pytest.fixture
def two_tables(db: mere.Database) -> mere.Database:
    with db.transaction() as tx:
        tx.create_table("a", KV)
        tx.create_table("b", KV)
    return db


def test_multi_table_commit_is_one_version(two_tables: mere.Database) -> None:
    db = two_tables
    before = db.version
    with db.transaction() as tx:
        tx.table("a").append(kv((1, 1)))
        tx.table("b").append(kv((1, 1), (2, 2)))
    assert db.version == before + 1
    old = db.snapshot(before)
    assert old.table("a").scan().num_rows == 0 and old.table("b").scan().num_rows == 0
    new = db.snapshot()
    assert new.table("a").scan().num_rows == 1 and new.table("b").scan().num_rows == 2


def test_exception_inside_the_block_aborts_everything(two_tables: mere.Database) -> None:
    db = two_tables
    before = db.version
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.table("a").append(kv((1, 1)))
        raise RuntimeError("boom")
    assert db.version == before
    assert tx.status == "aborted"
    assert list(db.store.list("tables/")) == []  # its data file was removed


def test_read_only_transaction_writes_nothing(two_tables: mere.Database) -> None:
    db = two_tables
    keys_before = [m.key for m in db.store.list("")]
    tx = db.transaction(isolation="serializable")
    tx.table("a").scan(filter="k = 1")
    assert tx.commit() == tx.read_version
    assert [m.key for m in db.store.list("")] == keys_before


def test_closed_transaction_refuses_more_work(two_tables: mere.Database) -> None:
    tx = two_tables.transaction()
    tx.commit()
    with pytest.raises(mere.TransactionClosed):
        tx.table("a")


def test_blind_appends_to_one_table_rebase(two_tables: mere.Database) -> None:
    db = two_tables
    t1, t2 = db.transaction(), db.transaction()
    t1.table("a").append(kv((1, 1)))
    t2.table("a").append(kv((2, 2)))
    v1, v2 = t1.commit(), t2.commit()
    assert v2 == v1 + 1
    assert sorted(db.table("a").scan().column("k").to_pylist()) == [1, 2]


@pytest.mark.parametrize("isolation", ["snapshot", "write_serializable"])
def test_read_then_append_does_not_conflict_below_serializable(
    two_tables: mere.Database, isolation: str
) -> None:
    db = two_tables
    t1 = db.transaction(isolation=isolation)  # type: ignore[arg-type]
    assert t1.table("a").scan(filter="k = 1").num_rows == 0
    db.table("a").append(kv((1, 10)))  # a concurrent write of the key t1 read
    t1.table("b").append(kv((1, 0)))
    t1.commit()


def test_serializable_read_conflicts_with_matching_append(two_tables: mere.Database) -> None:
    db = two_tables
    t1 = db.transaction(isolation="serializable")
    assert t1.table("a").scan(filter="k = 1").num_rows == 0
    winner = db.table("a").append(kv((1, 10)))
    t1.table("b").append(kv((1, 0)))
    with pytest.raises(mere.ConcurrentAppend) as err:
        t1.commit()
    assert err.value.winning_version == winner
    assert err.value.table == "a"


def test_serializable_read_ignores_appends_its_filter_rules_out(two_tables: mere.Database) -> None:
    db = two_tables
    t1 = db.transaction(isolation="serializable")
    t1.table("a").scan(filter="k = 1")
    db.table("a").append(kv((5, 50), (7, 70)))  # statistics show k in [5, 7]
    t1.table("b").append(kv((1, 0)))
    t1.commit()


def test_write_skew_is_allowed_only_at_snapshot(two_tables: mere.Database) -> None:
    """Each transaction reads the other's table and writes its own (the classic write skew).

    Below serializable, only blind appends are exempt from read validation; a
    transaction that read before writing is not blind, so write_serializable
    also prevents this skew, as in Delta Lake.
    """
    db = two_tables
    for isolation, conflicts in [
        ("snapshot", False),
        ("write_serializable", True),
        ("serializable", True),
    ]:
        t1 = db.transaction(isolation=isolation)  # type: ignore[arg-type]
        t2 = db.transaction(isolation=isolation)  # type: ignore[arg-type]
        t1.table("b").scan()
        t2.table("a").scan()
        t1.table("a").append(kv((1, 1)))
        t2.table("b").append(kv((1, 1)))
        t1.commit()
        if conflicts:
            with pytest.raises(mere.ConcurrentAppend):
                t2.commit()
        else:
            t2.commit()


def test_serializable_sees_concurrent_table_creation_of_a_name_it_looked_up(
    db: mere.Database,
) -> None:
    t1 = db.transaction(isolation="serializable")
    assert not t1.has_table("x")
    db.create_table("x", KV)
    t1.create_table("y", KV)
    with pytest.raises(mere.ConcurrentMetadataChange):
        t1.commit()


def test_append_to_a_table_dropped_concurrently_conflicts(two_tables: mere.Database) -> None:
    db = two_tables
    t1 = db.transaction(isolation="snapshot")
    t1.table("a").append(kv((1, 1)))
    db.drop_table("a")
    with pytest.raises(mere.ConcurrentMetadataChange) as err:
        t1.commit()
    assert err.value.table == "a"
    assert list(db.store.list("tables/")) == []  # the loser's file was cleaned up


def test_same_app_transaction_id_conflicts(two_tables: mere.Database) -> None:
    db = two_tables
    t1, t2 = db.transaction(), db.transaction()
    for tx in (t1, t2):
        tx.set_app_transaction("pipeline", 1)
        tx.table("a").append(kv((1, 1)))
    t1.commit()
    with pytest.raises(mere.ConcurrentTransaction):
        t2.commit()
    assert db.snapshot().app_version("pipeline") == 1


def test_create_in_transaction_is_visible_to_it_and_atomic(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.create_table("t", KV)
        tx.table("t").append(kv((1, 1)))
        assert tx.table("t").scan().num_rows == 1
        assert tx.tables() == ["t"]
        assert db.tables() == []
    assert db.tables() == ["t"]


def test_conflict_errors_explain_themselves(two_tables: mere.Database) -> None:
    db = two_tables
    t1 = db.transaction(isolation="snapshot")
    t1.table("a").append(kv((1, 1)))
    db.drop_table("a")
    with pytest.raises(mere.ConflictError) as err:
        t1.commit()
    text = str(err.value)
    assert "winning version" in text and "'a'" in text and "re-run the transaction" in text


def test_commit_timestamps_never_go_backwards(
    db: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.create_table("t", KV)
    first = db.snapshot().timestamp
    import time as time_module

    real = time_module.time
    monkeypatch.setattr(time_module, "time", lambda: real() - 3600)  # the clock jumps back an hour
    db.table("t").append(kv((1, 1)))
    monkeypatch.setattr(time_module, "time", real)
    assert db.snapshot().timestamp > first


def test_time_travel_by_version_and_timestamp(db: mere.Database) -> None:
    db.create_table("t", KV)
    versions = [db.table("t").append(kv((i, i))) for i in range(3)]
    stamps = [db.snapshot(v).timestamp for v in versions]
    assert db.snapshot(versions[0]).table("t").scan().num_rows == 1
    assert db.snapshot(timestamp=stamps[1]).version == versions[1]
    with pytest.raises(mere.VersionNotFound):
        db.snapshot(version=versions[-1] + 5)


# --- ambiguous outcomes -----------------------------------------------------------


def faulty_db() -> tuple[mere.Database, FaultyStore]:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", KV)
    return db, store


def test_already_exists_for_a_commit_that_landed_is_a_success() -> None:
    db, store = faulty_db()
    store.inject(Fault("put_if_absent", "exists_after", match=r"_log/\d+\.json"))
    v = db.table("t").append(kv((1, 1)))
    assert store.fired["exists_after"] == 1
    assert db.snapshot(v).table("t").scan().num_rows == 1
    assert db.version == v  # applied once, not twice


def test_error_after_the_commit_landed_is_resolved_by_reading_back() -> None:
    db, store = faulty_db()
    store.inject(Fault("put_if_absent", "error_after", match=r"_log/\d+\.json"))
    v = db.table("t").append(kv((1, 1)))
    assert db.version == v
    assert db.table("t").scan().num_rows == 1


def test_error_before_the_commit_is_retried_with_the_same_bytes() -> None:
    db, store = faulty_db()
    store.inject(Fault("put_if_absent", "error_before", match=r"_log/\d+\.json"))
    v = db.table("t").append(kv((1, 1)))
    assert db.version == v and db.table("t").scan().num_rows == 1


def test_unknown_outcome_raises_and_keeps_files() -> None:
    db, store = faulty_db()
    store.inject(Fault("put_if_absent", "error_before", match=r"_log/\d+\.json", times=None))
    store.inject(Fault("get", "error_before", match=r"_log/\d+\.json", times=None))
    with pytest.raises(mere.CommitOutcomeUnknown):
        db.table("t").append(kv((1, 1)))
    store.clear()
    assert len(list(store.list("tables/"))) == 1  # not deleted: it might have been live


def test_stale_or_garbage_hint_is_not_trusted() -> None:
    db, store = faulty_db()
    db.table("t").append(kv((1, 1)))
    store.put("_log/_latest", b'{"version": 0}')
    assert mere.connect(store).version == 2
    store.put("_log/_latest", b"garbage")
    assert mere.connect(store).version == 2
    store.put("_log/_latest", b'{"version": 999}')
    assert mere.connect(store).version == 2


def test_old_transaction_moves_to_the_latest_version_before_committing(
    two_tables: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long transaction must not try a version whose commit may have been expired."""
    from mere.log.keys import commit_key
    from mere.txn import committer as txn_module

    db = two_tables
    old = db.transaction()
    old.table("a").append(kv((1, 1)))
    first = db.table("b").append(kv((2, 2)))
    db.table("b").append(kv((3, 3)))
    for version in range(first + 1):  # as if expired (a checkpoint would cover them)
        db.store.delete(commit_key(version))  # a prefix: one commit alone would be a gap
    monkeypatch.setattr(txn_module, "STALE_SNAPSHOT_SECONDS", -1.0)
    with pytest.raises(mere.VersionNotFound):
        old.commit()  # it cannot validate the expired commit: it must not re-create it
    assert not db.store.exists(commit_key(first))
