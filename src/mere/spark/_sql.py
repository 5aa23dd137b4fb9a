"""Spark SQL over a mere database: pinned views, and Spark SQL transactions.

:func:`views` registers every table of a database as a Spark temp view, all
read at **one** version, so a query joining them sees one consistent state
however many commits land meanwhile.

:func:`transaction` runs Spark SQL statements inside one mere transaction;
their writes commit together, atomically, or not at all::

    with mere.spark.transaction(spark, uri) as tx:
        tx.sql("INSERT INTO orders SELECT * FROM new_orders")
        tx.sql("UPDATE customers SET last_order = DATE'2024-05-01' WHERE cid = 7")

Each statement is parsed with sqlglot (Spark dialect) and carried out by the
Spark path mere already has: queries and INSERT's source by Spark itself,
over the transaction's own view of each mere table it names (its snapshot
plus its own writes, read by Spark's Parquet reader and recorded as reads
for conflict detection); INSERT by :func:`mere.spark.write`; UPDATE and
DELETE by :func:`mere.spark.update`/:func:`~mere.spark.delete`; MERGE by
:func:`mere.spark.merge`. Conditions and assignments of UPDATE, DELETE and
MERGE are evaluated by mere's expression engine (transpiled to its dialect
with sqlglot), exactly as in the Python API. Each statement is atomic (a
savepoint); anything else raises :class:`~mere.UnsupportedSQL` naming it.
"""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import functions as F
from sqlglot import exp

from mere.database import Database, connect
from mere.errors import InvalidExpression, SchemaMismatch
from mere.names import name_key
from mere.spark import _core
from mere.spark._dml import delete, merge, update
from mere.spark._native import native_read_refusal, read_files
from mere.spark._types import spark_type
from mere.spark._write import check_uri, write
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.sql.statements import merge_clause, parse_trees, short_text, unqualify
from mere.txn.transaction import DEFAULT_ISOLATION, Isolation, Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: The dialect statements are read in, and the one mere's expression engine reads.
SPARK = "spark"
MERE = "duckdb"


@dataclass(frozen=True)
class PinnedViews:
    """What :func:`views` registered: the version every view reads, and the view names."""

    version: int
    tables: tuple[str, ...]


def views(
    spark: SparkSession,
    uri: str | os.PathLike[str],
    version: int | None = None,
    timestamp: datetime | int | None = None,
) -> PinnedViews:
    """Register every table of the database as a Spark temp view, all at one version.

    The version is the latest when neither ``version`` nor ``timestamp``
    (a datetime, or ms since the epoch) is given. Each view reads that
    version only, so a Spark SQL query joining several views sees one
    consistent state of the database even while writers commit; register
    again to see newer commits. A view replaces a temp view of the same name.
    """
    from mere.spark import read  # the package's own entry point (it imports this module)

    location = os.fspath(uri)
    with connect(location, create=False) as db:
        snapshot = db.snapshot(version=version, timestamp=timestamp)
        names = tuple(snapshot.tables())
    for name in names:
        read(spark, location, name, version=snapshot.version).createOrReplaceTempView(name)
    return PinnedViews(snapshot.version, names)


def transaction(
    spark: SparkSession,
    uri: str | os.PathLike[str],
    isolation: Isolation = DEFAULT_ISOLATION,
) -> SparkTransaction:
    """Begin a mere transaction for Spark SQL statements on the latest version.

    Use it as a context manager: leaving the block commits every statement's
    writes in one mere commit; an exception aborts (nothing committed, the
    data files written so far deleted). Outside a ``with`` block, call
    :meth:`SparkTransaction.commit` or :meth:`SparkTransaction.abort`.
    """
    db = connect(os.fspath(uri), create=False)
    try:
        check_uri(db.uri)
        tx = db.begin(isolation)
    except BaseException:
        db.close()
        raise
    return SparkTransaction(spark, db, tx)


