"""Table schemas: their JSON form in the log, and conforming user data to them.

A schema is stored as ``{"fields": [field, ...]}`` where a field is
``{"name": str, "type": type, "nullable": bool}`` (plus ``"metadata"`` when
the Arrow field has any). A type is either a string naming a primitive Arrow
type (``"int64"``, ``"string"``, ``"timestamp[us, tz=UTC]"``,
``"decimal128(10, 2)"``, ...) or an object for nested types:
``{"type": "list", "item": field}``, ``{"type": "struct", "fields": [...]}``,
``{"type": "map", "key": field, "value": field}``. ``docs/format.md`` lists
every primitive spelling.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere.errors import ConstraintViolation, InvalidName, SchemaMismatch
from mere.names import check_column_name, name_key

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date64": pa.date64(),
}
_NAMES = {str(t): name for name, t in _PRIMITIVES.items()}
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]\Z")
_TIME = re.compile(r"time(32|64)\[(s|ms|us|ns)\]\Z")
_DURATION = re.compile(r"duration\[(s|ms|us|ns)\]\Z")
_DECIMAL = re.compile(r"decimal(128|256)\((\d+), (-?\d+)\)\Z")
_FIXED = re.compile(r"fixed_size_binary\[(\d+)\]\Z")


def type_to_json(t: pa.DataType) -> Any:
    """Encode an Arrow type in the log's JSON form."""
    if pat.is_list(t) or pat.is_large_list(t):
        return {
            "type": "list" if pat.is_list(t) else "large_list",
            "item": field_to_json(t.value_field),
        }
    if pat.is_struct(t):
        return {
            "type": "struct",
            "fields": [field_to_json(t.field(i)) for i in range(t.num_fields)],
        }
    if pat.is_map(t):
        return {
            "type": "map",
            "key": field_to_json(t.key_field),
            "value": field_to_json(t.item_field),
        }
    if pat.is_dictionary(t):
        return type_to_json(t.value_type)
    text = str(t)
    if text in _NAMES:
        return _NAMES[text]
    if any(p.match(text) for p in (_TIMESTAMP, _TIME, _DURATION, _DECIMAL, _FIXED)):
        return text
    raise SchemaMismatch(f"unsupported column type {t}")


def type_from_json(obj: Any) -> pa.DataType:
    """Decode a type from the log's JSON form (ValueError on anything unknown)."""
    if isinstance(obj, str):
        if obj in _PRIMITIVES:
            return _PRIMITIVES[obj]
        if m := _TIMESTAMP.match(obj):
            return pa.timestamp(m.group(1), tz=m.group(2))
        if m := _TIME.match(obj):
            return pa.time32(m.group(2)) if m.group(1) == "32" else pa.time64(m.group(2))
        if m := _DURATION.match(obj):
            return pa.duration(m.group(1))
        if m := _DECIMAL.match(obj):
            make = pa.decimal128 if m.group(1) == "128" else pa.decimal256
            return make(int(m.group(2)), int(m.group(3)))
        if m := _FIXED.match(obj):
            return pa.binary(int(m.group(1)))
        raise ValueError(f"unknown type {obj!r}")
    if isinstance(obj, dict):
        kind = obj.get("type")
        if kind == "list":
            return pa.list_(field_from_json(obj["item"]))
        if kind == "large_list":
            return pa.large_list(field_from_json(obj["item"]))
        if kind == "struct":
            return pa.struct([field_from_json(f) for f in obj["fields"]])
        if kind == "map":
            key, value = field_from_json(obj["key"]), field_from_json(obj["value"])
            return pa.map_(key, value)
    raise ValueError(f"unknown type {obj!r}")


def field_to_json(f: pa.Field) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f.name, "type": type_to_json(f.type), "nullable": f.nullable}
    if f.metadata:
        out["metadata"] = {k.decode(): v.decode() for k, v in f.metadata.items()}
    return out


def field_from_json(obj: Any) -> pa.Field:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError(f"invalid field {obj!r}")
    nullable = obj.get("nullable", True)
    if not isinstance(nullable, bool):
        raise ValueError(f"invalid nullable flag in field {obj['name']!r}")
    return pa.field(obj["name"], type_from_json(obj.get("type")), nullable, obj.get("metadata"))


def schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    return {"fields": [field_to_json(f) for f in schema]}


