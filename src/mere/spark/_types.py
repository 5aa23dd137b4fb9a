"""Type mapping between mere tables (Arrow schemas) and Spark (StructType).

Three directions matter:

* a DataFrame's schema becomes a new table's schema (:func:`table_schema_from_spark`);
* a table's schema becomes the schema Spark reads (:func:`spark_schema`);
* Arrow data in the table schema becomes batches exactly as Spark expects them
  from a Python data source (:func:`to_spark_batches`): Spark compares the
  Arrow schema of every batch with its own (``string`` not ``large_string``,
  ``timestamp[us, tz=UTC]``, nullability included) and fails on any difference.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.types as pat
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from mere.errors import SchemaMismatch

#: Spark's DecimalType holds at most 38 digits.
_MAX_DECIMAL_PRECISION = 38


def spark_type(t: pa.DataType) -> DataType:
    """The Spark type a column of Arrow type ``t`` reads as.

    Unsigned integers widen to the next signed type (``uint64`` to
    ``decimal(20, 0)``), large and view variants map to their plain Spark
    type, timestamps of any unit read as microseconds (Spark's precision).

    Raises:
        SchemaMismatch: a type Spark cannot represent (time of day, large decimals, ...).
    """
    if pat.is_boolean(t):
        return BooleanType()
    if pat.is_int8(t):
        return ByteType()
    if pat.is_int16(t) or pat.is_uint8(t):
        return ShortType()
    if pat.is_int32(t) or pat.is_uint16(t):
        return IntegerType()
    if pat.is_int64(t) or pat.is_uint32(t):
        return LongType()
    if pat.is_uint64(t):
        return DecimalType(20, 0)
    if pat.is_float16(t) or pat.is_float32(t):
        return FloatType()
    if pat.is_float64(t):
        return DoubleType()
    if pat.is_decimal(t) and t.precision <= _MAX_DECIMAL_PRECISION:
        return DecimalType(t.precision, t.scale)
    if pat.is_string(t) or pat.is_large_string(t):
        return StringType()
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return BinaryType()
    if pat.is_date(t):
        return DateType()
    if pat.is_timestamp(t):
        return TimestampType() if t.tz is not None else TimestampNTZType()
    if pat.is_duration(t):
        return DayTimeIntervalType()
    if pat.is_null(t):
        return NullType()
    if pat.is_list(t) or pat.is_large_list(t):
        return ArrayType(spark_type(t.value_type), t.value_field.nullable)
    if pat.is_map(t):
        return MapType(spark_type(t.key_type), spark_type(t.item_type), t.item_field.nullable)
    if pat.is_struct(t):
        return StructType([_spark_field(t.field(i)) for i in range(t.num_fields)])
    raise SchemaMismatch(f"Spark has no type for the column type {t}")


def _spark_field(f: pa.Field) -> StructField:
    return StructField(f.name, spark_type(f.type), f.nullable)


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema a table with Arrow schema ``schema`` reads as (same names and order)."""
    try:
        return StructType([_spark_field(f) for f in schema])
    except SchemaMismatch as exc:
        raise SchemaMismatch(f"the table cannot be read by Spark: {exc}") from None


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects of batches read from a Python data source."""
    return to_arrow_schema(schema, timezone="UTC")


def table_schema_from_spark(schema: StructType) -> pa.Schema:
    """A new table's schema from a DataFrame's: Arrow types, every column nullable.

    Columns are nullable as in Spark's file sources and Delta Lake: Spark
    often marks computed columns NOT NULL, which would make later appends of
    ordinary nullable data fail. Timestamps are stored in UTC.
    """
    arrow = to_arrow_schema(schema, timezone="UTC")
    return pa.schema([pa.field(f.name, f.type, True) for f in arrow])


def _conform_array(array: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if array.type == target:
        return array
    # Spark keeps microseconds: finer timestamps are truncated, not refused.
    safe = not (pat.is_timestamp(array.type) or pat.is_duration(array.type))
    return array.cast(target, safe=safe)


def to_spark_table(data: pa.Table, target: pa.Schema) -> pa.Table:
    """``data`` (same column order as ``target``) cast to exactly ``target``'s types."""
    columns = [_conform_array(data.column(i), f.type) for i, f in enumerate(target)]
    return pa.Table.from_arrays(columns, schema=target)


def to_spark_batches(data: pa.Table, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of ``data`` as record batches with exactly the schema ``target``."""
    yield from to_spark_table(data, target).to_batches()
