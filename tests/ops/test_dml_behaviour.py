"""How DELETE, UPDATE, OVERWRITE and MERGE behave as transactions on files.

Copy-on-write touches only the files that can match; a change that matches
nothing writes nothing; several operations in one transaction commit as one
version; a transaction sees its own writes; concurrent writers conflict
exactly as the matrix in :mod:`mere.txn.conflicts` says; and a failing
update leaves the table as it was.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import mere
from mere.storage import FaultyStore, MemoryStore

ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)
COUNTRIES = ["DE", "FR", "GB", "US"]


def rows(start: int, n: int, amount: float | None = None) -> pa.Table:
    """Ids ``start..start+n-1``; amount equals the id unless given."""
    ids = range(start, start + n)
    return pa.table(
        {
            "id": list(ids),
            "country": [COUNTRIES[i % 4] for i in ids],
            "amount": [float(i) if amount is None else amount for i in ids],
        },
        schema=ORDERS,
    )


def four_files(db: mere.Database, partition_by: tuple[str, ...] = ()) -> mere.Table:
    """Table ``orders`` with ids 0..399, one append (one file per partition) per hundred."""
    db.create_table("orders", ORDERS, partition_by=list(partition_by))
    for start in range(0, 400, 100):
        db.table("orders").append(rows(start, 100))
    return db.table("orders")


def paths(db: mere.Database, table: str = "orders") -> set[str]:
    return {f.path for f in db.snapshot().table(table).files}


def ids(table: mere.Table | mere.TxTable, filter: str | None = None) -> list[int]:
    return sorted(table.scan(columns=["id"], filter=filter).column("id").to_pylist())


@pytest.fixture
def counted() -> tuple[mere.Database, FaultyStore]:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    four_files(db)
    return db, store


# --- copy-on-write touches only what can match ------------------------------------------


def test_delete_opens_and_replaces_only_the_file_that_can_match(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    before_paths, before = paths(db), store.calls["open_input"]
    assert db.table("orders").delete("id = 150") == 1
    assert store.calls["open_input"] - before == 1
    after_paths = paths(db)
    assert len(before_paths - after_paths) == 1  # one file removed
    assert len(after_paths - before_paths) == 1  # its 99 other rows rewritten
    assert ids(db.table("orders")) == [i for i in range(400) if i != 150]


def test_delete_drops_files_it_covers_without_reading_them(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    """Statistics show every row of files 1 and 2 matches; only file 3 is read and rewritten."""
    db, store = counted
    before_paths, before = paths(db), store.calls["open_input"]
    assert db.table("orders").delete("id >= 100 AND id < 350") == 250
    assert store.calls["open_input"] - before == 1
    assert len(before_paths - paths(db)) == 3
    assert len(paths(db) - before_paths) == 1  # file 3's 50 surviving rows
    assert ids(db.table("orders")) == [*range(100), *range(350, 400)]
    assert db.history(1)[0]["parameters"]["numDeletedRows"] == 250


def test_a_partition_delete_reads_nothing() -> None:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    four_files(db, partition_by=("country",))
    before_paths, before = paths(db), store.calls["open_input"]
    with db.transaction() as tx:
        assert tx.table("orders").delete("country IN ('FR', 'GB')") == 200
        assert ids(tx.table("orders")) == [i for i in range(400) if i % 4 in (0, 3)]
    # Only the scan inside the transaction reads: the 8 files of the other countries.
    assert store.calls["open_input"] - before == 8
    gone = before_paths - paths(db)
    assert len(gone) == 8 and all(p.startswith(("country=FR/", "country=GB/")) for p in gone)
    assert paths(db) < before_paths  # nothing written
    assert ids(db.table("orders")) == [i for i in range(400) if i % 4 in (0, 3)]


def test_update_spanning_two_files_rewrites_exactly_those(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    before_paths, before = paths(db), store.calls["open_input"]
    assert db.table("orders").update("id >= 190 AND id < 210", {"amount": "-amount"}) == 20
    assert store.calls["open_input"] - before == 2
    assert len(before_paths - paths(db)) == 2
    negative = db.table("orders").scan(filter="amount < 0")
    assert sorted(negative.column("id").to_pylist()) == list(range(190, 210))


def test_merge_reads_files_by_source_keys(counted: tuple[mere.Database, FaultyStore]) -> None:
    """Up to 1000 keys: an IN list (files 0 and 3 only); beyond: the key range."""
    db, store = counted
    before = store.calls["open_input"]
    source = [{"id": 5, "amount": -1.0}, {"id": 350, "amount": -1.0}]
    metrics = (
        db.table("orders")
        .merge(source, on="t.id = s.id")
        .when_matched_update({"amount": "s.amount"})
        .execute()
    )
    assert store.calls["open_input"] - before == 2  # not the files of ids 100..299
    assert metrics.num_target_files_removed == 2
    assert metrics.num_target_rows_updated == 2 and metrics.num_target_rows_copied == 198

    before = store.calls["open_input"]
    many = pa.table({"id": pa.array(range(100, 1300), pa.int64())})  # 1200 keys: a range
    metrics = (
        db.table("orders")
        .merge(many, on="t.id = s.id")
        .when_not_matched_insert({"id": "s.id"})
        .execute()
    )
    assert store.calls["open_input"] - before == 3  # ids 0..99 cannot match 100..1299
    assert metrics.num_target_rows_inserted == 900 and metrics.num_target_files_removed == 0


def test_merge_on_a_partition_column_prunes_partitions() -> None:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    table = four_files(db, partition_by=("country",))
    assert table.describe()["files"] == 16
    before = store.calls["open_input"]
    source = [{"id": i, "amount": 0.0} for i in range(0, 400, 4)]  # every DE row
    metrics = (
        table.merge(source, on="t.id = s.id AND t.country = 'DE'")
        .when_matched_update({"amount": "s.amount"})
        .execute()
    )
    assert store.calls["open_input"] - before == 4  # the DE file of each append
    assert metrics.num_target_rows_updated == 100 and metrics.num_target_files_removed == 4


def test_delete_matching_nothing_in_a_candidate_file_rewrites_nothing(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    """Statistics cannot rule the file out ('EE' lies between 'DE' and 'US'); it is read, kept."""
    db, store = counted
    version, before = db.version, store.calls["open_input"]
    objects = sorted(m.key for m in store.list(""))
    assert db.table("orders").delete("id = 150 AND country = 'EE'") == 0
    assert store.calls["open_input"] - before == 1
    assert db.version == version  # nothing to commit: no version at all
    assert sorted(m.key for m in store.list("")) == objects  # no file written


def test_update_and_merge_matching_nothing_write_nothing(
    counted: tuple[mere.Database, FaultyStore],
) -> None:
    db, store = counted
    version, objects = db.version, sorted(m.key for m in store.list(""))
    assert db.table("orders").update("amount > 1e9", {"amount": "0"}) == 0
    metrics = (
        db.table("orders").merge([{"id": 10_000}], on="t.id = s.id").when_matched_delete().execute()
    )
    assert metrics.num_target_files_added == metrics.num_target_files_removed == 0
    assert db.version == version
    assert sorted(m.key for m in store.list("")) == objects


# --- transactions ---------------------------------------------------------------------


def test_delete_and_append_on_two_tables_commit_as_one_version(db: mere.Database) -> None:
    four_files(db)
    db.create_table("audit", ORDERS)
    version = db.version
    with db.transaction() as tx:
        deleted = tx.table("orders").delete("id < 10")
        tx.table("audit").append(rows(0, 10))
        assert db.snapshot().table("orders").scan().num_rows == 400  # not visible yet
        assert db.snapshot().table("audit").scan().num_rows == 0
    assert deleted == 10
    assert db.version == version + 1
    assert db.table("orders").scan().num_rows == 390
    assert db.table("audit").scan().num_rows == 10
    entry = db.history(1)[0]
    assert entry["operation"] == "TRANSACTION"
    assert entry["metrics"]["tables"] == ["audit", "orders"]


def test_a_failure_after_a_delete_aborts_the_whole_transaction(db: mere.Database) -> None:
    four_files(db)
    version = db.version
    with pytest.raises(mere.SchemaMismatch), db.transaction() as tx:
        tx.table("orders").delete("id < 10")
        tx.table("orders").append([{"id": 1, "nope": 2}])
    assert db.version == version
    assert db.table("orders").scan().num_rows == 400


def test_a_transaction_reads_its_own_changes(db: mere.Database) -> None:
    four_files(db)
    with db.transaction() as tx:
        orders = tx.table("orders")
        orders.delete("id < 100")
        assert orders.scan(filter="id < 100").num_rows == 0
        orders.update("id = 100", {"amount": "-1"})
        assert orders.scan(filter="id = 100").column("amount").to_pylist() == [-1.0]
        orders.append(rows(1000, 3))
        orders.delete("id = 1001")  # a file this transaction wrote
        assert ids(orders, "id >= 1000") == [1000, 1002]
        orders.merge([{"id": 1000, "amount": 5.0}], on="t.id = s.id").when_matched_update(
            {"amount": "s.amount"}
        ).execute()
        assert orders.scan(filter="id = 1000").column("amount").to_pylist() == [5.0]
        assert db.table("orders").scan().num_rows == 400  # others see nothing yet
    assert db.table("orders").scan().num_rows == 302
    assert ids(db.table("orders"), "id >= 1000") == [1000, 1002]


# --- the conflict matrix --------------------------------------------------------------


def test_concurrent_deletes_in_the_same_file_conflict(db: mere.Database) -> None:
    """(a) the loser names the winning version and the table."""
    four_files(db)
    first, second = db.transaction(), db.transaction()
    first.table("orders").delete("id = 1")
    second.table("orders").delete("id = 2")
    won = first.commit()
    with pytest.raises(mere.ConcurrentDeleteDelete) as info:
        second.commit()
    assert info.value.winning_version == won
    assert info.value.table == "orders"
    assert f"winning version {won}" in str(info.value) and "'orders'" in str(info.value)
    assert ids(db.table("orders"), "id < 3") == [0, 2]


def test_concurrent_deletes_in_different_files_both_commit(db: mere.Database) -> None:
    four_files(db)
    first, second = db.transaction(), db.transaction()
    first.table("orders").delete("id = 1")
    second.table("orders").delete("id = 201")
    first.commit()
    second.commit()
    assert db.table("orders").scan().num_rows == 398


def test_delete_vs_blind_append_at_write_serializable_both_commit(db: mere.Database) -> None:
    """(b) WriteSerializable: the appended rows survive although they match the delete."""
    four_files(db)
    tx = db.transaction("write_serializable")
    assert tx.table("orders").delete("amount > 50") == 349
    db.table("orders").append(rows(1000, 5, amount=999.0))  # matching rows, blind append
    tx.commit()
    assert ids(db.table("orders")) == [*range(51), *range(1000, 1005)]


def test_delete_vs_matching_blind_append_at_serializable_conflicts(db: mere.Database) -> None:
    four_files(db)
    tx = db.transaction("serializable")
    tx.table("orders").delete("amount > 50")
    won = db.table("orders").append(rows(1000, 5, amount=999.0))
    with pytest.raises(mere.ConcurrentAppend) as info:
        tx.commit()
    assert info.value.winning_version == won and info.value.table == "orders"
    assert db.table("orders").scan().num_rows == 405


def test_delete_vs_non_matching_blind_append_at_serializable_commits(db: mere.Database) -> None:
    """Statistics show the appended file cannot hold a row with amount > 50."""
    four_files(db)
    tx = db.transaction("serializable")
    tx.table("orders").delete("amount > 50")
    db.table("orders").append(rows(1000, 5, amount=-5.0))
    tx.commit()
    assert ids(db.table("orders")) == [*range(51), *range(1000, 1005)]


@pytest.mark.parametrize("empty", [False, True], ids=["non-empty", "empty"])
def test_concurrent_full_overwrites_do_not_lose_an_update(db: mere.Database, empty: bool) -> None:
    """(c) delta-rs #3622: the second overwrite must fail, even of an empty table."""
    if empty:
        db.create_table("orders", ORDERS)
    else:
        four_files(db)
    first, second = db.transaction(), db.transaction()
    first.table("orders").overwrite(rows(1000, 3))
    second.table("orders").overwrite(rows(2000, 3))
    won = first.commit()
    (commit,) = db.log.read_commits(won, won)
    assert commit.info.is_blind_append is False
    expected = mere.ConcurrentAppend if empty else mere.ConcurrentDeleteDelete
    with pytest.raises(expected) as info:
        second.commit()
    assert info.value.winning_version == won and info.value.table == "orders"
    assert ids(db.table("orders")) == [1000, 1001, 1002]


