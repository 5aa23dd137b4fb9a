"""Statements inside transactions build objects only for the files they touch.

A table opened from a checkpoint keeps its files as columns. A plain scan
chooses the files a filter may match over those columns; a DELETE, UPDATE,
MERGE or a scan inside a transaction built an object for every live file
first (a one-row delete on a 1M-file table took minutes and gigabytes).
Counted here as objects built, not timed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.snapshot import files as live_files

FILES = 300
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int64()), ("v", pa.float64())])


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many file objects the columns have been turned into, call by call."""
    counts: list[int] = []
    original = live_files.columns_to_adds

    def counting(layout: Any, table_id: str, table: pa.Table) -> Any:
        counts.append(table.num_rows)
        return original(layout, table_id, table)

    monkeypatch.setattr(live_files, "columns_to_adds", counting)
    yield counts


def _opened(tmp_path: Path) -> mere.Database:
    """A table of FILES files (one per partition), read back from a checkpoint."""
    db = mere.connect(tmp_path / "db")
    db.create_table("t", SCHEMA, partition_by=["p"])
    ids = list(range(FILES))
    db.table("t").append(pa.table({"id": ids, "p": ids, "v": [1.0] * FILES}, schema=SCHEMA))
    db.checkpoint()
    return mere.connect(tmp_path / "db", create=False)


def _merge(db: mere.Database) -> object:
    source = pa.table({"id": [7], "p": [7], "v": [2.0]}, schema=SCHEMA)
    on = "t.p = s.p AND t.id = s.id"
    return db.table("t").merge(source, on=on).when_matched_update({"v": "s.v"}).execute()


def _tx_scan(db: mere.Database) -> object:
    with db.transaction() as tx:
        return tx.table("t").scan(filter="p = 7")


STATEMENTS: dict[str, Callable[[mere.Database], object]] = {
    "delete": lambda db: db.table("t").delete("p = 7 AND id = 7"),
    "update": lambda db: db.table("t").update("p = 7", {"v": "v + 1"}),
    "merge": _merge,
    "transaction scan": _tx_scan,
    "overwrite where": lambda db: db.table("t").overwrite(
        pa.table({"id": [7], "p": [7], "v": [3.0]}, schema=SCHEMA), where="p = 7"
    ),
}


@pytest.mark.parametrize("statement", sorted(STATEMENTS))
def test_a_statement_on_one_partition_builds_no_object_for_the_others(
    tmp_path: Path, built: list[int], statement: str
) -> None:
    db = _opened(tmp_path)
    built.clear()
    STATEMENTS[statement](db)
    assert sum(built) <= 2, built
    rows = db.table("t").scan(filter="p = 7").to_pylist()
    assert len(rows) == 1 or statement == "delete"
    assert db.snapshot().table("t").count() == FILES - (statement == "delete")


def test_sql_in_a_transaction_reads_through_duckdbs_own_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query reads every file: it gets them whole, with the statistics its view needs
    (objects built from fewer columns sent it down the slower dataset path)."""
    pytest.importorskip("duckdb")
    from mere.sql import engine

    views: list[str | None] = []
    original = engine.native_view

    def spy(*args: Any, **kwargs: Any) -> str | None:
        views.append(original(*args, **kwargs))
        return views[-1]

    monkeypatch.setattr(engine, "native_view", spy)
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    db = mere.connect(tmp_path / "db")
    db.create_table("u", schema)
    for i in range(3):
        db.table("u").append(pa.table({"id": [i], "s": ["x"]}, schema=schema))
    db.checkpoint()
    fresh = mere.connect(tmp_path / "db", create=False)
    with fresh.transaction() as tx:
        assert tx.sql("SELECT count(*) AS n FROM u").to_pylist() == [{"n": 3}]
    assert views and all(view is not None for view in views)
