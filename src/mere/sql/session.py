"""Scripts: statements one after another, autocommitted or inside BEGIN ... COMMIT.

A :class:`Session` runs a script statement by statement. Outside a
transaction block each statement is a transaction of its own (a query reads
the latest version). ``BEGIN`` opens a mere transaction that every statement
up to ``COMMIT`` or ``ROLLBACK`` runs in; its queries see its own writes.
Each statement is atomic: one that fails changes nothing. Inside a block, a
failure also rolls the whole transaction back and stops the script, as
``psql -v ON_ERROR_STOP=1 -1`` does. ``SAVEPOINT``, ``ROLLBACK TO SAVEPOINT``
and ``RELEASE`` map to the transaction's savepoints, which stay open across
statements (and across calls of :meth:`Session.execute`).

An interactive shell wants a mistake inside ``BEGIN`` to cost only the
mistaken statement, as psql's ``ON_ERROR_ROLLBACK=interactive`` does:
``Session(db, on_error="statement")`` keeps the transaction open after a
failing statement (the statement itself is undone; the caller decides).

A session can also run inside a transaction the caller owns
(:meth:`Session.inside`, what ``tx.sql`` uses): there ``BEGIN``, ``COMMIT`` and
``ROLLBACK`` are refused, a failing statement leaves the transaction as it was
before that statement (the caller decides what to do), and savepoints the
script leaves open are released when it ends.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from mere.errors import InvalidArgument
from mere.names import name_key
from mere.sql.catalog import History, SnapshotCatalog, TransactionCatalog, history_of
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.sql.query import run_query
from mere.sql.script import Params, Statement, split_script
from mere.sql.statements import run_command
from mere.txn.context import DatabaseContext, run_statement
from mere.txn.transaction import Isolation, Transaction

#: ``BEGIN ... ISOLATION LEVEL x``: mere's level for each SQL level. The levels
#: below snapshot isolation get snapshot isolation (a stronger level, as the SQL
#: standard allows).
ISOLATION_LEVELS: dict[str, Isolation] = {
    "SERIALIZABLE": "serializable",
    "WRITE SERIALIZABLE": "write_serializable",
    "WRITE_SERIALIZABLE": "write_serializable",
    "SNAPSHOT": "snapshot",
    "REPEATABLE READ": "snapshot",
    "READ COMMITTED": "snapshot",
    "READ UNCOMMITTED": "snapshot",
}


class _Rollback(Exception):
    """Thrown into a savepoint's block to roll it back."""


@dataclass
class _Savepoint:
    name: str
    block: AbstractContextManager[Any]

    def release(self) -> None:
        self.block.__exit__(None, None, None)

    def rollback(self) -> None:
        signal = _Rollback()
        self.block.__exit__(_Rollback, signal, None)


