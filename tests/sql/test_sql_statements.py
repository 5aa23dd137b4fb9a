"""Statements through db.sql: run by mere's verbs, one transaction each or BEGIN ... COMMIT."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

import mere
from mere.sql import Session, SQLError, UnsupportedSQL

SETUP = """
CREATE TABLE customers (cid BIGINT NOT NULL, name VARCHAR, last_order DATE);
CREATE TABLE orders (
    oid BIGINT NOT NULL, cid BIGINT NOT NULL, amount DECIMAL(10, 2), day DATE,
    CONSTRAINT positive CHECK (amount > 0)
) PARTITIONED BY (day);
INSERT INTO customers VALUES (1, 'Ann', NULL), (2, 'Bob', DATE '2024-04-30');
"""

PLACE_ORDER = """
BEGIN;
INSERT INTO orders VALUES ($oid, $cid, $amount, $day);
UPDATE customers SET last_order = $day WHERE cid = $cid;
COMMIT;
"""


@pytest.fixture
def shop(db: mere.Database) -> mere.Database:
    db.sql(SETUP)
    return db


def test_an_order_and_the_customer_change_together(shop: mere.Database) -> None:
    before = shop.version
    day = dt.date(2024, 5, 1)
    shop.sql(PLACE_ORDER, {"oid": 10, "cid": 1, "amount": decimal.Decimal("12.50"), "day": day})
    assert shop.version == before + 1  # one commit for both tables
    assert shop.sql("SELECT oid, cid, amount FROM orders").to_pylist() == [
        {"oid": 10, "cid": 1, "amount": decimal.Decimal("12.50")}
    ]
    assert shop.sql("SELECT last_order FROM customers WHERE cid = 1").column(0).to_pylist() == [day]
    assert shop.history(1)[0]["operation"] == "TRANSACTION"


def test_a_failing_second_statement_leaves_both_tables_unchanged(shop: mere.Database) -> None:
    before = shop.version
    orders = shop.table("orders").scan()
    customers = shop.table("customers").scan()
    with pytest.raises(mere.SchemaMismatch):  # 'soon' is not a date
        shop.sql(
            """BEGIN;
               INSERT INTO orders VALUES (11, 2, 5.00, DATE '2024-05-02');
               UPDATE customers SET last_order = 'soon' WHERE cid = 2;
               COMMIT"""
        )
    assert shop.version == before
    assert shop.table("orders").scan().equals(orders)
    assert shop.table("customers").scan().equals(customers)
    with pytest.raises(mere.ConstraintViolation):  # CHECK (amount > 0)
        shop.sql(
            """BEGIN;
               UPDATE customers SET last_order = DATE '2024-05-02' WHERE cid = 2;
               INSERT INTO orders VALUES (12, 2, -1, DATE '2024-05-02');
               COMMIT"""
        )
    assert shop.version == before
    assert shop.table("customers").scan().equals(customers)


def test_without_begin_each_statement_commits_on_its_own(shop: mere.Database) -> None:
    before = shop.version
    with pytest.raises(mere.ConstraintViolation):
        shop.sql(
            "INSERT INTO orders VALUES (1, 1, 3, DATE '2024-01-01'); "
            "INSERT INTO orders VALUES (2, 1, 0, DATE '2024-01-01')"
        )
    assert shop.version == before + 1
    assert shop.sql("SELECT oid FROM orders").column(0).to_pylist() == [1]


def test_results_of_statements(shop: mere.Database) -> None:
    assert shop.sql("UPDATE customers SET name = upper(name)").to_pylist() == [{"count": 2}]
    assert shop.sql("DELETE FROM customers WHERE cid = 2").to_pylist() == [{"count": 1}]
    assert shop.sql("INSERT INTO customers (cid) SELECT 5").to_pylist() == [{"count": 1}]
    assert shop.sql("DELETE FROM customers").to_pylist() == [{"count": 2}]
    assert shop.sql("CREATE TABLE x (a INT)") is None
    assert shop.sql("BEGIN; DROP TABLE x; COMMIT") is None


def test_savepoints(shop: mere.Database) -> None:
    result = shop.sql(
        """BEGIN;
           INSERT INTO customers VALUES (3, 'Cy', NULL);
           SAVEPOINT a;
           DELETE FROM customers WHERE cid = 1;
           SAVEPOINT b;
           DELETE FROM customers WHERE cid = 2;
           ROLLBACK TO SAVEPOINT a;
           SELECT cid FROM customers ORDER BY cid;"""
        " RELEASE SAVEPOINT a; INSERT INTO customers VALUES (4, 'Di', NULL); COMMIT"
    )
    assert result is None
    assert shop.sql("SELECT cid FROM customers ORDER BY cid").column(0).to_pylist() == [1, 2, 3, 4]
    inside = shop.sql(
        "BEGIN; SAVEPOINT s; DELETE FROM customers WHERE cid > 2; "
        "SELECT count(*) AS n FROM customers; ROLLBACK TO s; "
        "SELECT count(*) AS n FROM customers; ROLLBACK; "
        "SELECT count(*) AS n FROM customers"
    )
    assert inside.to_pylist() == [{"n": 4}]
    with pytest.raises(SQLError, match="does not exist"):
        shop.sql("BEGIN; SAVEPOINT a; ROLLBACK TO nope; COMMIT")
    with pytest.raises(SQLError, match="inside BEGIN"):
        shop.sql("SAVEPOINT a")


def test_begin_options_and_misuse(shop: mere.Database) -> None:
    shop.sql("BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE; SELECT 1; COMMIT")
    shop.sql("START TRANSACTION ISOLATION LEVEL SNAPSHOT; COMMIT WORK")
    shop.sql("BEGIN ISOLATION LEVEL READ COMMITTED; END")
    with pytest.raises(UnsupportedSQL, match="isolation level"):
        shop.sql("BEGIN ISOLATION LEVEL CHAOS")
    before = shop.version
    with pytest.raises(SQLError, match="BEGIN without COMMIT"):
        shop.sql("BEGIN; DELETE FROM customers WHERE cid = 1")
    assert shop.version == before
    with pytest.raises(SQLError, match="no transaction"):
        shop.sql("COMMIT")
    with pytest.raises(SQLError, match="already in progress"):
        shop.sql("BEGIN; BEGIN")


def test_tx_sql_runs_inside_the_callers_transaction(shop: mere.Database) -> None:
    with shop.transaction() as tx:
        tx.sql("INSERT INTO customers VALUES (7, 'Eve', NULL)")
        assert tx.sql("SELECT count(*) AS n FROM customers").to_pylist() == [{"n": 3}]
        with pytest.raises(mere.SchemaMismatch):
            tx.sql("UPDATE customers SET last_order = 'x' WHERE cid = 7")
        tx.sql("SAVEPOINT a; DELETE FROM customers WHERE cid = 7; ROLLBACK TO a")
        with pytest.raises(UnsupportedSQL, match="COMMIT"):
            tx.sql("COMMIT")
        assert shop.sql("SELECT count(*) AS n FROM customers").to_pylist() == [{"n": 2}]
    assert shop.sql("SELECT count(*) AS n FROM customers").to_pylist() == [{"n": 3}]


def test_create_table_types_partitions_and_constraints(db: mere.Database) -> None:
    db.sql(
        """CREATE TABLE t (
             a TINYINT, b SMALLINT, c INTEGER, d BIGINT NOT NULL, e UBIGINT, f REAL, g DOUBLE,
             h DECIMAL(9, 3), i BOOLEAN, j VARCHAR(10), k BLOB, l DATE, m TIME, n TIMESTAMP,
             o TIMESTAMP_NS, p TIMESTAMPTZ, q TEXT CHECK (q <> '')
           ) PARTITIONED BY (j)"""
    )
    schema = db.table("t").schema
    assert [str(f.type) for f in schema] == [
        "int8", "int16", "int32", "int64", "uint64", "float", "double", "decimal128(9, 3)",
        "bool", "string", "binary", "date32[day]", "time64[us]", "timestamp[us]",
        "timestamp[ns]", "timestamp[us, tz=UTC]", "string",
    ]  # fmt: skip
    assert not schema.field("d").nullable
    assert db.table("t").partition_by == ["j"]
    with pytest.raises(mere.ConstraintViolation):
        db.sql("INSERT INTO t (d, q) VALUES (1, '')")
    with pytest.raises(mere.ConstraintViolation):
        db.sql("INSERT INTO t (a) VALUES (1)")  # d is NOT NULL
    db.sql("CREATE TABLE IF NOT EXISTS t (z INT)")
    assert db.table("t").schema == schema
    db.sql("CREATE OR REPLACE TABLE t (z INT)")
    assert db.table("t").schema.names == ["z"]
    db.sql("DROP TABLE t; DROP TABLE IF EXISTS t")
    assert db.tables() == []


def test_create_or_replace_table_as_a_select_of_itself(db: mere.Database) -> None:
    """The query reads the table being replaced, as in DuckDB (it found no table)."""
    db.sql("CREATE TABLE t (k BIGINT, v BIGINT); INSERT INTO t VALUES (1, 10), (2, 20)")
    db.sql("CREATE OR REPLACE TABLE t AS SELECT k, v + 1 AS v FROM t WHERE k = 2")
    assert db.sql("SELECT * FROM t").to_pylist() == [{"k": 2, "v": 21}]
    db.sql("CREATE TABLE IF NOT EXISTS t AS SELECT * FROM nowhere")  # t exists: not run
    assert db.sql("SELECT * FROM t").to_pylist() == [{"k": 2, "v": 21}]


def test_create_table_as_select_and_insert_select(db: mere.Database) -> None:
    db.sql(
        "CREATE TABLE nums PARTITIONED BY (odd) AS "
        "SELECT range AS n, range % 2 = 1 AS odd FROM range(10)"
    )
    assert db.table("nums").partition_by == ["odd"]
    assert db.sql("SELECT sum(n) AS s FROM nums").to_pylist() == [{"s": 45}]
    db.sql("INSERT INTO nums SELECT n + 100, odd FROM nums WHERE n < 3")
    assert db.snapshot().table("nums").count() == 13
    db.sql("INSERT INTO nums (n) VALUES (1000)")  # odd is NULL
    assert db.snapshot().table("nums").count("odd IS NULL") == 1


def test_alter_table(shop: mere.Database) -> None:
    shop.sql(
        "ALTER TABLE customers ADD COLUMN vip BOOLEAN; "
        "ALTER TABLE customers RENAME COLUMN name TO full_name; "
        "ALTER TABLE customers ALTER COLUMN cid TYPE BIGINT; "
        "ALTER TABLE customers ADD CONSTRAINT named CHECK (full_name <> '')"
    )
    assert shop.table("customers").schema.names == ["cid", "full_name", "last_order", "vip"]
    assert shop.sql("SELECT full_name FROM customers ORDER BY cid").column(0).to_pylist() == [
        "Ann",
        "Bob",
    ]
    with pytest.raises(mere.ConstraintViolation):
        shop.sql("UPDATE customers SET full_name = '' WHERE cid = 1")
    shop.sql("ALTER TABLE customers DROP CONSTRAINT named")
    shop.sql("UPDATE customers SET full_name = '' WHERE cid = 1")
    with pytest.raises(UnsupportedSQL, match="DROP COLUMN"):
        shop.sql("ALTER TABLE customers DROP COLUMN vip")


def test_merge(shop: mere.Database) -> None:
    result = shop.sql(
        """MERGE INTO customers AS t
           USING (SELECT 2 AS cid, 'Robert' AS name UNION ALL SELECT 3, 'Cy') AS s
           ON t.cid = s.cid
           WHEN MATCHED THEN UPDATE SET name = s.name
           WHEN NOT MATCHED THEN INSERT (cid, name) VALUES (s.cid, s.name)"""
    )
    assert result.to_pylist() == [{"count": 2, "inserted": 1, "updated": 1, "deleted": 0}]
    assert shop.sql("SELECT cid, name FROM customers ORDER BY cid").to_pylist() == [
        {"cid": 1, "name": "Ann"},
        {"cid": 2, "name": "Robert"},
        {"cid": 3, "name": "Cy"},
    ]
    shop.sql("CREATE TABLE gone AS SELECT 1 AS cid")
    shop.sql("MERGE INTO customers USING gone ON customers.cid = gone.cid WHEN MATCHED THEN DELETE")
    assert shop.snapshot().table("customers").count() == 2
    with pytest.raises(UnsupportedSQL, match="BY SOURCE"):
        shop.sql(
            "MERGE INTO customers USING gone ON customers.cid = gone.cid "
            "WHEN NOT MATCHED BY SOURCE THEN DELETE"
        )


def test_parameters_in_statements_are_values(shop: mere.Database) -> None:
    evil = "x'); DROP TABLE customers; --"
    shop.sql("INSERT INTO customers VALUES (?, ?, ?)", [9, evil, dt.date(2024, 1, 2)])
    shop.sql("UPDATE customers SET name = ? WHERE cid = ?", [evil + "!", 9])
    assert shop.sql("SELECT name FROM customers WHERE cid = 9").column(0).to_pylist() == [
        evil + "!"
    ]
    shop.sql("DELETE FROM customers WHERE name = $n", {"n": evil + "!"})
    assert shop.tables() == ["customers", "orders"]
    assert shop.snapshot().table("customers").count() == 2


UNSUPPORTED = [
    ("UPDATE customers SET name = 'a' FROM orders WHERE orders.cid = customers.cid", "FROM"),
    ("DELETE FROM customers USING orders WHERE orders.cid = customers.cid", "USING"),
    ("INSERT INTO customers VALUES (1, 'a', NULL) RETURNING cid", "RETURNING"),
    ("INSERT INTO customers VALUES (1, 'a', NULL) ON CONFLICT ON CONSTRAINT k DO NOTHING", "ON C"),
    ("CREATE VIEW v AS SELECT 1", "CREATE VIEW"),
    ("CREATE TABLE y (a INT UNIQUE)", "UNIQUE"),
    ("CREATE TABLE y (a INTERVAL)", "INTERVAL"),
    ("DROP VIEW v", "DROP VIEW"),
    ("PRAGMA threads=1", "PRAGMA"),
    ("SET threads = 1", "SET"),
]


@pytest.mark.parametrize(("sql", "construct"), UNSUPPORTED)
def test_unsupported_constructs_are_named(shop: mere.Database, sql: str, construct: str) -> None:
    before = shop.version
    with pytest.raises(UnsupportedSQL, match=construct):
        shop.sql(sql)
    assert shop.version == before


def test_expressions_mere_cannot_evaluate_are_refused(shop: mere.Database) -> None:
    with pytest.raises(mere.InvalidExpression):
        shop.sql("DELETE FROM customers WHERE cid IN (SELECT cid FROM orders)")


def test_the_snapshot_is_read_only(shop: mere.Database) -> None:
    with pytest.raises(UnsupportedSQL, match="read-only"):
        shop.snapshot().sql("INSERT INTO customers VALUES (5, 'x', NULL)")
    assert shop.snapshot().sql("SELECT count(*) AS n FROM customers").to_pylist() == [{"n": 2}]


def test_a_table_made_with_sql_reads_back_in_python(db: mere.Database) -> None:
    db.sql("CREATE TABLE t (id BIGINT, v DOUBLE); INSERT INTO t VALUES (1, 'NaN'), (2, NULL)")
    got = db.table("t").scan()
    assert got.schema == pa.schema([("id", pa.int64()), ("v", pa.float64())])
    assert got.column("id").to_pylist() == [1, 2]


def test_concurrent_sql_transactions_get_the_python_apis_conflicts(shop: mere.Database) -> None:
    """Two sessions update the same row; the later commit conflicts, as with tx.table().update."""
    first, second = Session(shop), Session(shop)
    first.execute("BEGIN; UPDATE customers SET name = 'A1' WHERE cid = 1")
    second.execute("BEGIN; UPDATE customers SET name = 'A2' WHERE cid = 1; COMMIT")
    assert first.transaction is not None
    with pytest.raises(mere.ConflictError):
        first.execute("COMMIT")
    assert first.transaction is None
    assert shop.sql("SELECT name FROM customers WHERE cid = 1").column(0).to_pylist() == ["A2"]
    # appends to another table do not conflict (write_serializable): both commit
    first.execute("BEGIN; INSERT INTO orders VALUES (1, 1, 1, DATE '2024-01-01')")
    second.execute("INSERT INTO orders VALUES (2, 2, 2, DATE '2024-01-01')")
    first.execute("COMMIT")
    assert shop.snapshot().table("orders").count() == 2


def test_an_insert_of_the_wrong_width_names_the_users_table(shop: mere.Database) -> None:
    with pytest.raises(SQLError, match='table "customers" has') as caught:
        shop.sql("INSERT INTO customers VALUES (1)")
    assert "__mere" not in str(caught.value)
