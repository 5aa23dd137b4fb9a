"""The ``mere`` command: inspect a mere database from the shell.

Every command takes the database URI first (a local path, ``file://`` URI or
``memory://name``) and opens it read-only in spirit: the CLI never creates a
database, so a mistyped path is reported rather than turned into a new one.

Output is a rich table for people, or JSON on stdout with ``--json`` (given
either before the command, ``mere --json tables URI``, or after it,
``mere tables URI --json``). Errors print one ``error: ...`` line on stderr
and exit with status 1; usage errors exit with status 2.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import click
import pyarrow as pa
from rich.console import Group
from rich.text import Text

from mere.cli import check as _check  # noqa: F401 (registers `mere check`)
from mere.cli import sql as _sql  # noqa: F401 (registers `mere sql`)
from mere.cli import verify as _verify  # noqa: F401 (registers `mere verify`)
from mere.cli.common import (  # noqa: F401 (re-exported for the command modules' users)
    CliError,
    F,
    IsoTimestamp,
    MereGroup,
    _iso,
    check_time_travel,
    cli,
    json_option,
    one_line,
    open_database,
    snapshot_options,
    take_snapshot,
    time_travel_options,
    wants_json,
)
from mere.cli.maintain import register as _register_maintenance
from mere.cli.output import (
    cell,
    console,
    emit_json,
    escape_controls,
    human_size,
    iter_row_values,
    iter_rows,
    key_values,
    make_table,
    plain_cell,
    short_time,
    tables_view,
    titled,
)

#: Rows ``scan`` shows by default when stdout is a terminal.
DEFAULT_TERMINAL_LIMIT = 20


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


# --- opening ---------------------------------------------------------------------


@cli.command(short_help="Show the latest version and when it was committed.")
@click.argument("uri")
@json_option
@click.pass_context
def version(ctx: click.Context, uri: str, as_json: bool) -> None:
    """Show the latest committed version of the database and when it was committed.

    JSON: {"version": N, "timestamp": ISO}.
    """
    with open_database(uri) as db:
        snap = db.snapshot()
    if wants_json(ctx, as_json):
        emit_json({"version": snap.version, "timestamp": _iso(snap.timestamp)})
        return
    out = console()
    out.print(Text.assemble(("version ", ""), (str(snap.version), "bold")))
    out.print(Text(f"committed {_iso(snap.timestamp)}", style="dim"))


@cli.command()
@click.argument("uri")
@snapshot_options
@json_option
@click.pass_context
def tables(
    ctx: click.Context,
    uri: str,
    at_version: int | str | None,
    at_timestamp: datetime | None,
    as_json: bool,
) -> None:
    """List the tables with their row count, file count and size.

    JSON: {"version": N, "timestamp": ISO, "tables": [{"name", "rows",
    "files", "size_bytes"}, ...]}, tables sorted by name.
    """
    check_time_travel(at_version, at_timestamp)
    with open_database(uri) as db:
        snap = take_snapshot(db, at_version, at_timestamp)
        entries = []
        for name in snap.tables():
            info = snap.table(name).describe()
            entries.append(
                {
                    "name": name,
                    "rows": info["rows"],
                    "files": info["files"],
                    "size_bytes": info["size_bytes"],
                }
            )
    if wants_json(ctx, as_json):
        emit_json({"version": snap.version, "timestamp": _iso(snap.timestamp), "tables": entries})
        return
    out = console()
    if not entries:
        out.print(f"no tables at version {snap.version}")
        return
    out.print(tables_view(entries, f"tables at version {snap.version}"))


@cli.command(short_help="Describe a table: schema, partitioning, properties, size.")
@click.argument("uri")
@click.argument("table_name", metavar="TABLE")
@snapshot_options
@json_option
@click.pass_context
def describe(
    ctx: click.Context,
    uri: str,
    table_name: str,
    at_version: int | str | None,
    at_timestamp: datetime | None,
    as_json: bool,
) -> None:
    """Describe a table: its schema, partition columns, properties, files, rows and size.

    JSON: {"name", "id", "version", "created", "schema": [{"name", "type",
    "nullable"}, ...], "partition_by": [...], "properties": {...}, "files",
    "rows", "size_bytes", "inlined_files", "inlined_bytes"}.
    """
    check_time_travel(at_version, at_timestamp)
    with open_database(uri) as db:
        info = take_snapshot(db, at_version, at_timestamp).table(table_name).describe()
    if wants_json(ctx, as_json):
        emit_json(info)
        return
    summary = key_values(
        [
            ("table", info["name"]),
            ("id", info["id"]),
            ("version", info["version"]),
            ("created", info["created"]),
            ("partitioned by", ", ".join(info["partition_by"]) or Text("-", style="dim")),
            ("files", f"{info['files']:,}"),
            ("rows", f"{info['rows']:,}"),
            ("size", f"{human_size(info['size_bytes'])} ({info['size_bytes']:,} bytes)"),
            (
                "inlined",
                f"{info['inlined_files']:,} files, {human_size(info['inlined_bytes'])} in the log",
            ),
        ]
    )
    schema = make_table(["column", "type", "nullable"])
    partition = set(info["partition_by"])
    for field in info["schema"]:
        name = Text(escape_controls(field["name"]))
        if field["name"] in partition:
            name.append(" (partition)", style="dim")
        kind = Text(escape_controls(field["type"]))  # nested field names are the user's
        schema.add_row(name, kind, "yes" if field["nullable"] else "no")
    parts: list[Any] = [summary, Text(), titled("schema", schema)]
    if info["properties"]:
        props = make_table(["property", "value"])
        for key, value in sorted(info["properties"].items()):
            props.add_row(Text(escape_controls(key)), Text(escape_controls(str(value))))
        parts += [Text(), titled("properties", props)]
    console().print(Group(*parts))


def _history_entry(entry: dict[str, Any]) -> dict[str, Any]:
    metrics = entry.get("metrics") or {}
    return {
        "version": entry["version"],
        "timestamp": entry["timestamp"],
        "operation": entry["operation"],
        "tables": list(metrics.get("tables", [])),
        "rows_added": int(metrics.get("numAddedRows", 0)),
        "rows_removed": int(metrics.get("numRemovedRows", 0)),
        "files_added": int(metrics.get("numAddedFiles", 0)),
        "files_removed": int(metrics.get("numRemovedFiles", 0)),
        "isolation": entry["isolation"],
        "read_version": entry["read_version"],
        "commit_id": entry["commit_id"],
        "parameters": entry["parameters"],
        "metrics": metrics,
    }


@cli.command()
@click.argument("uri")
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=2**63 - 1),
    default=None,
    metavar="N",
    help="Show only the newest N commits (default: all).",
)
@json_option
@click.pass_context
def history(ctx: click.Context, uri: str, limit: int | None, as_json: bool) -> None:
    """Show the commit history, newest first.

    Each commit: version, timestamp, operation, tables touched, rows added
    and removed, and isolation level.

    JSON: [{"version", "timestamp", "operation", "tables": [...],
    "rows_added", "rows_removed", "files_added", "files_removed",
    "isolation", "read_version", "commit_id", "parameters", "metrics"}, ...].
    """
    with open_database(uri) as db:
        entries = [_history_entry(e) for e in db.history(limit)]
    if wants_json(ctx, as_json):
        emit_json(entries)
        return
    table = make_table(
        ["version", "timestamp", "operation", "tables", "+rows", "-rows", "isolation"],
        right=("version", "+rows", "-rows"),
    )
    for e in entries:
        table.add_row(
            str(e["version"]),
            short_time(e["timestamp"]),
            Text(e["operation"]),
            Text(", ".join(e["tables"])) if e["tables"] else Text("-", style="dim"),
            f"{e['rows_added']:,}",
            f"{e['rows_removed']:,}",
            Text(e["isolation"]),
        )
    console().print(titled("history (UTC)", table))


def _parse_columns(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise click.BadParameter("name at least one column", param_hint="--columns")
    return names


@cli.command(short_help="Print the rows of a table (filter, columns, time travel).")
@click.argument("uri")
@click.argument("table_name", metavar="TABLE")
@click.option(
    "--columns",
    metavar="A,B,...",
    default=None,
    help="Only these columns, comma-separated, in this order (default: all).",
)
@click.option(
    "--filter",
    "filter_sql",
    metavar="SQL",
    default=None,
    help="Only rows matching this SQL boolean expression, e.g. \"amount > 10 AND country = 'FR'\".",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    metavar="N",
    help=f"Stop after N rows; 0 means no limit (default: {DEFAULT_TERMINAL_LIMIT} "
    "when stdout is a terminal, no limit otherwise).",
)
@snapshot_options
@json_option
@click.pass_context
def scan(
    ctx: click.Context,
    uri: str,
    table_name: str,
    columns: str | None,
    filter_sql: str | None,
    limit: int | None,
    at_version: int | str | None,
    at_timestamp: datetime | None,
    as_json: bool,
) -> None:
    """Print the rows of a table, optionally filtered, projected and as of a past version.

    On a terminal: one table of the first 20 rows (--limit). Otherwise (a
    pipe, a file): plain text printed as the rows are read, a title line, a
    header line, one line per row and a last line with the count; columns
    are separated by two spaces and aligned 1,000 rows at a time, control
    characters are escaped (\\n, \\x1b) and a null prints as null.

    JSON: JSON Lines, one object per row ({"column": value, ...}, columns in
    order), nothing for no rows. Dates, times and timestamps are ISO 8601
    strings, decimals exact strings, binary base64, NaN/Infinity strings.
    """
    check_time_travel(at_version, at_timestamp)
    names = _parse_columns(columns)
    if limit is None:
        limit = DEFAULT_TERMINAL_LIMIT if _stdout_is_terminal() else 0
    json_out = wants_json(ctx, as_json)
    with open_database(uri) as db:
        snap = take_snapshot(db, at_version, at_timestamp)
        reader = snap.table(table_name).scan_batches(names, filter_sql)
        with reader:
            if json_out:
                _scan_json(reader, limit)
            else:
                _scan_human(reader, limit, f"{table_name} at version {snap.version}")


#: Rows converted and printed at a time when output is streamed (piped human
#: output, and --json): memory stays bounded by this many rows.
STREAM_ROWS = 1000


def _batches(reader: pa.RecordBatchReader, limit: int) -> Iterator[pa.RecordBatch]:
    """The reader's rows in batches of at most STREAM_ROWS, cut to ``limit`` (0: all) plus one.

    The extra row tells that more match.
    """
    wanted = limit + 1 if limit else None
    for batch in reader:
        for start in range(0, batch.num_rows, STREAM_ROWS):
            if wanted is not None and wanted <= 0:
                return
            piece = batch.slice(start, STREAM_ROWS if wanted is None else min(STREAM_ROWS, wanted))
            if wanted is not None:
                wanted -= piece.num_rows
            yield piece


def _scan_json(reader: pa.RecordBatchReader, limit: int) -> None:
    emitted = 0
    for batch in _batches(reader, limit):
        for row in iter_rows(batch):
            if limit and emitted >= limit:
                return
            emit_json(row, lines=True)
            emitted += 1
        sys.stdout.flush()


def _caption(shown: int, more: bool) -> str:
    noun = "row" if shown == 1 else "rows"
    return f"first {shown} {noun}; more match" if more else f"{shown} {noun}"


def _scan_human(reader: pa.RecordBatchReader, limit: int, title: str) -> None:
    """The rows as one table on a terminal; streamed as plain text otherwise."""
    if not _stdout_is_terminal():
        _scan_plain(reader, limit, title)
        return
    table = make_table(reader.schema.names)
    shown = 0
    more = False
    for batch in _batches(reader, limit):
        for values in iter_row_values(batch):
            if limit and shown >= limit:
                more = True
                break
            table.add_row(*(cell(value) for value in values))
            shown += 1
    more_text = " (--limit 0 shows all)" if more else ""
    console().print(titled(title, table, _caption(shown, more) + more_text))


def _scan_plain(reader: pa.RecordBatchReader, limit: int, title: str) -> None:
    """Rows as plain text, printed as they are read: columns aligned per STREAM_ROWS rows.

    Columns are separated by two spaces, numbers right-aligned; a column only
    widens, so a wider value further down shifts the columns from there on.
    """
    names = [escape_controls(name) for name in reader.schema.names]
    right = [
        pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        for f in reader.schema
    ]
    widths = [len(name) for name in names]
    out = sys.stdout

    def line(texts: list[str]) -> str:
        padded = [
            text.rjust(width) if align else text.ljust(width)
            for text, width, align in zip(texts, widths, right, strict=True)
        ]
        return "  ".join(padded).rstrip() + "\n"

    out.write(title + "\n")
    shown = 0
    more = False
    header = True
    for batch in _batches(reader, limit):
        rows = []
        for values in iter_row_values(batch):
            if limit and shown >= limit:
                more = True
                break
            rows.append([plain_cell(value) for value in values])
            shown += 1
        for texts in rows:
            widths = [max(w, len(t)) for w, t in zip(widths, texts, strict=True)]
        if header:
            out.write(line(names))
            header = False
        out.write("".join(line(texts) for texts in rows))
        out.flush()
    if header:
        out.write(line(names))
    more_text = ": --limit 0 shows all" if more else ""
    out.write(f"({_caption(shown, more)}{more_text})\n")
    out.flush()


# --- entry point -------------------------------------------------------------------


def _quiet_broken_pipe(func: Callable[[], Any]) -> Callable[[], Any]:
    """Exit quietly when the reader of stdout goes away (``mere scan ... | head``)."""

    @functools.wraps(func)
    def wrapper() -> Any:
        try:
            return func()
        except BrokenPipeError:
            # Python would complain again when flushing stdout at exit.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)

    return wrapper


@_quiet_broken_pipe
def main() -> Any:
    """Run the ``mere`` command (the console-script entry point)."""
    return cli(prog_name="mere")


# --- maintenance and verification commands ---------------------------------------

_register_maintenance(cli)

if __name__ == "__main__":
    main()