class Session:
    """A SQL session on a database: runs scripts, keeps an open transaction between them."""

    def __init__(
        self,
        db: DatabaseContext,
        *,
        transaction: Transaction | None = None,
        on_error: Literal["transaction", "statement"] = "transaction",
    ) -> None:
        """A session on ``db``.

        Args:
            transaction: run in this transaction (see :meth:`inside`).
            on_error: what a failing statement inside ``BEGIN`` rolls back:
                the whole transaction (``"transaction"``, for scripts), or only
                itself, leaving the transaction open (``"statement"``, for
                interactive shells). A failed ``COMMIT`` always ends the transaction.
        """
        if on_error not in ("transaction", "statement"):
            raise InvalidArgument(
                f"on_error must be 'transaction' or 'statement', not {on_error!r}"
            )
        self._db = db
        self._tx = transaction
        self._owned = transaction is None  # BEGIN/COMMIT/ROLLBACK are ours to run
        self._keep_on_error = on_error == "statement"
        self._savepoints: list[_Savepoint] = []

    @classmethod
    def inside(cls, tx: Transaction) -> Session:
        """A session whose statements run in ``tx``, which the caller commits."""
        return cls(_NoDatabase(), transaction=tx)

    @property
    def transaction(self) -> Transaction | None:
        """The open transaction (after BEGIN), or None."""
        return self._tx

    def execute(self, text: str, params: Params = None) -> pa.Table | None:
        """Run every statement of ``text``; return the last one's result.

        A query returns its rows; INSERT, UPDATE, DELETE and MERGE a one-row
        table with ``count``; other statements None.

        Raises:
            SQLError, UnsupportedSQL: a statement cannot be run (nothing of it applied).
            Any error of mere's verbs (ConstraintViolation, TableNotFound, conflicts).
        """
        result = None
        for statement in split_script(text, params):
            try:
                result = self._run(statement)
            except Exception:
                if self._owned and self._tx is not None:
                    if not (self._keep_on_error and self._tx.status == "open"):
                        self.rollback()
                elif not self._owned:
                    self._release_all()
                raise
        if not self._owned:
            self._release_all()
        return result

    def rollback(self) -> None:
        """Roll back the open transaction (if any) and every savepoint in it."""
        tx = self._tx
        if tx is None:
            return
        while self._savepoints:
            self._savepoints.pop().rollback()
        if self._owned:
            self._tx = None
            tx.abort()

    close = rollback

    # --- statements -------------------------------------------------------------------

    def _run(self, statement: Statement) -> pa.Table | None:
        if statement.kind == "transaction":
            self._control(statement)
            return None
        tx = self._tx
        if statement.kind == "query":
            if tx is not None:
                return run_query(TransactionCatalog(tx, self._history_of(tx)), statement)
            state = self._db.latest_state()
            history = history_of(self._db.store, state, self._db.state_at)
            return run_query(SnapshotCatalog(self._db.store, state, history), statement)
        if tx is not None:
            with tx.savepoint():
                return run_command(tx, TransactionCatalog(tx, self._history_of(tx)), statement)
        own = self._db.begin()
        catalog = TransactionCatalog(own, self._history_of(own))
        return run_statement(own, lambda _: run_command(own, catalog, statement), autocommit=True)

    def _history_of(self, tx: Transaction) -> History:
        states = None if isinstance(self._db, _NoDatabase) else self._db.state_at
        return history_of(tx.store, tx.read_state, states)

    def _control(self, statement: Statement) -> None:
        words = statement.words()
        first = words[0]
        if first in ("BEGIN", "START"):
            self._begin(words)
        elif first in ("COMMIT", "END"):
            _expect_only(words[1:], "COMMIT")
            self._commit()
        elif first in ("ROLLBACK", "ABORT"):
            rest = words[1:]
            if rest and rest[0] in ("TRANSACTION", "WORK"):
                rest = rest[1:]
            if rest and rest[0] == "TO":
                rest = rest[1:]
                if rest and rest[0] == "SAVEPOINT":
                    rest = rest[1:]
                self._rollback_to(_savepoint_name(statement, rest))
            else:
                _expect_only(rest, "ROLLBACK")
                self._require_owned("ROLLBACK")
                if self._tx is None:
                    raise SQLError("ROLLBACK: there is no transaction in progress")
                self.rollback()
        elif first == "SAVEPOINT":
            self._savepoint(_savepoint_name(statement, words[1:]))
        elif first == "RELEASE":
            rest = words[1:]
            if rest and rest[0] == "SAVEPOINT":
                rest = rest[1:]
            self._release(_savepoint_name(statement, rest))

    def _require_owned(self, what: str) -> None:
        if not self._owned:
            raise UnsupportedSQL(
                f"{what} inside tx.sql(): the transaction is the caller's",
                help="use tx.commit() / tx.abort(), or db.sql() for BEGIN ... COMMIT scripts",
            )

    def _begin(self, words: list[str]) -> None:
        self._require_owned("BEGIN")
        if self._tx is not None:
            raise SQLError("BEGIN: a transaction is already in progress")
        rest = words[1:]
        if rest and rest[0] in ("TRANSACTION", "WORK"):
            rest = rest[1:]
        elif words[0] == "START":
            raise SQLError("expected START TRANSACTION")
        isolation: Isolation | None = None
        if rest[:2] == ["ISOLATION", "LEVEL"]:
            level = " ".join(rest[2:])
            if level not in ISOLATION_LEVELS:
                raise UnsupportedSQL(
                    f"isolation level {level!r} is not supported",
                    help="use SERIALIZABLE, WRITE SERIALIZABLE, SNAPSHOT, REPEATABLE READ "
                    "or READ COMMITTED",
                )
            isolation = ISOLATION_LEVELS[level]
        elif rest:
            raise UnsupportedSQL(f"BEGIN {' '.join(rest)} is not supported")
        self._tx = self._db.begin(isolation) if isolation else self._db.begin()

    def _commit(self) -> None:
        self._require_owned("COMMIT")
        tx = self._tx
        if tx is None:
            raise SQLError("COMMIT: there is no transaction in progress")
        self._release_all()
        self._tx = None
        tx.commit()  # a failed commit has aborted the transaction

    def _savepoint(self, name: str) -> None:
        tx = self._in_transaction("SAVEPOINT")
        block = tx.savepoint()
        block.__enter__()
        self._savepoints.append(_Savepoint(name, block))

    def _rollback_to(self, name: str) -> None:
        tx = self._in_transaction("ROLLBACK TO SAVEPOINT")
        index = self._find(name)
        while len(self._savepoints) > index:
            self._savepoints.pop().rollback()
        block = tx.savepoint()
        block.__enter__()
        self._savepoints.append(_Savepoint(name, block))

    def _release(self, name: str) -> None:
        self._in_transaction("RELEASE SAVEPOINT")
        index = self._find(name)
        while len(self._savepoints) > index:
            self._savepoints.pop().release()

    def _release_all(self) -> None:
        while self._savepoints:
            self._savepoints.pop().release()

    def _find(self, name: str) -> int:
        for i in range(len(self._savepoints) - 1, -1, -1):
            if self._savepoints[i].name == name:
                return i
        raise SQLError(f"savepoint {name!r} does not exist")

    def _in_transaction(self, what: str) -> Transaction:
        if self._tx is None:
            raise SQLError(f"{what} can only be used inside BEGIN ... COMMIT")
        return self._tx


