"""SQL commands run by mere's own verbs inside a transaction.

Every command is parsed with sqlglot (DuckDB dialect) and carried out by the
verb the Python API uses, so constraints, statistics, conflict detection and
the log are exactly those of ``TxTable.append/update/delete/merge``,
``Transaction.create_table/drop_table`` and ``AlterTable``:

=====================================================  ==========================================
``INSERT INTO t [(cols)] VALUES ... | SELECT ...``     DuckDB evaluates the rows (with its cast
                                                       rules, into a scratch table of ``t``'s
                                                       types); ``TxTable.append`` writes them
``... ON CONFLICT [(key)] DO NOTHING``,                ``append(on_duplicate="skip")``
``INSERT OR IGNORE INTO ...``
``... ON CONFLICT [(key)] DO UPDATE SET c =``          ``append(on_duplicate="update")`` when
``excluded.c, ...``, ``INSERT OR REPLACE INTO ...``    every non-key column is set to its new
                                                       value; otherwise (some columns,
                                                       expressions, ``WHERE``) ``TxTable.merge``
                                                       on the key
``UPDATE t [AS a] SET c = expr, ... [WHERE cond]``     ``TxTable.update``
``DELETE FROM t [AS a] [WHERE cond]``                  ``TxTable.delete`` (no WHERE: every row)
``MERGE INTO t USING src ON ... WHEN ...``             ``TxTable.merge`` (``src``: a table or a
                                                       subquery, run by DuckDB)
``CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t (...)``  ``create_table`` (+ ``add_check``);
``[PARTITIONED BY (cols)]``, ``... AS SELECT``         CTAS appends DuckDB's rows;
``c T PRIMARY KEY``, ``[CONSTRAINT n] PRIMARY KEY``    ``primary_key=[...]``
``(a, b)``
``DROP TABLE [IF EXISTS] t [, ...]``                   ``drop_table``
``ALTER TABLE t ADD COLUMN | RENAME COLUMN ... TO |``  ``AlterTable.add_column`` / ``rename_column``
``ALTER COLUMN c TYPE | ADD CONSTRAINT n CHECK (...)`` / ``widen_column`` / ``add_check`` /
``| DROP CONSTRAINT n | ADD PRIMARY KEY (cols)``       ``drop_check`` / ``set_primary_key``
=====================================================  ==========================================

Conditions and values of UPDATE, DELETE and MERGE are evaluated by mere's
expression engine (:mod:`mere.expr`, the subset its docs list; a subquery, for
one, is refused). Their parameters (``?``, ``$1``, ``$name``) are replaced by
typed literal nodes in the parsed tree, never spliced into text.

ON CONFLICT follows DuckDB: the conflict target, if named, must be the
table's primary key; in ``DO UPDATE`` a bare column is the existing row's and
``excluded.c`` the new row's value; ``DO NOTHING`` keeps the first of rows
repeating a key. Unlike DuckDB (which keeps the first), a key repeated within
one ``DO UPDATE`` statement raises (``DuplicateKey``, or ``ConstraintViolation``
when it also matches a row), as PostgreSQL does.

DML returns a one-row table: ``count`` (rows inserted, updated or deleted);
MERGE adds ``inserted``, ``updated`` and ``deleted``. DDL returns None.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from mere.constraints import primary_key
from mere.errors import InvalidArgument, TableNotFound
from mere.names import name_key
from mere.schema import holds_type
from mere.sql import engine
from mere.sql.catalog import Catalog
from mere.sql.engine import duckdb_readable_type
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.sql.query import connection, register_tables
from mere.sql.script import (
    Statement,
    TimeTravel,
    quote_identifier,
    rewrite_time_travel,
    tokenize,
)
from mere.sql.types import arrow_type
from mere.txn.keys import key_columns
from mere.txn.transaction import Transaction

DIALECT = "duckdb"
_TARGET = "__mere_target"


def run_command(tx: Transaction, catalog: Catalog, statement: Statement) -> pa.Table | None:
    """Run one INSERT/UPDATE/DELETE/MERGE/CREATE/DROP/ALTER in ``tx``.

    The caller makes it atomic (a savepoint around it).
    """
    text, travels = rewrite_time_travel(statement)
    if travels:
        statement = dataclasses.replace(statement, text=text, tokens=tokenize(text))
    tree = parse(statement.text)
    if isinstance(tree, exp.Insert):
        return insert(tx, catalog, statement, tree, travels)
    tree = bind_placeholders(tree, statement.params)
    if isinstance(tree, exp.Update):
        return update(tx, tree)
    if isinstance(tree, exp.Delete):
        return delete(tx, tree)
    if isinstance(tree, exp.Merge):
        return merge(tx, catalog, tree, travels)
    if isinstance(tree, exp.Create):
        create(tx, catalog, tree, travels)
    elif isinstance(tree, exp.Drop):
        drop(tx, tree)
    elif isinstance(tree, exp.Alter):
        alter(tx, tree)
    else:
        raise UnsupportedSQL(f"the statement {short_text(statement.text)!r} is not supported")
    return None


def parse_trees(text: str, dialect: str = DIALECT) -> list[exp.Expression]:
    """The statements of ``text`` as sqlglot trees; SQLError naming where parsing failed."""
    try:
        trees = sqlglot.parse(text, dialect=dialect)
        return [cast(exp.Expression, t) for t in trees if t is not None]
    except sqlglot.errors.ParseError as exc:
        detail = "; ".join(
            f"{e.get('description')} at line {e.get('line')}, column {e.get('col')}"
            for e in exc.errors[:3]
        )
        raise SQLError(f"cannot parse {short_text(text)!r}: {detail}") from None


def parse(text: str) -> exp.Expression:
    trees = parse_trees(text)
    if len(trees) != 1:
        raise SQLError(f"expected one statement in {short_text(text)!r}")
    return trees[0]


def short_text(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut at ``limit`` characters (for error messages)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _refuse(tree: exp.Expression, args: Sequence[str], what: str) -> None:
    for arg in args:
        if tree.args.get(arg):
            raise UnsupportedSQL(f"{what} is not supported")


def _count(n: int) -> pa.Table:
    return pa.table({"count": pa.array([n], pa.int64())})


# --- parameters as literal nodes ---------------------------------------------------------


def bind_placeholders(
    tree: exp.Expression, params: Sequence[Any] | Mapping[str, Any] | None
) -> exp.Expression:
    """The tree with each ``?``/``$1``/``$name`` replaced by a typed literal node."""
    if params is None:
        return tree
    position = iter(range(1 << 30))

    def value_of(node: exp.Placeholder) -> Any:
        key = node.this
        if isinstance(params, Mapping):
            return params[str(key)]
        if key is None:
            return params[next(position)]
        return params[int(str(key)) - 1]

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder):
            return literal(value_of(node))
        return node

    bound: exp.Expression = tree.transform(replace, copy=True)
    return bound


def literal(value: Any) -> exp.Expression:
    """A SQL literal node of a Python value (None, bool, int, float, Decimal, str, date, datetime).

    Raises:
        InvalidArgument: a value of another type.
    """
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(str(value))
    if isinstance(value, float):
        text = repr(value) if math.isfinite(value) else ("NaN" if value != value else repr(value))
        return exp.cast(exp.Literal.string(text), exp.DataType.build("DOUBLE"))
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InvalidArgument(f"a Decimal parameter must be a number, not {value}")
        return exp.Literal.number(format(value, "f"))  # positional: 1.2E+5 would be a DOUBLE
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMP" if value.tzinfo is None else "TIMESTAMPTZ"
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), exp.DataType.build(kind))
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("DATE"))
    raise InvalidArgument(
        f"a parameter of type {type(value).__name__} cannot be used in UPDATE, DELETE or MERGE",
        help="use None, bool, int, float, Decimal, str, date or datetime values",
    )


# --- names ---------------------------------------------------------------------------------


def table_name(table: exp.Expression, what: str) -> str:
    if not isinstance(table, exp.Table) or not table.name:
        raise UnsupportedSQL(f"{what} needs a plain table name")
    if table.args.get("catalog") or table.db not in ("", "main"):
        raise UnsupportedSQL(f"{what}: qualified table names are not supported ({table.sql()})")
    return str(table.name)


def unqualify(tree: exp.Expression, names: set[str], what: str) -> exp.Expression:
    """Strip ``t.`` from columns qualified with the table's name or alias."""

    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table:
            if name_key(node.table) not in names or node.args.get("db"):
                raise UnsupportedSQL(
                    f"{what}: column {node.sql(dialect=DIALECT)} refers to another table"
                )
            return exp.column(node.args["this"].copy())
        return node

    return tree.transform(strip, copy=True)


