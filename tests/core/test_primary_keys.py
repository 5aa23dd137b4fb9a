"""Primary keys: declared once, enforced on every core write path, and under concurrency.

A key a transaction inserts is a predicate it relies on ("this key is
absent"); a concurrent commit that added the same key conflicts with it at
every isolation level, while inserts of different keys still rebase.
"""

from __future__ import annotations

import multiprocessing
import random
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import mere

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def rows(*pairs: tuple[int, str]) -> pa.Table:
    return pa.table({"id": [k for k, _ in pairs], "v": [v for _, v in pairs]}, schema=SCHEMA)


def content(table: mere.Table | mere.TxTable) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in table.scan().to_pylist())


@pytest.fixture(params=["memory", "local"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> mere.Database:
    uri = f"memory://keys-{uuid.uuid4().hex}" if request.param == "memory" else str(tmp_path)
    database = mere.connect(uri)
    database.create_table("t", SCHEMA, primary_key=["id"])
    database.table("t").append(rows((1, "a"), (2, "b")))
    return database


def test_a_key_is_declared_not_null_and_described(db: mere.Database) -> None:
    table = db.table("t")
    assert table.describe()["primary_key"] == ["id"]
    assert not table.schema.field("id").nullable
    with pytest.raises(mere.ConstraintViolation):
        table.append(pa.table({"id": [None], "v": ["x"]}, schema=SCHEMA))


def test_bad_key_declarations_are_refused(db: mere.Database) -> None:
    for key in (["nope"], [], ["id", "ID"]):
        with pytest.raises(mere.InvalidName):
            db.create_table(f"u{len(key)}", SCHEMA, primary_key=key)
    assert db.tables() == ["t"]


def test_duplicates_in_a_batch_and_against_the_table_are_refused(db: mere.Database) -> None:
    version = db.version
    with pytest.raises(mere.DuplicateKey, match=r"among the rows written.*\(3\)") as caught:
        db.table("t").append(rows((3, "c"), (3, "d")))
    assert caught.value.keys == [{"id": 3}]
    with pytest.raises(mere.DuplicateKey, match=r"already held by a row.*\(2\)"):
        db.table("t").append(rows((4, "d"), (2, "x")))
    assert db.version == version and content(db.table("t")) == [(1, "a"), (2, "b")]


def test_a_duplicate_across_statements_of_one_transaction(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.table("t").append(rows((5, "e")))  # still in memory when the next one runs
        with pytest.raises(mere.DuplicateKey):
            tx.table("t").append(rows((5, "again")))
        tx.table("t").append(rows((6, "f")))
    assert content(db.table("t")) == [(1, "a"), (2, "b"), (5, "e"), (6, "f")]


def test_update_checks_keys_when_the_statement_ends(db: mere.Database) -> None:
    db.table("t").update(None, {"id": "id + 1"})  # 1 -> 2 while 2 still holds 2: fine
    assert content(db.table("t")) == [(2, "a"), (3, "b")]
    with pytest.raises(mere.DuplicateKey):
        db.table("t").update("id = 2", {"id": 3})
    assert content(db.table("t")) == [(2, "a"), (3, "b")]


def test_merge_and_overwrite_cannot_create_duplicates(db: mere.Database) -> None:
    source = rows((7, "g"), (7, "h"))
    with pytest.raises(mere.DuplicateKey):
        db.table("t").merge(source, "t.id = s.id").when_not_matched_insert_all().execute()
    with pytest.raises(mere.DuplicateKey):
        db.table("t").overwrite(rows((1, "x"), (1, "y")))
    db.table("t").overwrite(rows((1, "x"), (9, "z")))
    assert content(db.table("t")) == [(1, "x"), (9, "z")]


def test_upserts_skip_or_update(db: mere.Database) -> None:
    db.table("t").append(rows((2, "B"), (3, "c"), (3, "c2")), on_duplicate="skip")
    assert content(db.table("t")) == [(1, "a"), (2, "b"), (3, "c")]
    db.table("t").append(rows((1, "A"), (4, "d")), on_duplicate="update")
    assert content(db.table("t")) == [(1, "A"), (2, "b"), (3, "c"), (4, "d")]
    with pytest.raises(mere.InvalidArgument):
        db.create_table("plain", SCHEMA).append(rows((1, "a")), on_duplicate="skip")


def test_set_primary_key_checks_the_existing_rows(db: mere.Database) -> None:
    db.create_table("u", SCHEMA)
    db.table("u").append(rows((1, "a"), (1, "b"), (2, "c")))
    with pytest.raises(mere.DuplicateKey, match=r"\(1\)"):
        with db.transaction() as tx:
            tx.alter_table("u").set_primary_key(["id"])
    db.table("u").delete("v = 'b'")
    with db.transaction() as tx:
        tx.alter_table("u").set_primary_key(["ID"])
    assert db.table("u").describe()["primary_key"] == ["id"]
    with pytest.raises(mere.DuplicateKey):
        db.table("u").append(rows((2, "again")))


def test_a_renamed_key_column_stays_the_key(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("id", "key")
    assert db.table("t").describe()["primary_key"] == ["key"]
    with pytest.raises(mere.DuplicateKey):
        db.table("t").append(pa.table({"key": [1], "v": ["x"]}))


@pytest.mark.parametrize("on_duplicate", ["error", "skip", "update"])
def test_renaming_the_key_after_writing_rows_in_the_transaction(
    db: mere.Database, on_duplicate: str
) -> None:
    """The key rows a transaction holds for its own files follow the key column's new name."""
    with db.transaction() as tx:
        tx.table("t").append(rows((10, "a")))
        tx.alter_table("t").rename_column("id", "k")
        tx.table("t").append(pa.table({"k": [11], "v": ["b"]}), on_duplicate=on_duplicate)
        with pytest.raises(mere.DuplicateKey, match=r"\(10\)"):
            tx.table("t").append(pa.table({"k": [10], "v": ["c"]}))
    assert sorted(r["k"] for r in db.table("t").scan().to_pylist()) == [1, 2, 10, 11]


def test_a_new_key_in_the_transaction_is_checked_against_its_own_rows(
    db: mere.Database,
) -> None:
    """Once the key is another column, rows written before under the old key are checked by
    their values in the new key column, not by what the old key column held."""
    db.create_table("s", pa.schema([("a", pa.int64()), ("b", pa.int64())]), primary_key=["a"])
    with db.transaction() as tx:
        tx.table("s").append([{"a": 1, "b": 5}])
        tx.alter_table("s").rename_column("a", "x")
        tx.alter_table("s").rename_column("b", "a")
        tx.alter_table("s").set_primary_key(["a"])
        with pytest.raises(mere.DuplicateKey, match=r"\(5\)"):
            tx.table("s").append([{"x": 2, "a": 5}])
        tx.table("s").append([{"x": 3, "a": 1}])
    assert sorted(r["a"] for r in db.table("s").scan().to_pylist()) == [1, 5]


def test_setting_another_key_after_writing_rows_in_the_transaction(db: mere.Database) -> None:
    with db.transaction() as tx:
        tx.table("t").append(rows((10, "c")))
        tx.alter_table("t").set_primary_key(["v"])
        tx.table("t").append(rows((11, "d")))
        with pytest.raises(mere.DuplicateKey, match=r"\('c'\)"):
            tx.table("t").append(rows((12, "c")))
    assert sorted(r["v"] for r in db.table("t").scan().to_pylist()) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("on_duplicate", ["error", "skip", "update"])
def test_widening_the_key_after_writing_rows_in_the_transaction(
    db: mere.Database, on_duplicate: str
) -> None:
    """The key index's bounds kept the narrow type: pyarrow's raw ArrowInvalid."""
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.string())])
    db.create_table("w", schema, primary_key=["id"])
    db.table("w").append(pa.table({"id": pa.array([1], pa.int32()), "v": ["a"]}))
    with db.transaction() as tx:
        tx.table("w").append(pa.table({"id": pa.array([10], pa.int32()), "v": ["a"]}))
        tx.alter_table("w").widen_column("id", pa.int64())
        wide = pa.table({"id": pa.array([11, 2**40], pa.int64()), "v": ["b", "c"]})
        tx.table("w").append(wide, on_duplicate=on_duplicate)
        with pytest.raises(mere.DuplicateKey, match=r"\(10\)"):
            tx.table("w").append(pa.table({"id": pa.array([10], pa.int64()), "v": ["d"]}))
    assert sorted(r["id"] for r in db.table("w").scan().to_pylist()) == [1, 10, 11, 2**40]


def test_sql_insert_after_renaming_the_key_in_one_transaction(db: mere.Database) -> None:
    db.sql("CREATE TABLE q (id BIGINT PRIMARY KEY, v BIGINT)")
    db.sql(
        "BEGIN; INSERT INTO q VALUES (1, 1); ALTER TABLE q RENAME COLUMN id TO k; "
        "INSERT INTO q VALUES (2, 2); COMMIT"
    )
    assert db.sql("SELECT k, v FROM q ORDER BY k").to_pylist() == [
        {"k": 1, "v": 1},
        {"k": 2, "v": 2},
    ]


def test_a_composite_key(db: mere.Database) -> None:
    schema = pa.schema([("a", pa.int32()), ("b", pa.string()), ("v", pa.float64())])
    db.create_table("c", schema, primary_key=["a", "b"])
    db.table("c").append([{"a": 1, "b": "x", "v": 1.0}, {"a": 1, "b": "y", "v": 2.0}])
    with pytest.raises(mere.DuplicateKey, match=r"\(1, 'y'\)"):
        db.table("c").append([{"a": 1, "b": "y", "v": 3.0}])


@pytest.mark.parametrize("isolation", ["snapshot", "write_serializable", "serializable"])
def test_two_transactions_inserting_one_key_cannot_both_commit(
    db: mere.Database, isolation: str
) -> None:
    first = db.transaction(isolation)  # type: ignore[arg-type]
    second = db.transaction(isolation)  # type: ignore[arg-type]
    first.table("t").append(rows((10, "first")))
    second.table("t").append(rows((11, "other"), (10, "second")))
    winner = first.commit()
    with pytest.raises(mere.ConcurrentDuplicateKey, match=r"\(10\)") as caught:
        second.commit()
    assert caught.value.winning_version == winner
    assert content(db.table("t")) == [(1, "a"), (2, "b"), (10, "first")]


@pytest.mark.parametrize("isolation", ["snapshot", "write_serializable", "serializable"])
def test_inserts_of_different_keys_rebase(db: mere.Database, isolation: str) -> None:
    first = db.transaction(isolation)  # type: ignore[arg-type]
    second = db.transaction(isolation)  # type: ignore[arg-type]
    first.table("t").append(rows((20, "x")))
    second.table("t").append(rows((21, "y")))
    first.commit()
    second.commit()
    assert [k for k, _ in content(db.table("t"))] == [1, 2, 20, 21]


def _skip_existing(tx: mere.Transaction) -> None:
    assert tx.table("t").append(rows((2, "mine")), on_duplicate="skip") == 0


def _fail_on_existing(tx: mere.Transaction) -> None:
    with pytest.raises(mere.DuplicateKey):
        tx.table("t").append(rows((2, "mine")))  # caught: the transaction goes on


@pytest.mark.parametrize("isolation", ["write_serializable", "serializable"])
@pytest.mark.parametrize("finds_key", [_skip_existing, _fail_on_existing], ids=["skip", "fail"])
def test_finding_a_key_present_is_a_read(db: mere.Database, isolation: str, finds_key) -> None:
    """A statement whose outcome turned on a key being present read that row: a
    concurrent delete of it conflicts, as for any read (a write skew otherwise)."""
    db.create_table("other", pa.schema([("n", pa.int64())]))
    mine = db.transaction(isolation)  # type: ignore[arg-type]
    finds_key(mine)
    db.table("t").delete("id = 2")
    mine.table("other").append([{"n": 1}])
    with pytest.raises(mere.ConcurrentDeleteRead, match="'t'"):
        mine.commit()
    assert db.table("other").scan().num_rows == 0


def test_finding_a_key_among_its_own_rows_reads_nothing_committed(db: mere.Database) -> None:
    """Skipping a key this transaction inserted itself depends on no committed row."""
    db.table("t").append(rows((10, "c"), (100, "d")))  # one file: its range holds 50
    mine = db.transaction("write_serializable")
    mine.table("t").append(rows((50, "mine")))
    assert mine.table("t").append(rows((50, "again")), on_duplicate="skip") == 0
    db.table("t").delete("id = 100")  # in the file the statistics admitted for 50
    mine.commit()
    assert content(db.table("t")) == [(1, "a"), (2, "b"), (10, "c"), (50, "mine")]


def test_finding_keys_absent_keeps_an_insert_blind(db: mere.Database) -> None:
    """Keys found absent are covered by the inserted keys' own check: the insert stays a
    blind append, which a concurrent reader of other rows does not conflict with."""
    reader = db.transaction("write_serializable")
    assert reader.table("t").scan(filter="id = 1").num_rows == 1
    reader.table("t").append(rows((30, "r")))
    db.table("t").append(rows((31, "w")), on_duplicate="skip")
    db.table("t").append(rows((32, "w")))
    reader.commit()
    assert [k for k, _ in content(db.table("t"))] == [1, 2, 30, 31, 32]


def _upsert_worker(uri: str, seed: int, rounds: int, done: multiprocessing.Queue) -> None:
    rng = random.Random(seed)
    db = mere.connect(uri, create=False)
    acknowledged: list[int] = []
    for _ in range(rounds):
        keys = rng.sample(range(40), 5)
        batch = rows(*((k, f"w{seed}") for k in keys))
        mode = rng.choice(["skip", "update"])
        db.table("t").append(batch, on_duplicate=mode)  # retries lost key races itself
        acknowledged += keys
    done.put(acknowledged)


def test_concurrent_upserts_from_processes_never_duplicate_a_key(tmp_path: Path) -> None:
    db = mere.connect(tmp_path)
    db.create_table("t", SCHEMA, primary_key=["id"])
    context = multiprocessing.get_context("spawn")
    done: multiprocessing.Queue = context.Queue()
    workers = [
        context.Process(target=_upsert_worker, args=(str(tmp_path), seed, 8, done))
        for seed in range(4)
    ]
    for worker in workers:
        worker.start()
    acknowledged = [k for _ in workers for k in done.get(timeout=240)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    ids = db.table("t").scan(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids))  # every key exactly once
    assert set(acknowledged) <= set(ids)  # every acknowledged key is there


NEGATIVE_NAN = -float("nan")  # the sign bit set, as -x of a NaN or inf - inf make it


@pytest.mark.parametrize(
    ("stored", "written"), [(-0.0, 0.0), (0.0, -0.0), (float("nan"), NEGATIVE_NAN)]
)
def test_float_keys_are_equal_as_sql_compares_them(
    db: mere.Database, stored: float, written: float
) -> None:
    """-0.0 = 0.0 and NaN = NaN (whatever its bits), as filters and MERGE compare."""
    schema = pa.schema([pa.field("x", pa.float64(), nullable=False), ("v", pa.int64())])
    db.create_table("k", schema, primary_key=["x"])
    db.table("k").append([{"x": stored, "v": 1}])
    with pytest.raises(mere.DuplicateKey):
        db.table("k").append([{"x": written, "v": 2}])
    with pytest.raises(mere.DuplicateKey):
        db.table("k").append([{"x": 7.0, "v": 1}, {"x": 7.0, "v": 2}])
    db.table("k").append([{"x": written, "v": 3}], on_duplicate="update")
    assert [r["v"] for r in db.table("k").scan().to_pylist()] == [3]
    db.table("k").append([{"x": written, "v": 4}], on_duplicate="skip")
    assert [r["v"] for r in db.table("k").scan().to_pylist()] == [3]


def test_merge_matches_float_keys_as_sql_compares_them(db: mere.Database) -> None:
    schema = pa.schema([("x", pa.float64()), ("v", pa.int64())])
    db.create_table("floats", schema)
    db.table("floats").append([{"x": -0.0, "v": 1}, {"x": float("nan"), "v": 2}])
    source = pa.table({"x": [0.0, NEGATIVE_NAN], "v": [10, 20]}, schema=schema)
    result = (
        db.table("floats")
        .merge(source, on="t.x = s.x")
        .when_matched_update({"v": "s.v"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert (result.num_target_rows_inserted, result.num_target_rows_updated) == (0, 2)
    assert sorted(r["v"] for r in db.table("floats").scan().to_pylist()) == [10, 20]


@pytest.mark.parametrize("on_duplicate", ["update", "skip"])
def test_an_upsert_of_a_reader_that_loses_a_race_is_run_again_with_its_rows(
    db: mere.Database, monkeypatch: pytest.MonkeyPatch, on_duplicate: str
) -> None:
    """The first attempt read the RecordBatchReader to its end; the second found it empty,
    committed nothing, and append() returned a version as if the rows were written."""
    schema = db.table("t").schema
    other = mere.connect(db.uri, create=False)
    begin = db.transaction
    calls = 0

    def racing_transaction(*args: object, **kwargs: object) -> mere.Transaction:
        nonlocal calls
        calls += 1
        tx = begin(*args, **kwargs)  # type: ignore[arg-type]
        if calls == 1:  # another client inserts key 1 while the first attempt runs
            other.table("t").append([{"id": 3, "v": "other"}])
        return tx

    monkeypatch.setattr(db, "transaction", racing_transaction)
    batch = pa.record_batch({"id": [3, 4], "v": ["mine", "mine"]}, schema=schema)
    reader = pa.RecordBatchReader.from_batches(schema, [batch])
    version = db.table("t").append(reader, on_duplicate=on_duplicate)  # type: ignore[arg-type]
    assert calls == 2
    first = "mine" if on_duplicate == "update" else "other"
    assert content(db.snapshot(version).table("t")) == [(1, "a"), (2, "b"), (3, first), (4, "mine")]
