"""Named CHECK constraints, kept in table properties and enforced on every write.

A constraint is stored as the table property ``mere.check.<name>`` holding a
SQL boolean expression. A row violates it when the expression is FALSE; NULL
passes, as in SQL. NOT NULL comes from the schema (see :func:`mere.schema.conform`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.errors import ConstraintViolation, InvalidExpression, InvalidName
from mere.names import check_table_name, name_key

CHECK_PREFIX = "mere.check."
#: The table property holding the primary key: a JSON list of column names.
PRIMARY_KEY_PROPERTY = "mere.primaryKey"
#: The property an export's target sets on tables whose files live elsewhere (format §11.6).
EXTERNAL_FILES = "mere.externalFiles"


def primary_key(properties: Mapping[str, str]) -> list[str]:
    """The table's primary key columns ([] when it has none)."""
    text = properties.get(PRIMARY_KEY_PROPERTY)
    if not text:
        return []
    columns = json.loads(text)
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise InvalidName(f"table property {PRIMARY_KEY_PROPERTY} must be a JSON list of names")
    return columns


def key_property(columns: Sequence[str]) -> str:
    """The property value recording ``columns`` as the primary key."""
    return json.dumps(list(columns))


def resolve_primary_key(schema: pa.Schema, columns: Sequence[str]) -> tuple[list[str], pa.Schema]:
    """Check key columns against a schema; return their spelling and the schema, keys NOT NULL.

    Raises:
        InvalidName: no columns, an unknown or repeated column, or a type a key cannot
            have: nested, null, duration or float16.
    """
    if isinstance(columns, str) or not columns:
        raise InvalidName("a primary key is a non-empty list of column names")
    by_key = {name_key(n): n for n in schema.names}
    resolved: list[str] = []
    for given in columns:
        name = by_key.get(name_key(given)) if isinstance(given, str) else None
        if name is None:
            raise InvalidName(f"primary key column {given!r} is not in the table {schema.names}")
        if name in resolved:
            raise InvalidName(f"primary key column {name!r} is named twice")
        if pa.types.is_nested(schema.field(name).type):
            raise InvalidName(f"primary key column {name!r} has a nested type")
        if pa.types.is_null(schema.field(name).type):
            raise InvalidName(f"primary key column {name!r} has the null type: it holds no value")
        type_ = schema.field(name).type
        if pa.types.is_duration(type_) or pa.types.is_float16(type_):
            raise InvalidName(
                f"primary key column {name!r} has type {type_}, which a key cannot have: "
                "key checks, merges and upserts do not support it",
                help="key on an integer (a duration's count of units) or a float32 column",
            )
        resolved.append(name)
    fields = [f.with_nullable(False) if f.name in resolved else f for f in schema]
    return resolved, pa.schema(fields, metadata=schema.metadata)


def check_reserved_properties(properties: Mapping[str, str], schema: pa.Schema) -> pa.Schema:
    """Validate the ``mere.*`` properties of a table being created from whole metadata
    (its key and constraints, as :meth:`AlterTable` would make them); return the schema
    with the key columns NOT NULL.

    Raises:
        InvalidName: an unknown ``mere.*`` key, or a key that does not name columns.
        InvalidExpression: a constraint that does not compile against the schema.
    """
    for key in properties:
        if key.startswith("mere.") and not (
            key in (PRIMARY_KEY_PROPERTY, EXTERNAL_FILES) or key.startswith(CHECK_PREFIX)
        ):
            raise InvalidName(f"property keys starting with 'mere.' are reserved: {key!r}")
    if PRIMARY_KEY_PROPERTY in properties:
        try:
            columns = primary_key(properties)
        except ValueError:
            raise InvalidName(
                f"table property {PRIMARY_KEY_PROPERTY} must be a JSON list of names"
            ) from None
        schema = resolve_primary_key(schema, columns)[1]
    for name, sql in checks(properties).items():
        compile_check(name, sql, schema)
    return schema


def checks(properties: Mapping[str, str]) -> dict[str, str]:
    """The table's CHECK constraints: name -> SQL expression."""
    return {k[len(CHECK_PREFIX) :]: v for k, v in properties.items() if k.startswith(CHECK_PREFIX)}


def compile_check(name: str, sql: str, schema: pa.Schema) -> sqlexpr.Expr:
    """Parse and bind a constraint; it must be a boolean expression over the table."""
    try:
        check_table_name(name)
    except InvalidName:
        raise InvalidName(f"invalid constraint name {name!r}: use an identifier") from None
    bound = sqlexpr.bind(sqlexpr.parse(sql), schema)
    if not sqlexpr.is_boolean(bound):
        raise InvalidExpression(f"constraint {name!r} ({sql}) is not a boolean expression")
    return bound


def enforce(schema: pa.Schema, properties: Mapping[str, str], rows: pa.Table, what: str) -> None:
    """Raise ConstraintViolation naming the first constraint some row breaks."""
    if rows.num_rows == 0:
        return
    for name, sql in checks(properties).items():
        result = sqlexpr.evaluate(compile_check(name, sql, schema), rows)
        failed = pc.sum(pc.invert(pc.fill_null(result, True))).as_py() or 0
        if failed:
            raise ConstraintViolation(
                f"{failed} row(s) of {what} violate CHECK constraint {name!r} ({sql})"
            )
