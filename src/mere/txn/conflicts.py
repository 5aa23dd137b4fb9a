"""Deciding whether a commit that won the race invalidates a pending transaction.

A transaction that loses the race for version N reads every commit it missed
and checks each against what it read and wrote, at its isolation level
(DESIGN.md §8):

==============================  ========  ==================  ============
winner did ...                  snapshot  write_serializable  serializable
==============================  ========  ==================  ============
change the protocol             conflict  conflict            conflict
record one of our app ids       conflict  conflict            conflict
set database properties we set  conflict  conflict            conflict
create a name we create         conflict  conflict            conflict
alter/drop a table we write     conflict  conflict            conflict
add files to a table we alter   conflict  conflict            conflict
remove a file we remove         conflict  conflict            conflict
add a primary key we insert     conflict  conflict            conflict
remove a file we read           --        conflict            conflict
add matching rows, not blind    --        conflict            conflict
append rows matching our read   --        --                  conflict
alter/drop a table we read      --        --                  conflict
create/drop a name we looked up --        --                  conflict
==============================  ========  ==================  ============

A commit is *blind* when it only appended, without reading or removing
anything (``commitInfo.isBlindAppend``); an overwrite, delete, update or
merge, or an append after a read, is not.
"Matching our read" is judged per file from partition values and statistics
against the read's filter, so writers of disjoint keys do not conflict.
Removals that are not data changes (compaction) never invalidate a read.
"A primary key we insert" is judged from the winner's added files: their
statistics on the first key column, then their key columns (mere.txn.keys).
Finding keys present (an upsert skipping them, an insert failing on them) is a
read of the files that may hold them (Stage.keys_present).
If no rule fires the transaction rebases onto the winner and retries.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from mere import errors
from mere.log.actions import (
    AddFile,
    AppTxn,
    Commit,
    DatabaseMeta,
    DropTable,
    Protocol,
    RemoveFile,
    TableMeta,
)
from mere.names import name_key
from mere.snapshot.state import DatabaseState
from mere.txn.keys import KeyProbe, describe_keys

UNSAFE_DISABLE_SWITCH = "MERE_UNSAFE_DISABLE_CONFLICT_DETECTION"
"""Environment variable that, set to ``1``, turns conflict detection off.

