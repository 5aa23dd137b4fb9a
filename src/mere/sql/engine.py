"""DuckDB as the embedded query engine: one in-process database, a cursor per query.

Each query gets a fresh cursor (a connection of its own on a shared in-memory
DuckDB), on which the tables it names are registered as ``pyarrow`` datasets
of their live files (:mod:`mere.snapshot.dataset`). DuckDB pushes its column
selection and filters into those datasets, so only the needed columns are
read and files are skipped by partition values and statistics. Renamed
columns are renamed back in a view; DuckDB pushes through it.

The DuckDB database may not touch the file system (``enable_external_access``
is off: ``read_csv``, ``COPY``, ``ATTACH`` fail), except, for a local store,
the files under its root, nor pick up Python variables by name
(``python_enable_replacements`` is off).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import pyarrow as pa
from sqlglot.tokens import Token, TokenType

from mere.errors import MissingDependency
from mere.log.actions import AddFile, TableMeta
from mere.schema import physical_name
from mere.snapshot.dataset import has_renamed_columns, inlined_table, physical_dataset
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.sql.native import inlined_files, native_view
from mere.sql.script import Statement, quote_identifier, tokenize
from mere.storage.base import ObjectStore
from mere.storage.local import LocalStore

_LOCK = threading.Lock()
#: One DuckDB database per local store root (and one for every other store), by root;
#: (pid, connection): a forked child makes its own.
_ROOTS: dict[str | None, tuple[int, Any]] = {}
_NAMES = itertools.count()
#: DuckDB statement types a query may be.
QUERY_TYPES = ("SELECT", "EXPLAIN")
_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


def import_duckdb() -> ModuleType:
    """Import duckdb, or explain which extra installs it.

    Raises:
        MissingDependency: duckdb is not installed (an ImportError too).
    """
    try:
        import duckdb
    except ImportError:
        raise MissingDependency(
            "SQL needs the duckdb package: install mere[sql]", help="pip install 'mere[sql]'"
        ) from None
    return duckdb


def cursor(store: ObjectStore | None = None) -> Any:
    """A fresh DuckDB connection on a shared in-memory database of this process.

    For a :class:`LocalStore` the database may read files under the store's
    root (``allowed_directories``), and nothing else: DuckDB's own Parquet
    reader then reads the tables (:mod:`mere.sql.native`). Every other
    database may touch no file at all.
    """
    duckdb = import_duckdb()
    root = os.path.join(store.root, "") if isinstance(store, LocalStore) else None
    with _LOCK:
        found = _ROOTS.get(root)
        if found is None or found[0] != os.getpid():
            con = duckdb.connect(config={"python_enable_replacements": False})
            if root is not None:
                con.execute(f"SET allowed_directories = [{_string(root)}]")
            con.execute("SET enable_external_access = false")
            con.execute("SET parquet_metadata_cache = true")
            found = _ROOTS[root] = (os.getpid(), con)
        return found[1].cursor()


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def duckdb_errors() -> tuple[type[BaseException], ...]:
    return (import_duckdb().Error,)


def register(
    con: Any,
    name: str,
    store: ObjectStore,
    meta: TableMeta,
    files: Sequence[AddFile],
    inline: list[tuple[str, str]] | None = None,
) -> None:
    """Make the table visible to queries on ``con`` as ``name`` (with its own column names).

    A local table becomes a view over DuckDB's Parquet reader where that reads
    exactly what ``scan()`` reads (:func:`mere.sql.native.native_view`), its
    inlined files (if any) an Arrow table registered beside it;
    anything else a pyarrow dataset of its live files. With ``inline``, such a
    view is not created but appended to it as ``(name, query)``, for the caller
    to put in the statement (:func:`with_views`): a view would be bound twice.
    """
    meta = _readable_by_duckdb(meta)
    if isinstance(store, LocalStore):
        inlined = inlined_files(files)
        hidden = f"__mere_inlined_{next(_NAMES)}"
        view = native_view(store, meta, files, hidden)
        if view is not None and inlined:  # the inlined files' branch reads this table
            con.register(hidden, inlined_table(store, meta, inlined))
        if view is not None and inline is not None:
            inline.append((name, view))
            return
        if view is not None:
            execute(con, f"CREATE TEMP VIEW {quote_identifier(name)} AS {view}", None)
            return
    dataset = physical_dataset(store, meta, files)
    if not has_renamed_columns(meta):
        con.register(name, dataset)
        return
    hidden = f"__mere_scan_{next(_NAMES)}"
    con.register(hidden, dataset)
    columns = ", ".join(
        f"{quote_identifier(f.name if f.name in meta.partition_columns else physical_name(f))}"
        f" AS {quote_identifier(f.name)}"
        for f in meta.schema
    )
    con.execute(
        f"CREATE TEMP VIEW {quote_identifier(name)} AS "
        f"SELECT {columns} FROM {quote_identifier(hidden)}"
    )


def _readable_by_duckdb(meta: TableMeta) -> TableMeta:
    """``meta`` with the types DuckDB cannot take from Arrow replaced by ones that hold
    every value exactly (the dataset casts as it reads, and fails on a value that
    would change): see :func:`duckdb_readable_type`.

    Raises:
        UnsupportedSQL: a DECIMAL wider than DuckDB's 38 digits.
    """
    fields = [f.with_type(duckdb_readable_type(f.type, f.name, meta.name)) for f in meta.schema]
    if fields == list(meta.schema):
        return meta
    return dataclasses.replace(meta, schema=pa.schema(fields, metadata=meta.schema.metadata))


def duckdb_readable_type(t: pa.DataType, column: str, table: str) -> pa.DataType:
    """``t``, or the type DuckDB reads its values as, at any depth: a half float as a
    REAL, a 256-bit DECIMAL of at most 38 digits as a 128-bit one, a nanosecond
    duration as microseconds (DuckDB's INTERVAL; a value finer than that is an
    error when read, not truncated).

    Raises:
        UnsupportedSQL: a DECIMAL wider than DuckDB's 38 digits.
    """
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_duration(t) and t.unit == "ns":
        return pa.duration("us")
    if pa.types.is_decimal256(t):
        if t.precision > 38:
            raise UnsupportedSQL(
                f"column {column!r} of table {table!r} is DECIMAL({t.precision}, "
                f"{t.scale}): SQL holds at most 38 digits",
                help=f"read {table!r} with db.table({table!r}).scan(), whose "
                "filters take any DECIMAL",
            )
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(duckdb_readable_type(f.type, column, table)) for f in t])
    if pa.types.is_map(t):
        key = duckdb_readable_type(t.key_type, column, table)
        return pa.map_(
            key, t.item_field.with_type(duckdb_readable_type(t.item_type, column, table))
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field.with_type(duckdb_readable_type(t.value_type, column, table))
        if pa.types.is_list(t):
            return pa.list_(item)
        if pa.types.is_large_list(t):
            return pa.large_list(item)
        return pa.list_(item, t.list_size)
    return t


#: Statements :func:`with_views` can put common table expressions in front of.
INLINE_STARTS = ("SELECT", "WITH", "FROM", "(")


def with_views(statement: Statement, views: Sequence[tuple[str, str]]) -> str:
    """The query with ``views`` as ``NOT MATERIALIZED`` common table expressions in front.

    DuckDB inlines them as it inlines views (filters and projections reach
    the scans). ``statement`` must start with one of :data:`INLINE_STARTS`.
    """
    if not views:
        return statement.text
    ctes = ", ".join(f"{quote_identifier(n)} AS NOT MATERIALIZED ({q})" for n, q in views)
    tokens, text = statement.tokens, statement.text
    if tokens[0].text.upper() == "WITH":
        at = 1 if len(tokens) < 2 or tokens[1].text.upper() != "RECURSIVE" else 2
        cut = tokens[at].start if at < len(tokens) else len(text)
        return text[:cut] + ctes + ", " + text[cut:]
    return f"WITH {ctes} {text}"


def top_level_cte_names(tokens: Sequence[Token]) -> set[str]:
    """The names (lower case) a statement's leading ``WITH`` defines, at its top level."""
    if not tokens or tokens[0].text.upper() != "WITH":
        return set()
    names: set[str] = set()
    depth, expect_name = 0, True
    for tok in tokens[1:]:
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0:
            if tok.token_type == TokenType.COMMA:
                expect_name = True
            elif expect_name and tok.token_type in _NAME_TOKENS:
                names.add(tok.text.lower())
                expect_name = False
            elif tok.text.upper() in ("SELECT", "FROM", "VALUES", "TABLE"):
                break  # the query after the WITH clause
    return names