def test_updates_of_different_tables_both_commit(db: mere.Database) -> None:
    """(d) even at serializable."""
    four_files(db)
    db.create_table("other", ORDERS)
    db.table("other").append(rows(0, 10))
    first, second = db.transaction("serializable"), db.transaction("serializable")
    first.table("orders").update("id = 1", {"amount": "0"})
    second.table("other").update("id = 1", {"amount": "0"})
    v1 = first.commit()
    v2 = second.commit()
    assert v2 == v1 + 1
    assert db.table("orders").scan(filter="amount = 0").num_rows == 2  # ids 0 and 1
    assert db.table("other").scan(filter="amount = 0").num_rows == 2


def test_conflict_message_names_table_and_winning_version(db: mere.Database) -> None:
    """(e)"""
    four_files(db)
    db.table("orders").append(rows(1000, 1))  # a version between read and winner
    first, second = db.transaction(), db.transaction()
    first.table("orders").update("id = 5", {"amount": "1"})
    second.table("orders").update("id = 6", {"amount": "1"})
    won = first.commit()
    with pytest.raises(mere.ConflictError) as info:
        second.commit()
    message = str(info.value)
    assert f"winning version {won}" in message
    assert "table 'orders'" in message
    assert second.status == "aborted"


def test_concurrent_merges_of_the_same_keys_conflict(db: mere.Database) -> None:
    four_files(db)
    first, second = db.transaction(), db.transaction()
    for tx, amount in ((first, 1.0), (second, 2.0)):
        tx.table("orders").merge(
            [{"id": 7, "amount": amount}], on="t.id = s.id"
        ).when_matched_update({"amount": "s.amount"}).execute()
    won = first.commit()
    with pytest.raises(mere.ConcurrentDeleteDelete) as info:
        second.commit()
    assert info.value.winning_version == won
    assert db.table("orders").scan(filter="id = 7").column("amount").to_pylist() == [1.0]


