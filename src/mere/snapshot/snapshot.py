"""Read-only views of the database at one version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mere.constraints import primary_key
from mere.errors import TableNotFound
from mere.log.actions import AddFile, TableMeta
from mere.names import check_table_name
from mere.snapshot.planning import select_files
from mere.snapshot.scan import plan_scan, scan_batches, scan_files
from mere.snapshot.state import DatabaseState, TableState
from mere.storage.base import ObjectStore

if TYPE_CHECKING:
    import pyarrow.dataset as ds


def ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class Snapshot:
    """Every table of the database as of one committed version.

    A snapshot never changes: later commits are invisible to it. Every table
    read through one snapshot is at the same version.
    """

    def __init__(self, store: ObjectStore, state: DatabaseState) -> None:
        self._store = store
        self._state = state

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def state(self) -> DatabaseState:
        """The database state this snapshot reads (for engines built on mere)."""
        return self._state

    @property
    def timestamp(self) -> datetime:
        """When this version was committed (UTC)."""
        return ms_to_datetime(self._state.timestamp)

    def tables(self) -> list[str]:
        """Table names at this version, sorted."""
        return self._state.table_names()

    def has_table(self, name: str) -> bool:
        return self._state.table_by_name(check_table_name(name)) is not None

    def table(self, name: str) -> TableSnapshot:
        """Raises TableNotFound if no such table exists at this version."""
        state = self._state.table_by_name(check_table_name(name))
        if state is None:
            raise TableNotFound(name, self.version)
        return TableSnapshot(self._store, state, self.version)

    def sql(self, text: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pa.Table:
        """Run a SQL query over every table at this version (see :mod:`mere.sql`)."""
        from mere.sql import query_snapshot

        return query_snapshot(self._store, self._state, text, params)

    def app_version(self, app_id: str) -> int | None:
        """The last version an application recorded with ``app_id`` (idempotent writes)."""
        txn = self._state.app_txns.get(app_id)
        return None if txn is None else txn.version

    def __repr__(self) -> str:
        return f"<Snapshot version={self.version} tables={len(self._state.tables)}>"


class TableSnapshot:
    """One table at one version."""

    def __init__(self, store: ObjectStore, state: TableState, version: int) -> None:
        self._store = store
        self._state = state
        self.version = version

    @property
    def name(self) -> str:
        return self._state.meta.name

    @property
    def meta(self) -> TableMeta:
        """The table's full metadata (id, physical column names, constraints)."""
        return self._state.meta

    @property
    def id(self) -> str:
        return self._state.meta.id

    @property
    def schema(self) -> pa.Schema:
        return self._state.meta.schema

    @property
    def partition_by(self) -> list[str]:
        return list(self._state.meta.partition_columns)

    @property
    def files(self) -> list[AddFile]:
        return list(self._state.files.values())

    def scan(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        """Rows matching the SQL ``filter`` (all rows if None), as one Arrow table."""
        plan = plan_scan(self._state.meta, columns, filter)
        return scan_files(self._store, plan, select_files(plan, self._state), version=self.version)

    def scan_batches(
        self, columns: Sequence[str] | None = None, filter: str | None = None
    ) -> pa.RecordBatchReader:
        """The same rows as :meth:`scan`, streamed with bounded memory."""
        plan = plan_scan(self._state.meta, columns, filter)
        return scan_batches(
            self._store, plan, select_files(plan, self._state), version=self.version
        )

    def to_dataset(self) -> ds.Dataset:
        """A reusable ``pyarrow.dataset.Dataset`` of the table at this version.

        Engines that scan datasets (DuckDB, polars, pyarrow) push their column
        selection and filters into it; files are skipped by partition values
        and statistics. See :func:`mere.snapshot.dataset.table_dataset`.
        """
        from mere.snapshot.dataset import table_dataset

        return table_dataset(self._store, self._state.meta, self.files)

    def to_pandas(self, columns: Sequence[str] | None = None, filter: str | None = None) -> Any:
        """The rows :meth:`scan` returns, as a pandas DataFrame (needs ``mere[pandas]``)."""
        from mere.snapshot.handoff import to_pandas

        return to_pandas(self.scan(columns, filter))

    def to_polars(self, columns: Sequence[str] | None = None, filter: str | None = None) -> Any:
        """The rows :meth:`scan` returns, as a polars DataFrame (needs ``mere[polars]``)."""
        from mere.snapshot.handoff import to_polars

        return to_polars(self.scan(columns, filter))

    def count(self, filter: str | None = None) -> int:
        """How many rows match ``filter``, from the log's row counts and statistics where it can."""
        from mere.snapshot.handoff import count_rows

        return count_rows(self._store, self._state.meta, self.files, filter)

    def describe(self) -> dict[str, Any]:
        return describe_table(self._state, self.version)


def describe_table(state: TableState, version: int) -> dict[str, Any]:
    """A JSON-friendly description of a table (for ``describe`` and the CLI)."""
    meta = state.meta
    inlined_files, inlined_bytes = state.live.inlined()
    return {
        "name": meta.name,
        "id": meta.id,
        "version": version,
        "created": ms_to_datetime(meta.created_time).isoformat(),
        "schema": [
            {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in meta.schema
        ],
        "partition_by": list(meta.partition_columns),
        "primary_key": primary_key(meta.properties),
        "properties": dict(meta.properties),
        "files": len(state.files),
        "rows": state.rows,
        "size_bytes": state.size,
        "inlined_files": inlined_files,
        "inlined_bytes": inlined_bytes,
    }
