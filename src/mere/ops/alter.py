"""ALTER TABLE: schema evolution, properties and CHECK constraints inside a transaction."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mere import schema as schemas
from mere.constraints import (
    CHECK_PREFIX,
    PRIMARY_KEY_PROPERTY,
    checks,
    compile_check,
    enforce,
    key_property,
    primary_key,
    resolve_primary_key,
)
from mere.errors import ConstraintViolation, InvalidName, SchemaMismatch
from mere.expr.parse import rename_in_sql
from mere.log.actions import TableMeta
from mere.names import name_key
from mere.properties import check_table_properties
from mere.txn.keys import duplicates_within, refuse_duplicates

if TYPE_CHECKING:
    from mere.txn.transaction import Transaction


class AlterTable:
    """Changes to one table's metadata; each call takes effect in the transaction at once.

    ``tx.alter_table("orders").add_column("note", pa.string()).add_check("positive",
    "amount > 0")``. Concurrent writers of the table conflict with these changes
    (ConcurrentMetadataChange), so data written against the old schema never
    lands under the new one unchecked.
    """

    def __init__(self, tx: Transaction, table_id: str) -> None:
        self._tx = tx
        self._id = table_id

    def _change(
        self, change: Callable[[TableMeta], TableMeta], operation: str, **parameters: Any
    ) -> AlterTable:
        """Stage the metadata ``change`` makes, as one statement."""
        with self._tx.statement() as stage:
            stage.set_metadata(self._id, change(stage.meta(self._id)))
            stage.record_operation(operation, self._id, **parameters)
        return self

    def add_column(self, name: str, type: pa.DataType, *, nullable: bool = True) -> AlterTable:
        """Add a nullable column; rows written before read it as NULL."""
        field = pa.field(name, type, nullable)
        return self._change(
            lambda meta: replace(meta, schema=schemas.add_column(meta.schema, field)),
            "ADD COLUMN",
            column=name,
            type=str(type),
        )

    def rename_column(self, old: str, new: str) -> AlterTable:
        """Rename a column (not a partition column); data files are not rewritten."""

        def rename(meta: TableMeta) -> TableMeta:
            schema = schemas.rename_column(meta.schema, meta.partition_columns, old, new)
            properties = dict(meta.properties)
            key = primary_key(properties)
            if key:  # the key follows the column
                renamed = [new if name_key(c) == name_key(old) else c for c in key]
                properties[PRIMARY_KEY_PROPERTY] = key_property(renamed)
            for check, condition in checks(properties).items():  # and so do constraints
                properties[CHECK_PREFIX + check] = rename_in_sql(condition, old, new)
                compile_check(check, properties[CHECK_PREFIX + check], schema)
            return replace(meta, schema=schema, properties=properties)

        return self._change(rename, "RENAME COLUMN", column=old, to=new)

    def set_primary_key(self, columns: Sequence[str]) -> AlterTable:
        """Declare the table's primary key (its columns become NOT NULL).

        The existing rows are checked first: a NULL in a key column is a
        ConstraintViolation, duplicate values a DuplicateKey naming them.
        """

        def declare(meta: TableMeta) -> TableMeta:
            resolved, schema = resolve_primary_key(meta.schema, columns)
            current = self._tx.table(meta.name).scan(columns=resolved)
            for column in resolved:
                nulls = current.column(column).null_count
                if nulls:
                    raise ConstraintViolation(
                        f"{nulls} row(s) of table {meta.name!r} hold NULL in key column {column!r}"
                    )
            refuse_duplicates(meta, duplicates_within(current), "among the existing rows")
            properties = {**meta.properties, PRIMARY_KEY_PROPERTY: key_property(resolved)}
            return replace(meta, schema=schema, properties=properties)

        return self._change(declare, "SET PRIMARY KEY", columns=list(columns))

    def widen_column(self, name: str, type: pa.DataType) -> AlterTable:
        """Widen a column losslessly (integers, floats and decimals to wider ones, a column
        of the null type to any type); a change that could lose data is refused."""

        def widen(meta: TableMeta) -> TableMeta:
            if name in meta.partition_columns:
                raise SchemaMismatch(f"{name!r} is a partition column; its type cannot change")
            return replace(meta, schema=schemas.widen_column(meta.schema, name, type))

        return self._change(widen, "CHANGE COLUMN TYPE", column=name, type=str(type))

    def set_properties(self, properties: dict[str, str]) -> AlterTable:
        """Set table properties (string to string); ``mere.*`` keys are reserved."""
        if not isinstance(properties, Mapping):
            raise InvalidName(
                f"table properties must be a dict of strings, not {type(properties).__name__}"
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise InvalidName("table properties must map strings to strings")
        reserved = [k for k in properties if k.startswith("mere.")]
        if reserved:
            raise InvalidName(f"property keys starting with 'mere.' are reserved: {reserved}")
        check_table_properties(properties)
        return self._change(
            lambda meta: replace(meta, properties={**meta.properties, **properties}),
            "SET PROPERTIES",
            properties=properties,
        )

    def add_check(self, name: str, condition: str) -> AlterTable:
        """Add a named CHECK constraint; the table's current rows must satisfy it."""

        def add(meta: TableMeta) -> TableMeta:
            if name in checks(meta.properties):
                raise InvalidName(f"constraint {name!r} already exists")
            compile_check(name, condition, meta.schema)
            current = self._tx.table(meta.name).scan()
            enforce(meta.schema, {CHECK_PREFIX + name: condition}, current, "the existing rows")
            return replace(meta, properties={**meta.properties, CHECK_PREFIX + name: condition})

        return self._change(add, "ADD CONSTRAINT", name=name, expr=condition)

    def drop_check(self, name: str) -> AlterTable:
        def drop(meta: TableMeta) -> TableMeta:
            if name not in checks(meta.properties):
                raise InvalidName(f"no constraint {name!r} on table {meta.name!r}")
            properties = {k: v for k, v in meta.properties.items() if k != CHECK_PREFIX + name}
            return replace(meta, properties=properties)

        return self._change(drop, "DROP CONSTRAINT", name=name)