class SparkTransaction:
    """Spark SQL statements inside one mere transaction (see :func:`transaction`)."""

    def __init__(self, spark: SparkSession, db: Database, tx: Transaction) -> None:
        self.spark = spark
        #: The mere transaction: its Python API may be mixed with :meth:`sql`.
        self.transaction = tx
        self._db = db
        self._prefix = f"__mere_{uuid.uuid4().hex[:12]}_"
        self._counter = itertools.count()
        self._views: list[str] = []

    @property
    def read_version(self) -> int:
        """The version of the snapshot the transaction reads."""
        return self.transaction.read_version

    @property
    def version(self) -> int | None:
        """The version the transaction committed (None until it has)."""
        return self.transaction.commit_version

    # --- statements --------------------------------------------------------------------

    def sql(self, text: str) -> DataFrame:
        """Run one Spark SQL statement in the transaction.

        A query returns its DataFrame (reading the transaction's snapshot and
        own writes); INSERT, UPDATE and DELETE a one-row DataFrame ``count``;
        MERGE adds ``inserted``, ``updated`` and ``deleted``. The statement is
        atomic: if it raises, the transaction is as it was before it (and
        stays open).

        Raises:
            UnsupportedSQL: a statement kind or form this does not run (named).
            SQLError: the text does not parse, or holds more than one statement.
        """
        tree = _parse(text)
        with self.transaction.savepoint():
            if isinstance(tree, exp.Query):
                return self._query(tree)
            if isinstance(tree, exp.Insert):
                return self._counts(count=self._insert(tree))
            if isinstance(tree, exp.Update):
                return self._counts(count=self._update(tree))
            if isinstance(tree, exp.Delete):
                return self._counts(count=self._delete(tree))
            if isinstance(tree, exp.Merge):
                return self._merge(tree)
        raise UnsupportedSQL(
            f"{_kind(tree)} in a Spark SQL transaction is not supported",
            help="Spark SQL transactions run queries, INSERT, UPDATE, DELETE and MERGE; "
            "for DDL use mere's own SQL in the same transaction: tx.transaction.sql(...)",
        )

    def table(self, name: str) -> DataFrame:
        """A mere table as this transaction sees it (snapshot and own writes), as a DataFrame."""
        tx = self.transaction
        meta = _core.tx_table_meta(tx, name)
        refusal = native_read_refusal(meta.schema)
        if refusal is not None:
            raise UnsupportedSQL(
                f"a Spark SQL transaction cannot read {meta.name!r}: {refusal}",
                help="read it with mere.spark.read(..., method='datasource') outside it",
            )
        _, files = _core.plan_tx_read(tx, name, None)
        return read_files(self.spark, tx.store, meta, files)

    def _query(self, tree: exp.Query) -> DataFrame:
        return self.spark.sql(self._spark_sql(cast(exp.Expression, tree)))

    def _spark_sql(self, tree: exp.Expression) -> str:
        """Spark SQL text of ``tree`` with each mere table it names read from this transaction."""
        ctes = {name_key(c.alias_or_name) for c in tree.find_all(exp.CTE)}
        views: dict[str, str] = {}

        def swap(node: exp.Expression) -> exp.Expression:
            if (
                isinstance(node, exp.Table)
                and isinstance(node.this, exp.Identifier)
                and not node.args.get("db")
                and not node.args.get("catalog")
                and name_key(node.name) not in ctes
                and self.transaction.has_table(node.name)
            ):
                key = name_key(node.name)
                if key not in views:
                    views[key] = self._view(node.name)
                alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
                return exp.Table(this=exp.to_identifier(views[key]), alias=alias.copy())
            return node

        return str(tree.transform(swap, copy=True).sql(dialect=SPARK))

    def _view(self, name: str) -> str:
        view = f"{self._prefix}{next(self._counter)}"
        self.table(name).createOrReplaceTempView(view)
        self._views.append(view)
        return view

    def _counts(self, **counts: int) -> DataFrame:
        names = list(counts)
        return self.spark.createDataFrame(
            [tuple(counts[n] for n in names)], ", ".join(f"{n} BIGINT" for n in names)
        )

    def _insert(self, tree: exp.Insert) -> int:
        for arg, what in (
            ("partition", "INSERT ... PARTITION (...)"),
            ("where", "INSERT ... REPLACE WHERE"),
            ("conflict", "INSERT ... ON CONFLICT"),
            ("returning", "INSERT ... RETURNING"),
            ("alternative", "INSERT OR REPLACE"),
            ("by_name", "INSERT ... BY NAME"),
        ):
            if tree.args.get(arg):
                raise UnsupportedSQL(f"{what} is not supported in a Spark SQL transaction")
        target = tree.this
        columns: list[str] | None = None
        if isinstance(target, exp.Schema):
            columns = [c.name for c in target.expressions]
            target = target.this
        name = _table_name(target, "INSERT")
        source = tree.expression
        if isinstance(source, exp.Values):
            source = exp.select("*").from_(source)
        if not isinstance(source, exp.Query):
            raise UnsupportedSQL("INSERT takes VALUES (...) or a query")
        rows = self._query(source)
        frame = _shape(rows, _core.tx_table_meta(self.transaction, name).schema, columns, name)
        if tree.args.get("overwrite"):
            return write(self.transaction, frame, name, mode="overwrite")
        return write(self.transaction, frame, name)

    def _update(self, tree: exp.Update) -> int:
        for arg in ("from", "from_", "with", "with_", "returning", "order", "limit"):
            if tree.args.get(arg):
                raise UnsupportedSQL("UPDATE ... FROM / WITH / ORDER BY / LIMIT is not supported")
        name = _table_name(tree.this, "UPDATE")
        names = _names(tree.this)
        assignments: dict[str, Any] = {}
        for item in tree.expressions:
            if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                raise UnsupportedSQL(f"UPDATE assignment {_mere(item)!r} is not supported")
            if item.this.table and name_key(item.this.table) not in names:
                raise UnsupportedSQL(f"UPDATE sets {_mere(item.this)}, a column of another table")
            assignments[item.this.name] = _mere(unqualify(item.expression, names, "UPDATE"))
        where = tree.args.get("where")
        condition = None if where is None else _mere(unqualify(where.this, names, "UPDATE"))
        return update(self.spark, self.transaction, name, condition, assignments)

    def _delete(self, tree: exp.Delete) -> int:
        for arg in ("using", "tables", "with", "with_", "returning", "order", "limit"):
            if tree.args.get(arg):
                raise UnsupportedSQL("DELETE ... USING / WITH / ORDER BY / LIMIT is not supported")
        name = _table_name(tree.this, "DELETE")
        where = tree.args.get("where")
        names = _names(tree.this)
        condition = "TRUE" if where is None else _mere(unqualify(where.this, names, "DELETE"))
        return delete(self.spark, self.transaction, name, condition)

    def _merge(self, tree: exp.Merge) -> DataFrame:
        if tree.args.get("returning"):
            raise UnsupportedSQL("MERGE ... RETURNING is not supported")
        target = _table_name(tree.this, "MERGE INTO")
        target_alias = tree.this.alias or target
        using = tree.args.get("using")
        if isinstance(using, exp.Table):
            source_alias = using.alias or using.name
            plain = exp.Table(this=using.this.copy(), db=using.args.get("db"))
            source = self._query(exp.select("*").from_(plain))
        elif isinstance(using, exp.Subquery) and isinstance(using.this, exp.Query):
            source_alias = using.alias or "s"
            source = self._query(using.this)
        else:
            raise UnsupportedSQL("MERGE ... USING takes a table or a (subquery) AS alias")
        if name_key(source_alias) == name_key(target_alias):
            raise UnsupportedSQL("MERGE: give the source and the target different aliases")
        merger = merge(
            self.spark,
            self.transaction,
            target,
            source,
            _mere(tree.args["on"]),
            source_alias=source_alias,
            target_alias=target_alias,
        )
        whens = tree.args.get("whens")
        for when in whens.expressions if whens is not None else []:
            merge_clause(merger, when)
        metrics = merger.execute()
        inserted = metrics.num_target_rows_inserted
        updated = metrics.num_target_rows_updated
        deleted = metrics.num_target_rows_deleted
        return self._counts(
            count=inserted + updated + deleted, inserted=inserted, updated=updated, deleted=deleted
        )

    # --- ending --------------------------------------------------------------------------

    def commit(self) -> int | None:
        """Commit every statement's writes in one mere commit; the new version.

        None when the transaction wrote nothing (nothing is committed).
        """
        try:
            self.transaction.commit()
            return self.transaction.commit_version
        finally:
            self._close()

    def abort(self) -> None:
        """Discard every statement's writes and delete their data files. Idempotent."""
        try:
            self.transaction.abort()
        finally:
            self._close()

    def _close(self) -> None:
        for view in self._views:
            self.spark.catalog.dropTempView(view)
        self._views.clear()
        self._db.close()

    def __enter__(self) -> SparkTransaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        if exc_type is None:
            if self.transaction.status == "open":
                self.commit()
            else:
                self._close()
        else:
            self.abort()

    def __repr__(self) -> str:
        tx = self.transaction
        return f"<SparkTransaction read_version={tx.read_version} {tx.status}>"


