r"""``mere sql URI``: a SQL shell on a database, and SQL scripts from the command line.

**Interactive** (no ``-c``/``-f`` and stdin is a terminal): statements end with
``;`` and may span lines. The prompt shows the state: ``mere=>`` ready,
``mere*>`` inside ``BEGIN``, ``mere->`` / ``mere*->`` while a statement goes
on over lines, ``mere@12=>`` in a read-only session at version 12. Backslash
commands at the start of a line: ``\dt`` lists tables, ``\d TABLE`` describes
one, ``\?`` helps, ``\q`` quits. A failing statement prints one ``error: ...``
line and the session goes on; inside a transaction only that statement is
undone (``Session(on_error="statement")``, like psql's
``ON_ERROR_ROLLBACK=interactive``), so the user decides between ``COMMIT`` and
``ROLLBACK``. Ctrl-C drops the input being typed; during a statement it
cancels it (a query as soon as DuckDB notices, which it does between pieces of
work: sometimes only at the end), and if it arrives outside the statement's own
undo an open transaction is rolled back, as a half-run statement cannot be
kept. Ctrl-D and ``\q`` leave, rolling back an open transaction and saying so.

**Scripts** (``-c TEXT``, ``-f FILE``, or stdin that is not a terminal) run
as ``db.sql`` does: statement by statement, each one's result printed; the
first error stops the script with exit status 1, and a transaction open then
(or left open at the end) is rolled back.

Line editing and history come from the standard library's ``readline`` (GNU
readline on Linux): no extra dependency, and the keys people know from psql and
sqlite3. History is kept in ``$MERE_SQL_HISTORY``, else
``$XDG_STATE_HOME/mere/sql_history`` (``~/.local/state/mere/sql_history``),
one entry per statement.

With ``--json`` every row a statement returns is printed as one JSON object
per line (JSON Lines, as ``mere scan --json``): a query's rows, and
``{"count": n}`` for INSERT, UPDATE and DELETE (MERGE adds ``inserted``,
``updated``, ``deleted``); other statements print nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
import pyarrow as pa

import mere
from mere.cli.common import (
    CliError,
    check_time_travel,
    cli,
    json_option,
    one_line,
    open_database,
    take_snapshot,
    time_travel_options,
    wants_json,
)
from mere.cli.sql_output import show_result, show_table, show_tables
from mere.errors import MereError

if TYPE_CHECKING:
    from mere.sql.script import Statement
    from mere.sql.session import Session

#: Statements the history file keeps.
HISTORY_LENGTH = 1000

HELP = r"""Statements end with ';' and may span lines. BEGIN ... COMMIT (or ROLLBACK)
makes one transaction; the prompt shows mere*> while it is open, and an error
inside it undoes only the failing statement.
  \dt          list the tables (rows, files, size)
  \d TABLE     describe a table: columns, types, partitioning
  \?           this help
  \q           quit (an open transaction is rolled back; so does Ctrl-D)
Ctrl-C clears the statement being typed."""


# --- what statements run on ------------------------------------------------------


class _Target:
    """Where the shell's statements run: the live database, or a read-only snapshot."""

    label = "mere"

    def run(self, statement: Statement) -> pa.Table | None:
        raise NotImplementedError

    def in_transaction(self) -> bool:
        return False

    def rollback(self) -> bool:
        """Roll back an open transaction; whether there was one."""
        return False

    def version(self) -> int:
        raise NotImplementedError

    def tables(self) -> list[str]:
        raise NotImplementedError

    def describe(self, name: str) -> dict[str, Any]:
        raise NotImplementedError


class _Live(_Target):
    """The latest version; statements write, BEGIN ... COMMIT makes a transaction."""

    def __init__(self, db: mere.Database, session: Session) -> None:
        self._db = db
        self._session = session

    def run(self, statement: Statement) -> pa.Table | None:
        return self._session.execute(statement.text)

    def in_transaction(self) -> bool:
        return self._session.transaction is not None

    def rollback(self) -> bool:
        if self._session.transaction is None:
            return False
        self._session.rollback()
        return True

    def version(self) -> int:
        return self._db.snapshot().version

    def tables(self) -> list[str]:
        tx = self._session.transaction
        return tx.tables() if tx is not None else self._db.tables()

    def describe(self, name: str) -> dict[str, Any]:
        tx = self._session.transaction  # a transaction sees its own changes
        if tx is not None:
            return tx.table(name).describe()
        return self._db.snapshot().table(name).describe()


