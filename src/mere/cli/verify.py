"""``mere verify URI``: run concurrent transactions against a fresh database and check them.

Unlike the other commands, verify writes: it creates a database at URI
(which must not hold one yet), runs the workload from several client
processes, and checks the recorded history against the log. See
:mod:`mere.verify`.

Exit status: 0 when no anomaly forbidden at ``--isolation`` was found, 3
when one was (the history is invalid), 1 on an error, 2 on a usage error.
"""

from __future__ import annotations

from typing import Any

import click

from mere.cli.common import CliError, cli, json_option, one_line, wants_json
from mere.cli.output import console, emit_json
from mere.errors import MereError
from mere.properties import MAX_INLINE_LIMIT
from mere.txn.conflicts import conflict_detection_disabled
from mere.verify.checker import ISOLATION_LEVELS
from mere.verify.client import FAULTS
from mere.verify.report import print_summary, write_json
from mere.verify.runner import (
    DEFAULT_TIME_LIMIT,
    DEFAULT_VERIFY_FLUSH_BYTES,
    MAX_RUN_SECONDS,
    RunConfig,
    run,
)
from mere.verify.workloads import WORKLOADS

#: Exit status of a run whose history holds an anomaly the isolation level forbids.
EXIT_INVALID = 3


def _faults(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """Parse ``--faults a,b,c`` (``all`` for every kind)."""
    if not value:
        return ()
    kinds = [part.strip() for part in value.split(",") if part.strip()]
    if kinds == ["all"]:
        return FAULTS
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        raise click.BadParameter(
            f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULTS)} or all"
        )
    return tuple(dict.fromkeys(kinds))


@click.command(short_help="Run concurrent transactions on a fresh database and check isolation.")
@click.argument("uri")
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default="list-append",
    show_default=True,
    help="list-append: read keys and append unique values; register: read, update and "
    "delete single-row keys; bank: transfers between accounts in two tables; upsert: "
    "register on keyed tables, writing with upserts (no key may ever appear twice).",
)
@click.option(
    "--processes", type=click.IntRange(1, 64), default=4, show_default=True, help="Clients."
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True, max=MAX_RUN_SECONDS),
    default=None,
    metavar="SECONDS",
    help="Run for this long (default 10 s unless --transactions is given).",
)
@click.option(
    "--transactions",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Run N transactions in total instead of for a duration.",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0, min_open=True, max=MAX_RUN_SECONDS),
    default=DEFAULT_TIME_LIMIT,
    show_default=True,
    metavar="SECONDS",
    help="With --transactions: fail if the clients have not finished after this long.",
)
@click.option("--keys", type=click.IntRange(1, 10_000), default=5, show_default=True)
@click.option("--tables", type=click.IntRange(1, 100), default=2, show_default=True)
@click.option(
    "--isolation",
    type=click.Choice(ISOLATION_LEVELS),
    default="serializable",
    show_default=True,
    help="The level transactions run at, and the one the history is judged by.",
)
@click.option(
    "--faults",
    callback=_faults,
    default="",
    metavar="LIST",
    help=f"Comma-separated faults to inject: {', '.join(FAULTS)} (or all). http puts a "
    "fault-injecting proxy in front of a cloud store's plain-http endpoint (an emulator); "
    "it is skipped on a local store and refused for an https endpoint.",
)
@click.option(
    "--inline-limit",
    type=click.IntRange(0, MAX_INLINE_LIMIT),
    default=0,
    show_default=True,
    metavar="BYTES",
    help="Inline data files of at most BYTES in their commit (the database property "
    "inlineLimit; 0: off). Checkpoints then come every 10 commits unless "
    "--checkpoint-interval says otherwise, so that inlined files are flushed during the run.",
)
@click.option(
    "--inline-flush-bytes",
    type=click.IntRange(min=0),
    default=DEFAULT_VERIFY_FLUSH_BYTES,
    show_default=True,
    metavar="BYTES",
    help="With --inline-limit: a checkpoint moves a table's inlined files to data files "
    "once they pass BYTES (the property inlineFlushBytes).",
)
@click.option(
    "--checkpoint-interval",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="A checkpoint every N commits (default 10 with --inline-limit, else the database's).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds every random choice.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the full JSON report to this file.",
)
@json_option
@click.pass_context
def verify(
    ctx: click.Context,
    uri: str,
    workload: str,
    processes: int,
    duration: float | None,
    transactions: int | None,
    time_limit: float,
    keys: int,
    tables: int,
    isolation: str,
    faults: tuple[str, ...],
    inline_limit: int,
    inline_flush_bytes: int,
    checkpoint_interval: int | None,
    seed: int,
    report_path: str | None,
    as_json: bool,
) -> None:
    """Check that concurrent transactions on URI are isolated as promised.

    Creates a database at URI (a local path, file://, s3://, az:// or gs://
    location that holds no database yet; memory:// is refused, as clients are
    separate processes; cloud credentials come from the environment),
    runs the workload from --processes clients, records every transaction,
    and checks the history against the log for lost and duplicated writes and
    the Adya anomalies G0, G1a, G1b, G1c, G-single and G2.

    \b
    Exit status: 0 valid, 3 an anomaly forbidden at --isolation was found,
    1 an error, 2 a usage error.
    """
    if duration is not None and transactions is not None:
        raise click.UsageError("give --duration or --transactions, not both")
    config = RunConfig(
        uri=uri,
        workload=workload,
        processes=processes,
        duration=duration,
        transactions=transactions,
        time_limit=time_limit,
        keys=keys,
        tables=tables,
        isolation=isolation,
        faults=faults,
        inline_limit=inline_limit,
        inline_flush_bytes=inline_flush_bytes,
        checkpoint_interval=checkpoint_interval,
        seed=seed,
        unsafe_disable_conflict_detection=conflict_detection_disabled(),
    )
    as_json = wants_json(ctx, as_json)

    def progress(message: str) -> None:
        if not as_json:
            click.echo(message, err=True)

    try:
        result = run(config, progress)
    except MereError as exc:
        raise CliError(one_line(str(exc))) from exc
    if report_path is not None:
        write_json(result, report_path)
    if as_json:
        emit_json(result.to_json())
    else:
        print_summary(result, console())
    ctx.exit(0 if result.valid else EXIT_INVALID)


def main(**kwargs: Any) -> Any:
    """Run ``verify`` as a program of its own (``python -m mere.verify``)."""
    return verify(prog_name="python -m mere.verify", **kwargs)


cli.add_command(verify)
