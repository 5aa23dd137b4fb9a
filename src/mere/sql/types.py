"""SQL type names (DuckDB's spelling) to Arrow types, for CREATE TABLE and ALTER TABLE.

=============================================================  ==========================
SQL                                                            Arrow
=============================================================  ==========================
TINYINT / SMALLINT / INTEGER (INT, INT4) / BIGINT (INT8, LONG) int8 / int16 / int32 / int64
UTINYINT / USMALLINT / UINTEGER / UBIGINT                      uint8 / uint16 / uint32 / uint64
REAL (FLOAT, FLOAT4) / DOUBLE (FLOAT8, DOUBLE PRECISION)       float32 / float64
DECIMAL(p, s) / NUMERIC(p, s) (DECIMAL alone: (18, 3))         decimal128(p, s), p <= 38
BOOLEAN (BOOL)                                                 bool
VARCHAR, TEXT, STRING, CHAR(n) (lengths are ignored)           string
BLOB (BYTEA, VARBINARY)                                        binary
DATE                                                           date32
TIME                                                           time64[us]
TIMESTAMP (DATETIME), TIMESTAMP(0|3|6|9)                       timestamp[us] (s/ms/us/ns)
TIMESTAMP_S / TIMESTAMP_MS / TIMESTAMP_NS                      timestamp[s] / [ms] / [ns]
TIMESTAMPTZ (TIMESTAMP WITH TIME ZONE)                         timestamp[us, tz=UTC]
=============================================================  ==========================

Anything else (INTERVAL, UUID, HUGEINT, lists, structs, maps, JSON, ...)
raises :class:`~mere.sql.errors.UnsupportedSQL` naming the type.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from mere.sql.errors import UnsupportedSQL

_T = exp.DataType.Type

_SIMPLE: dict[object, pa.DataType] = {
    _T.TINYINT: pa.int8(),
    _T.SMALLINT: pa.int16(),
    _T.INT: pa.int32(),
    _T.BIGINT: pa.int64(),
    _T.UTINYINT: pa.uint8(),
    _T.USMALLINT: pa.uint16(),
    _T.UINT: pa.uint32(),
    _T.UBIGINT: pa.uint64(),
    _T.FLOAT: pa.float32(),
    _T.DOUBLE: pa.float64(),
    _T.BOOLEAN: pa.bool_(),
    _T.TEXT: pa.string(),
    _T.VARCHAR: pa.string(),
    _T.NVARCHAR: pa.string(),
    _T.CHAR: pa.string(),
    _T.NCHAR: pa.string(),
    _T.BPCHAR: pa.string(),
    _T.VARBINARY: pa.binary(),
    _T.BINARY: pa.binary(),
    _T.BLOB: pa.binary(),
    _T.DATE: pa.date32(),
    _T.TIME: pa.time64("us"),
    _T.TIMESTAMP_S: pa.timestamp("s"),
    _T.TIMESTAMP_MS: pa.timestamp("ms"),
    _T.TIMESTAMP_NS: pa.timestamp("ns"),
}
_TIMESTAMP = (_T.TIMESTAMP, _T.TIMESTAMPNTZ, _T.DATETIME)
_TIMESTAMPTZ = (_T.TIMESTAMPTZ, _T.TIMESTAMPLTZ)
_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def arrow_type(node: exp.DataType) -> pa.DataType:
    """The Arrow type of a SQL type (see the table in this module's docstring).

    Raises:
        UnsupportedSQL: the type has no Arrow counterpart in mere.
    """
    kind = node.this
    ints = []
    for p in node.expressions:
        value = p.this if isinstance(p, exp.DataTypeParam) else p
        if isinstance(value, exp.Literal) and not value.is_string:
            ints.append(int(value.this))
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == _T.DECIMAL:
        precision = ints[0] if ints else 18
        scale = ints[1] if len(ints) > 1 else (0 if ints else 3)
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise UnsupportedSQL(f"DECIMAL({precision}, {scale}): precision 1..38, scale 0..p")
        return pa.decimal128(precision, scale)
    if kind in _TIMESTAMP or kind in _TIMESTAMPTZ:
        unit = "us"
        if ints:
            if ints[0] not in _UNITS:
                raise UnsupportedSQL(f"timestamp precision {ints[0]}: use 0, 3, 6 or 9")
            unit = _UNITS[ints[0]]
        return pa.timestamp(unit, "UTC" if kind in _TIMESTAMPTZ else None)
    raise UnsupportedSQL(
        f"column type {node.sql(dialect='duckdb')} is not supported",
        help="use an integer, REAL/DOUBLE, DECIMAL(p, s), BOOLEAN, VARCHAR, BLOB, DATE, TIME, "
        "TIMESTAMP[_S|_MS|_NS] or TIMESTAMPTZ type",
    )


__all__ = ["arrow_type"]