# --- statement pieces ----------------------------------------------------------------------


def _parse(text: str) -> exp.Expression:
    if not isinstance(text, str) or not text.strip():
        raise SQLError("the SQL text holds no statement")
    trees = parse_trees(text, SPARK)
    if len(trees) != 1:
        raise SQLError(
            f"expected one statement in {short_text(text)!r}, found {len(trees)}",
            help="call tx.sql() once per statement",
        )
    return trees[0]


def _kind(tree: exp.Expression) -> str:
    """A statement's kind as a user wrote it: ``CREATE TABLE``, ``DROP``, ``SET`` ..."""
    if isinstance(tree, exp.Create | exp.Drop):
        kind = tree.args.get("kind")
        word = "CREATE" if isinstance(tree, exp.Create) else "DROP"
        return f"{word} {kind}" if kind else word
    if isinstance(tree, exp.Alter):
        return "ALTER TABLE"
    if isinstance(tree, exp.Command):
        return str(tree.this).upper()
    return tree.key.upper()


def _table_name(table: exp.Expression, what: str) -> str:
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise UnsupportedSQL(f"{what} needs a plain table name")
    if table.args.get("catalog") or table.args.get("db"):
        raise UnsupportedSQL(
            f"{what}: qualified table names are not supported ({table.sql(dialect=SPARK)})",
            help="a Spark SQL transaction writes the tables of its own database, by name",
        )
    return str(table.name)


