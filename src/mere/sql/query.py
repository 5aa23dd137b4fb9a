"""Running a query with DuckDB over a catalog's tables (and older versions of them).

The steps for one query: rewrite ``FOR SYSTEM_VERSION|SYSTEM_TIME AS OF``
references into relations of their own; ask DuckDB's parser which tables the
query names and that it is a query; register those tables (each time-travel
reference at its own version) as datasets; run it with DuckDB binding the
parameters. Names that are no table are left for DuckDB to report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from mere.data.external import data_file_location, data_file_name
from mere.errors import (
    CorruptDataFile,
    DataFileError,
    DataFileMissing,
    TableNotFound,
)
from mere.log.actions import AddFile, TableMeta
from mere.snapshot.state import DatabaseState
from mere.sql import engine
from mere.sql.catalog import Catalog
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.sql.script import (
    Statement,
    TimeTravel,
    quote_identifier,
    rewrite_time_travel,
    tokenize,
)
from mere.storage import ObjectStore

Params = Sequence[Any] | Mapping[str, Any] | None


@contextmanager
def connection(catalog: Catalog, text: str, travels: Sequence[TimeTravel] = ()) -> Iterator[Any]:
    """A DuckDB cursor on which every table ``text`` names is registered."""
    con = engine.cursor(catalog.store)
    try:
        register_tables(con, catalog, text, travels)
        yield con
    finally:
        con.close()


def register_tables(
    con: Any,
    catalog: Catalog,
    text: str,
    travels: Sequence[TimeTravel] = (),
    inline: list[tuple[str, str]] | None = None,
) -> list[tuple[TableMeta, Sequence[AddFile]]]:
    """Register the tables ``text`` names, as the catalog sees them and as of time travel;
    returns each table registered with its files.

    With ``inline``, views are collected there instead (see :func:`engine.register`).
    """
    registered: list[tuple[TableMeta, Sequence[AddFile]]] = []
    special = {t.relation for t in travels}
    for name in sorted(engine.table_names(con, text)):
        if name in special or name.startswith("__mere_"):
            continue
        relation = catalog.relation(name)
        if relation is not None:
            engine.register(con, name, catalog.store, relation.meta, relation.files, inline)
            registered.append((relation.meta, relation.files))
    states: dict[int, DatabaseState] = {}
    for travel in travels:
        history = catalog.history
        version = travel.version
        if travel.name is not None:
            version = history.version_named(travel.name)
        elif version is None:
            assert travel.timestamp_ms is not None
            version = history.version_at(travel.timestamp_ms)
        if version not in states:
            states[version] = history.state_at(version)
        table = states[version].table_by_name(travel.table)
        if table is None:
            raise TableNotFound(travel.table, version)
        files = list(table.files.values())
        engine.register(con, travel.relation, catalog.store, table.meta, files, inline)
        registered.append((table.meta, files))
    return registered


def run_query(catalog: Catalog, statement: Statement) -> pa.Table:
    """The rows of a query statement (SELECT, WITH, VALUES, FROM, TABLE, EXPLAIN).

    Raises:
        UnsupportedSQL: DuckDB parses the statement as something other than a query.
        SQLError: DuckDB cannot parse, bind or run it (its message is kept).
        TableNotFound: a time-travel reference names a table absent at that version.
        VersionNotFound: a time-travel reference names a version that does not exist.
    """
    text, travels = rewrite_time_travel(statement)
    con = engine.cursor(catalog.store)
    try:
        kind = engine.statement_type(con, text)
        if kind not in engine.QUERY_TYPES:
            raise UnsupportedSQL(f"{kind} statements are not supported as queries")
        inline: list[tuple[str, str]] | None = None
        if statement.tokens[0].text.upper() in engine.INLINE_STARTS:
            inline = []
        registered = register_tables(con, catalog, text, travels, inline)
        if inline:
            tokens = tokenize(text)
            # A table the query's own WITH also names (``WITH t AS (... FROM t)``):
            # as a view, under which the query's CTE reads it, not a second CTE.
            mine = engine.top_level_cte_names(tokens)
            for name, view in [v for v in inline if v[0].lower() in mine]:
                engine.execute(con, f"CREATE TEMP VIEW {quote_identifier(name)} AS {view}", None)
                inline.remove((name, view))
            text = engine.with_views(
                dataclasses.replace(statement, text=text, tokens=tokens), inline
            )
        try:
            return engine.run(con, text, statement.params)
        except SQLError as exc:
            damaged = _damaged_file(catalog.store, registered, str(exc))
            if damaged is None:
                raise
            raise damaged from exc
    finally:
        con.close()


def _damaged_file(
    store: ObjectStore, tables: Sequence[tuple[TableMeta, Sequence[AddFile]]], message: str
) -> DataFileError | None:
    """The error a scan raises for the data file DuckDB's ``message`` names, if it names one.

    DuckDB's reader and the pyarrow dataset name the file they failed to open
    or decode: it is missing (``DataFileMissing``) or damaged (``CorruptDataFile``).
    """
    for meta, files in tables:
        for add in files:
            if add.inline is not None:
                continue
            try:
                holder, key = data_file_location(store, meta, add)
            except DataFileMissing as missing:  # its store's root is gone
                if add.path in message:
                    return missing
                continue
            if key not in message:
                continue
            name = data_file_name(meta, add)
            if not holder.exists(key):
                return DataFileMissing.of(name, meta.name)
            return CorruptDataFile.of(name, meta.name, reason=message)
    return None


__all__ = ["connection", "register_tables", "run_query"]
