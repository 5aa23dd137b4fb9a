"""A session that keeps its transaction after a failing statement (what `mere sql` uses)."""

from __future__ import annotations

import pytest

import mere
from mere.sql import Session


@pytest.fixture
def shop(db: mere.Database) -> mere.Database:
    db.sql("CREATE TABLE t (k BIGINT NOT NULL, v BIGINT, CONSTRAINT pos CHECK (v > 0))")
    return db


def test_on_error_statement_undoes_only_the_failing_statement(shop: mere.Database) -> None:
    session = Session(shop, on_error="statement")
    session.execute("BEGIN; INSERT INTO t VALUES (1, 1)")
    with pytest.raises(mere.ConstraintViolation):
        session.execute("INSERT INTO t VALUES (2, 2), (3, -3)")
    assert session.transaction is not None  # still open, with the first insert only
    session.execute("INSERT INTO t VALUES (4, 4); COMMIT")
    rows = shop.sql("SELECT k FROM t ORDER BY k")
    assert rows is not None and rows.column("k").to_pylist() == [1, 4]


def test_on_error_transaction_is_the_default(shop: mere.Database) -> None:
    session = Session(shop)
    session.execute("BEGIN; INSERT INTO t VALUES (1, 1)")
    with pytest.raises(mere.ConstraintViolation):
        session.execute("INSERT INTO t VALUES (3, -3)")
    assert session.transaction is None
    assert shop.snapshot().table("t").count() == 0


def test_on_error_must_be_a_known_mode(shop: mere.Database) -> None:
    with pytest.raises(mere.InvalidArgument, match="on_error"):
        Session(shop, on_error="ignore")  # type: ignore[arg-type]
