"""ALTER TABLE: schema evolution, properties and CHECK constraints inside a transaction."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from mere import schema as schemas
from mere.constraints import CHECK_PREFIX, checks, compile_check, enforce
from mere.errors import InvalidName, SchemaMismatch

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

    def add_column(self, name: str, type: pa.DataType, *, nullable: bool = True) -> AlterTable:
        """Add a nullable column; rows written before read it as NULL."""
        meta = self._tx._meta(self._id)
        schema = schemas.add_column(meta.schema, pa.field(name, type, nullable))
        self._tx._alter(
            self._id, replace(meta, schema=schema), "ADD COLUMN", column=name, type=str(type)
        )
        return self

    def rename_column(self, old: str, new: str) -> AlterTable:
        """Rename a column (not a partition column); data files are not rewritten."""
        meta = self._tx._meta(self._id)
        schema = schemas.rename_column(meta.schema, meta.partition_columns, old, new)
        self._tx._alter(self._id, replace(meta, schema=schema), "RENAME COLUMN", column=old, to=new)
        return self

    def widen_column(self, name: str, type: pa.DataType) -> AlterTable:
        """Widen an integer, floating or decimal column; a lossy change is refused."""
        meta = self._tx._meta(self._id)
        if name in meta.partition_columns:
            raise SchemaMismatch(f"{name!r} is a partition column; its type cannot change")
        schema = schemas.widen_column(meta.schema, name, type)
        self._tx._alter(
            self._id,
            replace(meta, schema=schema),
            "CHANGE COLUMN TYPE",
            column=name,
            type=str(type),
        )
        return self

    def set_properties(self, properties: dict[str, str]) -> AlterTable:
        """Set table properties (string to string); ``mere.*`` keys are reserved."""
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise InvalidName("table properties must map strings to strings")
        reserved = [k for k in properties if k.startswith("mere.")]
        if reserved:
            raise InvalidName(f"property keys starting with 'mere.' are reserved: {reserved}")
        meta = self._tx._meta(self._id)
        self._tx._alter(
            self._id,
            replace(meta, properties={**meta.properties, **properties}),
            "SET PROPERTIES",
            properties=properties,
        )
        return self

    def add_check(self, name: str, condition: str) -> AlterTable:
        """Add a named CHECK constraint; the table's current rows must satisfy it."""
        meta = self._tx._meta(self._id)
        if name in checks(meta.properties):
            raise InvalidName(f"constraint {name!r} already exists")
        compile_check(name, condition, meta.schema)
        properties = {**meta.properties, CHECK_PREFIX + name: condition}
        current = self._tx.table(meta.name).scan()
        enforce(meta.schema, {CHECK_PREFIX + name: condition}, current, "the existing rows")
        self._tx._alter(
            self._id,
            replace(meta, properties=properties),
            "ADD CONSTRAINT",
            name=name,
            expr=condition,
        )
        return self

    def drop_check(self, name: str) -> AlterTable:
        meta = self._tx._meta(self._id)
        if name not in checks(meta.properties):
            raise InvalidName(f"no constraint {name!r} on table {meta.name!r}")
        properties = {k: v for k, v in meta.properties.items() if k != CHECK_PREFIX + name}
        self._tx._alter(
            self._id, replace(meta, properties=properties), "DROP CONSTRAINT", name=name
        )
        return self
