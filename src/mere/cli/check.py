"""``mere check URI``: verify a database, and with ``--repair`` repair what is safe to.

Prints one line per finding (``KIND key: what is wrong [what to do]``) and a
summary line, or with ``--json`` one JSON object. See
:mod:`mere.maintain.check` for what is checked and repaired.

Exit status: 0 when nothing was found, 1 when anything was found (even if
``--repair`` repaired it all: a repair loses rows, which someone should
know) or on an error, 2 on a usage error.
"""

from __future__ import annotations

import click

from mere.cli.common import cli, json_option, open_database, wants_json
from mere.cli.output import emit_json
from mere.maintain.check import summary


@click.command(short_help="Verify the log, checkpoints, data files and hints (--repair).")
@click.argument("uri")
@click.option(
    "--repair",
    is_flag=True,
    help="Repair what is safe to, forward: remove references to missing data files "
    "(a REPAIR commit), rewrite bad hints, write a checkpoint the latest version can use. "
    "Never deletes or overwrites a commit or checkpoint.",
)
@json_option
@click.pass_context
def check(ctx: click.Context, uri: str, repair: bool, as_json: bool) -> None:
    """Verify a database the way a careful operator would.

    Every commit decodes and the versions are contiguous (GAP), checkpoints
    agree with the log they summarise, every data file live at the latest
    version exists with its recorded size (an inlined one decodes), and the
    hints are sane. Each finding is one line: KIND key: message [repair].

    Kinds: GAP, NO_BASE, CORRUPT_COMMIT, INVALID_COMMIT, TIMESTAMP_ORDER,
    CORRUPT_CHECKPOINT, CHECKPOINT_MISMATCH, STRAY_CHECKPOINT, UNREADABLE,
    MISSING_FILE, WRONG_SIZE, CORRUPT_INLINED, BAD_HINT.

    Exit status 0 when clean, 1 when anything was found (repaired or not).

    JSON: {"uri", "clean", "oldest_version", "latest_version",
    "commits_checked", "checkpoints_checked", "files_checked",
    "repair_version", "findings": [{"kind", "key", "message", "version",
    "table", "repairable", "repaired", "repair"}, ...]}.
    """
    with open_database(uri) as db:
        result = db.check(repair=repair)
    if wants_json(ctx, as_json):
        emit_json(result.to_dict())
    else:
        for finding in result.findings:
            click.echo(finding.line())
        click.echo(summary(result))
    if not result.clean:
        ctx.exit(1)


cli.add_command(check)
