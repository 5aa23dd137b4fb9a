"""The data source refuses options it does not know, listing the ones it does."""

from __future__ import annotations

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import LongType, StructField, StructType

import mere
from mere.spark.datasource import MereDataSource

SparkError = (PySparkException, Py4JJavaError)
SCHEMA = StructType([StructField("k", LongType(), True)])


def _two_versions(uri: str) -> mere.Database:
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("k", pa.int64())]))
    db.table("t").append(pa.table({"k": [1]}))
    db.table("t").append(pa.table({"k": [2]}))
    return db


def test_a_misspelt_read_option_is_an_error_naming_the_known_ones(spark, uri):
    _two_versions(uri)
    reader = spark.read.format("mere").option("database", uri).option("versionAt", 1)
    with pytest.raises(SparkError) as info:
        reader.load("t").collect()
    message = str(info.value)
    assert "'versionat'" in message and "versionAsOf" in message and "timestampAsOf" in message


def test_a_misspelt_write_option_is_an_error_and_writes_nothing(spark, uri):
    db = _two_versions(uri)
    version = db.version
    writer = spark.createDataFrame([(3,)], SCHEMA).write.format("mere").option("database", uri)
    with pytest.raises(SparkError, match="replaceWhere"):
        writer.option("replaceWher", "k = 1").mode("overwrite").save("t")
    assert db.version == version and sorted(db.table("t").scan()["k"].to_pylist()) == [1, 2]


def test_options_spark_passes_and_known_options_in_any_case_are_accepted(uri):
    _two_versions(uri)
    source = MereDataSource(CaseInsensitiveDict(database=uri, path="t", versionasof="2"))
    assert source.schema().fieldNames() == ["k"]
    assert source._pin().version == 2
    stream = MereDataSource(
        CaseInsensitiveDict(database=uri, path="t", txnappid="a", checkpointlocation="/tmp/x")
    )
    stream.streamWriter(SCHEMA, False)


@pytest.mark.parametrize(
    ("options", "use"),
    [
        ({"replaceWhere": "k = 1"}, "read"),  # a write option is not a read option
        ({"versionAsOf": "1"}, "write"),
        ({"checkpointLocation": "/tmp/x"}, "write"),  # only a stream has one
    ],
)
def test_options_of_another_use_are_refused(uri, options, use):
    _two_versions(uri)
    source = MereDataSource({"database": uri, "path": "t", **options})
    with pytest.raises(mere.InvalidArgument, match="known options: database, table, path"):
        source.schema() if use == "read" else source.writer(SCHEMA, False)
