"""The entry point: a database on an object store, its snapshots, transactions and tables."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa

from mere.data.writer import DEFAULT_TARGET_FILE_SIZE
from mere.errors import (
    ConflictError,
    ConstraintViolation,
    CorruptLog,
    DatabaseNotFound,
    InvalidArgument,
    ObjectNotFound,
    SchemaMismatch,
    TableNotFound,
    VersionNotFound,
)
from mere.log.actions import (
    ARROW_INLINE_FORMAT_VERSION,
    BASE_FORMAT_VERSION,
    INLINE_FORMAT_VERSION,
    Action,
    DatabaseMeta,
    Protocol,
)
from mere.log.log import Log
from mere.names import check_table_name
from mere.properties import (
    CHECKPOINT_INTERVAL_PROPERTY,
    DEFAULT_CHECKPOINT_INTERVAL,
    INLINE_LIMIT_PROPERTY,
    check_database_properties,
    checkpoint_interval,
    inline_limit,
)
from mere.snapshot.loader import load_state
from mere.snapshot.snapshot import Snapshot, TableSnapshot, describe_table
from mere.snapshot.state import DatabaseState
from mere.storage import ObjectStore, open_store
from mere.timestamps import Moment, epoch_ms
from mere.txn.committer import Committer, first_commit_info
from mere.txn.context import run_statement
from mere.txn.transaction import (
    DEFAULT_ISOLATION,
    DEFAULT_MAX_COMMIT_ATTEMPTS,
    STALE_SNAPSHOT_SECONDS,
    Isolation,
    OnDuplicate,
    SchemaMode,
    Transaction,
    TxTable,
)

if TYPE_CHECKING:
    from mere.maintain import (
        CheckResult,
        CompactResult,
        DeltaExportResult,
        ExpireResult,
        ExportInfo,
        ExportResult,
        RestoreResult,
        VacuumResult,
    )
    from mere.ops.merge import TableMerger

log = logging.getLogger("mere")
T = TypeVar("T")


def connect(
    uri: str | os.PathLike[str] | ObjectStore,
    *,
    create: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    checkpoint_interval: int | None = None,
    inline_limit: int | None = None,
    max_commit_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
) -> Database:
    """Open the database at ``uri``, creating it if absent (unless ``create=False``).

    Args:
        uri: a local path, ``file://`` URI, ``memory://name``, a cloud URI
            (``s3://``, ``az://``, ``abfss://``, ``gs://``), or an ObjectStore.
        create: create an empty database when none exists at ``uri``.
        storage_options: cloud configuration (credentials, region, endpoint)
            overriding the environment; see :mod:`mere.storage.cloud`.
        checkpoint_interval: write a checkpoint every this many commits; stored
            in the database when it is created (default 100).
        inline_limit: inline data files of at most this many bytes in their
            commits (docs/format.md §2.5; 65536 is the usual choice); stored
            in the database when it is created (default: off), not read when
            it exists. A database created with it starts at format version 4;
            an existing one turns it on with
            ``db.set_properties({"inlineLimit": "65536"})``.
        max_commit_attempts: how often a commit that loses races to
            non-conflicting commits is rebased and retried; while other
            writers keep committing it goes on trying for up to 30 s past
            that (``COMMIT_PATIENCE_SECONDS``); 1 means exactly one try.
        target_file_size: the size data files are cut at (bytes).

    Raises:
        DatabaseNotFound: no database at ``uri`` and ``create`` is False.
        FormatVersionError: the database was written by a newer format.
    """
    if inline_limit is not None:  # refused before anything is created
        check_database_properties({INLINE_LIMIT_PROPERTY: str(inline_limit)})
    if isinstance(uri, ObjectStore):
        if storage_options:
            raise InvalidArgument("storage_options configure a URI; this store is already open")
        store = uri
    else:
        try:
            store = open_store(uri, storage_options, create=create)
        except ObjectNotFound:
            raise DatabaseNotFound(
                f"no mere database at {os.fspath(uri)!r}: the directory does not exist",
                help="connect with create=True to create one",
            ) from None
    return Database(
        store,
        create=create,
        checkpoint_interval=checkpoint_interval,
        inline_limit=inline_limit,
        max_commit_attempts=max_commit_attempts,
        target_file_size=target_file_size,
    )


class Database:
    """A mere database: one log, any number of tables, no server."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        create: bool = True,
        checkpoint_interval: int | None = None,
        inline_limit: int | None = None,
        max_commit_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    ) -> None:
        for name, value, least in (
            ("checkpoint_interval", checkpoint_interval, 1),
            ("max_commit_attempts", max_commit_attempts, 1),
            ("target_file_size", target_file_size, 1),
        ):
            if value is None and name == "checkpoint_interval":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InvalidArgument(f"{name} must be a whole number of at least {least}")
        properties = {
            CHECKPOINT_INTERVAL_PROPERTY: str(checkpoint_interval or DEFAULT_CHECKPOINT_INTERVAL)
        }
        if inline_limit:
            properties[INLINE_LIMIT_PROPERTY] = str(inline_limit)
        check_database_properties(properties)
        self.store = store
        self.log = Log(store)
        self.max_commit_attempts = max_commit_attempts
        self.target_file_size = target_file_size
        self._lock = threading.Lock()
        self._cached: DatabaseState | None = None
        self._known: tuple[int, float] | None = None  # (version seen committed, monotonic time)
        try:
            latest = self.log.latest_version()
        except CorruptLog:  # a database, damaged: each operation that meets the damage says so
            return
        if latest is None:
            if not create:
                raise DatabaseNotFound(
                    f"no mere database at {store.uri}",
                    help="connect with create=True to create one",
                )
            self._create(properties)
        else:
            self._saw_committed(latest)

    @property
    def uri(self) -> str:
        return self.store.uri

    def _create(self, properties: dict[str, str]) -> None:
        now = int(time.time() * 1000)
        # A first export or tag moves the database to format 2, turning inlining on to 4.
        inlining = inline_limit(properties) > 0
        actions: list[Action] = [
            Protocol(ARROW_INLINE_FORMAT_VERSION if inlining else BASE_FORMAT_VERSION),
            DatabaseMeta(uuid.uuid4().hex, properties, now),
        ]
        # Losing this race means another client created the database at the same time: fine.
        committer = Committer(self.log, self.after_commit, max_attempts=1)
        committer.create(first_commit_info("CREATE DATABASE", now), actions)

    # --- state (the DatabaseContext the verbs use) -----------------------------------

    def state_at(self, version: int) -> DatabaseState:
        """The state at ``version``, from the cache and the nearest checkpoint."""
        with self._lock:
            cached = self._cached
        state = load_state(self.log, version, cached)
        with self._lock:
            if self._cached is None or state.version > self._cached.version:
                self._cached = state
        return state

    def latest_state(self) -> DatabaseState:
        """The state at the latest version (found with O(1) requests)."""
        latest = self.log.latest_version(known=self.known_version())
        if latest is None:
            raise DatabaseNotFound(f"the database at {self.uri} has no log any more")
        self._saw_committed(latest)
        return self.state_at(latest)

    def _fresh_cached_state(self) -> DatabaseState | None:
        """The cached state, if it is at the version this client saw committed a moment ago."""
        known = self.known_version()
        with self._lock:
            cached = self._cached
        return cached if cached is not None and cached.version == known else None

    def known_version(self) -> int | None:
        """The newest version this client saw committed in the last ``STALE_SNAPSHOT_SECONDS``.

        Discovery may start there without asking the store whether it exists:
        expiry never removes the latest version, nor one younger than its
        minimum retention, so such a version cannot have vanished since.
        """
        with self._lock:
            known = self._known
        if known is None or time.monotonic() - known[1] > STALE_SNAPSHOT_SECONDS:
            return None
        return known[0]

    def _saw_committed(self, version: int) -> None:
        with self._lock:
            if self._known is None or version >= self._known[0]:
                self._known = (version, time.monotonic())

    def after_commit(self, state: DatabaseState) -> None:
        """After a commit landed: cache the new state, update the hint, checkpoint when due."""
        state.confirm()
        with self._lock:
            if self._cached is None or state.version > self._cached.version:
                self._cached = state
        self._saw_committed(state.version)
        if self.log.hint_due(state.version):
            self.log.write_latest_hint(state.version)
        if state.version > 0 and state.version % self.checkpoint_interval(state) == 0:
            self._write_checkpoint(state)
            if state.protocol.format_version >= INLINE_FORMAT_VERSION:  # else nothing is inlined
                # Imported here, and only here: mere.maintain costs ~60 ms to import.
                from mere.maintain.inline import flush_after_checkpoint

                flush_after_checkpoint(self, state)

    @property
    def properties(self) -> dict[str, str]:
        """The database properties at the latest version (docs/format.md §2.3)."""
        database = self.latest_state().database
        return dict(database.properties) if database is not None else {}

    def set_properties(self, properties: Mapping[str, str | None]) -> int:
        """Set database properties (None removes one) in a transaction of their own.

        Returns the committed version. See :meth:`Transaction.set_database_properties`.
        """
        with self.transaction() as tx:
            tx.set_database_properties(properties)
        assert tx.commit_version is not None
        return tx.commit_version

    def checkpoint_interval(self, state: DatabaseState | None = None) -> int:
        return checkpoint_interval((state or self.latest_state()).properties)

    def _write_checkpoint(self, state: DatabaseState) -> None:
        try:
            self.log.write_checkpoint(
                state.version, state.timestamp, state.checkpoint_actions(), state.checkpoint_files()
            )
        except Exception as exc:  # the commit stands, whatever happens here; a later one retries
            log.warning("could not write the checkpoint at version %d: %s", state.version, exc)

    @property
    def version(self) -> int:
        """The latest committed version."""
        return self.latest_state().version

    def snapshot(
        self, version: int | str | None = None, timestamp: Moment | None = None
    ) -> Snapshot:
        """Every table at one version: the latest, a given version, or as of a time.

        ``version`` may also be the name of a live export or tag (``"q3-close"``):
        the version it is at. ``timestamp`` selects the newest version committed
        at or before it: a datetime (naive means UTC), a date (its midnight
        UTC), an ISO 8601 string, or ms since the epoch (see :mod:`mere.timestamps`).

        Raises:
            VersionNotFound: the version does not exist (yet, or any more);
                ``mere.maintain.ExportNotFound`` for a name no export or tag has.
        """
        if version is not None and timestamp is not None:
            raise InvalidArgument("pass version or timestamp, not both")
        if version is None and timestamp is None:
            return Snapshot(self.store, self.latest_state())
        if isinstance(version, str):
            from mere.maintain.export import resolve_named_version

            version = resolve_named_version(self, version)
        latest = self.log.latest_version()
        if latest is None:
            raise DatabaseNotFound(f"the database at {self.uri} has no log any more")
        if timestamp is not None:
            version = self.log.version_at_timestamp(epoch_ms(timestamp), 0, latest)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InvalidArgument(f"a version is a non-negative int, not {version!r}")
        if version > latest:
            raise VersionNotFound(f"version {version} does not exist; the latest is {latest}")
        return Snapshot(self.store, self.state_at(version))

    def tables(self) -> list[str]:
        """Table names at the latest version."""
        return self.latest_state().table_names()

    def table(self, name: str) -> Table:
        """A handle on a table by name; each call on it is its own transaction.

        The handle does not pin a version: every call resolves the name at the
        latest version then.

        Raises:
            TableNotFound: no such table at the latest version.
        """
        check_table_name(name)
        # A client that keeps committing already holds the latest state it saw a
        # moment ago: a table found there needs no request (each verb finds the
        # latest version anyway); only a miss is checked against the store.
        state = self._fresh_cached_state()
        if state is None or state.table_by_name(name) is None:
            if self.latest_state().table_by_name(name) is None:
                raise TableNotFound(name)
        return Table(self, name)

    def transaction(
        self, isolation: Isolation = DEFAULT_ISOLATION, *, max_commit_attempts: int | None = None
    ) -> Transaction:
        """Begin a transaction on the latest version (see :class:`Transaction`)."""
        return self.begin(isolation, max_commit_attempts=max_commit_attempts)

    def begin(
        self,
        isolation: Isolation = DEFAULT_ISOLATION,
        *,
        state: DatabaseState | None = None,
        max_commit_attempts: int | None = None,
    ) -> Transaction:
        """A transaction reading ``state`` (default: the latest version)."""
        return Transaction(
            self.store,
            self.log,
            state if state is not None else self.latest_state(),
            isolation,
            after_commit=self.after_commit,
            max_commit_attempts=(
                self.max_commit_attempts if max_commit_attempts is None else max_commit_attempts
            ),
            target_file_size=self.target_file_size,
        )

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] = (),
        properties: dict[str, str] | None = None,
        if_not_exists: bool = False,
        primary_key: Sequence[str] | None = None,
    ) -> Table:
        """Create a table in a transaction of its own (see Transaction.create_table)."""
        with self.transaction() as tx:
            tx.create_table(
                name,
                schema,
                partition_by=partition_by,
                properties=properties,
                if_not_exists=if_not_exists,
                primary_key=primary_key,
            )
        return Table(self, name)

    def drop_table(self, name: str, *, if_exists: bool = False) -> None:
        """Drop a table in a transaction of its own."""
        with self.transaction() as tx:
            tx.drop_table(name, if_exists=if_exists)

    def sql(
        self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> pa.Table | None:
        """Run a SQL script: queries with DuckDB, statements with mere's verbs (``mere[sql]``).

        Without ``BEGIN`` each statement commits on its own; ``BEGIN ... COMMIT``
        makes the statements between one transaction. Returns the last
        statement's result: a query's rows, ``count`` for INSERT/UPDATE/DELETE/MERGE,
        None otherwise. See :mod:`mere.sql`.
        """
        from mere.sql import run_script

        return run_script(self, text, params)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """One entry per commit, newest first (see :func:`mere.maintain.history.history`)."""
        from mere.maintain.history import history

        return history(self, limit)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<mere.Database {self.uri!r}>"

    # --- maintenance (mere.maintain) -----------------------------------------------

    def checkpoint(self) -> int:
        """Write a checkpoint at the latest version now; return that version."""
        from mere.maintain.checkpoint import checkpoint

        return checkpoint(self)

    def check(self, *, repair: bool = False) -> CheckResult:
        """Verify the log, checkpoints, live data files and hints; repair what is safe to.

        See :func:`mere.maintain.check.check`.
        """
        from mere.maintain.check import check

        return check(self, repair=repair)

    def restore(
        self,
        version: int | None = None,
        *,
        timestamp: Moment | None = None,
        tables: Sequence[str] | None = None,
    ) -> RestoreResult:
        """Commit the state of ``tables`` (default: all) as of an older version.

        See :func:`mere.maintain.restore.restore`.
        """
        from mere.maintain.restore import restore

        return restore(self, version, timestamp=timestamp, tables=tables)

    def vacuum(
        self,
        retention: timedelta = timedelta(days=7),
        *,
        dry_run: bool = False,
        force: bool = False,
        min_retention: timedelta | None = None,
    ) -> VacuumResult:
        """Delete data files no retained version needs, once older than ``retention``.

        See :func:`mere.maintain.vacuum.vacuum`.
        """
        from mere.maintain.vacuum import vacuum

        return vacuum(self, retention, dry_run=dry_run, force=force, min_retention=min_retention)

    def expire(
        self,
        retention: timedelta = timedelta(days=30),
        *,
        dry_run: bool = False,
        force: bool = False,
        min_retention: timedelta | None = None,
    ) -> ExpireResult:
        """Delete log entries older than ``retention``; retained versions stay readable.

        See :func:`mere.maintain.expire.expire`.
        """
        from mere.maintain.expire import expire

        return expire(self, retention, dry_run=dry_run, force=force, min_retention=min_retention)

    def export(
        self,
        target_uri: str | os.PathLike[str] | ObjectStore,
        version: int | str | None = None,
        tables: Sequence[str] | None = None,
        mode: Literal["full", "partial", "minimal"] = "full",
        *,
        name: str | None = None,
        since: int | str | None = None,
    ) -> ExportResult:
        """Create a new database whose version 0 is this one's state (see mere.maintain.export).

        ``mode="minimal"`` references this database's files instead of copying
        them, ``"partial"`` references those it had at version ``since``; both
        need a ``name``, under which this database records the export and keeps
        what it shares until :meth:`drop_export`.
        """
        from mere.maintain.export import export

        return export(
            self, target_uri, version=version, tables=tables, mode=mode, name=name, since=since
        )

    def exports(self) -> list[ExportInfo]:
        """The live named exports and tags, by name (see mere.maintain.export)."""
        from mere.maintain.export import list_exports

        return list_exports(self)

    def drop_export(self, name: str) -> int:
        """End a named export (or tag); returns the version that records it.

        Vacuum and expiry may then reclaim what it kept.
        """
        from mere.maintain.export import drop_export

        return drop_export(self, name)

    def tag(self, name: str, version: int | str | None = None) -> ExportInfo:
        """Name a version (default: the latest) and keep it readable until :meth:`drop_tag`.

        A tag is an export with no target (mode ``"tag"``): ``snapshot(version=name)``
        reads it; expiry and vacuum keep its version and files.
        """
        from mere.maintain.export import tag

        return tag(self, name, version)

    def drop_tag(self, name: str) -> int:
        """Drop a tag (not an export); returns the version that records it."""
        from mere.maintain.export import drop_export

        return drop_export(self, name, tag_only=True)


#: How often ``Table.append`` with ``on_duplicate`` re-runs after losing a key race.
UPSERT_ATTEMPTS = 20


class Table:
    """A table by name at the latest version; each call is a one-statement transaction."""

    def __init__(self, db: Database, name: str) -> None:
        self._db = db
        self.name = name

    def _snapshot(self) -> TableSnapshot:
        return Snapshot(self._db.store, self._db.latest_state()).table(self.name)

    def _autocommit(self, work: Callable[[TxTable], T]) -> T:
        tx = self._db.transaction()
        return run_statement(tx, lambda _: work(tx.table(self.name)), autocommit=True)

    @property
    def schema(self) -> pa.Schema:
        return self._snapshot().schema

    @property
    def partition_by(self) -> list[str]:
        return self._snapshot().partition_by

    def append(
        self,
        data: Any,
        *,
        schema_mode: SchemaMode = "strict",
        on_duplicate: OnDuplicate = "error",
    ) -> int:
        """Append rows in a transaction of their own; returns the committed version.

        An upsert (``on_duplicate="skip"`` or ``"update"``, see
        :meth:`TxTable.append`) that loses a race to a conflicting commit (one
        that inserted one of its keys, or rewrote a file it rewrites) runs again
        on the new version, with jittered backoff, at most ``UPSERT_ATTEMPTS``
        times: concurrent upserts never duplicate a key.
        """
        if isinstance(data, pa.RecordBatchReader):
            data = data.read_all()  # read once: a second attempt must see the rows too
        if on_duplicate == "error":
            version = self._append_from_cache(data, schema_mode)
            if version is not None:
                return version
        attempts = UPSERT_ATTEMPTS if on_duplicate != "error" else 1
        for attempt in range(1, attempts + 1):
            tx = self._db.transaction()
            try:
                table = tx.table(self.name)
                run_statement(
                    tx,
                    lambda _, t=table: t.append(  # type: ignore[misc]
                        data, schema_mode=schema_mode, on_duplicate=on_duplicate
                    ),
                    autocommit=True,
                )
            except ConflictError:
                # An upsert re-reads what it decides on, so running it again on the
                # new version is always right; a plain append's conflict is the user's.
                if attempt == attempts:
                    raise
                time.sleep(random.uniform(0, min(0.5, 0.005 * 2**attempt)))
                continue
            assert tx.commit_version is not None
            return tx.commit_version
        raise AssertionError("unreachable")

    def _append_from_cache(self, data: Any, schema_mode: SchemaMode) -> int | None:
        """A blind append by a client that keeps committing: no request to find the latest.

        It starts from the state this client saw committed a moment ago and
        puts its commit at the next version directly; losing that race only
        makes it rebase onto the winners (a blind append conflicts with none
        but a change of the table itself). If anything goes wrong that a
        fresher state could change — another client altered, dropped or
        re-created the table — it returns None and the caller starts over
        from the latest version, so no error ever comes from a stale start.
        """
        state = self._db._fresh_cached_state()
        if state is None or state.table_by_name(self.name) is None:
            return None
        tx = self._db.begin(state=state)
        try:
            table = tx.table(self.name)
            run_statement(
                tx, lambda _: table.append(data, schema_mode=schema_mode), autocommit=True
            )
        except (ConflictError, SchemaMismatch, ConstraintViolation, TableNotFound):
            return None
        return tx.commit_version

    def delete(self, where: str) -> int:
        """Delete matching rows in a transaction of their own; returns how many."""
        return self._autocommit(lambda t: t.delete(where))

    def update(self, where: str | None, set: dict[str, Any]) -> int:
        """Update matching rows in a transaction of their own; returns how many."""
        return self._autocommit(lambda t: t.update(where, set))

    def overwrite(self, data: Any, where: str | None = None) -> int:
        """Replace all rows, or those matching ``where``, in a transaction of their own."""
        return self._autocommit(lambda t: t.overwrite(data, where))

    def merge(
        self, source: Any, on: str, *, source_alias: str = "s", target_alias: str = "t"
    ) -> TableMerger:
        """Start a MERGE (upsert) in a transaction of its own; ``execute()`` commits it.

        The transaction reads the latest version as of this call; ``execute()``
        commits it, or aborts it if anything raises. A builder never executed
        leaves nothing behind. See :class:`mere.ops.merge.TableMerger`.
        """
        from mere.ops.merge import TableMerger

        tx = self._db.transaction()
        try:
            return TableMerger(
                tx.table(self.name),
                source,
                on,
                source_alias=source_alias,
                target_alias=target_alias,
                commit=True,
            )
        except Exception:
            tx.abort()
            raise

    def scan(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        return self._snapshot().scan(columns, filter)

    def scan_batches(
        self, columns: Sequence[str] | None = None, filter: str | None = None
    ) -> pa.RecordBatchReader:
        return self._snapshot().scan_batches(columns, filter)

    def describe(self) -> dict[str, Any]:
        state = self._db.latest_state()
        table = state.table_by_name(self.name)
        if table is None:
            raise TableNotFound(self.name, state.version)
        return describe_table(table, state.version)

    def __repr__(self) -> str:
        return f"<mere.Table {self.name!r}>"

    # --- maintenance (mere.maintain) -----------------------------------------------

    def compact(
        self,
        target_file_size: int | None = None,
        where: str | None = None,
        sort_by: Sequence[str] | None = None,
        *,
        zorder_by: Sequence[str] | None = None,
    ) -> CompactResult:
        """Bin-pack small files, optionally sorting or z-ordering (see mere.maintain.compact)."""
        from mere.maintain.compact import compact

        return compact(
            self._db,
            self.name,
            target_file_size=target_file_size,
            where=where,
            sort_by=sort_by,
            zorder_by=zorder_by,
        )

    def export_delta(
        self, target_uri: str | os.PathLike[str] | ObjectStore, version: int | None = None
    ) -> DeltaExportResult:
        """Write this table as a Delta Lake table at ``target_uri`` (see mere.maintain.delta)."""
        from mere.maintain.delta import export_delta

        return export_delta(self._db, self.name, target_uri, version=version)
