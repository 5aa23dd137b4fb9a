"""Primary keys hold on Spark's write paths: the data source and mere.spark.write."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import mere
import mere.spark

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


@pytest.fixture
def keyed(uri: str) -> mere.Database:
    db = mere.connect(uri)
    db.create_table("t", SCHEMA, primary_key=["id"])
    db.table("t").append([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    return db


def _ids(db: mere.Database) -> list[int]:
    return sorted(db.table("t").scan(columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_spark_write_refuses_a_key_already_in_the_table(
    spark: SparkSession, keyed: mere.Database, method: str
) -> None:
    df = spark.createDataFrame([(2, "again"), (3, "c")], "id long, v string")
    version = keyed.version
    with pytest.raises(mere.DuplicateKey, match=r"\(2\)"):
        with keyed.transaction() as tx:
            mere.spark.write(tx, df, "t", method=method)  # type: ignore[arg-type]
    assert keyed.version == version and _ids(keyed) == [1, 2]
    with keyed.transaction() as tx:
        mere.spark.write(tx, df.where("id = 3"), "t", method=method)  # type: ignore[arg-type]
    assert _ids(keyed) == [1, 2, 3]


def test_the_data_source_refuses_duplicates_in_the_data(
    spark: SparkSession, keyed: mere.Database, uri: str
) -> None:
    mere.spark.register(spark)
    df = spark.createDataFrame([(5, "x"), (5, "y")], "id long, v string")
    with pytest.raises(Exception, match="duplicate primary key"):
        df.write.format("mere").option("database", uri).mode("append").save("t")
    assert _ids(keyed) == [1, 2]


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_a_failed_overwrite_caught_in_a_transaction_removes_nothing(
    spark: SparkSession, keyed: mere.Database, method: str
) -> None:
    """The overwrite's removal and the new files were two statements: the duplicate key
    undid the second only, and the caught error left the old rows removed."""
    df = spark.createDataFrame([(1, "new"), (1, "dup")], "id long, v string")
    with keyed.transaction() as tx:
        with pytest.raises(mere.DuplicateKey):
            mere.spark.write(  # type: ignore[arg-type]
                tx, df, "t", mode="overwrite", replace_where="id < 2", method=method
            )
        tx.table("t").append([{"id": 3, "v": "c"}])
    assert _ids(keyed) == [1, 2, 3]
