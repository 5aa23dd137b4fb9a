"""Random DML scripts run through db.sql and through DuckDB's own transactions: same tables.

Each script is ``BEGIN; <statements>; COMMIT`` (or ``ROLLBACK``) over a table
with NULLs, quotes and non-ASCII text in several files (and partitions);
statements are INSERT ... VALUES, INSERT ... SELECT, UPDATE and DELETE with
conditions and expressions from the subset mere evaluates. After every
script the two tables must hold the same rows.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import mere
from mere.storage import MemoryStore

CREATE = "CREATE TABLE t (id BIGINT NOT NULL, grp INTEGER, x BIGINT, f DOUBLE, s VARCHAR)"
STRINGS = ["'alpha'", "'Beta'", "'O''Brien'", "'naïve'", "'日本語'", "''", "'50%_off'", "NULL"]
CONDITIONS = [
    "x > 5",
    "NOT (x > 5)",
    "x IS NULL",
    "x IS NOT NULL AND f < 0",
    "s = 'O''Brien'",
    "s LIKE '50%'",
    "x IN (1, 2, NULL)",
    "x NOT IN (1, 2)",
    "grp = 1",
    "grp IS NULL",
    "id % 3 = 0",
    "f * 2 >= x",
    "coalesce(x, 0) = 0",
    "length(s) > 4",
    "id >= 0",
]
ASSIGNMENTS = [
    "x = x + 100",
    "x = -1, s = 'was null'",
    "s = s || '!'",
    "s = upper(s)",
    "f = f * 2, x = x - 1",
    "grp = 2",
    "grp = NULL",
    "s = coalesce(s, '∅')",
    "x = grp, grp = x",
]


def value_row(rng: random.Random, id_: int) -> str:
    def maybe(text: str) -> str:
        return "NULL" if rng.random() < 0.2 else text

    return (
        f"({id_}, {maybe(str(rng.randrange(3)))}, {maybe(str(rng.randrange(-5, 15)))}, "
        f"{maybe(str(rng.randrange(-8, 8) / 2))}, {rng.choice(STRINGS)})"
    )


def random_script(rng: random.Random, next_id: list[int]) -> str:
    statements = []
    for _ in range(rng.randrange(1, 5)):
        kind = rng.choice(["values", "select", "update", "update", "delete"])
        if kind == "values":
            rows = []
            for _ in range(rng.randrange(1, 6)):
                rows.append(value_row(rng, next_id[0]))
                next_id[0] += 1
            statements.append(f"INSERT INTO t VALUES {', '.join(rows)}")
        elif kind == "select":
            offset = next_id[0]
            next_id[0] += 10_000
            statements.append(
                f"INSERT INTO t SELECT id + {offset}, grp, x, f, s FROM t "
                f"WHERE {rng.choice(CONDITIONS)}"
            )
        elif kind == "update":
            statements.append(
                f"UPDATE t SET {rng.choice(ASSIGNMENTS)} WHERE {rng.choice(CONDITIONS)}"
            )
        else:
            statements.append(f"DELETE FROM t WHERE {rng.choice(CONDITIONS)}")
    end = "ROLLBACK" if rng.random() < 0.2 else "COMMIT"
    return "BEGIN; " + "; ".join(statements) + f"; {end}"


def rows_of(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
@pytest.mark.parametrize("seed", range(4))
def test_random_scripts_leave_the_same_rows_as_duckdb(seed: int, partitioned: bool) -> None:
    rng = random.Random(seed)
    db = mere.connect(MemoryStore())
    con = duckdb.connect()
    db.sql(CREATE + (" PARTITIONED BY (grp)" if partitioned else ""))
    con.execute(CREATE)
    next_id = [0]
    for _ in range(3):  # several files to start with
        load = f"INSERT INTO t VALUES {', '.join(value_row(rng, next_id[0] + i) for i in range(8))}"
        next_id[0] += 8
        db.sql(load)
        con.execute(load)
    for _ in range(8):
        script = random_script(rng, next_id)
        con.execute(script)
        db.sql(script)
        expected = con.sql("SELECT * FROM t").to_arrow_table()
        assert rows_of(db.sql("SELECT * FROM t")) == rows_of(expected), script
        assert rows_of(db.table("t").scan()) == rows_of(expected), script