def schema_from_json(obj: Any) -> pa.Schema:
    if not isinstance(obj, dict) or not isinstance(obj.get("fields"), list):
        raise ValueError("schema must be an object with a 'fields' list")
    return pa.schema([field_from_json(f) for f in obj["fields"]])


_PARTITION_TYPES = (
    pat.is_integer,
    pat.is_string,
    pat.is_large_string,
    pat.is_date,
    pat.is_boolean,
    pat.is_timestamp,
    pat.is_decimal,
)


def normalize_schema(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """Check a new table's schema and partition columns; return the stored form.

    Dictionary types are stored as their value type and field names are
    checked (non-empty, unique ignoring case). Partition columns must exist,
    be identifiers, and have a type with a canonical text form.
    """
    if not isinstance(schema, pa.Schema):
        raise SchemaMismatch(
            f"a table schema must be a pyarrow.Schema, not {type(schema).__name__}"
        )
    if len(schema) == 0:
        raise SchemaMismatch("a table needs at least one column")
    seen: dict[str, str] = {}
    fields = []
    for f in schema:
        check_column_name(f.name)
        if name_key(f.name) in seen:
            raise InvalidName(f"duplicate column name {f.name!r} (names are unique ignoring case)")
        seen[name_key(f.name)] = f.name
        t = storable_type(f.name, f.type)
        meta = {k: v for k, v in (f.metadata or {}).items() if not k.startswith(b"PARQUET:")}
        fields.append(pa.field(f.name, t, f.nullable, meta or None))
    if len(set(partition_by)) != len(partition_by):
        raise SchemaMismatch(f"duplicate partition column in {list(partition_by)}")
    names = [f.name for f in fields]
    for col in partition_by:
        check_column_name(col, partition=True)
        if col not in names:
            raise SchemaMismatch(f"partition column {col!r} is not in the schema {names}")
        t = fields[names.index(col)].type  # as stored: a dictionary or view type decoded
        if not any(pred(t) for pred in _PARTITION_TYPES):
            raise SchemaMismatch(f"partition column {col!r} has type {t}, which cannot partition")
    if len(partition_by) == len(fields):
        raise SchemaMismatch("a table needs at least one column that is not a partition column")
    return pa.schema(fields, metadata=schema.metadata)


def storage_type(t: pa.DataType) -> pa.DataType:
    """The type a column is stored as: dictionaries decoded, view types as plain ones."""
    if pat.is_dictionary(t):
        return storage_type(t.value_type)
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    if pat.is_list(t) or pat.is_large_list(t):
        item = t.value_field.with_type(storage_type(t.value_field.type))
        return pa.list_(item) if pat.is_list(t) else pa.large_list(item)
    if pat.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(storage_type(t.field(i).type)) for i in range(t.num_fields)]
        )
    return t


def _family(t: pa.DataType) -> str:
    if pat.is_integer(t) or pat.is_floating(t) or pat.is_decimal(t):
        return "number"
    if (
        pat.is_string(t)
        or pat.is_large_string(t)
        or getattr(pat, "is_string_view", lambda _: False)(t)
    ):
        return "string"
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return "binary"
    if pat.is_timestamp(t) or pat.is_date(t):
        return "datetime"
    if pat.is_time(t):  # a unit changes when no value is cut (Arrow's safe cast checks)
        return "time"
    if pat.is_duration(t):
        return "duration"
    if pat.is_null(t):
        return "null"
    return str(t)


def to_arrow_table(data: Any, schema: pa.Schema, *, infer: bool = False) -> pa.Table:
    """Turn any supported input into a ``pyarrow.Table`` (without validating it).

    A list of dicts is read with the table schema, or with inferred types
    when ``infer`` is set (to find new columns for a schema merge).
    """
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, list):
        return _table_from_rows(data, schema, infer=infer)
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False)
    raise SchemaMismatch(
        f"cannot append a {type(data).__name__}: pass a pyarrow Table, RecordBatch, "
        "RecordBatchReader, pandas DataFrame or a list of dicts"
    )


_VALUE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError)


