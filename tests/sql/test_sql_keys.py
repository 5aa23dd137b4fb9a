"""SQL primary keys: ``PRIMARY KEY`` in CREATE/ALTER TABLE, ``INSERT ... ON CONFLICT``.

The differential test runs random statements on a keyed table through db.sql
and through DuckDB's own ``ON CONFLICT``: after every statement both tables
hold the same rows, and a statement one refuses the other refuses too (and
changes nothing). Keys repeat within a ``DO UPDATE`` statement only in the
pinned difference below (mere raises, as PostgreSQL; DuckDB keeps the first).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import mere
from mere.sql import UnsupportedSQL
from mere.storage import MemoryStore

CREATE = "CREATE TABLE t (id BIGINT PRIMARY KEY, grp INTEGER, x BIGINT, s VARCHAR)"
STRINGS = ["'a'", "'Bé'", "'O''Brien'", "''", "NULL"]
SETS = [
    "grp = excluded.grp, x = excluded.x, s = excluded.s",  # the plain form: an upsert
    "s = excluded.s, x = excluded.x, grp = excluded.grp",
    "x = excluded.x",
    "x = x + excluded.x",
    "s = excluded.s || s, grp = 7",
    "grp = coalesce(excluded.grp, grp)",
    "x = t.x - 1",
]
WHERES = ["", "", " WHERE excluded.x > x", " WHERE x IS NULL", " WHERE t.grp = 1"]


def _row(rng: random.Random, key: int) -> str:
    def maybe(text: str) -> str:
        return "NULL" if rng.random() < 0.2 else text

    return f"({key}, {maybe(str(rng.randrange(3)))}, {maybe(str(rng.randrange(-5, 9)))}, " + (
        f"{rng.choice(STRINGS)})"
    )


def random_statement(rng: random.Random) -> str:
    kind = rng.choice(["plain", "nothing", "nothing", "update", "update", "ignore", "replace"])
    count = rng.randrange(1, 6)
    if kind in ("nothing", "ignore"):
        keys = [rng.randrange(30) for _ in range(count)]  # repeats allowed: the first wins
    else:
        keys = rng.sample(range(30), count)
    values = "VALUES " + ", ".join(_row(rng, k) for k in keys)
    if rng.random() < 0.2:
        values = f"SELECT id + {rng.randrange(-3, 4)}, x, grp, s FROM t WHERE id % 3 = 0"
    if kind == "plain":
        return f"INSERT INTO t {values}"
    if kind == "ignore":
        return f"INSERT OR IGNORE INTO t {values}"
    if kind == "replace":
        return f"INSERT OR REPLACE INTO t {values}"
    target = rng.choice(["", " (id)"])
    if kind == "nothing":
        return f"INSERT INTO t {values} ON CONFLICT{target} DO NOTHING"
    return (
        f"INSERT INTO t {values} ON CONFLICT{target} DO UPDATE SET {rng.choice(SETS)}"
        f"{rng.choice(WHERES)}"
    )


def rows_of(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("seed", range(3))
def test_on_conflict_leaves_the_same_rows_as_duckdb(seed: int) -> None:
    rng = random.Random(seed)
    db = mere.connect(MemoryStore())
    con = duckdb.connect()
    db.sql(CREATE)
    con.execute(CREATE)
    for _ in range(30):
        statement = random_statement(rng)
        try:
            con.execute(statement)
            duck_error: Exception | None = None
        except duckdb.Error as exc:
            duck_error = exc
        if duck_error is not None:
            before = db.version
            with pytest.raises(mere.MereError):
                db.sql(statement)
            assert db.version == before, statement
        else:
            db.sql(statement)
        expected = rows_of(con.sql("SELECT * FROM t").to_arrow_table())
        assert rows_of(db.table("t").scan()) == expected, statement


@pytest.fixture
def db() -> mere.Database:
    db = mere.connect(MemoryStore())
    db.sql(CREATE + "; INSERT INTO t VALUES (1, 0, 10, 'a'), (2, 0, 20, 'b')")
    return db


def test_primary_key_declarations_reach_the_table() -> None:
    db = mere.connect(MemoryStore())
    db.sql("CREATE TABLE a (id BIGINT PRIMARY KEY, v INT)")
    db.sql("CREATE TABLE b (k INT, s VARCHAR, v INT, PRIMARY KEY (k, s))")
    db.sql("CREATE TABLE c (k INT, v INT, CONSTRAINT c_pk PRIMARY KEY (k))")
    db.sql(
        "CREATE TABLE d (k INT, v INT); INSERT INTO d VALUES (1, 1); "
        "ALTER TABLE d ADD PRIMARY KEY (k)"
    )
    keys = {n: db.table(n).describe()["primary_key"] for n in "abcd"}
    assert keys == {"a": ["id"], "b": ["k", "s"], "c": ["k"], "d": ["k"]}
    assert not db.table("b").schema.field("s").nullable
    with pytest.raises(mere.DuplicateKey):
        db.sql("INSERT INTO a VALUES (1, 1), (1, 2)")


def test_bad_key_declarations_are_refused_and_change_nothing() -> None:
    db = mere.connect(MemoryStore())
    before = db.version
    with pytest.raises(mere.InvalidArgument, match="more than one PRIMARY KEY"):
        db.sql("CREATE TABLE a (id INT PRIMARY KEY, v INT, PRIMARY KEY (v))")
    with pytest.raises(mere.MereError, match="nope"):
        db.sql("CREATE TABLE a (id INT, PRIMARY KEY (nope))")
    db.sql("CREATE TABLE d (k INT); INSERT INTO d VALUES (1), (1)")
    with pytest.raises(mere.DuplicateKey):
        db.sql("ALTER TABLE d ADD PRIMARY KEY (k)")
    assert db.tables() == ["d"] and db.table("d").describe()["primary_key"] in ([], None)
    assert db.version == before + 2  # the CREATE and the INSERT
    db.sql("CREATE TABLE k (id INT PRIMARY KEY, v INT)")
    with pytest.raises(mere.InvalidArgument, match=r"has a primary key already \(id\)"):
        db.sql("ALTER TABLE k ADD PRIMARY KEY (v)")
    assert db.table("k").describe()["primary_key"] == ["id"]


@pytest.mark.parametrize(
    ("sql", "error", "match"),
    [
        (
            "INSERT INTO t VALUES (1, 0, 0, 'z') ON CONFLICT (x) DO NOTHING",
            mere.InvalidArgument,
            "primary key",
        ),
        (
            "INSERT INTO t VALUES (1, 0, 0, 'z') ON CONFLICT ON CONSTRAINT pk DO NOTHING",
            UnsupportedSQL,
            "ON CONSTRAINT",
        ),
        (
            "INSERT INTO t VALUES (1, 0, 0, 'z') ON CONFLICT DO UPDATE SET x = u.x",
            UnsupportedSQL,
            "another table",
        ),
        ("INSERT INTO t VALUES (1, 0, 0, 'z') RETURNING id", UnsupportedSQL, "RETURNING"),
        (
            "INSERT INTO t VALUES (3, 0, 0, 'z'), (3, 1, 1, 'y') "
            "ON CONFLICT DO UPDATE SET x = excluded.x",
            mere.DuplicateKey,
            "3",
        ),
        ("INSERT INTO u VALUES (1) ON CONFLICT DO NOTHING", mere.InvalidArgument, "no primary key"),
        ("INSERT OR IGNORE INTO u VALUES (1)", mere.InvalidArgument, "no primary key"),
        ("ALTER TABLE t ADD COLUMN z INT PRIMARY KEY", UnsupportedSQL, "PRIMARY KEY"),
    ],
)
def test_unsupported_or_bad_on_conflict_is_named(
    db: mere.Database, sql: str, error: type[Exception], match: str
) -> None:
    db.sql("CREATE TABLE u (k INT)")
    before = db.version, rows_of(db.table("t").scan())
    with pytest.raises(error, match=match):
        db.sql(sql)
    assert (db.version, rows_of(db.table("t").scan())) == before


def test_the_plain_form_is_an_upsert_and_the_rest_a_merge(db: mere.Database) -> None:
    db.sql(
        "INSERT INTO t VALUES (1, 5, 11, 'A'), (3, 5, 30, 'c') ON CONFLICT (id) "
        "DO UPDATE SET grp = excluded.grp, x = excluded.x, s = excluded.s"
    )
    upsert = db.history(limit=1)[0]["parameters"]  # append(on_duplicate="update")'s merge
    assert (
        upsert["predicate"] == "t.id = s.id" and upsert["matchedPredicates"][0]["predicate"] is None
    )
    got = db.sql(
        "INSERT INTO t VALUES (2, 9, 1, 'B') "
        "ON CONFLICT DO UPDATE SET x = x + excluded.x WHERE t.grp = 0"
    )
    assert got.to_pylist() == [{"count": 1}]
    assert sorted(db.table("t").scan().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "grp": 5, "x": 11, "s": "A"},
        {"id": 2, "grp": 0, "x": 21, "s": "b"},
        {"id": 3, "grp": 5, "x": 30, "s": "c"},
    ]
    got = db.sql("INSERT INTO t (id, x) VALUES (3, 1), (4, 4) ON CONFLICT DO NOTHING")
    assert got.to_pylist() == [{"count": 1}]
    assert db.sql("SELECT grp, x, s FROM t WHERE id = 4").to_pylist() == [
        {"grp": None, "x": 4, "s": None}
    ]


def test_parameters_and_a_select_source(db: mere.Database) -> None:
    db.sql(
        "INSERT INTO t VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET s = excluded.s", [1, 0, 0, "p"]
    )
    db.sql("INSERT INTO t SELECT id + 1, grp, x, s FROM t ON CONFLICT (id) DO NOTHING")
    assert sorted(db.table("t").scan().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "grp": 0, "x": 10, "s": "p"},
        {"id": 2, "grp": 0, "x": 20, "s": "b"},
        {"id": 3, "grp": 0, "x": 20, "s": "b"},
    ]
