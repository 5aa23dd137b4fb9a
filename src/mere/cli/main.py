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
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import click
import pyarrow as pa
from rich.console import Group
from rich.text import Text

import mere
from mere.cli.output import (
    cell,
    console,
    emit_json,
    human_size,
    iter_rows,
    key_values,
    make_table,
    short_time,
    titled,
)
from mere.errors import DatabaseNotFound, MereError

F = TypeVar("F", bound=Callable[..., Any])

#: Rows ``scan`` shows by default when stdout is a terminal.
DEFAULT_TERMINAL_LIMIT = 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

_NOT_FOUND_HELP = "check the URI; the mere CLI never creates a database"


# --- errors ---------------------------------------------------------------------


class CliError(click.ClickException):
    """An expected failure: printed as one ``error: ...`` line on stderr, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr)


def one_line(message: str) -> str:
    """A message without terminal escape codes, its lines joined into one."""
    text = _ANSI.sub("", message)
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or "failed"


class MereGroup(click.Group):
    """A click group that turns mere's errors into one-line messages."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (MereError, NotImplementedError, pa.ArrowException) as exc:
            raise CliError(one_line(str(exc))) from exc


# --- shared options ------------------------------------------------------------


def json_option(func: F) -> F:
    """Add ``--json`` to a command (it can also be given on the ``mere`` group)."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print machine-readable JSON on stdout instead of a table.",
    )(func)


def time_travel_options(*, version_help: str, timestamp_help: str) -> Callable[[F], F]:
    """A decorator adding ``--version N`` and ``--timestamp ISO`` to a command."""

    def add(func: F) -> F:
        func = click.option(
            "--timestamp",
            "at_timestamp",
            type=IsoTimestamp(),
            default=None,
            metavar="ISO",
            help=timestamp_help,
        )(func)
        return click.option(
            "--version",
            "at_version",
            type=click.IntRange(min=0),
            default=None,
            metavar="N",
            help=version_help,
        )(func)

    return add


#: ``--version`` / ``--timestamp`` for the commands that read a snapshot.
snapshot_options = time_travel_options(
    version_help="Read the database as of version N (default: the latest).",
    timestamp_help="Read the newest version committed at or before this time "
    "(ISO 8601; UTC when no offset is given).",
)


class IsoTimestamp(click.ParamType):
    """An ISO 8601 date or date-time; naive values are taken as UTC."""

    name = "timestamp"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 timestamp", param, ctx)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def wants_json(ctx: click.Context, flag: bool) -> bool:
    """Whether JSON output was asked for, on the command or on the group."""
    root = ctx.find_root()
    return flag or bool(root.params.get("as_json"))


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


# --- opening ---------------------------------------------------------------------


def _missing_local_path(uri: str) -> str | None:
    """The ``file://`` URI of a local database path that does not exist, else None.

    Opening a local store creates its root directory, so the CLI checks first:
    a mistyped path must not leave an empty directory behind.
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        path = unquote(parsed.path)
    elif scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        path = uri
    else:
        return None
    absolute = Path(os.path.abspath(path))
    return None if absolute.exists() else absolute.as_uri()


@contextmanager
def open_database(uri: str) -> Iterator[mere.Database]:
    """Connect to an existing database (never create one) and close it afterwards."""
    missing = _missing_local_path(uri)
    if missing is not None:
        raise DatabaseNotFound(f"no mere database at {missing}", help=_NOT_FOUND_HELP)
    try:
        db = mere.connect(uri, create=False)
    except DatabaseNotFound as exc:
        raise DatabaseNotFound(str(exc.args[0]), help=_NOT_FOUND_HELP) from exc
    try:
        yield db
    finally:
        db.close()


def check_time_travel(version: int | None, timestamp: datetime | None) -> None:
    """Reject ``--version`` together with ``--timestamp`` (a usage error, before any I/O)."""
    if version is not None and timestamp is not None:
        raise click.UsageError("give --version or --timestamp, not both")


def take_snapshot(
    db: mere.Database, version: int | None, timestamp: datetime | None
) -> mere.Snapshot:
    """The snapshot that ``--version`` / ``--timestamp`` select (the latest if neither)."""
    check_time_travel(version, timestamp)
    return db.snapshot(version=version, timestamp=timestamp)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