def _table_from_rows(rows: list[Any], schema: pa.Schema, *, infer: bool) -> pa.Table:
    """A list of dicts as a table: one column per key, matched to the schema ignoring case.

    A key missing from a row is NULL there, in both schema modes; a column of
    the schema that no row names is all NULL. Keys the schema lacks are
    refused unless ``infer`` (a schema merge), which infers their types (and
    those of a column of the ``null`` type, which the merge may widen).
    Errors name the column and the first row that does not fit.
    """
    exact = _rows_spelling_the_schema(rows, schema)
    if exact is not None:
        return exact
    fields = {name_key(f.name): f for f in schema}
    spelled: dict[str, str] = {}  # name key -> the first spelling met in the rows
    normalized: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise SchemaMismatch(f"row {i} is a {type(row).__name__}, not a dict")
        keyed: dict[str, Any] = {}
        for name, value in row.items():
            if not isinstance(name, str):
                raise SchemaMismatch(f"row {i} has a column name that is not text: {name!r}")
            key = name_key(name)
            if key in keyed:
                raise SchemaMismatch(f"row {i} names column {name!r} twice (names ignore case)")
            keyed[key] = value
            spelled.setdefault(key, name)
        normalized.append(keyed)
    extra = [name for key, name in spelled.items() if key not in fields]
    if extra and not infer:
        raise SchemaMismatch(
            f"rows have columns not in the schema: {extra}",
            help="append(..., schema_mode='merge') adds new columns to the table",
        )
    names: list[str] = []
    arrays: list[pa.Array] = []
    for key, name in spelled.items():
        field = fields.get(key)
        values = [row.get(key) for row in normalized]
        column = field.name if field is not None else name
        type_ = None if field is None or (infer and pat.is_null(field.type)) else field.type
        arrays.append(_column_from_values(column, values, type_))
        names.append(column)
    for key, field in fields.items():
        if key not in spelled:
            arrays.append(pa.nulls(len(rows), field.type))
            names.append(field.name)
    return pa.Table.from_arrays(arrays, names=names)


def _rows_spelling_the_schema(rows: list[Any], schema: pa.Schema) -> pa.Table | None:
    """The common case of ``_table_from_rows`` in one conversion: every row a
    dict naming exactly the schema's columns, spelled as the schema spells
    them, whose values all fit. None otherwise (then the general path finds
    what does not fit, and says so)."""
    names = set(schema.names)
    if len(names) != len(schema) or not all(
        type(row) is dict and row.keys() == names for row in rows
    ):
        return None
    try:
        table = pa.Table.from_pylist(rows, schema=schema)
    except _VALUE_ERRORS:
        return None
    for f in schema:
        if _may_lose(f.type):
            _check_lossless(f.name, [row[f.name] for row in rows], table.column(f.name))
    return table


_NULL_COLUMN_HELP = (
    "a column of the null type holds only NULL: give it a type with "
    "alter_table(...).widen_column(name, type), or append with schema_mode='merge'"
)


def _column_from_values(column: str, values: list[Any], type: pa.DataType | None) -> pa.Array:
    try:
        array = pa.array(values, type=type)
        if type is not None and _may_lose(type):
            _check_lossless(column, values, array)
        return array
    except _VALUE_ERRORS as exc:
        for i, value in enumerate(values):  # find the first row that does not fit
            try:
                pa.array([value], type=type)
            except _VALUE_ERRORS:
                kind = f" ({type})" if type is not None else ""
                raise SchemaMismatch(
                    f"column {column!r}{kind}: row {i} holds {value!r}, which does not fit: {exc}",
                    help=_NULL_COLUMN_HELP if type is not None and pat.is_null(type) else None,
                ) from None
        raise SchemaMismatch(f"column {column!r}: the values cannot be read: {exc}") from None