def statement_type(con: Any, text: str) -> str:
    """DuckDB's type of the one statement in ``text`` (``SELECT``, ``INSERT``, ...)."""
    try:
        parsed = con.extract_statements(text)
    except duckdb_errors() as exc:
        raise SQLError(f"{_message(exc)}") from exc
    if len(parsed) != 1:
        raise SQLError(f"expected one statement, found {len(parsed)}")
    return str(parsed[0].type.name)


def table_names(con: Any, text: str) -> set[str]:
    """The names a statement may refer to tables by.

    DuckDB's parser answers exactly (CTE names excluded) for most queries;
    where it cannot (it binds some joins), every identifier in the text is a
    candidate, which over-approximates: a name that is no table is skipped.
    """
    words = {t.text for t in tokenize(text) if t.token_type in _NAME_TOKENS}
    try:
        names = set(con.get_table_names(text))
    except duckdb_errors():
        return words
    # DuckDB leaves out the names of its catalog views (pg_tables, sqlite_master,
    # tables, ...): a mere table of such a name must still be registered over them.
    return names | {w for w in words if w.lower() in _catalog_views(con)}


_CATALOG_VIEWS: frozenset[str] | None = None


def _catalog_views(con: Any) -> frozenset[str]:
    """The names of DuckDB's built-in views (the same in every connection: read once)."""
    global _CATALOG_VIEWS
    if _CATALOG_VIEWS is None:
        rows = con.execute("SELECT view_name FROM duckdb_views() WHERE internal").fetchall()
        _CATALOG_VIEWS = frozenset(str(name).lower() for (name,) in rows)
    return _CATALOG_VIEWS


def run(con: Any, text: str, params: Sequence[Any] | Mapping[str, Any] | None) -> pa.Table:
    """Run a query on ``con`` with DuckDB binding ``params``; its rows as an Arrow table."""
    try:
        relation = con.sql(text, params=_params(params))
        if relation is None:
            return pa.table({})
        return relation.to_arrow_table()
    except duckdb_errors() as exc:
        raise SQLError(_message(exc)) from exc


def execute(con: Any, text: str, params: Sequence[Any] | Mapping[str, Any] | None) -> None:
    """Run a statement on ``con`` (DuckDB binds ``params``) for its effect."""
    try:
        con.execute(text, _params(params))
    except duckdb_errors() as exc:
        raise SQLError(_message(exc)) from exc


def _params(params: Sequence[Any] | Mapping[str, Any] | None) -> Any:
    if params is None:
        return None
    return dict(params) if isinstance(params, Mapping) else list(params)


def _message(exc: BaseException) -> str:
    return str(exc).strip()


__all__ = [
    "QUERY_TYPES",
    "cursor",
    "execute",
    "import_duckdb",
    "register",
    "run",
    "statement_type",
    "table_names",
]