# --- the group -----------------------------------------------------------------


@click.group(cls=MereGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print machine-readable JSON on stdout (same as --json on the command).",
)
@click.version_option(
    mere.__version__,
    "-V",
    "--version",
    prog_name="mere",
    help="Show the version of mere and exit.",
)
def cli(as_json: bool) -> None:
    """Inspect and maintain a mere database: versions, tables, history, rows, upkeep.

    URI is a local path, a file:// URI or a cloud URI (s3://, az://, gs://).
    The CLI never creates a database; only the maintenance commands (restore,
    compact, vacuum, expire, checkpoint, export) and verify write.

    \b
    Output:
      a table for people (no colour when stdout is not a terminal), or
      with --json, JSON on stdout only (before or after the command:
      `mere --json tables URI` or `mere tables URI --json`).
    Time travel: tables, describe and scan read an older version with
    --version N or --timestamp ISO.
    Exit status: 0 on success, 1 on an error (one `error: ...` line on
    stderr), 2 on a usage error.
    """


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
    at_version: int | None,
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
    table = make_table(["table", "rows", "files", "size"], right=("rows", "files", "size"))
    for entry in entries:
        table.add_row(
            Text(entry["name"]),
            f"{entry['rows']:,}",
            f"{entry['files']:,}",
            human_size(entry["size_bytes"]),
        )
    out.print(titled(f"tables at version {snap.version}", table))


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
    at_version: int | None,
    at_timestamp: datetime | None,
    as_json: bool,
) -> None:
    """Describe a table: its schema, partition columns, properties, files, rows and size.

    JSON: {"name", "id", "version", "created", "schema": [{"name", "type",
    "nullable"}, ...], "partition_by": [...], "properties": {...}, "files",
    "rows", "size_bytes"}.
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
        ]
    )
    schema = make_table(["column", "type", "nullable"])
    partition = set(info["partition_by"])
    for field in info["schema"]:
        name = Text(field["name"])
        if field["name"] in partition:
            name.append(" (partition)", style="dim")
        schema.add_row(name, Text(field["type"]), "yes" if field["nullable"] else "no")
    parts: list[Any] = [summary, Text(), titled("schema", schema)]
    if info["properties"]:
        props = make_table(["property", "value"])
        for key, value in sorted(info["properties"].items()):
            props.add_row(Text(key), Text(str(value)))
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
    type=click.IntRange(min=1),
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
    type=click.IntRange(min=0),
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
    at_version: int | None,
    at_timestamp: datetime | None,
    as_json: bool,
) -> None:
    """Print the rows of a table, optionally filtered, projected and as of a past version.

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


def _batches(reader: pa.RecordBatchReader, limit: int) -> Iterator[pa.RecordBatch]:
    """The reader's batches, cut to ``limit`` rows (0: all) plus one to detect more."""
    wanted = limit + 1 if limit else None
    for batch in reader:
        if wanted is not None:
            if wanted <= 0:
                return
            batch = batch.slice(0, wanted)
            wanted -= batch.num_rows
        yield batch


def _scan_json(reader: pa.RecordBatchReader, limit: int) -> None:
    emitted = 0
    for batch in _batches(reader, limit):
        for row in iter_rows(batch):
            if limit and emitted >= limit:
                return
            emit_json(row, lines=True)
            emitted += 1


def _scan_human(reader: pa.RecordBatchReader, limit: int, title: str) -> None:
    table = make_table(reader.schema.names)
    shown = 0
    more = False
    for batch in _batches(reader, limit):
        for row in iter_rows(batch):
            if limit and shown >= limit:
                more = True
                break
            table.add_row(*(cell(value) for value in row.values()))
            shown += 1
    noun = "row" if shown == 1 else "rows"
    caption = (
        f"first {shown} {noun}; more match (--limit 0 shows all)" if more else f"{shown} {noun}"
    )
    console().print(titled(title, table, caption))


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


# --- maintenance commands (mere.cli.maintain) ---------------------------------------

from mere.cli.maintain import register as _register_maintenance  # noqa: E402

_register_maintenance(cli)

import mere.cli.verify  # noqa: E402 -- registers `mere verify`

if __name__ == "__main__":
    main()
