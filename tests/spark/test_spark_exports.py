"""Spark reads an export's target whose files are partly its source's (docs/format.md §11.6)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
from spark_helpers import ORDERS, orders

import mere
import mere.spark
from mere.data.reader import iter_file
from mere.spark import _core

ZERO = timedelta(0)


def rows(table_or_df: object) -> list[dict[str, object]]:
    table = table_or_df if isinstance(table_or_df, pa.Table) else table_or_df.toArrow()  # type: ignore[attr-defined]
    return table.sort_by("id").to_pylist()


def test_spark_reads_a_partial_export_in_place_and_from_its_source(spark, tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    db.create_table("orders", ORDERS, partition_by=["country"])
    db.table("orders").append(orders(0, 30, countries=("FR", "DE", "")))  # '' is read apart
    since = db.version
    db.table("orders").append(orders(30, 10))
    expected = rows(db.table("orders").scan())
    db.export(tmp_path / "out", mode="partial", since=since, name="p")  # the first append shared
    db.table("orders").delete("id < 100")  # the shared files stop being live in the source
    db.expire(ZERO, force=True)
    db.vacuum(ZERO, force=True)

    out = str(tmp_path / "out")
    assert rows(mere.spark.read(spark, out, "orders")) == expected
    assert rows(mere.spark.read(spark, out, "orders", method="datasource")) == expected

    # The data source reads a large file in parts (runs of row groups): from the source too.
    target = mere.connect(out, create=False)
    table = target.snapshot().table("orders")
    meta = _core.table_meta(table)
    shared = next(a for a in table.files if "://" in a.path)
    whole = pa.concat_tables(iter_file(target.store, meta, shared, ORDERS.names))
    pieces = [
        piece
        for part in range(2)
        for piece in _core.iter_row_groups(target.store, meta, shared, ORDERS.names, part, 2)
    ]
    assert rows(pa.concat_tables(pieces)) == rows(whole)
