"""How ``mere sql`` prints: a query's rows, a statement's tag, the table listings.

People get rich tables and psql-style tags (``INSERT 2``, ``BEGIN``); with
``--json`` every row a statement returns is one JSON object per line and
nothing else is printed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
import pyarrow as pa
from rich.console import Group, RenderableType
from rich.text import Text

from mere.cli.output import (
    cell,
    console,
    emit_json,
    escape_controls,
    human_size,
    iter_row_values,
    iter_rows,
    make_table,
    tables_view,
    titled,
)

if TYPE_CHECKING:
    from mere.sql.script import Statement

#: Rows a result shows as a table (``--json`` prints every row).
MAX_SHOWN_ROWS = 1000


def tag(statement: Statement, result: pa.Table | None) -> str:
    """What a statement that returns no rows prints, psql style: ``INSERT 2``, ``BEGIN``."""
    keyword = statement.keyword
    if result is not None and "count" in result.column_names and result.num_rows == 1:
        row = result.to_pylist()[0]
        extra = [f"{k} {row[k]}" for k in ("inserted", "updated", "deleted") if k in row]
        return f"{keyword} {row['count']}" + (f" ({', '.join(extra)})" if extra else "")
    if keyword in ("CREATE", "DROP", "ALTER"):
        return f"{keyword} TABLE"
    return keyword


def rows_view(result: pa.Table) -> RenderableType:
    """A query's rows as a table (numbers right-aligned), at most MAX_SHOWN_ROWS of them."""
    numeric = [
        f.name
        for f in result.schema
        if pa.types.is_integer(f.type)
        or pa.types.is_floating(f.type)
        or pa.types.is_decimal(f.type)
    ]
    table = make_table(result.column_names, right=numeric)
    shown = result.slice(0, MAX_SHOWN_ROWS)
    for values in iter_row_values(shown):
        table.add_row(*(cell(value) for value in values))
    total = result.num_rows
    if total > shown.num_rows:
        caption = f"(first {shown.num_rows:,} of {total:,} rows; --json prints them all)"
    else:
        caption = f"({_count(total, 'row')})"
    return Group(table, Text(caption, style="dim"))


def show_result(statement: Statement, result: pa.Table | None, *, as_json: bool) -> None:
    """Print a statement's result: a query's rows, or its tag (JSON: rows only)."""
    if as_json:
        if result is not None:
            for row in iter_rows(result):
                emit_json(row, lines=True)
        return
    if statement.kind == "query" and result is not None:
        console().print(rows_view(result))
    else:
        click.echo(tag(statement, result))


def show_tables(infos: list[dict[str, Any]], where: str, *, as_json: bool) -> None:
    """``\\dt``: each table's name, rows, files and size (``where``: "at version 3")."""
    entries = []
    for info in infos:
        entries.append(
            {
                "name": info["name"],
                "rows": info["rows"],
                "files": info["files"],
                "size_bytes": info["size_bytes"],
            }
        )
    if as_json:
        for entry in entries:
            emit_json(entry, lines=True)
        return
    if not entries:
        click.echo(f"no tables {where}")
        return
    console().print(tables_view(entries, f"tables {where}"))


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def show_table(info: dict[str, Any], *, as_json: bool) -> None:
    """``\\d TABLE``: its columns, types and partitioning (``info``: ``describe()``'s dict)."""
    if as_json:
        emit_json(info, lines=True)
        return
    table = make_table(["column", "type", "nullable"])
    partition = set(info["partition_by"])
    for field in info["schema"]:
        column = Text(escape_controls(field["name"]))
        if field["name"] in partition:
            column.append(" (partition)", style="dim")
        kind = Text(escape_controls(field["type"]))  # nested field names are the user's
        table.add_row(column, kind, "yes" if field["nullable"] else "no")
    caption = (
        f"{_count(info['rows'], 'row')} in {_count(info['files'], 'file')}, "
        f"{human_size(info['size_bytes'])}"
    )
    if info["partition_by"]:
        caption += f"; partitioned by {', '.join(info['partition_by'])}"
    console().print(titled(f"table {info['name']}", table, caption))


__all__ = ["MAX_SHOWN_ROWS", "rows_view", "show_result", "show_table", "show_tables", "tag"]
