"""What every ``mere`` command shares: the group, options, errors, opening a database.

The commands live in :mod:`mere.cli.main`, :mod:`mere.cli.maintain`,
:mod:`mere.cli.check` and :mod:`mere.cli.verify`; each imports this module,
never another command module.
"""

from __future__ import annotations

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

import mere
from mere.errors import DatabaseNotFound, MereError

F = TypeVar("F", bound=Callable[..., Any])

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


class VersionOrName(click.ParamType):
    """A version number, or the name of an export or tag (``q3-close``)."""

    name = "version"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", text):
            self.fail(
                f"{value!r} is neither a version number nor an export or tag name", param, ctx
            )
        return text


def time_travel_options(*, version_help: str, timestamp_help: str) -> Callable[[F], F]:
    """A decorator adding ``--version N|NAME`` and ``--timestamp ISO`` to a command."""

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
            type=VersionOrName(),
            default=None,
            metavar="N|NAME",
            help=version_help,
        )(func)

    return add


#: ``--version`` / ``--timestamp`` for the commands that read a snapshot.
snapshot_options = time_travel_options(
    version_help="Read the database as of version N, or the version of the export or tag "
    "NAME (default: the latest).",
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


def check_time_travel(version: int | str | None, timestamp: datetime | None) -> None:
    """Reject ``--version`` together with ``--timestamp`` (a usage error, before any I/O)."""
    if version is not None and timestamp is not None:
        raise click.UsageError("give --version or --timestamp, not both")


def take_snapshot(
    db: mere.Database, version: int | str | None, timestamp: datetime | None
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
    compact, vacuum, expire, checkpoint, export, check --repair), verify and
    sql (its statements) commit. Any command may refresh the latest-version
    hint (_log/_latest), as every reader of mere does.

    \b
    Output:
      a table for people (no colour when stdout is not a terminal), or
      with --json, JSON on stdout only (before or after the command:
      `mere --json tables URI` or `mere tables URI --json`).
    Time travel: tables, describe, scan and sql read an older version with
    --version N, --version NAME (an export or tag) or --timestamp ISO.
    Exit status: 0 on success, 1 on an error (one `error: ...` line on
    stderr), 2 on a usage error.
    """
