"""DML statements whose meaning a bug hunt against DuckDB found mere getting wrong: each is
run through db.sql and through DuckDB, and the tables (or the refusals) must agree."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import duckdb
import pytest

import mere
from mere.sql import SQLError


def both(db: mere.Database, con: duckdb.DuckDBPyConnection, *statements: str) -> None:
    for statement in statements:
        db.sql(statement)
        con.execute(statement)


def rows(db: mere.Database, con: duckdb.DuckDBPyConnection, table: str) -> tuple[Any, Any]:
    query = f"SELECT * FROM {table} ORDER BY ALL"
    return [tuple(r.values()) for r in db.sql(query).to_pylist()], con.sql(query).fetchall()


@pytest.mark.parametrize(
    "insert",
    [
        "INSERT OR REPLACE INTO t (id, s) VALUES (1, 'new'), (2, 'two')",
        "INSERT OR REPLACE INTO t (s, id) VALUES ('new', 1)",
        "INSERT OR REPLACE INTO t (id) VALUES (1), (3)",
        "INSERT OR REPLACE INTO t (id, a, s) VALUES (1, 11, 'new')",
        "INSERT OR REPLACE INTO t VALUES (1, 11, 'new')",
    ],
)
def test_insert_or_replace_keeps_the_columns_it_does_not_name(
    db: mere.Database, insert: str
) -> None:
    """A partial column list set every unnamed column of a replaced row to NULL."""
    con = duckdb.connect()
    both(
        db,
        con,
        "CREATE TABLE t (id BIGINT PRIMARY KEY, a INTEGER, s VARCHAR)",
        "INSERT INTO t VALUES (1, 10, 'old')",
        insert,
    )
    mine, theirs = rows(db, con, "t")
    assert mine == theirs


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE t SET a = 5, a = a + 100",
        "UPDATE t SET a = 5, A = 6",
        "MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET a = 7, a = 8",
        "MERGE INTO t USING (SELECT 9 AS id) s ON t.id = s.id "
        "WHEN NOT MATCHED THEN INSERT (id, a, a) VALUES (s.id, 1, 2)",
        "INSERT INTO t VALUES (1, 5) ON CONFLICT DO UPDATE SET a = 7, a = excluded.a",
    ],
)
def test_a_column_assigned_twice_is_refused(db: mere.Database, statement: str) -> None:
    """The last assignment silently won; DuckDB and PostgreSQL refuse the statement."""
    con = duckdb.connect()
    create = "CREATE TABLE t (id BIGINT PRIMARY KEY, a INTEGER)"
    both(db, con, create, "INSERT INTO t VALUES (1, 1)")
    with pytest.raises(duckdb.Error):
        con.execute(statement)
    v = db.version
    with pytest.raises(mere.InvalidArgument, match="more than once"):
        db.sql(statement)
    assert db.version == v
    mine, theirs = rows(db, con, "t")
    assert mine == theirs == [(1, 1)]


def test_a_decimal_parameter_is_a_value_not_text(db: mere.Database) -> None:
    """``str(Decimal)`` went back into the SQL: an exponent made it a DOUBLE (the wrong row
    updated), and ``Infinity`` or ``NaN`` named a column."""
    con = duckdb.connect()
    both(
        db,
        con,
        'CREATE TABLE b (id BIGINT, v DECIMAL(38, 0), "Infinity" DECIMAL(38, 0))',
        "INSERT INTO b VALUES (1, 1234567890123456789100001, 5)",
    )
    wide = [Decimal("12345678901234567891E+5")]
    for statement in ("UPDATE b SET id = 2 WHERE v = ?", "DELETE FROM b WHERE v = ?"):
        assert db.sql(statement, wide).to_pylist() == [{"count": 0}]
        con.execute(statement, wide)
    assert db.sql("SELECT count(*) AS n FROM b WHERE v = ?", wide).to_pylist() == [{"n": 0}]
    db.sql("UPDATE b SET v = ? WHERE id = 1", [Decimal("-12.5E+1")])
    con.execute("UPDATE b SET v = ? WHERE id = 1", [Decimal("-12.5E+1")])
    for value in ("Infinity", "-Infinity", "NaN"):
        with pytest.raises(mere.InvalidArgument, match="must be a number"):
            db.sql("UPDATE b SET v = ? WHERE id = 1", [Decimal(value)])
    mine, theirs = rows(db, con, "b")
    assert mine == theirs


def test_a_clause_after_an_unconditional_one_is_a_mere_error(db: mere.Database) -> None:
    """It raised a bare ValueError."""
    db.sql("CREATE TABLE t (id BIGINT, a INTEGER)")
    db.sql("INSERT INTO t VALUES (1, 1)")
    v = db.version
    with pytest.raises(mere.InvalidArgument, match="can never run"):
        db.sql(
            "MERGE INTO t USING (SELECT 1 AS id, 9 AS a) AS s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET a = s.a WHEN MATCHED THEN DELETE"
        )
    assert db.version == v


def test_errors_name_the_table_not_the_scratch_table(db: mere.Database) -> None:
    db.sql("CREATE TABLE t (id BIGINT, a INTEGER)")
    for statement in (
        "INSERT INTO t (id, nope) VALUES (1, 2)",
        "INSERT INTO t SELECT x FROM t",
        "INSERT INTO t VALUES ('a', 1)",
    ):
        with pytest.raises(SQLError) as info:
            db.sql(statement)
        assert "__mere" not in str(info.value)


def test_sql_text_that_is_not_unicode_is_refused(db: mere.Database) -> None:
    """A lone surrogate reached DuckDB, which raised a raw TypeError."""
    with pytest.raises(mere.InvalidArgument, match="offset 8"):
        db.sql("SELECT '\udcff'")