@pytest.mark.parametrize("isolation", ["write_serializable", "serializable"])
def test_insert_only_merge_vs_concurrent_append_of_the_same_key(
    db: mere.Database, isolation: str
) -> None:
    """The merge read key 1000 (absent); a concurrent append of it is a phantom.

    Serializable refuses it; write_serializable lets both commit (blind appends
    never conflict there), as Delta Lake does.
    """
    four_files(db)
    tx = db.transaction(isolation)  # type: ignore[arg-type]
    tx.table("orders").merge([{"id": 1000}], on="t.id = s.id").when_not_matched_insert(
        {"id": "s.id"}
    ).execute()
    db.table("orders").append(rows(1000, 1))
    if isolation == "serializable":
        with pytest.raises(mere.ConcurrentAppend):
            tx.commit()
        assert ids(db.table("orders"), "id = 1000") == [1000]
    else:
        tx.commit()
        assert ids(db.table("orders"), "id = 1000") == [1000, 1000]


def test_merge_vs_concurrent_append_of_other_keys_commits_at_serializable(
    db: mere.Database,
) -> None:
    four_files(db)
    tx = db.transaction("serializable")
    tx.table("orders").merge([{"id": 1000}], on="t.id = s.id").when_not_matched_insert(
        {"id": "s.id"}
    ).execute()
    db.table("orders").append(rows(2000, 5))  # statistics: cannot hold id 1000
    tx.commit()
    assert db.table("orders").scan().num_rows == 406


