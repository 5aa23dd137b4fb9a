"""Named CHECK constraints, kept in table properties and enforced on every write.

A constraint is stored as the table property ``mere.check.<name>`` holding a
SQL boolean expression. A row violates it when the expression is FALSE; NULL
passes, as in SQL. NOT NULL comes from the schema (see :func:`mere.schema.conform`).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.errors import ConstraintViolation, InvalidExpression, InvalidName
from mere.names import check_table_name

CHECK_PREFIX = "mere.check."


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
