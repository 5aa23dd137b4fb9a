"""The CLI's maintenance commands: restore, compact, vacuum, expire, checkpoint, export, tags.

Unlike the inspection commands these write to the database (a commit, or
deletions of objects no retained version needs); like them, they never
create a database, print a rich summary for people or JSON with ``--json``,
and report errors as one ``error: ...`` line. Long operations draw a progress
bar on stderr when it is a terminal.

The commands are defined here and added to the ``mere`` group by
:func:`register` (called at the end of :mod:`mere.cli.main`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.text import Text

from mere.cli.common import (
    VersionOrName,
    check_time_travel,
    json_option,
    open_database,
    time_travel_options,
    wants_json,
)
from mere.cli.output import (
    console,
    emit_json,
    human_size,
    key_values,
    make_table,
    short_time,
    titled,
)
from mere.maintain.delta import export_delta
from mere.properties import parse_duration

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b?|b)?\s*\Z", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "ki": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "mi": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "gi": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
    "ti": 1024**4,
}


class Duration(click.ParamType):
    """A duration: ``3600`` (seconds), ``90s``, ``15m``, ``1h30m``, ``7d``, ``2w``."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ByteSize(click.ParamType):
    """A size in bytes: ``1048576``, ``512KiB``, ``128MiB``, ``1GB``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        match = _SIZE.match(str(value))
        if match is None:
            self.fail(f"{value!r} is not a size (examples: 1048576, 512KiB, 128MiB)", param, ctx)
        size = int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()])
        if size < 1:
            self.fail("a size must be at least 1 byte", param, ctx)
        return size


def _columns(text: str | None, option: str) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise click.BadParameter("name at least one column", param_hint=option)
    return names


def _report(ctx: click.Context, as_json: bool, payload: Any, line: str) -> None:
    """Print a command's one-line outcome, or ``payload`` as JSON (``--json``)."""
    if wants_json(ctx, as_json):
        emit_json(payload)
    else:
        console().print(line)


_time_travel = time_travel_options(
    version_help="Version N, or the version of the export or tag NAME.",
    timestamp_help="The newest version committed at or before this time "
    "(ISO 8601; UTC by default).",
)


# --- restore ----------------------------------------------------------------------


@click.command(short_help="Roll tables back to an older version, as a new commit.")
@click.argument("uri")
@_time_travel
@click.option(
    "--table",
    "tables",
    multiple=True,
    metavar="NAME",
    help="Restore only this table (repeatable; default: every table).",
)
@json_option
@click.pass_context
def restore(
    ctx: click.Context,
    uri: str,
    at_version: int | str | None,
    at_timestamp: datetime | None,
    tables: tuple[str, ...],
    as_json: bool,
) -> None:
    """Commit the state of the tables as of --version N or --timestamp ISO.

    One new commit makes the tables equal to that version: dropped tables
    come back, tables created since are dropped (when restoring every table).
    The versions in between stay in the history.

    JSON: {"restored_version", "version", "tables_restored", "tables_recreated",
    "tables_dropped", "files_added", "files_removed", "rows_added", "rows_removed"}.
    """
    check_time_travel(at_version, at_timestamp)
    if at_version is None and at_timestamp is None:
        raise click.UsageError("give --version N or --timestamp ISO")
    with open_database(uri) as db:
        if isinstance(at_version, str):
            at_version = db.snapshot(version=at_version).version
        result = db.restore(at_version, timestamp=at_timestamp, tables=list(tables) or None)
    if wants_json(ctx, as_json):
        emit_json(result.to_dict())
        return
    if not (result.tables_restored or result.tables_recreated or result.tables_dropped):
        console().print(
            f"nothing to restore: the tables already equal version {result.restored_version}"
        )
        return
    console().print(
        titled(
            f"restored version {result.restored_version} as version {result.version}",
            key_values(
                [
                    ("restored", ", ".join(result.tables_restored) or "-"),
                    ("re-created", ", ".join(result.tables_recreated) or "-"),
                    ("dropped", ", ".join(result.tables_dropped) or "-"),
                    ("files", f"+{result.files_added:,} -{result.files_removed:,}"),
                    ("rows", f"+{result.rows_added:,} -{result.rows_removed:,}"),
                ]
            ),
        )
    )


# --- compact -----------------------------------------------------------------------