# --- update errors leave the table unchanged ------------------------------------------


NOT_NULL = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("small", pa.int8()),
        pa.field("country", pa.string()),
    ]
)


@pytest.fixture
def small(db: mere.Database) -> mere.Table:
    db.create_table("small", NOT_NULL, partition_by=["country"])
    db.table("small").append(
        pa.table(
            {"id": [1, 2, 3], "small": [1, 2, 3], "country": ["FR", "FR", "DE"]}, schema=NOT_NULL
        )
    )
    return db.table("small")


@pytest.mark.parametrize(
    ("set", "error", "match"),
    [
        ({"nope": "1"}, mere.SchemaMismatch, "unknown column 'nope'"),
        ({"small": 1000}, mere.SchemaMismatch, "cannot set column 'small'"),  # literal
        ({"small": "small * 1000"}, mere.SchemaMismatch, "do not fit"),  # expression
        ({"id": None}, mere.ConstraintViolation, "NOT NULL"),
        ({"id": "NULL"}, mere.ConstraintViolation, "NOT NULL"),
        ({"small": "'text'"}, mere.SchemaMismatch, "do not fit"),
        ({"small": "nope + 1"}, mere.InvalidExpression, "unknown column"),
    ],
)
def test_failing_update_leaves_the_table_unchanged(
    small: mere.Table, set: dict[str, object], error: type[Exception], match: str
) -> None:
    db = small._db
    version, before = db.version, small.scan().sort_by("id")
    with pytest.raises(error, match=match):
        small.update("id >= 1", set)
    assert db.version == version
    assert small.scan().sort_by("id").equals(before)