def _sql(node: exp.Expression) -> str:
    return str(node.sql(dialect=DIALECT))


def assign(values: dict[str, str], column: str, value: str, what: str) -> None:
    """Record ``column = value`` in ``values``; a column named twice is an error (as in
    DuckDB and PostgreSQL), not the last assignment silently winning."""
    if any(name_key(c) == name_key(column) for c in values):
        raise InvalidArgument(f"{what}: column {column!r} is assigned more than once")
    values[column] = value


# --- INSERT ------------------------------------------------------------------------------


def insert(
    tx: Transaction,
    catalog: Catalog,
    statement: Statement,
    tree: exp.Insert,
    travels: Sequence[TimeTravel] = (),
) -> pa.Table:
    """INSERT: DuckDB computes the rows into a scratch table of the target's types."""
    _refuse(tree, ("returning",), "INSERT ... RETURNING")
    _refuse(tree, ("overwrite", "ignore"), "INSERT OVERWRITE / IGNORE")
    _refuse(tree, ("where", "partition", "using", "stored", "settings"), "this INSERT form")
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    name = table_name(target, "INSERT")
    table = tx.table(name)
    upsert = _on_conflict(table, tree, target)
    text = _retarget_insert(statement, bool(tree.args.get("conflict")))
    interval = next((f for f in table.schema if holds_type(f.type, pa.types.is_duration)), None)
    if interval is not None:
        raise UnsupportedSQL(
            f"INSERT into table {name!r}, whose column {interval.name!r} is a duration "
            f"({interval.type}): DuckDB's INTERVAL does not convert back to it",
            help=f"append the rows with db.table({name!r}).append(...)",
        )
    con = engine.cursor(catalog.store)
    try:
        scratch = pa.schema(
            [pa.field(f.name, duckdb_readable_type(f.type, f.name, name)) for f in table.schema]
        )
        con.register("__mere_target_type", scratch.empty_table())
        engine.execute(
            con, f"CREATE TEMP TABLE {_TARGET} AS SELECT * FROM __mere_target_type", None
        )
        register_tables(con, catalog, text, travels)
        try:
            engine.execute(con, text, statement.params)
        except SQLError as exc:  # DuckDB names the scratch table: say the user's
            message = str(exc).replace(f'"{_TARGET}"', f'"{name}"')
            if _TARGET in message:  # its excerpt of the statement is not the user's text
                message = message.split("\n\nLINE ", 1)[0]
            raise SQLError(message) from exc
        rows = engine.run(con, f"SELECT * FROM {_TARGET}", None)
    finally:
        con.close()
    if scratch.types != table.schema.types:  # back from the types DuckDB read to the table's
        rows = rows.cast(pa.schema([pa.field(f.name, f.type) for f in table.schema]))
    if upsert is None:
        return _count(table.append(rows))
    return _count(upsert(rows))