def _names(table: exp.Table) -> set[str]:
    """The names a statement's columns may be qualified with: the table's and its alias."""
    return {name_key(table.name)} | ({name_key(table.alias)} if table.alias else set())


def _mere(node: exp.Expression) -> str:
    """An expression in the dialect of mere's expression engine.

    sqlglot reads Spark's ``CAST`` as ``TRY_CAST`` (its meaning without ANSI
    mode); Spark 4 is ANSI by default, where a failing CAST is an error, as in
    mere: it stays a CAST. An explicit ``TRY_CAST`` (``safe``) stays one, which
    mere's engine refuses.
    """

    def strict(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.TryCast) and not n.args.get("safe"):
            return exp.Cast(this=n.this, to=n.args["to"])
        return n

    return str(node.transform(strict, copy=True).sql(dialect=MERE))


def _shape(rows: DataFrame, schema: Any, columns: list[str] | None, table: str) -> DataFrame:
    """The INSERT's rows as the table's columns, by position (or by the column list).

    Values are cast to the column types as Spark's own INSERT does; columns
    the list leaves out are NULL.
    """
    by_key = {name_key(f.name): f.name for f in schema}
    if columns is None:
        columns = [f.name for f in schema]
    else:
        resolved = []
        for c in columns:
            if name_key(c) not in by_key:
                raise SchemaMismatch(f"table {table!r} has no column {c!r}")
            resolved.append(by_key[name_key(c)])
        if len({name_key(c) for c in resolved}) != len(resolved):
            raise InvalidExpression(f"INSERT into {table!r} names a column twice")
        columns = resolved
    given = rows.columns
    if len(given) != len(columns):
        raise SchemaMismatch(
            f"INSERT into {table!r} gives {len(given)} values per row for {len(columns)} columns"
        )
    source = dict(zip(columns, given, strict=True))
    out = []
    for f in schema:
        kind = spark_type(f.type)
        if f.name in source:
            out.append(rows[_quote(source[f.name])].cast(kind).alias(f.name))
        else:
            out.append(F.lit(None).cast(kind).alias(f.name))
    return rows.select(*out)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
