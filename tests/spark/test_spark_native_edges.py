"""The native read gives the answer the core gives: partition strings, NaN under filters."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import mere
import mere.spark
from mere.data import writer

FLOATS = pa.schema([("k", pa.int64()), ("f", pa.float64()), ("g", pa.float32())])


def _bits(value: float | None) -> bytes | None:
    return None if value is None else struct.pack(">d", value)


def _rows(df) -> list[tuple]:
    table = df.toArrow() if not isinstance(df, pa.Table) else df
    return sorted(
        (r["k"], _bits(r["f"]), _bits(r["g"])) for r in table.select(["k", "f", "g"]).to_pylist()
    )


def test_the_partition_string_hive_uses_for_null_reads_as_itself(spark, uri):
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("k", pa.int64()), ("p", pa.string())]), partition_by=["p"])
    values = ["__HIVE_DEFAULT_PARTITION__", None, "", "x"]
    db.table("t").append(pa.table({"k": [0, 1, 2, 3], "p": values}))

    native = mere.spark.read(spark, uri, "t", method="native").toArrow().sort_by("k")
    assert native["p"].to_pylist() == values
    core = db.table("t").scan(filter="p = '__HIVE_DEFAULT_PARTITION__'")
    where = mere.spark.read(spark, uri, "t", method="native").where(
        "p = '__HIVE_DEFAULT_PARTITION__'"
    )
    assert where.toArrow()["k"].to_pylist() == core["k"].to_pylist() == [0]


def _assert_footer_statistics(db: mere.Database) -> None:
    """Check that the table's files carry float min/max in their footers, which leave NaN
    out, as pyarrow's, older mere versions' and Spark's own writers write them.

    The test has mere's writer write them so: rewriting them afterwards would
    change their sizes, which a reader takes for damage.
    """
    table = db.snapshot().table("t")
    for add in table.files:
        path = Path(db.uri.removeprefix("file://"), "tables", table.id, add.path)
        stats = pq.ParquetFile(path).metadata.row_group(0).column(1).statistics
        assert stats is not None and stats.has_min_max


def test_a_filter_after_the_native_read_keeps_nan_rows_and_values_stay_exact(
    spark, uri, monkeypatch
):
    monkeypatch.setattr(writer, "footer_statistics_columns", lambda schema: True)
    monkeypatch.setattr(writer, "TINY_FILE_BYTES", -1)  # footers even in one-row files
    db = mere.connect(uri)
    db.create_table("t", FLOATS)
    db.table("t").append(
        pa.table({"k": [1, 2], "f": [5.0, math.nan], "g": [5.0, math.nan]}, FLOATS)
    )
    db.table("t").append(
        pa.table({"k": [3, 4, 5], "f": [-0.0, math.inf, -math.inf], "g": [-0.0, 1.5, None]}, FLOATS)
    )
    _assert_footer_statistics(db)
    expected = _rows(db.table("t").scan(filter="f <> 5 AND g <> 5"))
    assert [r[0] for r in expected] == [2, 3, 4]

    df = mere.spark.read(spark, uri, "t", method="native")
    assert _rows(df) == _rows(db.table("t").scan())  # -0.0, NaN and infinities bit for bit
    after = df.where("f <> 5 AND g <> 5")
    assert _rows(after) == expected
    plan = after._jdf.queryExecution().executedPlan().toString()
    pushed = plan[plan.index("PushedFilters: [") :].split("]")[0]
    assert "f" not in pushed.replace("PushedFilters", "") and "g," not in pushed, plan
    assert _rows(mere.spark.read(spark, uri, "t", method="native", filter="f <> 5 AND g <> 5")) == (
        expected
    )


def test_native_writes_leave_no_float_statistics_in_parquet_footers(spark, uri):
    schema = "k long, f double, g float"
    rows = [(1, 5.0, None), (2, math.nan, 2.5), (3, None, -0.0)]
    db = mere.connect(uri)
    with db.transaction() as tx:
        mere.spark.write(tx, spark.createDataFrame(rows, schema), "t", method="native")
    table = db.snapshot().table("t")
    assert table.files
    for add in table.files:
        md = pq.ParquetFile(Path(uri, "tables", table.id, add.path)).metadata
        assert "parquet-mr" in md.created_by
        for g in range(md.num_row_groups):
            for j in range(md.num_columns):
                column = md.row_group(g).column(j)
                floating = column.path_in_schema in ("f", "g")
                assert (column.statistics is None) == floating, column.path_in_schema
    nulls = {"f": 0, "g": 0}
    for add in table.files:
        for name in nulls:
            nulls[name] += add.stats["nullCount"][name]
    assert nulls == {"f": 1, "g": 1}  # counted from the values instead
    assert sorted(db.table("t").scan()["k"].to_pylist()) == [1, 2, 3]