def _retarget_insert(statement: Statement, conflict: bool = False) -> str:
    """The INSERT's text with its target table replaced by the scratch table.

    ``OR IGNORE`` / ``OR REPLACE`` and (``conflict``) the trailing ``ON
    CONFLICT`` clause are cut: mere carries them out, the scratch table has no key.
    """
    tokens = statement.tokens
    into = next((i for i, t in enumerate(tokens) if t.token_type == TokenType.INTO), None)
    if into is None or into + 1 >= len(tokens):
        raise UnsupportedSQL("INSERT needs INTO <table>")
    end = into + 1
    while end + 2 < len(tokens) and tokens[end + 1].token_type == TokenType.DOT:
        end += 2
    text = statement.text
    head = text[: tokens[into + 1].start]
    verb = next((t for t in tokens[:into] if t.token_type == TokenType.INSERT), None)
    if verb is not None and tokens[into - 1] is not verb:  # INSERT OR IGNORE/REPLACE INTO
        head = text[: verb.end + 1] + " INTO "
    tail_end = len(text)
    if conflict:
        tail_end = _conflict_start(statement, end + 1)
    return head + _TARGET + text[tokens[end].end + 1 : tail_end]


def _conflict_start(statement: Statement, start: int) -> int:
    """Where the INSERT's ``ON CONFLICT`` clause begins in its text (the last at depth 0)."""
    tokens = statement.tokens
    depth = 0
    found: int | None = None
    for i in range(start, len(tokens) - 1):
        kind = tokens[i].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and kind == TokenType.ON and tokens[i + 1].text.upper() == "CONFLICT":
            found = tokens[i].start
    if found is None:
        raise UnsupportedSQL("INSERT ... ON CONFLICT: cannot find the ON CONFLICT clause")
    return found


