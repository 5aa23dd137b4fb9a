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

from mere.errors import TableNotFound
from mere.snapshot.state import DatabaseState
from mere.sql import engine
from mere.sql.catalog import Catalog
from mere.sql.errors import UnsupportedSQL
from mere.sql.script import Statement, TimeTravel, rewrite_time_travel, tokenize

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
) -> None:
    """Register the tables ``text`` names, as the catalog sees them and as of time travel.

    With ``inline``, views are collected there instead (see :func:`engine.register`).
    """
    special = {t.relation for t in travels}
    for name in sorted(engine.table_names(con, text)):
        if name in special or name.startswith("__mere_"):
            continue
        relation = catalog.relation(name)
        if relation is not None:
            engine.register(con, name, catalog.store, relation.meta, relation.files, inline)
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
        engine.register(
            con, travel.relation, catalog.store, table.meta, list(table.files.values()), inline
        )


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
        register_tables(con, catalog, text, travels, inline)
        if inline:
            text = engine.with_views(
                dataclasses.replace(statement, text=text, tokens=tokenize(text)), inline
            )
        return engine.run(con, text, statement.params)
    finally:
        con.close()


__all__ = ["connection", "register_tables", "run_query"]