class _ReadOnly(_Target):
    """One version (``--version`` / ``--timestamp``): queries only."""

    def __init__(self, snapshot: mere.Snapshot, how: str) -> None:
        self._snapshot = snapshot
        self._how = how
        self.label = f"mere@{snapshot.version}"

    def run(self, statement: Statement) -> pa.Table | None:
        if statement.kind != "query":
            from mere.sql.errors import UnsupportedSQL

            raise UnsupportedSQL(
                f"{statement.keyword}: this session is read-only at version "
                f"{self._snapshot.version} ({self._how})",
                help="leave out --version/--timestamp to change the database",
            )
        return self._snapshot.sql(statement.text)

    def version(self) -> int:
        return self._snapshot.version

    def tables(self) -> list[str]:
        return self._snapshot.tables()

    def describe(self, name: str) -> dict[str, Any]:
        return self._snapshot.table(name).describe()


# --- splitting input into statements --------------------------------------------


def statement_texts(text: str) -> list[str]:
    """The statements of ``text`` in order, without their ``;`` (SQL lexing, not text search).

    Raises:
        SQLError: the text cannot be tokenized (an unterminated string or comment).
    """
    from sqlglot.tokens import TokenType

    from mere.sql.script import tokenize

    pieces: list[str] = []
    start: int | None = None
    end = 0
    for token in tokenize(text):
        if token.token_type == TokenType.SEMICOLON:
            if start is not None:
                pieces.append(text[start:end])
            start = None
        else:
            if start is None:
                start = token.start
            end = token.end + 1
    if start is not None:
        pieces.append(text[start:end])
    return pieces


def is_complete(text: str) -> bool:
    """Whether typed ``text`` ends a statement: its last token is a ``;`` outside quotes."""
    from sqlglot.tokens import TokenType

    from mere.sql.errors import SQLError
    from mere.sql.script import tokenize

    try:
        tokens = tokenize(text)
    except SQLError:  # an open string or comment: the statement goes on
        return False
    return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON


# --- running ----------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, MereError | NotImplementedError | pa.ArrowException):
        return one_line(str(exc))
    return one_line(f"{type(exc).__name__}: {exc} (unexpected: please report it)")


def _print_error_text(exc: BaseException) -> str:
    """An error met printing a statement's result (the statement itself ran)."""
    return f"the statement ran but its result could not be printed: {_error_text(exc)}"


def _parse(text: str) -> Statement:
    from mere.sql.script import split_script

    (statement,) = split_script(text)
    return statement


def run_script(target: _Target, text: str, *, as_json: bool) -> None:
    """Run a script statement by statement; raise CliError at the first failure.

    A transaction open when a statement fails, or still open when the script
    ends, is rolled back (as ``db.sql`` does).
    """
    try:
        for piece in statement_texts(text):
            was_open = target.in_transaction()
            try:
                statement = _parse(piece)
                result = target.run(statement)
            except Exception as exc:
                rolled_back = target.rollback() or (was_open and not target.in_transaction())
                note = "; the transaction was rolled back" if rolled_back else ""
                raise CliError(_error_text(exc) + note) from exc
            try:
                show_result(statement, result, as_json=as_json)
            except BrokenPipeError:
                raise
            except Exception as exc:
                rolled_back = target.rollback()
                note = "; the transaction was rolled back" if rolled_back else ""
                raise CliError(_print_error_text(exc) + note) from exc
    finally:
        open_at_end = target.rollback()
    if open_at_end:
        raise CliError(
            "the script ended inside a transaction (BEGIN without COMMIT or ROLLBACK); "
            "it was rolled back and nothing of it was committed"
        )


def _say_error(message: str) -> None:
    click.echo(f"error: {message}", err=True)


