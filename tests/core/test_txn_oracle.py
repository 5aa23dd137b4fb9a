"""Transactions against an oracle: mere and SQLite run the same random transactions.

Hypothesis drives a state machine through random sequences of transactions. Each
transaction is a random list of statements over the tables ``a``, ``b`` and ``c``
(create, drop, re-create, append, delete, update, merge, overwrite with and without a
condition, add and rename a column, add and drop a CHECK constraint, scan, and
savepoints that release or roll back), ending in a commit or an abort. Many statements
fail on purpose, and are caught inside the transaction: CHECK and NOT NULL violations,
appends with a column the table lacks, unknown columns in a condition, missing tables,
a MERGE whose target row matches two source rows, an OVERWRITE whose new rows fall
outside its condition.

SQLite (the stdlib ``sqlite3``) is the oracle: one SQLite transaction per mere
transaction, one SQLite SAVEPOINT per statement, rolled back when the statement fails.
What must hold, and why:

* Statement atomicity: mere and SQLite agree on which statements fail, and a failed
  statement leaves the transaction exactly as it was (any residue shows up as a
  difference with the oracle, which rolled the statement back).
* Read your own writes: a scan inside a transaction equals the oracle's SELECT,
  statements return the same counts (rows appended, deleted, updated, ...), and at the
  end of every transaction each table it sees equals the oracle's.
* Atomic, durable, readable commits: after every commit a *fresh* connection opens
  every version of the log, every table of every version equals what the oracle held
  when that version was committed, and the latest version equals the oracle.
* Abort: the version does not move.

Modelling notes. ``k`` is NOT NULL in the schema; mere's ALTER TABLE has no SET NOT
NULL, so NOT NULL on another column is a CHECK (``v IS NOT NULL``). SQLite cannot add
a CHECK to an existing table, so a CHECK is a pair of BEFORE INSERT/UPDATE triggers.
The rules mere has and SQLite lacks are refusals in the oracle: a partition column
cannot be renamed, a new column must be nullable, OVERWRITE's new rows must satisfy
its condition, MERGE refuses a target row matched by several source rows. Renaming a
column a CHECK uses renames it inside the CHECK in SQLite; mere may do that too or
refuse the rename (as Delta Lake does). Savepoint blocks are skipped while
``Transaction.savepoint`` does not exist.

Runs on the memory and the local store. The two regression tests at the end pin the
first bugs the state machine found.
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

import mere
from mere.storage import MemoryStore

TABLES = ("a", "b", "c")
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("tag", pa.string()),  # the partition column of partitioned tables
    ]
)
SQLITE_COLUMNS = "k INTEGER NOT NULL, v INTEGER, tag TEXT"
ARROW_TYPES = {"INTEGER": pa.int64(), "TEXT": pa.string()}

Value = int | str | None
#: Values for a table's columns by position: k, v, tag; columns added later take v's value.
Row = tuple[int | None, int | None, str | None]
#: A table's columns as the oracle sees them: (name, SQLite type), in table order.
Layout = tuple[tuple[str, str], ...]
#: Every table: name -> (column names, rows sorted by repr).
Content = dict[str, tuple[tuple[str, ...], list[tuple[Value, ...]]]]
Result = object  # what a statement returns, compared between mere and the oracle

BASE_LAYOUT: Layout = (("k", "INTEGER"), ("v", "INTEGER"), ("tag", "TEXT"))
MERE_ERRORS = (mere.MereError, ValueError)
T = TypeVar("T")


def sorted_rows(rows: Iterable[tuple[Value, ...]]) -> list[tuple[Value, ...]]:
    """Rows in a canonical order (a scan promises none)."""
    return sorted(rows, key=repr)


def row_values(row: Row, width: int) -> tuple[Value, ...]:
    """The values of ``row`` for a table of ``width`` columns."""
    return tuple(row[i] if i < len(row) else row[1] for i in range(width))


def arrow_rows(layout: Layout, rows: Sequence[Row]) -> pa.Table:
    """``rows`` as an Arrow table with the table's columns (all nullable: mere checks)."""
    values = [row_values(row, len(layout)) for row in rows]
    schema = pa.schema([pa.field(name, ARROW_TYPES[kind]) for name, kind in layout])
    return pa.Table.from_pylist([dict(zip(schema.names, v, strict=True)) for v in values], schema)