For testing the isolation checker only (``mere verify`` must catch the anomalies
this lets through); never set it anywhere else. Every transaction then rebases
over every winner, so serializable silently degrades below snapshot isolation.
"""


def conflict_detection_disabled() -> bool:
    """True when the test-only :data:`UNSAFE_DISABLE_SWITCH` is set."""
    return os.environ.get(UNSAFE_DISABLE_SWITCH) == "1"


@dataclass(frozen=True)
class ReadRecord:
    """One read of a table: which files it looked at, and which rows it wanted.

    ``matches`` tells whether a file may hold rows the read wanted (None means
    every row was wanted).
    """

    table_id: str
    table_name: str
    files: frozenset[str]
    matches: Callable[[AddFile], bool] | None = None


@dataclass
class TxFootprint:
    """What a pending transaction read and wrote, for conflict checks."""

    isolation: str
    created_names: set[str] = field(default_factory=set)  # name keys
    written: set[str] = field(default_factory=set)  # ids of existing tables written to
    altered: set[str] = field(default_factory=set)  # ids of existing tables altered or dropped
    removed: dict[str, set[str]] = field(default_factory=dict)  # table id -> paths
    reads: list[ReadRecord] = field(default_factory=list)
    looked_up: set[str] = field(default_factory=set)  # name keys looked up (present or not)
    listed_tables: bool = False
    app_ids: set[str] = field(default_factory=set)
    database_changed: bool = False  # sets database properties
    #: table id -> the primary key values this transaction inserts (a mere.txn.keys.KeyProbe)
    inserted_keys: dict[str, KeyProbe] = field(default_factory=dict)


def check_winner(tx: TxFootprint, before: DatabaseState, winner: Commit) -> None:
    """Raise the ConflictError that ``winner`` causes for ``tx``, if any.

    ``before`` is the state just below the winner, used to tell a table's
    creation from a change of its metadata and to name tables in errors.
    """
    if conflict_detection_disabled():
        return
    v = winner.version
    adds: dict[str, list[AddFile]] = {}
    removes: dict[str, list[RemoveFile]] = {}
    changed: dict[str, str] = {}  # table id -> name, for altered or dropped tables
    created: dict[str, str] = {}  # name key -> name
    for a in winner.actions:
        if isinstance(a, Protocol):
            raise errors.ProtocolChanged(
                "a concurrent commit changed the format version", winning_version=v, table=None
            )
        if isinstance(a, DatabaseMeta) and tx.database_changed:
            raise errors.ConcurrentMetadataChange(
                "a concurrent commit changed the database properties, which this "
                "transaction also changes",
                winning_version=v,
                table=None,
            )
        if isinstance(a, AppTxn) and a.app_id in tx.app_ids:
            raise errors.ConcurrentTransaction(
                f"a concurrent commit recorded application transaction {a.app_id!r}",
                winning_version=v,
                table=None,
            )
        if isinstance(a, AddFile):
            adds.setdefault(a.table_id, []).append(a)
        elif isinstance(a, RemoveFile):
            removes.setdefault(a.table_id, []).append(a)
        elif isinstance(a, DropTable):
            changed[a.table_id] = a.name
            created.pop(name_key(a.name), None)
        elif isinstance(a, TableMeta):
            old = before.tables.get(a.id)
            if old is None:
                created[name_key(a.name)] = a.name
            else:
                changed[a.id] = old.meta.name
                if name_key(old.meta.name) != name_key(a.name):
                    created[name_key(a.name)] = a.name
    renamed_or_dropped = {name_key(name) for name in changed.values()}

    for key, name in created.items():
        if key in tx.created_names:
            raise errors.ConcurrentCreateTable(
                f"a concurrent commit created a table named {name!r}", winning_version=v, table=name
            )
    for table_id, name in changed.items():
        if table_id in tx.written or table_id in tx.altered:
            raise errors.ConcurrentMetadataChange(
                f"a concurrent commit altered or dropped table {name!r}, "
                "which this transaction writes",
                winning_version=v,
                table=name,
            )
    for table_id in tx.altered:
        if table_id in adds:
            name = before.tables[table_id].meta.name
            raise errors.ConcurrentMetadataChange(
                f"a concurrent commit added data to table {name!r}, whose metadata this "
                "transaction changes",
                winning_version=v,
                table=name,
            )
    for table_id, paths in tx.removed.items():
        for r in removes.get(table_id, ()):
            if r.path in paths:
                name = before.tables[table_id].meta.name
                raise errors.ConcurrentDeleteDelete(
                    f"a concurrent commit removed data file {r.path} of table {name!r}, "
                    "which this transaction also removes",
                    winning_version=v,
                    table=name,
                )
    for table_id, probe in tx.inserted_keys.items():
        winner_adds = [a for a in adds.get(table_id, ()) if a.data_change]
        collided = probe.collisions(winner_adds) if winner_adds else None
        if collided is not None and collided.num_rows:
            name = before.tables[table_id].meta.name
            raise errors.ConcurrentDuplicateKey(
                f"a concurrent commit inserted primary key value(s) {describe_keys(collided)} "
                f"into table {name!r}, which this transaction also inserts",
                winning_version=v,
                table=name,
            )
    if tx.isolation == "snapshot":
        return

    serializable = tx.isolation == "serializable"
    for read in tx.reads:
        table_removes = removes.get(read.table_id, [])
        for r in table_removes:
            if r.data_change and r.path in read.files:
                raise errors.ConcurrentDeleteRead(
                    f"a concurrent commit removed data file {r.path} of table {read.table_name!r}, "
                    "which this transaction read",
                    winning_version=v,
                    table=read.table_name,
                )
        rewrite = not winner.info.is_blind_append
        if serializable or rewrite:
            for a in adds.get(read.table_id, ()):
                if a.data_change and (read.matches is None or read.matches(a)):
                    kind = "appended" if winner.info.is_blind_append else "wrote"
                    raise errors.ConcurrentAppend(
                        f"a concurrent commit {kind} rows of table {read.table_name!r} that match "
                        "what this transaction read",
                        winning_version=v,
                        table=read.table_name,
                    )
        if serializable and read.table_id in changed:
            raise errors.ConcurrentMetadataChange(
                f"a concurrent commit altered or dropped table {read.table_name!r}, which this "
                "transaction read",
                winning_version=v,
                table=read.table_name,
            )
    if serializable:
        for key, name in created.items():
            if tx.listed_tables or key in tx.looked_up:
                raise errors.ConcurrentMetadataChange(
                    f"a concurrent commit created table {name!r}, "
                    "whose absence this transaction saw",
                    winning_version=v,
                    table=name,
                )
        for key in renamed_or_dropped:
            if tx.listed_tables or key in tx.looked_up:
                name = next(n for n in changed.values() if name_key(n) == key)
                raise errors.ConcurrentMetadataChange(
                    f"a concurrent commit dropped or renamed table {name!r}, which this "
                    "transaction looked up",
                    winning_version=v,
                    table=name,
                )