class _Interrupts:
    """Whether Ctrl-C was pressed while a statement ran.

    DuckDB turns the KeyboardInterrupt raised inside a query into an error of
    its own, so the shell notes the signal itself to tell a cancellation from
    a failure.
    """

    def __init__(self) -> None:
        self.seen = False

    @contextmanager
    def watching(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def note(signum: int, frame: Any) -> None:
            self.seen = True
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, note)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def run_typed(target: _Target, text: str, *, as_json: bool) -> None:
    """Run what was typed at the prompt; an error is reported and the session goes on."""
    try:
        pieces = statement_texts(text)
    except MereError as exc:
        _say_error(_error_text(exc))
        return
    for i, piece in enumerate(pieces):
        was_open = target.in_transaction()
        interrupts = _Interrupts()
        try:
            with interrupts.watching():
                statement = _parse(piece)
                result = target.run(statement)
        except KeyboardInterrupt:
            # Raised outside a statement's savepoint handling: what it staged
            # may be half there, so an open transaction cannot be kept.
            if target.rollback():
                _say_error("cancelled; the open transaction was rolled back")
            else:
                _say_error(
                    "cancelled (had it begun committing, `mere history` shows whether it landed)"
                )
            return
        except Exception as exc:
            if was_open and target.in_transaction():
                note = " (only this statement was undone; the transaction is still open)"
            elif was_open:
                note = " (the transaction was rolled back)"
            else:
                note = ""
            skipped = len(pieces) - i - 1
            if skipped:
                note += f" ({skipped} more statement{'s' if skipped > 1 else ''} not run)"
            message = "cancelled" if interrupts.seen else _error_text(exc)
            _say_error(message + note)
            return
        try:
            show_result(statement, result, as_json=as_json)
        except BrokenPipeError:
            raise
        except Exception as exc:
            # The statement ran (and stays done: an open transaction stays open).
            skipped = len(pieces) - i - 1
            note = f" ({skipped} more statement{'s' if skipped > 1 else ''} not run)"
            _say_error(_print_error_text(exc) + (note if skipped else ""))
            return


# --- the interactive loop -----------------------------------------------------------


def history_path() -> Path:
    """Where the shell keeps its history: ``$MERE_SQL_HISTORY`` or the XDG state directory."""
    explicit = os.environ.get("MERE_SQL_HISTORY")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.join("~", ".local", "state")
    return Path(state).expanduser() / "mere" / "sql_history"


@contextmanager
def _history() -> Iterator[Callable[[str], None]]:
    """Line editing with readline and a history file; yields a function adding an entry."""
    try:
        import readline
    except ImportError:  # no readline (e.g. Windows): plain input, no history
        yield lambda entry: None
        return
    path = history_path()
    readline.set_auto_history(False)  # one entry per statement, not per line
    readline.set_history_length(HISTORY_LENGTH)
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    try:
        yield readline.add_history
    finally:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            readline.write_history_file(path)
        except OSError:  # a read-only home must not break leaving the shell
            pass


def _history_entry(lines: list[str]) -> list[str]:
    """A typed statement as history entries: one line, unless a ``--`` comment needs its lines."""
    if any("--" in line for line in lines):
        return lines
    return [" ".join(line.strip() for line in lines if line.strip())]


def _meta(target: _Target, command: str, as_json: bool) -> bool:
    """Run a backslash command; False when it asks to quit."""
    name, _, argument = command.partition(" ")
    argument = argument.strip()
    if name == "\\q":
        return False
    if name == "\\?":
        click.echo(HELP)
    elif name == "\\dt" or (name == "\\d" and not argument):
        where = (
            "in this transaction" if target.in_transaction() else f"at version {target.version()}"
        )
        show_tables([target.describe(t) for t in target.tables()], where, as_json=as_json)
    elif name == "\\d":
        show_table(target.describe(argument), as_json=as_json)
    else:
        _say_error(f"unknown command {name}; \\? lists the commands")
    return True