def conform(data: pa.Table, schema: pa.Schema, *, what: str = "data") -> pa.Table:
    """Return ``data`` with exactly the table's columns, order and types.

    Columns are matched by name (exact, then ignoring case); missing or extra
    columns are a :class:`SchemaMismatch`. Values are cast only when the cast
    is lossless and stays within a type family (a narrower integer into a
    wider one, ``large_string`` into ``string``, nanoseconds that are whole
    microseconds), and a DOUBLE into a REAL rounds to the nearest as SQL's
    does; anything else — text into a number, an overflow (a DOUBLE beyond
    REAL's range too) — is a mismatch. Nulls in a NOT NULL column raise
    :class:`ConstraintViolation`.
    """
    if data.schema.equals(schema, check_metadata=True):  # already conformed
        for i, f in enumerate(schema):
            _conform_column(data.column(i), f, what)  # the NOT NULL check
        return data
    by_key = {name_key(n): n for n in data.column_names}
    if len(by_key) != data.num_columns:
        raise SchemaMismatch(f"{what} has duplicate column names: {data.column_names}")
    missing = [
        f.name for f in schema if f.name not in data.column_names and name_key(f.name) not in by_key
    ]
    expected = {name_key(f.name) for f in schema}
    extra = [n for n in data.column_names if name_key(n) not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing columns {missing}")
        if extra:
            parts.append(f"columns not in the table {extra}")
        raise SchemaMismatch(
            f"{what} does not match the table schema: {', '.join(parts)}",
            help="append(..., schema_mode='merge') adds new columns to the table",
        )
    columns = []
    for f in schema:
        source = f.name if f.name in data.column_names else by_key[name_key(f.name)]
        columns.append(_conform_column(data.column(source), f, what))
    return pa.Table.from_arrays(columns, schema=schema)


def _conform_column(col: pa.ChunkedArray, f: pa.Field, what: str) -> pa.ChunkedArray:
    if col.type != f.type and storage_type(col.type) == f.type:
        col = col.cast(f.type)
    if col.type != f.type:
        if _family(col.type) not in (_family(f.type), "null"):
            raise SchemaMismatch(
                f"column {f.name!r} of {what} has type {col.type}, the table has {f.type}",
                help=_NULL_COLUMN_HELP if pat.is_null(f.type) else None,
            )
        try:
            cast = col.cast(f.type, safe=True)
            if _drops_time_of_day(col, f.type):  # Arrow's safe cast does not check it
                raise pa.ArrowInvalid("a time of day would be dropped")
            if f.type in _NARROW_FLOATS and _beyond_range(col, cast):  # nor this
                raise pa.ArrowInvalid(f"a value is beyond the range of {f.type}")
            col = cast
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaMismatch(
                f"column {f.name!r} of {what} ({col.type}) cannot be stored as {f.type} "
                f"without loss: {exc}"
            ) from None
    if not f.nullable and col.null_count:
        raise ConstraintViolation(
            f"column {f.name!r} is NOT NULL but {what} has {col.null_count} null value(s)"
        )
    if _holds_map(f.type):
        for chunk in col.chunks:
            _refuse_repeated_map_keys(chunk, f.name, what)
    return col


def holds_type(t: pa.DataType, kind: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``t`` is, or holds at any depth (in a struct, list or map), a type ``kind``
    accepts (``kind`` is a predicate such as ``pyarrow.types.is_map``)."""
    if kind(t):
        return True
    if pat.is_struct(t):
        return any(holds_type(t.field(i).type, kind) for i in range(t.num_fields))
    if pat.is_map(t):
        return holds_type(t.key_type, kind) or holds_type(t.item_type, kind)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return holds_type(t.value_type, kind)
    return False


@functools.lru_cache(maxsize=256)
def _holds_map(t: pa.DataType) -> bool:
    """Whether values of ``t`` may hold a map (checked for every write: cached)."""
    return holds_type(t, pat.is_map)


def _refuse_repeated_map_keys(values: pa.Array, column: str, what: str) -> None:
    """Raise SchemaMismatch if a map within ``values`` holds a key twice.

    Readers refuse such a map (DuckDB cannot read the table, Spark rejects
    duplicate map keys), so a writer never publishes one. Keys compare as SQL
    does: -0.0 = 0.0 and NaN = NaN. Values under a NULL (struct, list or map
    row) are not values, and are not checked.
    """
    t = values.type
    if pat.is_struct(t):
        for child in values.flatten():  # NULL structs' children masked as NULL
            if _holds_map(child.type):
                _refuse_repeated_map_keys(child, column, what)
    elif pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        _refuse_repeated_map_keys(values.flatten(), column, what)
    elif pat.is_map(t):
        # As a list of entries: Arrow's list kernels mishandle a MapArray itself
        # (list_parent_indices aborts the process, .keys ignores a slice's offset).
        entries = pa.struct([t.key_field, t.item_field])
        listed = values.cast(pa.list_(pa.field("entries", entries, False)))
        items = listed.flatten()  # skips the entries a NULL map row may still hold
        lengths = pc.fill_null(pc.list_value_length(listed), 0).to_numpy(zero_copy_only=False)
        keys, rows = items.field(0), pa.array(np.repeat(np.arange(len(listed)), lengths))
        repeated = _repeated_key(rows, keys)
        if repeated is not None:
            raise SchemaMismatch(
                f"column {column!r} of {what} holds a map with a repeated key ({repeated})",
                help="a map holds each key once (readers such as DuckDB and Spark refuse it)",
            )
        for child in (keys, items.field(1)):
            if _holds_map(child.type):
                _refuse_repeated_map_keys(child, column, what)


def _repeated_key(rows: pa.Array, keys: pa.Array) -> str | None:
    """A key (as text) that occurs twice in one row, given each key's row; None if none."""
    if len(keys) < 2:
        return None
    if pat.is_floating(keys.type):
        wide = keys.cast(pa.float64())
        keys = pc.if_else(pc.is_nan(wide), pa.scalar(float("nan")), pc.add(wide, 0.0))
    pairs = pa.table({"row": rows, "key": keys})
    try:
        counted = pairs.group_by(["row", "key"], use_threads=False).aggregate([([], "count_all")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # keys no hash kernel takes
        seen: set[tuple[int, str]] = set()
        for row, key in zip(rows.to_pylist(), keys.to_pylist(), strict=True):
            if (row, repr(key)) in seen:
                return repr(key)
            seen.add((row, repr(key)))
        return None
    if counted.num_rows == pairs.num_rows:
        return None
    first = counted.filter(pc.greater(counted["count_all"], 1))["key"][0]
    try:
        return repr(first.as_py())
    except (OverflowError, ValueError):
        return str(first)


#: Float types narrower than a Python float (DOUBLE): values round, or overflow.
_NARROW_FLOATS = (pa.float32(), pa.float16())


def _beyond_range(wide: pa.Array | pa.ChunkedArray, narrow: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a finite value became infinite when cast to a narrower float."""
    if not pat.is_floating(wide.type):
        return False
    return bool(pc.any(pc.and_(pc.is_finite(wide), pc.is_inf(narrow))).as_py())


def _may_lose(type_: pa.DataType) -> bool:
    """Whether pyarrow's conversion of Python values to ``type_`` can drop part of one
    without an error (a float's fraction into an integer, a time into a date, ...)."""
    return bool(
        type_ in _NARROW_FLOATS
        or pat.is_integer(type_)
        or pat.is_date(type_)
        or (pat.is_timestamp(type_) and type_.unit in ("s", "ms"))
    )


def _check_lossless(column: str, values: list[Any], array: pa.Array | pa.ChunkedArray) -> None:
    """Refuse Python values pyarrow stored in ``array`` with a part dropped: the rule
    Arrow data meets in :func:`conform` (only a DOUBLE's rounding into REAL is taken)."""
    t = array.type
    if t in _NARROW_FLOATS:
        if pc.any(pc.is_inf(array)).as_py() and _beyond_range(
            pa.array(values, pa.float64()), array
        ):
            raise SchemaMismatch(f"column {column!r} ({t}): a value is beyond the range of {t}")
        return
    per = {"s": 1_000_000, "ms": 1_000}.get(getattr(t, "unit", ""), 1)
    for i, value in enumerate(values):
        lost = False
        if isinstance(value, float):
            lost = pat.is_integer(t) and not value.is_integer()
        elif isinstance(value, datetime.datetime):
            if pat.is_date(t):
                lost = value.time() != datetime.time()
            elif pat.is_timestamp(t):
                lost = value.microsecond % per != 0
        if lost:
            raise SchemaMismatch(
                f"column {column!r} ({t}): row {i} holds {value!r}, which does not fit "
                "without loss",
                help="round or convert the value first (Arrow data is held to the same rule)",
            )


def _drops_time_of_day(col: pa.ChunkedArray, target: pa.DataType) -> bool:
    """Whether casting timestamps to dates loses a time of day (local time, if zoned)."""
    if not (pat.is_timestamp(col.type) and pat.is_date(target)):
        return False
    local = pc.local_timestamp(col) if col.type.tz else col
    return not bool(local.equals(pc.floor_temporal(local, unit="day")))


def data_columns(schema: pa.Schema, partition_by: Iterable[str]) -> pa.Schema:
    """The schema of data files: non-partition columns, under their physical names."""
    skip = set(partition_by)
    return pa.schema(
        [pa.field(physical_name(f), f.type, f.nullable) for f in schema if f.name not in skip]
    )


# --- schema evolution -----------------------------------------------------------

#: Field metadata key holding the column's name inside data files, once it differs
#: from the logical name (after a rename, or when a new column reuses an old name).
PHYSICAL_NAME = b"mere.physical"
#: Field metadata key listing the types a column had before it was widened (format §5).
WIDENED_FROM = b"mere.widenedFrom"


def physical_name(f: pa.Field) -> str:
    """The name a column has inside data files."""
    if f.metadata and PHYSICAL_NAME in f.metadata:
        return str(f.metadata[PHYSICAL_NAME].decode())
    return str(f.name)


def _with_physical(f: pa.Field, physical: str) -> pa.Field:
    meta = dict(f.metadata or {})
    if physical == f.name:
        meta.pop(PHYSICAL_NAME, None)
    else:
        meta[PHYSICAL_NAME] = physical.encode()
    return f.with_metadata(meta or None)


def fresh_physical_name(schema: pa.Schema, name: str) -> str:
    """A physical name for a new column that no existing column's files use."""
    # Compared ignoring case: Spark's Parquet reader takes ``v`` and ``V`` for one column.
    taken = {name_key(physical_name(f)) for f in schema}
    if name_key(name) not in taken:
        return name
    suffix = 1
    while name_key(f"{name}__{suffix}") in taken:
        suffix += 1
    return f"{name}__{suffix}"


def physical_names_clashing(fields: Iterable[pa.Field]) -> tuple[str, str] | None:
    """Two physical names among ``fields`` that differ only in case, if any.

    :func:`fresh_physical_name` never makes such a pair, but tables altered
    before it compared names ignoring case may hold one, which Spark's
    Parquet reader and writer take for a single column.
    """
    seen: dict[str, str] = {}
    for f in fields:
        name = physical_name(f)
        other = seen.setdefault(name_key(name), name)
        if other != name:
            return other, name
    return None


def storable_type(column: str, type_: pa.DataType) -> pa.DataType:
    """The type a column of ``type_`` is stored as.

    Raises:
        SchemaMismatch: the log cannot hold the type, or it is or holds ``null``.
    """
    stored = storage_type(type_)
    type_to_json(stored)  # raises for unsupported types
    refuse_null_type(column, stored)
    return stored


def refuse_null_type(column: str, type_: pa.DataType, *, inferred: bool = False) -> None:
    """Raise SchemaMismatch if ``type_`` is or holds Arrow's ``null`` type.

    A column of that type can hold nothing but NULL, and Delta Lake has no
    such type. ``inferred``: the type was read off data that holds only
    nulls (or empty lists), as a schema merge does.
    """
    if not holds_type(type_, pat.is_null):
        return
    if inferred:
        raise SchemaMismatch(
            f"column {column!r} holds only nulls, so its type cannot be told (it reads as "
            f"{type_}); a column of the null type could never hold a value",
            help=f"give {column!r} a type: pass a pyarrow Table whose column has one "
            "(pa.nulls(n, pa.int64())), or add the column first with "
            "alter_table(...).add_column(...)",
        )
    raise SchemaMismatch(
        f"column {column!r} has type {type_}: a column of the null type can hold nothing but NULL",
        help="give the column the type of the values it will hold",
    )


def add_column(schema: pa.Schema, f: pa.Field) -> pa.Schema:
    """The schema with a new nullable column appended (old files read it as nulls)."""
    check_column_name(f.name)
    if name_key(f.name) in {name_key(n) for n in schema.names}:
        raise SchemaMismatch(f"column {f.name!r} already exists")
    if not f.nullable:
        raise SchemaMismatch(
            f"a new column must be nullable: existing rows have no value for {f.name!r}"
        )
    t = storable_type(f.name, f.type)  # as create_table stores it
    return schema.append(
        _with_physical(pa.field(f.name, t, True), fresh_physical_name(schema, f.name))
    )


def rename_column(schema: pa.Schema, partition_by: Sequence[str], old: str, new: str) -> pa.Schema:
    """The schema with a column renamed; data files keep the old physical name."""
    if old not in schema.names:
        raise SchemaMismatch(f"no column {old!r} to rename; the table has {schema.names}")
    if old in partition_by:
        raise SchemaMismatch(f"{old!r} is a partition column; renaming it is not supported")
    check_column_name(new)
    if name_key(new) != name_key(old) and name_key(new) in {name_key(n) for n in schema.names}:
        raise SchemaMismatch(f"cannot rename {old!r} to {new!r}: the name is taken")
    i = schema.get_field_index(old)
    f = schema.field(i)
    renamed = _with_physical(pa.field(new, f.type, f.nullable, f.metadata), physical_name(f))
    return schema.set(i, renamed)


_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINT_ORDER = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOAT_ORDER = [pa.float16(), pa.float32(), pa.float64()]


def is_safe_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly representable in ``new``.

    A column of the ``null`` type holds only NULL, which every type holds (a
    type that is or holds ``null`` excepted: nothing would be gained).
    """
    if old == new:
        return True
    if pat.is_null(old):
        return not holds_type(new, pat.is_null)
    for order in (_INT_ORDER, _UINT_ORDER, _FLOAT_ORDER):
        if old in order and new in order:
            return order.index(new) > order.index(old)
    if old in _UINT_ORDER[:3] and new in _INT_ORDER:
        return _INT_ORDER.index(new) > _UINT_ORDER.index(old)
    if old in (*_INT_ORDER[:3], *_UINT_ORDER[:3]) and new == pa.float64():
        return True
    if old in (pa.int8(), pa.int16(), pa.uint8(), pa.uint16()) and new == pa.float32():
        return True
    if pat.is_decimal(old) and pat.is_decimal(new):
        return bool(
            new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
        )
    return False


def widen_column(schema: pa.Schema, name: str, new_type: pa.DataType) -> pa.Schema:
    """The schema with a column's type widened; refuses any change that could lose data."""
    if name not in schema.names:
        raise SchemaMismatch(f"no column {name!r}; the table has {schema.names}")
    i = schema.get_field_index(name)
    f = schema.field(i)
    if pat.is_null(f.type):  # it holds only NULL: any type will do, as it is stored
        new_type = storable_type(name, new_type)
    if not is_safe_widening(f.type, new_type):
        raise SchemaMismatch(
            f"changing column {name!r} from {f.type} to {new_type} could lose data; only "
            "widening integer, floating and decimal types (or a column of the null type, "
            "which holds only NULL) is allowed",
            help="write the data to a new column instead",
        )
    metadata = dict(f.metadata or {})
    if new_type != f.type:  # readers of the files written before may need to know
        earlier = [*widened_from(f), str(f.type)]
        metadata[WIDENED_FROM] = json.dumps(earlier).encode()
    return schema.set(i, pa.field(f.name, new_type, f.nullable, metadata or None))


def widened_from(f: pa.Field) -> list[str]:
    """The types a column had before it was widened, oldest first (Arrow's type names)."""
    raw = (f.metadata or {}).get(WIDENED_FROM)
    if raw is None:
        return []
    try:
        names = json.loads(raw)
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def merge_schema(
    schema: pa.Schema, incoming: pa.Schema, partition_by: Iterable[str] = ()
) -> pa.Schema:
    """The table schema extended for ``append(..., schema_mode="merge")``.

    New columns are added as nullable; a column whose incoming type is a safe
    widening of the table's is widened, except a partition column (files
    spell its values in their paths in its type's text, as
    ``alter_table().widen_column`` also requires). Nothing else changes.

    As in Spark's schema merging, a column of the ``null`` type (which only
    an older mere created) takes the incoming type, and incoming ``null``
    columns never narrow a table's. A new column whose incoming type is or
    holds ``null`` (what Arrow infers for values that are all None or empty
    lists) is a SchemaMismatch: its type cannot be told.
    """
    fixed = {name_key(c) for c in partition_by}
    by_key = {name_key(n): n for n in schema.names}
    merged = schema
    for f in incoming:
        existing = by_key.get(name_key(f.name))
        if existing is None:
            refuse_null_type(f.name, storage_type(f.type), inferred=True)
            merged = add_column(merged, pa.field(f.name, f.type, True))
            continue
        old_type = merged.field(existing).type
        new_type = storage_type(f.type)
        if name_key(existing) in fixed:
            continue
        if new_type != old_type and is_safe_widening(old_type, new_type):
            merged = widen_column(merged, existing, new_type)
    return merged


def has_statistics(type_: pa.DataType) -> bool:
    """Whether min/max statistics are kept for columns of this type."""
    return bool(
        pat.is_integer(type_)
        or pat.is_floating(type_)
        or pat.is_boolean(type_)
        or pat.is_string(type_)
        or pat.is_large_string(type_)
        or pat.is_date(type_)
        or pat.is_timestamp(type_)
        or pat.is_decimal(type_)
    )