@click.command(short_help="Bin-pack a table's small files (optionally sorted or z-ordered).")
@click.argument("uri")
@click.argument("table_name", metavar="TABLE")
@click.option(
    "--target-size",
    type=ByteSize(),
    default=None,
    metavar="SIZE",
    help="Pack files up to this size, e.g. 128MiB (default: the table's or database's).",
)
@click.option(
    "--where",
    "where",
    metavar="SQL",
    default=None,
    help="Only partitions matching this condition on partition columns.",
)
@click.option("--sort-by", metavar="A,B,...", default=None, help="Sort rows by these columns.")
@click.option("--zorder-by", metavar="A,B,...", default=None, help="Z-order rows by these columns.")
@json_option
@click.pass_context
def compact(
    ctx: click.Context,
    uri: str,
    table_name: str,
    target_size: int | None,
    where: str | None,
    sort_by: str | None,
    zorder_by: str | None,
    as_json: bool,
) -> None:
    """Rewrite a table's small files into files of the target size, in one commit.

    Concurrent appends are not affected. JSON: {"table", "read_version",
    "version", "files_removed", "files_added", "bytes_removed", "bytes_added",
    "rows", "partitions", "partitions_compacted"}.
    """
    sort = _columns(sort_by, "--sort-by")
    zorder = _columns(zorder_by, "--zorder-by")
    if sort and zorder:
        raise click.UsageError("give --sort-by or --zorder-by, not both")
    with open_database(uri) as db:
        result = db.table(table_name).compact(target_size, where, sort, zorder_by=zorder)
    if wants_json(ctx, as_json):
        emit_json(result.to_dict())
        return
    if result.version == result.read_version:
        console().print(f"nothing to compact in {result.table} at version {result.version}")
        return
    console().print(
        titled(
            f"compacted {result.table} as version {result.version}",
            key_values(
                [
                    ("files", f"{result.files_removed:,} -> {result.files_added:,}"),
                    (
                        "bytes",
                        f"{human_size(result.bytes_removed)} -> {human_size(result.bytes_added)}",
                    ),
                    ("rows", f"{result.rows:,}"),
                    (
                        "partitions",
                        f"{len(result.partitions_compacted):,} of {result.partitions:,}",
                    ),
                ]
            ),
        )
    )


# --- vacuum and expire ----------------------------------------------------------------


def _retention_options(default: str) -> Any:
    def decorate(func: Any) -> Any:
        func = click.option(
            "--force",
            is_flag=True,
            help="Allow a retention below the minimum (unsafe with long transactions).",
        )(func)
        func = click.option("--dry-run", is_flag=True, help="Only report what would be deleted.")(
            func
        )
        return click.option(
            "--retention",
            type=Duration(),
            default=default,
            show_default=True,
            metavar="DURATION",
            help="Keep what versions of this age still need (e.g. 7d, 12h, 3600).",
        )(func)

    return decorate


def _print_keys(title: str, keys: list[str]) -> None:
    out = console()
    out.print(Text(title, style="bold"))
    for key in keys:
        out.print(Text(f"  {key}"))