def table_content(table: pa.Table) -> tuple[tuple[str, ...], list[tuple[Value, ...]]]:
    names = tuple(table.column_names)
    return names, sorted_rows([tuple(r[n] for n in names) for r in table.to_pylist()])


def snapshot_content(snapshot: mere.Snapshot) -> Content:
    return {name: table_content(snapshot.table(name).scan()) for name in snapshot.tables()}


def transaction_content(tx: mere.Transaction) -> Content:
    """Every table as the transaction sees it (its snapshot plus its own writes)."""
    return {name: table_content(tx.table(name).scan()) for name in tx.tables()}


def attempt(
    action: Callable[[], T], errors: tuple[type[Exception], ...]
) -> tuple[T | None, Exception | None]:
    """Run ``action``: (its result, None), or (None, the error) when it raised one of ``errors``."""
    try:
        return action(), None
    except errors as exc:
        return None, exc


class OracleRefusal(Exception):
    """The oracle refuses a statement by a rule of mere's that SQLite lacks."""


# --- the oracle ---------------------------------------------------------------------------


class Oracle:
    """An in-memory SQLite database mirroring the mere database, statement by statement."""

    def __init__(self) -> None:
        self.sql = sqlite3.connect(":memory:", isolation_level=None)  # we say BEGIN ourselves
        self.sql.execute("CREATE TABLE _partitioned (name TEXT PRIMARY KEY)")
        self._names = itertools.count()

    def execute(self, sql: str, params: Sequence[Value] = ()) -> sqlite3.Cursor:
        return self.sql.execute(sql, tuple(params))

    def change(self, sql: str, params: Sequence[Value] = ()) -> int:
        """Run a DML statement; return how many rows it changed (rowcount misses WITH ...)."""
        self.execute(sql, params)
        return int(self.execute("SELECT changes()").fetchone()[0])

    def savepoint(self) -> str:
        name = f"sp{next(self._names)}"
        self.execute(f"SAVEPOINT {name}")
        return name

    def release(self, savepoint: str, *, rollback: bool) -> None:
        if rollback:
            self.execute(f"ROLLBACK TO {savepoint}")
        self.execute(f"RELEASE {savepoint}")

    def tables(self) -> list[str]:
        query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)"
        return sorted(name for (name,) in self.execute(query, TABLES))

    def layout(self, table: str) -> Layout:
        """The table's columns; a missing table gets the base ones (its statements fail)."""
        columns = tuple((row[1], row[2]) for row in self.execute(f"PRAGMA table_info({table})"))
        return columns or BASE_LAYOUT

    def partitioned(self, table: str) -> bool:
        return (
            self.execute("SELECT 1 FROM _partitioned WHERE name = ?", (table,)).fetchone()
            is not None
        )

    def checks_use(self, table: str, column: str) -> bool:
        """Whether a CHECK constraint (trigger) of ``table`` uses ``column``."""
        query = "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?"
        return any(f"NEW.{column} " in sql for (sql,) in self.execute(query, (table,)))

    def select(
        self, table: str, where: str | None = None
    ) -> tuple[tuple[str, ...], list[tuple[Value, ...]]]:
        names = tuple(name for name, _ in self.layout(table))
        condition = "" if where is None else f" WHERE {where}"
        rows = self.execute(f"SELECT {', '.join(names)} FROM {table}{condition}")
        return names, sorted_rows(list(rows))

    def insert(self, table: str, names: Sequence[str], rows: Sequence[tuple[Value, ...]]) -> int:
        columns = ", ".join(names)
        self.execute(f"SELECT {columns} FROM {table} LIMIT 0")  # no rows: still check the names
        marks = ", ".join("?" * len(names))
        self.sql.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
        return len(rows)

    def content(self) -> Content:
        return {name: self.select(name) for name in self.tables()}


def values_cte(layout: Layout, rows: Sequence[Row]) -> tuple[str, list[Value]]:
    """``WITH src(<columns>) AS (VALUES ...)`` holding ``rows``, and its parameters."""
    names = ", ".join(name for name, _ in layout)
    marks = "(" + ", ".join("?" * len(layout)) + ")"
    params = [value for row in rows for value in row_values(row, len(layout))]
    return f"WITH src({names}) AS (VALUES {', '.join([marks] * len(rows))})", params