_EXCLUDED = "excluded"


def _on_conflict(table: Any, tree: exp.Insert, target: exp.Table) -> Any:
    """What ``ON CONFLICT`` / ``OR IGNORE`` / ``OR REPLACE`` makes of the rows (None: plain).

    Returns a function of the rows that writes them and returns the count.
    """
    alternative = str(tree.args.get("alternative") or "").upper()
    conflict = tree.args.get("conflict")
    if alternative not in ("", "IGNORE", "REPLACE"):
        raise UnsupportedSQL(f"INSERT OR {alternative} is not supported")
    if not alternative and conflict is None:
        return None
    if conflict is not None and conflict.args.get("constraint") is not None:
        raise UnsupportedSQL("INSERT ... ON CONFLICT ON CONSTRAINT is not supported; name (key)")
    if conflict is not None and conflict.args.get("duplicate"):
        raise UnsupportedSQL("INSERT ... ON DUPLICATE KEY is not supported; use ON CONFLICT")
    keys = key_columns(table.meta)
    what = f"INSERT OR {alternative}" if alternative else "INSERT ... ON CONFLICT"
    if not keys:
        raise InvalidArgument(
            f"{what}: table {table.name!r} has no primary key",
            help="declare one: CREATE TABLE t (id BIGINT PRIMARY KEY, ...) or "
            "ALTER TABLE t ADD PRIMARY KEY (id)",
        )
    if alternative == "IGNORE":
        return lambda rows: table.append(rows, on_duplicate="skip")
    alias = target.alias or target.name
    others = {name_key(f.name) for f in table.schema} - {name_key(k) for k in keys}
    if alternative == "REPLACE" or conflict is None:
        listed = _insert_columns(tree)
        if listed is None or others <= {name_key(c) for c in listed}:
            return lambda rows: table.append(rows, on_duplicate="update")
        # As in DuckDB, a replaced row keeps the columns the INSERT does not name.
        replaced = {
            c: f"{_EXCLUDED}.{quote_identifier(c)}" for c in listed if name_key(c) in others
        }
        if not replaced:
            return lambda rows: table.append(rows, on_duplicate="skip")
        return _merge_upsert(table, keys, alias, replaced, None)
    named = conflict.args.get("conflict_keys") or []
    if named:
        columns = [k.this if isinstance(k, exp.Ordered) else k for k in named]
        if not all(isinstance(c, exp.Column | exp.Identifier) for c in columns) or sorted(
            name_key(c.name) for c in columns
        ) != sorted(name_key(k) for k in keys):
            raise InvalidArgument(
                f"ON CONFLICT ({', '.join(_sql(c) for c in named)}): the conflict target "
                f"must be table {table.name!r}'s primary key ({', '.join(keys)})"
            )
    action = conflict.args.get("action")
    verb = action.name.upper() if isinstance(action, exp.Var) else ""
    if verb == "DO NOTHING":
        return lambda rows: table.append(rows, on_duplicate="skip")
    if verb != "DO UPDATE":
        raise UnsupportedSQL(f"ON CONFLICT {verb or _sql(conflict)!r} is not supported")
    names = {name_key(alias)}
    values: dict[str, str] = {}
    plain = True
    for item in conflict.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise UnsupportedSQL(
                f"ON CONFLICT DO UPDATE assignment {_sql(item)!r} is not supported"
            )
        column = item.this
        if column.table and name_key(column.table) not in names:
            raise UnsupportedSQL(
                f"ON CONFLICT DO UPDATE sets {_sql(column)}, a column of another table"
            )
        value = _upsert_value(item.expression, alias, names)
        assign(values, column.name, _sql(value), "ON CONFLICT DO UPDATE")
        source = item.expression
        plain = plain and (
            isinstance(source, exp.Column)
            and name_key(source.table) == _EXCLUDED
            and name_key(source.name) == name_key(column.name)
        )
    where = conflict.args.get("where")
    cond = _sql(_upsert_value(where.this, alias, names)) if where is not None else None
    if plain and cond is None and others <= {name_key(c) for c in values}:
        return lambda rows: table.append(rows, on_duplicate="update")
    return _merge_upsert(table, keys, alias, values, cond)