def _savepoint_name(statement: Statement, rest: list[str]) -> str:
    if len(rest) != 1:
        raise SQLError(f"expected a savepoint name in {statement.text!r}")
    return name_key(statement.tokens[len(statement.tokens) - 1].text)


def _expect_only(rest: list[str], what: str) -> None:
    if rest and rest != ["TRANSACTION"] and rest != ["WORK"]:
        raise UnsupportedSQL(f"{what} {' '.join(rest)} is not supported")


class _NoDatabase:
    """The database side of a session inside a caller's transaction: never used."""

    def __getattr__(self, name: str) -> Any:
        raise SQLError("this session runs inside a transaction and has no database")


def run_script(db: DatabaseContext, text: str, params: Params = None) -> pa.Table | None:
    """Run a script on ``db`` (what ``db.sql`` does).

    Raises:
        SQLError: besides a failing statement's error, a script that ends
            inside ``BEGIN`` without ``COMMIT`` or ``ROLLBACK`` (it is rolled back).
    """
    session = Session(db)
    result = session.execute(text, params)
    if session.transaction is not None:
        session.rollback()
        raise SQLError(
            "the script ended inside a transaction (BEGIN without COMMIT or ROLLBACK); "
            "it was rolled back and nothing was committed"
        )
    return result


def run_in_transaction(tx: Transaction, text: str, params: Params = None) -> pa.Table | None:
    """Run a script inside ``tx`` (what ``tx.sql`` does)."""
    tx.check_open()
    return Session.inside(tx).execute(text, params)


__all__ = ["ISOLATION_LEVELS", "Session", "run_in_transaction", "run_script"]