# --- statements: each runs on mere and on the oracle, and returns what to compare -----------


class Statement:
    """One statement of a transaction; ``layout`` is its table's columns before it runs."""

    table: str

    def mere_may_refuse(self, oracle: Oracle) -> bool:
        """Whether mere may refuse this statement though SQLite runs it (both are right)."""
        return False

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        raise NotImplementedError

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        raise NotImplementedError


@dataclass(frozen=True)
class Create(Statement):
    table: str
    partitioned: bool

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        tx.create_table(self.table, SCHEMA, partition_by=["tag"] if self.partitioned else [])
        return None

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        oracle.execute(f"CREATE TABLE {self.table} ({SQLITE_COLUMNS})")
        if self.partitioned:
            oracle.execute("INSERT INTO _partitioned VALUES (?)", (self.table,))
        return None


@dataclass(frozen=True)
class Drop(Statement):
    table: str

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        tx.drop_table(self.table)
        return None

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        oracle.execute(f"DROP TABLE {self.table}")  # its CHECK triggers go with it
        oracle.execute("DELETE FROM _partitioned WHERE name = ?", (self.table,))
        return None


@dataclass(frozen=True)
class Append(Statement):
    table: str
    rows: tuple[Row, ...]
    mistake: Literal["null key", "extra column"] | None = None

    def data(self, layout: Layout) -> tuple[tuple[str, ...], list[tuple[Value, ...]]]:
        names = tuple(name for name, _ in layout)
        rows = [row_values(row, len(layout)) for row in self.rows]
        if self.mistake == "null key":
            rows.append((None, *row_values((0, 1, "x"), len(layout))[1:]))
        elif self.mistake == "extra column":
            names += ("zz",)
            rows = [(*row, 1) for row in rows]
        return names, rows

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        names, rows = self.data(layout)
        types = dict(layout)
        schema = pa.schema([pa.field(n, ARROW_TYPES[types.get(n, "INTEGER")]) for n in names])
        table = pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows], schema)
        return tx.table(self.table).append(table)

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        names, rows = self.data(layout)
        return oracle.insert(self.table, names, rows)


@dataclass(frozen=True)
class Delete(Statement):
    table: str
    where: str

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        return tx.table(self.table).delete(self.where)

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        return oracle.change(f"DELETE FROM {self.table} WHERE {self.where}")


@dataclass(frozen=True)
class Update(Statement):
    """``SET column = value``: a str value is SQL, an int or None a literal."""

    table: str
    where: str | None
    column: str
    value: Value

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        return tx.table(self.table).update(self.where, {self.column: self.value})

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        literal = not isinstance(self.value, str)
        value = "?" if literal else self.value
        condition = "" if self.where is None else f" WHERE {self.where}"
        sql = f"UPDATE {self.table} SET {self.column} = {value}{condition}"
        return oracle.change(sql, (self.value,) if literal else ())