@click.command(short_help="Delete data files no retained version needs.")
@click.argument("uri")
@_retention_options("7d")
@json_option
@click.pass_context
def vacuum(
    ctx: click.Context,
    uri: str,
    retention: timedelta,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Delete data files that no version within the retention references.

    Also deletes the orphans of failed or killed transactions once older
    than the retention. A retention below the minimum (database property
    vacuumMinRetention, default 1h) is refused without --force.

    Files that live minimal or partial exports and tags share are kept
    until those are dropped (mere drop-export); the summary says how many,
    for which export (with --dry-run, which files).

    JSON: {"dry_run", "retention_seconds", "latest_version",
    "oldest_retained_version", "files_deleted", "bytes_deleted",
    "files_kept_young", "temp_files_deleted", "keys": [...],
    "kept_for_exports": {NAME: [keys]}, "files_kept_for_exports"}.
    """
    with open_database(uri) as db:
        result = db.vacuum(retention, dry_run=dry_run, force=force)
    if wants_json(ctx, as_json):
        emit_json(result.to_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    console().print(
        titled(
            f"vacuum {'(dry run) ' if dry_run else ''}keeping versions "
            f"{result.oldest_retained_version}..{result.latest_version}",
            key_values(
                [
                    (verb, f"{result.files_deleted:,} files ({human_size(result.bytes_deleted)})"),
                    ("kept (younger than retention)", f"{result.files_kept_young:,} files"),
                    *(
                        (f"kept for export {name}", f"{len(keys):,} files")
                        for name, keys in result.kept_for_exports.items()
                    ),
                    ("temporary files", f"{result.temp_files_deleted:,}"),
                ]
            ),
        )
    )
    if dry_run and result.keys:
        _print_keys("files that would be deleted", result.keys)
    if dry_run:
        for name, keys in result.kept_for_exports.items():
            _print_keys(f"files kept for export {name}", keys)


@click.command(short_help="Delete log entries older than the retention.")
@click.argument("uri")
@_retention_options("30d")
@json_option
@click.pass_context
def expire(
    ctx: click.Context,
    uri: str,
    retention: timedelta,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Delete commits and checkpoints that no version within the retention needs.

    A checkpoint is written at the oldest retained version first, so every
    retained version stays readable; older ones can no longer be read.

    Versions of live minimal or partial exports and tags stay readable (a
    checkpoint at each is kept, or written) until those are dropped.

    JSON: {"dry_run", "retention_seconds", "latest_version", "oldest_version",
    "checkpoint_written", "commits_deleted", "checkpoints_deleted", "keys": [...],
    "kept_for_exports": {NAME: [checkpoint keys]}, "export_checkpoints_written": [...]}.
    """
    with open_database(uri) as db:
        result = db.expire(retention, dry_run=dry_run, force=force)
    if wants_json(ctx, as_json):
        emit_json(result.to_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    console().print(
        titled(
            f"expire {'(dry run) ' if dry_run else ''}keeping versions "
            f"{result.oldest_version}..{result.latest_version}",
            key_values(
                [
                    (f"commits {verb}", f"{result.commits_deleted:,}"),
                    (f"checkpoints {verb}", f"{result.checkpoints_deleted:,}"),
                    (
                        "checkpoint written",
                        "-"
                        if result.checkpoint_written is None
                        else f"at version {result.checkpoint_written}",
                    ),
                    *(
                        (f"kept for export {name}", ", ".join(keys))
                        for name, keys in result.kept_for_exports.items()
                    ),
                ]
            ),
        )
    )


# --- checkpoint ----------------------------------------------------------------------------


@click.command(short_help="Write a checkpoint at the latest version.")
@click.argument("uri")
@json_option
@click.pass_context
def checkpoint(ctx: click.Context, uri: str, as_json: bool) -> None:
    """Write a checkpoint at the latest version (kept if one exists).

    JSON: {"version": N}.
    """
    with open_database(uri) as db:
        version = db.checkpoint()
    _report(ctx, as_json, {"version": version}, f"checkpoint at version {version}")


# --- export ----------------------------------------------------------------------------------


@click.command(short_help="Export tables to a new mere database or a Delta Lake table.")
@click.argument("uri")
@click.argument("target")
@_time_travel
@click.option(
    "--table",
    "tables",
    multiple=True,
    metavar="NAME",
    help="Export only this table (repeatable; default: every table). "
    "With --format delta, exactly one.",
)
@click.option(
    "--mode",
    type=click.Choice(["full", "partial", "minimal"]),
    default="full",
    show_default=True,
    help="full copies the data files; minimal references the source's (needs --name); "
    "partial references those the source had at --since and copies the rest.",
)
@click.option(
    "--name",
    "export_name",
    default=None,
    metavar="NAME",
    help="Record the export in the source under NAME (required for minimal and partial: "
    "the source keeps what it shares until `mere drop-export URI NAME`).",
)
@click.option(
    "--since",
    type=VersionOrName(),
    default=None,
    metavar="N|NAME",
    help="For --mode partial: files the source had at this version are shared.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mere", "delta"]),
    default="mere",
    show_default=True,
    help="A new mere database whose version 0 is the state, or a Delta Lake table.",
)
@json_option
@click.pass_context
def export(
    ctx: click.Context,
    uri: str,
    target: str,
    at_version: int | str | None,
    at_timestamp: datetime | None,
    tables: tuple[str, ...],
    mode: str,
    export_name: str | None,
    since: int | str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Export the database (or some tables) as of a version to TARGET.

    JSON (mere): {"target", "source_version", "mode", "tables", "files",
    "bytes", "rows", "name", "registered_version", "since", "files_copied",
    "files_referenced"}; (delta): {"target", "table", "source_version", "files",
    "files_rewritten", "bytes", "rows"}.
    """
    check_time_travel(at_version, at_timestamp)
    if fmt == "delta" and len(tables) != 1:
        raise click.UsageError("--format delta exports one table: give exactly one --table")
    if fmt == "delta" and (mode != "full" or export_name or since is not None):
        raise click.UsageError(
            "--format delta always copies the data files (--mode full, no --name or --since)"
        )
    with open_database(uri) as db:
        version = db.snapshot(version=at_version, timestamp=at_timestamp).version
        if fmt == "delta":
            payload = export_delta(db, tables[0], target, version=version).to_dict()
            title = f"exported {payload['table']} at version {version} as Delta Lake"
        else:
            payload = db.export(
                target,
                version=version,
                tables=list(tables) or None,
                mode="minimal" if mode == "minimal" else "partial" if mode == "partial" else "full",
                name=export_name,
                since=since,
            ).to_dict()
            title = f"exported version {version} as a new database"
            if export_name:
                title += f" ({mode} export {export_name!r})"
    if wants_json(ctx, as_json):
        emit_json(payload)
        return
    rows: list[tuple[str, Any]] = [
        ("target", payload["target"]),
        ("files", f"{payload['files']:,} ({human_size(payload['bytes'])})"),
        ("rows", f"{payload['rows']:,}"),
    ]
    if fmt == "mere" and mode != "full":
        rows.append(
            ("copied / shared", f"{payload['files_copied']:,} / {payload['files_referenced']:,}")
        )
    console().print(titled(title, key_values(rows)))


# --- named exports and tags ----------------------------------------------------------------


@click.command("exports", short_help="List the live named exports and tags.")
@click.argument("uri")
@json_option
@click.pass_context
def exports(ctx: click.Context, uri: str, as_json: bool) -> None:
    """List the named exports and tags the database keeps.

    JSON: [{"name", "version", "mode", "target", "tables", "since",
    "created_time", "keeps"}, ...].
    """
    with open_database(uri) as db:
        found = db.exports()
    if wants_json(ctx, as_json):
        emit_json([info.to_dict() for info in found])
        return
    if not found:
        console().print("no exports or tags")
        return
    table = make_table(
        ["name", "version", "mode", "target", "tables", "since", "created"], right=("version",)
    )
    for info in found:
        table.add_row(
            info.name,
            str(info.version),
            info.mode,
            info.target or "-",
            ", ".join(info.tables) if info.tables is not None else "(all)",
            "-" if info.since is None else str(info.since),
            short_time(datetime.fromtimestamp(info.created_time / 1000, UTC).isoformat()),
        )
    console().print(titled("exports and tags", table))


@click.command("drop-export", short_help="End a named export or tag.")
@click.argument("uri")
@click.argument("name")
@json_option
@click.pass_context
def drop_export(ctx: click.Context, uri: str, name: str, as_json: bool) -> None:
    """End the export (or tag) NAME: vacuum and expire may then reclaim what it kept.

    JSON: {"name", "version"} (the version that records the drop).
    """
    with open_database(uri) as db:
        version = db.drop_export(name)
    _report(
        ctx, as_json, {"name": name, "version": version}, f"dropped {name} as version {version}"
    )


@click.command("tag", short_help="Name a version and keep it from expiry and vacuum.")
@click.argument("uri")
@click.argument("name")
@click.option(
    "--version",
    "at_version",
    type=VersionOrName(),
    default=None,
    metavar="N|NAME",
    help="The version to tag, or the name of an export or tag (default: the latest).",
)
@json_option
@click.pass_context
def tag(
    ctx: click.Context, uri: str, name: str, at_version: int | str | None, as_json: bool
) -> None:
    """Tag a version as NAME: `--version NAME` reads it, and it stays readable until dropped.

    JSON: {"name", "version", "mode", "target", "tables", "since", "created_time", "keeps"}.
    """
    with open_database(uri) as db:
        info = db.tag(name, at_version)
    _report(ctx, as_json, info.to_dict(), f"tagged version {info.version} as {info.name}")


@click.command("drop-tag", short_help="Drop a tag.")
@click.argument("uri")
@click.argument("name")
@json_option
@click.pass_context
def drop_tag(ctx: click.Context, uri: str, name: str, as_json: bool) -> None:
    """Drop the tag NAME (an export is refused: use drop-export).

    JSON: {"name", "version"} (the version that records the drop).
    """
    with open_database(uri) as db:
        version = db.drop_tag(name)
    _report(
        ctx, as_json, {"name": name, "version": version}, f"dropped tag {name} as version {version}"
    )


COMMANDS: list[click.Command] = [
    restore,
    compact,
    vacuum,
    expire,
    checkpoint,
    export,
    exports,
    drop_export,
    tag,
    drop_tag,
]


def register(group: click.Group) -> None:
    """Add the maintenance commands to the ``mere`` click group."""
    for command in COMMANDS:
        group.add_command(command)