def _insert_columns(tree: exp.Insert) -> list[str] | None:
    """The columns an INSERT names (``INSERT INTO t (a, b)``); None when it names none."""
    if not isinstance(tree.this, exp.Schema) or not tree.this.expressions:
        return None
    return [str(c.name) for c in tree.this.expressions]


def _merge_upsert(
    table: Any, keys: Sequence[str], alias: str, values: dict[str, str], cond: str | None
) -> Any:
    """Rows upserted by a MERGE on the key: a match gets ``values`` where ``cond`` holds."""
    on = " AND ".join(
        f"{quote_identifier(alias)}.{quote_identifier(k)} = {_EXCLUDED}.{quote_identifier(k)}"
        for k in keys
    )

    def merge_rows(rows: pa.Table) -> int:
        merger = table.merge(rows, on, source_alias=_EXCLUDED, target_alias=alias)
        metrics = merger.when_matched_update(values, cond).when_not_matched_insert_all().execute()
        return int(metrics.num_target_rows_inserted + metrics.num_target_rows_updated)

    return merge_rows


def _upsert_value(node: exp.Expression, alias: str, names: set[str]) -> exp.Expression:
    """A DO UPDATE expression for MERGE: bare columns are the existing row's (``alias.c``)."""

    def qualify(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            if not n.table:
                return exp.column(n.args["this"].copy(), table=exp.to_identifier(alias))
            if name_key(n.table) == _EXCLUDED:
                return exp.column(n.args["this"].copy(), table=exp.to_identifier(_EXCLUDED))
            if name_key(n.table) not in names or n.args.get("db"):
                raise UnsupportedSQL(
                    f"ON CONFLICT DO UPDATE: column {_sql(n)} refers to another table"
                )
        return n

    return node.transform(qualify, copy=True)


# --- UPDATE, DELETE ------------------------------------------------------------------------


def update(tx: Transaction, tree: exp.Update) -> pa.Table:
    _refuse(tree, ("from", "from_", "with", "with_", "options"), "UPDATE ... FROM / WITH")
    _refuse(tree, ("returning", "order", "limit"), "UPDATE ... RETURNING / ORDER BY / LIMIT")
    name = table_name(tree.this, "UPDATE")
    names = {name_key(name)} | ({name_key(tree.this.alias)} if tree.this.alias else set())
    assignments: dict[str, str] = {}
    for item in tree.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise UnsupportedSQL(f"UPDATE assignment {_sql(item)!r} is not supported")
        column = item.this
        if column.table and name_key(column.table) not in names:
            raise UnsupportedSQL(f"UPDATE sets {_sql(column)}, a column of another table")
        assign(
            assignments, column.name, _sql(unqualify(item.expression, names, "UPDATE")), "UPDATE"
        )
    where = tree.args.get("where")
    condition = _sql(unqualify(where.this, names, "UPDATE")) if where is not None else None
    return _count(tx.table(name).update(condition, assignments))


def delete(tx: Transaction, tree: exp.Delete) -> pa.Table:
    _refuse(tree, ("using", "tables", "with", "with_"), "DELETE ... USING / WITH")
    _refuse(tree, ("returning", "order", "limit"), "DELETE ... RETURNING / ORDER BY / LIMIT")
    name = table_name(tree.this, "DELETE")
    names = {name_key(name)} | ({name_key(tree.this.alias)} if tree.this.alias else set())
    where = tree.args.get("where")
    condition = _sql(unqualify(where.this, names, "DELETE")) if where is not None else "TRUE"
    return _count(tx.table(name).delete(condition))


# --- MERGE ---------------------------------------------------------------------------------


def merge(
    tx: Transaction, catalog: Catalog, tree: exp.Merge, travels: Sequence[TimeTravel] = ()
) -> pa.Table:
    _refuse(tree, ("returning", "using_cond"), "MERGE ... RETURNING")
    target_name = table_name(tree.this, "MERGE INTO")
    target_alias = tree.this.alias or target_name
    source = tree.args.get("using")
    if isinstance(source, exp.Table):
        source_alias = source.alias or source.name
        query = f"SELECT * FROM {_sql(exp.table_(source.name, db=source.db or None))}"
    elif isinstance(source, exp.Subquery):
        source_alias = source.alias or "s"
        query = _sql(source.this)
    else:
        raise UnsupportedSQL("MERGE ... USING takes a table or a (subquery) AS alias")
    if name_key(source_alias) == name_key(target_alias):
        raise UnsupportedSQL("MERGE: give the source and the target different aliases")
    with connection(catalog, query, travels) as con:
        rows = engine.run(con, query, None)
    merger = tx.table(target_name).merge(
        rows, _sql(tree.args["on"]), source_alias=source_alias, target_alias=target_alias
    )
    whens = tree.args.get("whens")
    for when in whens.expressions if whens is not None else []:
        merge_clause(merger, when)
    metrics = merger.execute()
    inserted = metrics.num_target_rows_inserted
    updated = metrics.num_target_rows_updated
    deleted = metrics.num_target_rows_deleted
    return pa.table(
        {
            "count": pa.array([inserted + updated + deleted], pa.int64()),
            "inserted": pa.array([inserted], pa.int64()),
            "updated": pa.array([updated], pa.int64()),
            "deleted": pa.array([deleted], pa.int64()),
        }
    )


def merge_clause(merger: Any, when: exp.When) -> None:
    """Add one ``WHEN [NOT] MATCHED ... THEN ...`` clause to a merge builder.

    ``merger`` is a :class:`~mere.ops.merge.TableMerger` or Spark's merger: both
    take the clauses as conditions and values in mere's SQL.
    """
    if when.args.get("source"):
        raise UnsupportedSQL("MERGE ... WHEN NOT MATCHED BY SOURCE is not supported")
    cond_node = when.args.get("condition")
    cond = _sql(cond_node) if cond_node is not None else None
    then = when.args.get("then")
    matched = bool(when.args.get("matched"))
    if matched and isinstance(then, exp.Update):
        items = then.expressions
        if len(items) == 1 and isinstance(items[0], exp.Star):
            merger.when_matched_update_all(cond)
            return
        values: dict[str, str] = {}
        for item in items:
            if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                raise UnsupportedSQL(f"MERGE assignment {_sql(item)!r} is not supported")
            assign(values, item.this.name, _sql(item.expression), "MERGE ... UPDATE")
        merger.when_matched_update(values, cond)
    elif matched and isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        merger.when_matched_delete(cond)
    elif not matched and isinstance(then, exp.Insert):
        if isinstance(then.this, exp.Star):
            merger.when_not_matched_insert_all(cond)
            return
        columns = then.this.expressions if isinstance(then.this, exp.Tuple) else None
        exprs = then.expression.expressions if isinstance(then.expression, exp.Tuple) else None
        if columns is None or exprs is None or len(columns) != len(exprs):
            raise UnsupportedSQL("MERGE ... INSERT needs (columns) VALUES (values) or *")
        inserted: dict[str, str] = {}
        for c, v in zip(columns, exprs, strict=True):
            assign(inserted, c.name, _sql(v), "MERGE ... INSERT")
        merger.when_not_matched_insert(inserted, cond)
    else:
        raise UnsupportedSQL(f"MERGE clause {short_text(_sql(when))!r} is not supported")


# --- CREATE, DROP, ALTER --------------------------------------------------------------------


def create(
    tx: Transaction, catalog: Catalog, tree: exp.Create, travels: Sequence[TimeTravel] = ()
) -> None:
    kind = str(tree.args.get("kind") or "").upper()
    if kind != "TABLE":
        raise UnsupportedSQL(f"CREATE {kind or '...'} is not supported (only CREATE TABLE)")
    _refuse(tree, ("indexes", "clone", "unique", "refresh", "concurrently"), "this CREATE TABLE")
    schema_node = tree.this if isinstance(tree.this, exp.Schema) else None
    target = schema_node.this if schema_node is not None else tree.this
    name = table_name(target, "CREATE TABLE")
    if target.args.get("temporary") or _has_property(tree, exp.TemporaryProperty):
        raise UnsupportedSQL("CREATE TEMPORARY TABLE is not supported")
    partition_by = _partition_by(tree)
    if tree.args.get("exists") and tx.has_table(name):
        return None
    query = tree.args.get("expression")
    rows = None
    if query is not None:  # run first: the query may read the table it replaces
        if schema_node is not None and schema_node.expressions:
            raise UnsupportedSQL("CREATE TABLE t (columns) AS SELECT: leave the columns out")
        text = _sql(query)
        with connection(catalog, text, travels) as con:
            rows = engine.run(con, text, None)
    if tree.args.get("replace") and tx.has_table(name):
        tx.drop_table(name)
    if rows is not None:
        schema = pa.schema([pa.field(f.name, f.type) for f in rows.schema])
        tx.create_table(name, schema, partition_by=partition_by)
        tx.table(name).append(rows)
        return None
    if schema_node is None or not schema_node.expressions:
        raise UnsupportedSQL("CREATE TABLE needs a column list or AS SELECT")
    fields: list[pa.Field] = []
    checks: list[tuple[str | None, str]] = []
    keys: list[list[str]] = []
    for item in schema_node.expressions:
        if isinstance(item, exp.ColumnDef):
            fields.append(_column(item, checks, keys))
        elif isinstance(item, exp.Constraint):
            for c in item.expressions:
                if isinstance(c, exp.PrimaryKey):
                    keys.append(_key_names(c))
                else:
                    checks.append((item.name, _check_sql(c)))
        elif isinstance(item, exp.PrimaryKey):
            keys.append(_key_names(item))
        elif isinstance(item, exp.CheckColumnConstraint):
            checks.append((None, _check_sql(item)))
        else:
            raise UnsupportedSQL(f"table constraint {short_text(_sql(item))!r} is not supported")
    if len(keys) > 1:
        raise InvalidArgument(f"CREATE TABLE {name}: more than one PRIMARY KEY")
    tx.create_table(
        name, pa.schema(fields), partition_by=partition_by, primary_key=keys[0] if keys else None
    )
    for number, (check_name, condition) in enumerate(checks, start=1):
        tx.alter_table(name).add_check(check_name or f"{name}_check{number}", condition)
    return None


def _has_property(tree: exp.Create, kind: type[exp.Expression]) -> bool:
    props = tree.args.get("properties")
    return props is not None and any(isinstance(p, kind) for p in props.expressions)


def _partition_by(tree: exp.Create) -> list[str]:
    props = tree.args.get("properties")
    columns: list[str] = []
    for prop in props.expressions if props is not None else []:
        if isinstance(prop, exp.PartitionedByProperty):
            node = prop.this
            items = node.expressions if isinstance(node, exp.Schema | exp.Tuple) else [node]
            for item in items:
                if not isinstance(item, exp.Identifier | exp.Column):
                    raise UnsupportedSQL("PARTITIONED BY takes column names")
                columns.append(item.name)
        else:
            raise UnsupportedSQL(f"table property {short_text(_sql(prop))!r} is not supported")
    return columns


def _key_names(key: exp.PrimaryKey) -> list[str]:
    """The column names of a ``PRIMARY KEY (a, b)`` constraint."""
    names: list[str] = []
    for item in key.expressions:
        node = item.this if isinstance(item, exp.Ordered) else item
        if not isinstance(node, exp.Identifier | exp.Column):
            raise UnsupportedSQL(f"PRIMARY KEY takes column names, not {_sql(item)!r}")
        names.append(node.name)
    return names


def _column(
    item: exp.ColumnDef,
    checks: list[tuple[str | None, str]],
    keys: list[list[str]] | None = None,
) -> pa.Field:
    kind = item.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise UnsupportedSQL(f"column {item.name!r} needs a type")
    nullable = True
    for constraint in item.args.get("constraints") or []:
        c = constraint.args.get("kind")
        if isinstance(c, exp.NotNullColumnConstraint):
            nullable = bool(c.args.get("allow_null"))
        elif isinstance(c, exp.CheckColumnConstraint):
            checks.append((constraint.name or None, _check_sql(c)))
        elif isinstance(c, exp.PrimaryKeyColumnConstraint) and keys is not None:
            keys.append([item.name])
            nullable = False
        else:
            raise UnsupportedSQL(
                f"column constraint {short_text(_sql(constraint))!r} is not supported",
                help="supported: NOT NULL, NULL, CHECK (...) and PRIMARY KEY (in CREATE TABLE)",
            )
    return pa.field(item.name, arrow_type(kind), nullable)


def _check_sql(constraint: exp.Expression) -> str:
    if not isinstance(constraint, exp.CheckColumnConstraint):
        raise UnsupportedSQL(f"constraint {short_text(_sql(constraint))!r} is not supported")
    return _sql(constraint.this)


def drop(tx: Transaction, tree: exp.Drop) -> None:
    kind = str(tree.args.get("kind") or "").upper()
    if kind != "TABLE":
        raise UnsupportedSQL(f"DROP {kind or '...'} is not supported (only DROP TABLE)")
    for table in tree.args.get("tables") or [tree.this]:
        tx.drop_table(table_name(table, "DROP TABLE"), if_exists=bool(tree.args.get("exists")))
    return None


def alter(tx: Transaction, tree: exp.Alter) -> None:
    kind = str(tree.args.get("kind") or "").upper()
    if kind != "TABLE":
        raise UnsupportedSQL(f"ALTER {kind or '...'} is not supported (only ALTER TABLE)")
    name = table_name(tree.this, "ALTER TABLE")
    if tree.args.get("exists") and not tx.has_table(name):
        return None
    if not tx.has_table(name):
        raise TableNotFound(name, tx.read_version)
    for action in tree.args.get("actions") or []:
        _alter_one(tx, name, action)
    return None


def _alter_one(tx: Transaction, name: str, action: exp.Expression) -> None:
    alter = tx.alter_table(name)
    if isinstance(action, exp.ColumnDef):
        checks: list[tuple[str | None, str]] = []
        f = _column(action, checks)
        alter.add_column(f.name, f.type, nullable=f.nullable)
        for number, (check_name, condition) in enumerate(checks, start=1):
            alter.add_check(check_name or f"{name}_{f.name}_check{number}", condition)
    elif isinstance(action, exp.RenameColumn):
        alter.rename_column(action.this.name, action.args["to"].name)
    elif isinstance(action, exp.AddConstraint):
        for constraint in action.expressions:
            if isinstance(constraint, exp.PrimaryKey):
                current = primary_key(tx.table(name).meta.properties)
                if current:  # as PostgreSQL and DuckDB: one primary key, added once
                    raise InvalidArgument(
                        f"ALTER TABLE {name} ADD PRIMARY KEY: the table has a primary key "
                        f"already ({', '.join(current)})"
                    )
                alter.set_primary_key(_key_names(constraint))
                continue
            if not isinstance(constraint, exp.Constraint) or not constraint.name:
                raise UnsupportedSQL("ALTER TABLE ... ADD CONSTRAINT needs a name: CONSTRAINT n")
            for c in constraint.expressions:
                alter.add_check(constraint.name, _check_sql(c))
    elif isinstance(action, exp.AlterColumn):
        dtype = action.args.get("dtype")
        other = [k for k, v in action.args.items() if v and k not in ("this", "dtype")]
        if dtype is None or other:
            raise UnsupportedSQL(
                f"ALTER COLUMN {short_text(_sql(action))!r} is not supported (only ... TYPE t)"
            )
        alter.widen_column(action.this.name, arrow_type(dtype))
    elif isinstance(action, exp.Drop):
        what = str(action.args.get("kind") or "").upper()
        if what == "CONSTRAINT":
            for c in action.args.get("tables") or action.expressions or [action.this]:
                alter.drop_check(c.name)
        else:
            raise UnsupportedSQL(
                f"ALTER TABLE ... DROP {what or '...'} is not supported",
                help="dropping a column is not supported yet",
            )
    else:
        raise UnsupportedSQL(f"ALTER TABLE action {short_text(_sql(action))!r} is not supported")


__all__ = ["bind_placeholders", "literal", "parse", "run_command"]