@dataclass(frozen=True)
class Merge(Statement):
    """Upsert by key: WHEN MATCHED UPDATE *, WHEN NOT MATCHED INSERT *."""

    table: str
    rows: tuple[Row, ...]

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        metrics = (
            tx.table(self.table)
            .merge(arrow_rows(layout, self.rows), on="t.k = s.k")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return metrics.num_target_rows_inserted, metrics.num_target_rows_updated

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        t = self.table
        src, params = values_cte(layout, self.rows)
        doubled = f"{src} SELECT count(*) FROM {t} WHERE k IN "
        doubled += "(SELECT k FROM src GROUP BY k HAVING count(*) > 1)"
        if oracle.execute(doubled, params).fetchone()[0]:
            raise OracleRefusal("a target row matches several source rows")
        names = [name for name, _ in layout]
        sets = ", ".join(f"{n} = (SELECT src.{n} FROM src WHERE src.k = {t}.k)" for n in names)
        update = f"{src} UPDATE {t} SET {sets} WHERE k IN (SELECT k FROM src)"
        updated = oracle.change(update, params)
        columns = ", ".join(names)
        insert = f"{src} INSERT INTO {t} ({columns}) SELECT {columns} FROM src"
        inserted = oracle.change(f"{insert} WHERE k NOT IN (SELECT k FROM {t})", params)
        return inserted, updated


@dataclass(frozen=True)
class Overwrite(Statement):
    """Replace every row, or those matching ``where`` (new rows must match it too)."""

    table: str
    rows: tuple[Row, ...]
    where: str | None

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        return tx.table(self.table).overwrite(arrow_rows(layout, self.rows), where=self.where)

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        if self.where is not None and self.rows:
            src, params = values_cte(layout, self.rows)
            outside = f"{src} SELECT count(*) FROM src WHERE NOT coalesce(({self.where}), 0)"
            if oracle.execute(outside, params).fetchone()[0]:
                raise OracleRefusal("new rows outside the overwrite condition")
        condition = "" if self.where is None else f" WHERE {self.where}"
        removed = oracle.change(f"DELETE FROM {self.table}{condition}")
        names = [name for name, _ in layout]
        oracle.insert(self.table, names, [row_values(r, len(layout)) for r in self.rows])
        return removed


@dataclass(frozen=True)
class AddColumn(Statement):
    table: str
    column: str
    nullable: bool = True

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        tx.alter_table(self.table).add_column(self.column, pa.int64(), nullable=self.nullable)
        return None

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        oracle.execute(f"ALTER TABLE {self.table} ADD COLUMN {self.column} INTEGER")
        if not self.nullable:  # SQLite allows it on an empty table
            raise OracleRefusal("a new column must be nullable")
        return None


@dataclass(frozen=True)
class RenameColumn(Statement):
    table: str
    old: str
    new: str

    def mere_may_refuse(self, oracle: Oracle) -> bool:
        # SQLite renames the column inside the CHECK too; refusing, as Delta Lake does, is fine.
        return oracle.checks_use(self.table, self.old)

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        tx.alter_table(self.table).rename_column(self.old, self.new)
        return None

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        if self.old == "tag" and oracle.partitioned(self.table):
            raise OracleRefusal("a partition column cannot be renamed")
        oracle.execute(f"ALTER TABLE {self.table} RENAME COLUMN {self.old} TO {self.new}")
        return None


@dataclass(frozen=True)
class AddCheck(Statement):
    """``CHECK (<column> <predicate>)``, e.g. ``v > 0`` or ``v IS NOT NULL``."""

    table: str
    name: str
    check: str

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        tx.alter_table(self.table).add_check(self.name, self.check)
        return None

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        t = self.table
        broken = f"SELECT count(*) FROM {t} WHERE NOT coalesce(({self.check}), 1)"
        if oracle.execute(broken).fetchone()[0]:  # also checks the column exists
            raise OracleRefusal("existing rows violate the constraint")
        for event in ("INSERT", "UPDATE"):
            oracle.execute(
                f"CREATE TRIGGER {t}_{self.name}_{event} BEFORE {event} ON {t} "
                f"WHEN NOT coalesce((NEW.{self.check}), 1) "
                f"BEGIN SELECT RAISE(ABORT, 'CHECK {self.name}'); END"
            )
        return None


@dataclass(frozen=True)
class DropCheck(Statement):
    table: str
    name: str

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        tx.alter_table(self.table).drop_check(self.name)
        return None

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        for event in ("INSERT", "UPDATE"):
            oracle.execute(f"DROP TRIGGER {self.table}_{self.name}_{event}")
        return None


@dataclass(frozen=True)
class Scan(Statement):
    table: str
    where: str | None

    def on_mere(self, tx: mere.Transaction, layout: Layout) -> Result:
        return table_content(tx.table(self.table).scan(filter=self.where))

    def on_oracle(self, oracle: Oracle, layout: Layout) -> Result:
        oracle.execute(f"SELECT * FROM {self.table} LIMIT 0")  # a missing table fails here
        return oracle.select(self.table, self.where)


@dataclass(frozen=True)
class Savepoint:
    """``with tx.savepoint(): <body>``, then raise out of it when ``rollback``."""

    body: tuple[Statement | Savepoint, ...]
    rollback: bool


class RollBack(Exception):
    """Raised out of a savepoint's body to roll it back."""


# --- strategies -------------------------------------------------------------------------------


def weighted(*options: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """One of the strategies, each drawn about as often as its weight."""
    return st.one_of([strategy for weight, strategy in options for _ in range(weight)])


tables = st.sampled_from(("a", "a", "a", "b", "b", "c"))  # mostly a and b: they start out existing
row = st.tuples(
    st.integers(0, 9),
    st.sampled_from([1, 2, 3, 4, 5, None, 0, -1, -2]),  # mostly > 0, so CHECKs can be added
    st.sampled_from(["x", "y", None]),
)
rows = st.lists(row, max_size=4).map(tuple)
some_rows = st.lists(row, min_size=1, max_size=4).map(tuple)
COMMON_FILTERS = (
    "k = {n}",
    "k < {n}",
    "k >= {n}",
    "k IN ({n}, {m})",
    "v > {m}",
    "v <= {m} OR tag = 'x'",
    "NOT (v > {m})",
    "k < {n} AND v > {m}",
    "v IS NULL",
    "tag IS NULL",
    "tag = 'y'",
)
ODD_FILTERS = (
    "w > {m}",  # only once v is renamed w, or w is added
    "label = 'x'",  # only once tag is renamed label
    "zz = {n}",  # never: no table has zz
)
filters = st.builds(
    lambda template, n, m: template.format(n=n, m=m),
    weighted((4, st.sampled_from(COMMON_FILTERS)), (1, st.sampled_from(ODD_FILTERS))),
    st.integers(0, 9),
    st.integers(-3, 6),
)
updates = st.builds(
    Update,
    table=tables,
    where=st.none() | filters,
    column=st.sampled_from(["v", "v", "v", "v", "k", "w"]),
    value=weighted(
        (3, st.integers(-5, 9)), (1, st.none()), (1, st.sampled_from(["v + 1", "v - 5", "k"]))
    ),
) | st.builds(
    Update,
    table=tables,
    where=st.none() | filters,
    column=st.sampled_from(["tag", "label"]),
    value=st.sampled_from(["'x'", "'y'", None]),
)
renames = st.builds(
    RenameColumn,
    table=tables,
    old=st.sampled_from(["v", "w"]),
    new=st.sampled_from(["w", "v", "x"]),
) | st.builds(
    RenameColumn,
    table=tables,
    old=st.sampled_from(["tag", "label"]),
    new=st.sampled_from(["label", "tag"]),
)
check_names = st.sampled_from(["c1", "c2"])
CHECKS = ("v > 0", "v < 5", "v IS NOT NULL", "k < 8", "w > 0")  # <column> <predicate>

any_statement: st.SearchStrategy[Statement | Savepoint] = st.deferred(
    lambda: weighted(
        (4, st.builds(Append, table=tables, rows=rows)),
        (
            1,
            st.builds(
                Append,
                table=tables,
                rows=rows,
                mistake=st.sampled_from(["null key", "extra column"]),
            ),
        ),
        (6, updates),
        (2, st.builds(Delete, table=tables, where=filters)),
        (2, st.builds(Merge, table=tables, rows=some_rows)),
        (2, st.builds(Overwrite, table=tables, rows=rows, where=st.none() | filters)),
        (2, st.builds(Scan, table=tables, where=st.none() | filters)),
        (2, st.builds(Create, table=tables, partitioned=st.booleans())),
        (2, st.builds(Drop, table=tables)),
        (3, st.builds(AddCheck, table=tables, name=check_names, check=st.sampled_from(CHECKS))),
        (1, st.builds(DropCheck, table=tables, name=check_names)),
        (
            1,
            st.builds(
                AddColumn, table=tables, column=st.sampled_from(["x", "w"]), nullable=st.booleans()
            ),
        ),
        (1, renames.filter(lambda r: r.old != r.new)),
        (
            1,
            st.builds(
                Savepoint,
                body=st.lists(any_statement, min_size=1, max_size=3).map(tuple),
                rollback=st.booleans(),
            ),
        ),
    )
)


# --- the state machine -------------------------------------------------------------------------


def agree(got: object, expected: object, what: str) -> None:
    """Check that mere (``got``) agrees with the oracle (``expected``) about ``what``.

    Every disagreement fails on this one line, so Hypothesis reports and shrinks them
    as one failure, whichever check sees it first; an error mere raises on its own
    (CorruptLog from a commit, say) is another.
    """
    assert got == expected, what


class OracleMachine(RuleBasedStateMachine):
    """mere against SQLite, one random transaction per step."""

    store: ClassVar[Literal["memory", "local"]]
    #: Data files of at most this many bytes travel inside their commit (0: none do).
    inline_limit: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.directory: str | None = None
        if self.store == "memory":
            self.uri = f"memory://txn-oracle-{uuid.uuid4().hex}"
        else:
            self.directory = tempfile.mkdtemp(prefix="txn-oracle-")
            self.uri = str(Path(self.directory) / "db")
        self.db = mere.connect(self.uri, inline_limit=self.inline_limit or None)
        self.oracle = Oracle()
        self.history: list[Content] = [{}]  # the oracle's content at each committed version
        self.tx: mere.Transaction | None = None

    def teardown(self) -> None:
        if self.tx is not None:
            self.tx.abort()
        self.db.close()
        self.oracle.sql.close()
        if self.directory is None:
            MemoryStore.forget(self.uri.removeprefix("memory://"))
        else:
            shutil.rmtree(self.directory, ignore_errors=True)

    @initialize(
        a_rows=some_rows,
        a_check=st.sampled_from(["v < 5", "v > 0", "v IS NOT NULL", "k < 8", None]),
        b_rows=some_rows,
    )
    def setup(self, a_rows: tuple[Row, ...], a_check: str | None, b_rows: tuple[Row, ...]) -> None:
        """Start with a plain table ``a`` (maybe with a CHECK) and a partitioned ``b``."""
        setup: list[Statement | Savepoint] = [Create("a", partitioned=False), Append("a", a_rows)]
        if a_check is not None:
            setup.append(AddCheck("a", "c1", a_check))
        setup += [Create("b", partitioned=True), Append("b", b_rows)]
        self.run_transaction(setup, commit=True)

    @rule(
        statements=st.lists(any_statement, min_size=1, max_size=8),
        commit=st.sampled_from([True, True, False]),
    )
    def transaction(self, statements: list[Statement | Savepoint], commit: bool) -> None:
        self.run_transaction(statements, commit)

    # --- running statements ---------------------------------------------------------------

    def run_transaction(self, statements: Sequence[Statement | Savepoint], commit: bool) -> None:
        before = len(self.history) - 1
        self.tx = self.db.transaction()
        self.oracle.execute("BEGIN")
        for statement in statements:
            self.run(statement)
        agree(transaction_content(self.tx), self.oracle.content(), "the tables in the transaction")
        if commit:
            version = self.tx.commit()
            self.oracle.execute("COMMIT")
            self.committed(before, version)
        else:
            self.tx.abort()
            self.oracle.execute("ROLLBACK")
            self.aborted(before)
        self.tx = None

    def run(self, statement: Statement | Savepoint) -> None:
        if isinstance(statement, Savepoint):
            self.run_savepoint(statement)
            return
        assert self.tx is not None
        tx, oracle = self.tx, self.oracle
        layout = oracle.layout(statement.table)
        optional = statement.mere_may_refuse(oracle)
        savepoint = oracle.savepoint()
        expected, refused = attempt(
            lambda: statement.on_oracle(oracle, layout), (sqlite3.Error, OracleRefusal)
        )
        got, failed = attempt(lambda: statement.on_mere(tx, layout), MERE_ERRORS)
        # mere decides: a statement it failed must have left nothing, so the oracle rolls it back.
        oracle.release(savepoint, rollback=failed is not None or refused is not None)
        if failed is not None and refused is None and optional:
            return
        outcome = f"{statement}: mere raised {failed!r}, SQLite raised {refused!r}"
        agree(failed is None, refused is None, outcome)
        agree(got, expected, f"what {statement} returned")

    def run_savepoint(self, block: Savepoint) -> None:
        savepoint_of = getattr(self.tx, "savepoint", None)
        if savepoint_of is None:
            return  # tx.savepoint() is not there yet
        savepoint = self.oracle.savepoint()
        try:
            with savepoint_of():
                for statement in block.body:
                    self.run(statement)
                if block.rollback:
                    raise RollBack
        except RollBack:
            self.oracle.release(savepoint, rollback=True)
        else:
            self.oracle.release(savepoint, rollback=False)

    # --- checking the database from a fresh connection ---------------------------------------

    @contextmanager
    def fresh(self) -> Iterator[mere.Database]:
        db = mere.connect(self.uri, create=False)
        try:
            yield db
        finally:
            db.close()

    def committed(self, before: int, version: int) -> None:
        """Every version opens and holds what the oracle held then; the latest is the oracle."""
        content = self.oracle.content()
        if version == before:  # nothing to publish: nothing may have changed
            agree(self.history[before], content, f"version {before}, after a commit of nothing")
        else:
            agree(version, before + 1, "the committed version")
            self.history.append(content)
        with self.fresh() as db:
            agree(db.version, version, "the latest version")
            for v, expected in enumerate(self.history):
                agree(snapshot_content(db.snapshot(version=v)), expected, f"version {v}")

    def aborted(self, before: int) -> None:
        """Nothing was published (the next commit checks that no version lost a file)."""
        with self.fresh() as db:
            agree(db.version, before, "the latest version, after an abort")


ORACLE_SETTINGS = settings(
    max_examples=200,  # found each bug the regressions below pin in every trial run (16 of 16)
    stateful_step_count=5,  # transactions per run, after the setup one
    deadline=None,
    # No explain phase: once a case fails it traces every later one, which turns shrinking
    # these (slow) cases from seconds into many minutes.
    phases=[phase for phase in Phase if phase is not Phase.explain],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


class MemoryMachine(OracleMachine):
    store = "memory"


class LocalMachine(OracleMachine):
    store = "local"  # in a fresh temporary directory per run


class InlinedMachine(OracleMachine):
    """Every data file these small transactions write travels inside its commit."""

    store = "memory"
    inline_limit = 65536


@pytest.mark.parametrize(
    "machine",
    [MemoryMachine, LocalMachine, InlinedMachine],
    ids=["memory", "local", "memory-inlined"],
)
def test_transactions_match_sqlite(machine: type[OracleMachine]) -> None:
    run_state_machine_as_test(machine, settings=ORACLE_SETTINGS)


# --- regressions: the first bugs the state machine found ---------------------------------------


def kv_rows(table: pa.Table) -> list[tuple[Value, ...]]:
    return sorted_rows([(r["k"], r["v"]) for r in table.to_pylist()])


@pytest.mark.parametrize("write", ["delete", "append then scan"])
def test_writing_to_a_table_then_dropping_it_keeps_the_log_readable(
    db_uri: str, write: str
) -> None:
    db = mere.connect(db_uri)
    with db.transaction() as tx:
        tx.create_table("t", SCHEMA)
        tx.table("t").append([{"k": 1, "v": 1, "tag": None}, {"k": 2, "v": 2, "tag": None}])
    tx = db.transaction()
    if write == "delete":
        tx.table("t").delete("k = 1")
    else:
        tx.table("t").append([{"k": 3, "v": 3, "tag": None}])
        tx.table("t").scan()
    tx.drop_table("t")
    version = tx.commit()  # was published with a file action on the dropped table: CorruptLog
    fresh = mere.connect(db_uri, create=False)
    assert fresh.version == version
    assert fresh.tables() == []
    assert kv_rows(fresh.snapshot(version=version - 1).table("t").scan()) == [(1, 1), (2, 2)]


def test_a_failed_update_leaves_the_transaction_as_it_was(db_uri: str) -> None:
    db = mere.connect(db_uri)
    with db.transaction() as tx:
        tx.create_table("u", SCHEMA)
        tx.table("u").append([{"k": 1, "v": 1, "tag": None}, {"k": 2, "v": 2, "tag": None}])
        tx.alter_table("u").add_check("positive", "v > 0")
    tx = db.transaction()
    with pytest.raises(mere.ConstraintViolation):
        tx.table("u").update("k = 1", {"v": -5})
    assert kv_rows(tx.table("u").scan()) == [(1, 1), (2, 2)]  # was []: its file was removed
    tx.commit()
    fresh = mere.connect(db_uri, create=False)
    assert kv_rows(fresh.table("u").scan()) == [(1, 1), (2, 2)]