def interact(target: _Target, uri: str, *, as_json: bool) -> None:
    """Read statements at a prompt until ``\\q`` or end of input."""
    read_only = " (read-only)" if isinstance(target, _ReadOnly) else ""
    click.echo(
        f"mere {mere.__version__} SQL on {uri} at version {target.version()}{read_only}. "
        "End statements with ';'. \\? for help, \\q to quit."
    )
    lines: list[str] = []
    with _history() as remember:
        try:
            while True:
                open_mark = "*" if target.in_transaction() else ""
                mark = f"{open_mark}-" if lines else (open_mark or "=")
                prompt = f"{target.label}{mark}> "
                try:
                    line = input(prompt)
                except KeyboardInterrupt:
                    click.echo("")
                    lines.clear()
                    continue
                except EOFError:
                    click.echo("")
                    break
                if not lines and line.strip().startswith("\\"):
                    remember(line.strip())
                    try:
                        if not _meta(target, line.strip(), as_json):
                            break
                    except Exception as exc:
                        _say_error(_error_text(exc))
                    continue
                if not lines and not line.strip():
                    continue
                lines.append(line)
                text = "\n".join(lines)
                if not is_complete(text):
                    continue
                for entry in _history_entry(lines):
                    remember(entry)
                lines.clear()
                run_typed(target, text, as_json=as_json)
        finally:
            if target.rollback():
                click.echo("the open transaction was rolled back (nothing of it was committed)")


# --- the command ------------------------------------------------------------------


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _utf8(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8, or a CliError naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{where} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from exc


def _script_text(command: str | None, script: IO[bytes] | None) -> str:
    """The SQL of ``-c``, ``-f`` or stdin, as UTF-8 text (a CliError if it is not)."""
    if command is not None:
        # Arguments that are not UTF-8 arrive with their bytes as lone surrogates.
        try:
            data = command.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise CliError(f"-c SQL is not valid UTF-8 (character {exc.start})") from exc
        return _utf8(data, "-c SQL")
    if script is not None:
        return _utf8(script.read(), str(script.name))
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None:
        raise CliError("no SQL to run: stdin is closed (give -c SQL or -f FILE)")
    return _utf8(stdin.read(), "the SQL read from stdin")


@cli.command(short_help="Run SQL: an interactive shell, -c TEXT or -f FILE.")
@click.argument("uri")
@click.option("-c", "--command", "command", metavar="SQL", default=None, help="Run SQL and exit.")
@click.option(
    "-f",
    "--file",
    "script",
    type=click.File("rb"),
    default=None,
    metavar="FILE",
    help="Run the SQL script in FILE ('-' for stdin) and exit.",
)
@time_travel_options(
    version_help="A read-only session at version N, or at the version of the export or "
    "tag NAME: queries only, every one reading that version.",
    timestamp_help="A read-only session at the newest version committed at or before "
    "this time (ISO 8601; UTC when no offset is given).",
)
@json_option
@click.pass_context
def sql(
    ctx: click.Context,
    uri: str,
    command: str | None,
    script: IO[bytes] | None,
    at_version: int | str | None,
    at_timestamp: datetime | None,
    as_json: bool,
) -> None:
    """Run SQL on the database at URI: a shell, or a script with -c / -f.

    Without -c or -f, and with stdin a terminal, an interactive shell: end
    statements with ';'; BEGIN ... COMMIT makes one transaction (the prompt
    shows mere*> then) and an error inside it undoes only that statement;
    \\dt lists tables, \\d TABLE describes one, \\? helps, \\q or Ctrl-D
    quits (rolling back an open transaction). History is kept in
    $XDG_STATE_HOME/mere/sql_history (or $MERE_SQL_HISTORY).

    With -c SQL, -f FILE or stdin from a pipe, the statements run one by one
    as db.sql runs them; the first error stops with exit status 1 and rolls
    back an open transaction, as does a script ending inside BEGIN.

    --version N / --timestamp T: a read-only session at that version
    (statements that write are refused). JSON: every row a statement returns
    as a JSON object per line (a query's rows; {"count": n} for INSERT,
    UPDATE, DELETE and MERGE); other statements print nothing.
    """
    check_time_travel(at_version, at_timestamp)
    if command is not None and script is not None:
        raise click.UsageError("give -c or -f, not both")
    json_out = wants_json(ctx, as_json)
    interactive = command is None and script is None and _stdin_is_terminal()
    with open_database(uri) as db:
        target: _Target
        if at_version is not None or at_timestamp is not None:
            snap = take_snapshot(db, at_version, at_timestamp)
            how = f"--version {at_version}" if at_version is not None else "--timestamp"
            target = _ReadOnly(snap, how)
        else:
            from mere.sql.session import Session

            session = Session(db, on_error="statement" if interactive else "transaction")
            target = _Live(db, session)
        if interactive:
            interact(target, uri, as_json=json_out)
            return
        run_script(target, _script_text(command, script), as_json=json_out)