def test_updating_a_partition_column_moves_rows(small: mere.Table) -> None:
    """Setting a partition column works: the rows are rewritten into the new partition."""
    assert small.update("id = 1", {"country": "'GB'"}) == 1
    files = small._db.snapshot().table("small").files
    by_partition = {f.partition_values["country"]: f.rows for f in files}
    assert by_partition == {"FR": 1, "DE": 1, "GB": 1}
    assert small.scan(filter="country = 'GB'").column("id").to_pylist() == [1]
    assert small.update("country = 'GB'", {"country": None}) == 1  # into the NULL partition
    assert small.scan(filter="country IS NULL").column("id").to_pylist() == [1]


def test_update_casts_values_only_for_matching_rows(db: mere.Database) -> None:
    """SET small = big WHERE big < 100: DuckDB stores 7; mere casts 1000 too and fails."""
    schema = pa.schema([pa.field("small", pa.int8()), pa.field("big", pa.int64())])
    db.create_table("mixed", schema)
    db.table("mixed").append([{"small": 1, "big": 7}, {"small": 2, "big": 1000}])  # one file
    assert db.table("mixed").update("big < 100", {"small": "big"}) == 1
    assert sorted(db.table("mixed").scan().column("small").to_pylist()) == [2, 7]


def test_update_refuses_a_lossy_python_literal(small: mere.Table) -> None:
    version = small._db.version
    with pytest.raises(mere.SchemaMismatch):
        small.update("id = 1", {"small": 2.7})
    assert small._db.version == version


def test_update_expression_errors_only_count_for_matching_rows(db: mere.Database) -> None:
    db.create_table("big", pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())]))
    db.table("big").append([{"id": 1, "v": 5}, {"id": 2, "v": 2**62}])
    assert db.table("big").update("id = 1", {"v": "v * 4"}) == 1
    assert sorted(db.table("big").scan().column("v").to_pylist()) == [20, 2**62]


def test_update_of_nothing_checks_values_but_writes_nothing(small: mere.Table) -> None:
    version = small._db.version
    with pytest.raises(mere.SchemaMismatch):
        small.update("id > 100", {"small": 1000})  # a bad literal is refused up front
    assert small.update("id > 100", {"small": 5}) == 0
    assert small._db.version == version
    assert pc.sum(small.scan().column("small")).as_py() == 6


def test_every_assignment_sees_the_row_as_it_was(db) -> None:
    """SET a = b, b = a swaps: the second assignment reads the old value of a."""
    import pyarrow as pa

    db.create_table("swap", pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    db.table("swap").append([{"a": 1, "b": 2}])
    db.table("swap").update(None, {"a": "b", "b": "a"})
    assert db.table("swap").scan().to_pylist() == [{"a": 2, "b": 1}]
