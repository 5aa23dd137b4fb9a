"""Every error mere raises on purpose derives from :class:`MereError`.

Errors that a user can act on carry a ``help`` sentence saying what to do.
Conflict errors carry the winning version, the table and the reason, so a
caller can decide whether to retry the whole transaction.
"""

from __future__ import annotations

from typing import Self


class MereError(Exception):
    """Root of every error raised by mere."""

    help: str = ""

    def __init__(self, message: str, *, help: str | None = None) -> None:
        super().__init__(message)
        if help is not None:
            self.help = help

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base} ({self.help})" if self.help else base


# --- storage -----------------------------------------------------------------


class StorageError(MereError):
    """An object-store operation failed; its effect may or may not have happened."""


class AlreadyExists(StorageError):
    """A create-only write found the key already present. Nothing was written."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object already exists: {key}")
        self.key = key


class NotDurable(StorageError):
    """A create landed (its key now names the bytes) but may not survive a crash.

    The local store raises it when the directory's fsync failed after the link.
    """


class NotWritten(StorageError):
    """A write failed before anything was stored (a read-only or full filesystem, say):
    the key does not name the bytes, and trying again cannot change that by itself."""


class ObjectNotFound(StorageError):
    """The key does not exist in the store."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key}")
        self.key = key


class InvalidKey(StorageError):
    """A key is malformed or would escape the store's root."""


# --- log and format ----------------------------------------------------------


class CorruptLog(MereError):
    """A commit or checkpoint file cannot be decoded; the message names the file."""

    def __init__(self, key: str, reason: str) -> None:
        if ".checkpoint." in key:  # a checkpoint only summarises the log
            help = (
                "restore it from a backup; while the commits it summarises remain, moving "
                "the checkpoint's files away makes readers rebuild from them (`mere check` "
                "says which)"
            )
        else:
            help = (
                "the file was not written by a compatible mere; restore it from a backup; "
                "`mere check` lists every defect of the log"
            )
        super().__init__(f"corrupt log file {key}: {reason}", help=help)
        self.key = key
        self.reason = reason


class DataFileError(MereError):
    """A data file a version references cannot be read; the message names it.

    ``path`` (the file's key or URI), ``table`` and ``version`` are set when
    known: the code that reads a file knows no version, so a read of a
    version adds it on the way up (:meth:`at_version`).
    """

    #: What users can do about it.
    advice = ""

    def __init__(
        self,
        message: str,
        *,
        help: str | None = None,
        path: str | None = None,
        table: str | None = None,
        version: int | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message, help=help)
        self.path = path
        self.table = table
        self.version = version
        self.reason = reason

    @classmethod
    def of(cls, path: str, table: str, *, reason: str = "", version: int | None = None) -> Self:
        """The error for the data file ``path`` of ``table``, its message made from the parts."""
        return cls(
            cls.describe(path, table, version, reason),
            help=cls.advice,
            path=path,
            table=table,
            version=version,
            reason=reason,
        )

    @classmethod
    def describe(cls, path: str, table: str, version: int | None, reason: str) -> str:
        raise NotImplementedError

    def at_version(self, version: int) -> Self:
        """The same error, naming the version being read (itself if it names one already)."""
        if self.version is not None or self.path is None or self.table is None:
            return self
        return type(self).of(self.path, self.table, reason=self.reason, version=version)


class DataFileMissing(DataFileError):
    """A data file a version references no longer exists (vacuum deleted it).

    ``reason`` says where it was looked for when that is not the database's own store.
    """

    advice = (
        "vacuum deleted it: read a newer version; to keep a version readable, tag it "
        "(db.tag) or export it before vacuuming"
    )

    @classmethod
    def describe(cls, path: str, table: str, version: int | None, reason: str) -> str:
        at = "" if version is None else f" (version {version})"
        where = f" {reason}" if reason else ""
        return f"data file {path} of table {table!r}{at} does not exist{where}"


class CorruptDataFile(DataFileError):
    """A data file cannot be read as Parquet, or is not the file the log describes
    (another size, row count or columns): damaged or overwritten after it was written."""

    advice = (
        "the file changed after mere wrote it (truncated or overwritten): restore it from "
        "a backup, or read a version that does not reference it; `mere check` reports "
        "files whose size changed"
    )

    @classmethod
    def describe(cls, path: str, table: str, version: int | None, reason: str) -> str:
        at = "" if version is None else f" (version {version})"
        return f"data file {path} of table {table!r}{at} is damaged: {reason}"


class CorruptInlinedFile(CorruptDataFile):
    """An inlined data file's bytes (held in the log, format §2.5) do not decode."""

    advice = (
        "the log changed after mere wrote it: restore the commit or checkpoint file that "
        "holds these bytes from a backup, or read a version that does not reference it; "
        "`mere check` reports inlined files that do not decode"
    )

    @classmethod
    def describe(cls, path: str, table: str, version: int | None, reason: str) -> str:
        at = "" if version is None else f" (version {version})"
        return (
            f"inlined data file {path} of table {table!r}{at} (its bytes are in the log) "
            f"does not decode: {reason}"
        )


class InvalidCommit(MereError):
    """A commit was refused before publication: readers would reject it."""


class FormatVersionError(MereError):
    """The database was written by a newer format version than this mere reads."""


class VersionNotFound(MereError):
    """The requested version or timestamp does not exist (or was expired)."""


class DatabaseNotFound(MereError):
    """There is no database at the URI and creation was not requested."""


# --- names, schemas, data ----------------------------------------------------


class InvalidArgument(MereError, ValueError):
    """An argument is not valid (a ValueError too); nothing was changed."""


class InvalidName(InvalidArgument):
    """A table or column name (or an id, or properties) is not allowed."""


class TableNotFound(MereError):
    """No table of that name exists at the snapshot being read."""

    def __init__(self, name: str, version: int | None = None) -> None:
        where = f" at version {version}" if version is not None else ""
        super().__init__(f"table {name!r} does not exist{where}")
        self.name = name


class TableExists(MereError):
    """A table of that name already exists."""

    def __init__(self, name: str, existing: str | None = None) -> None:
        if existing is not None and existing != name:
            super().__init__(
                f"cannot create table {name!r}: table {existing!r} exists, and table names "
                "ignore case"
            )
        else:
            super().__init__(f"table {name!r} already exists")
        self.name = name


class SchemaMismatch(MereError):
    """Data does not match the table's schema; nothing was written."""


class ConstraintViolation(MereError):
    """Data violates a NOT NULL or CHECK constraint; nothing was written."""


class DuplicateKey(ConstraintViolation):
    """Rows would give the table a primary key value twice; nothing was written.

    ``keys`` holds up to ten of the duplicate key values (one dict per key).
    """

    def __init__(
        self, message: str, *, keys: list[dict[str, object]], help: str | None = None
    ) -> None:
        super().__init__(message, help=help)
        self.keys = keys


class InvalidExpression(MereError):
    """A SQL expression cannot be parsed or is not supported."""


# --- transactions -------------------------------------------------------------


class TransactionClosed(MereError):
    """The transaction was already committed or aborted."""


class ConflictError(MereError):
    """A concurrent commit conflicts with this transaction; nothing was committed.

    Attributes:
        winning_version: the committed version that conflicts.
        table: the table the conflict is about (None for database-wide ones).
        reason: a short machine-readable reason.
    """

    reason = "conflict"
    help = "re-run the transaction: it will read the new version"

    def __init__(self, message: str, *, winning_version: int, table: str | None) -> None:
        super().__init__(f"{message} (winning version {winning_version}, table {table!r})")
        self.winning_version = winning_version
        self.table = table


class ConcurrentCreateTable(ConflictError):
    """Both transactions created a table of the same name."""

    reason = "concurrent_create_table"


class ConcurrentMetadataChange(ConflictError):
    """A concurrent commit created, dropped or changed the metadata of a table in use."""

    reason = "concurrent_metadata_change"


class ConcurrentDeleteDelete(ConflictError):
    """Both transactions removed the same data file."""

    reason = "concurrent_delete_delete"


class ConcurrentDeleteRead(ConflictError):
    """A concurrent commit removed a data file this transaction read."""

    reason = "concurrent_delete_read"


class ConcurrentAppend(ConflictError):
    """A concurrent commit added data matching what this transaction read."""

    reason = "concurrent_append"


class ConcurrentTransaction(ConflictError):
    """A concurrent commit recorded the same application transaction id."""

    reason = "concurrent_app_transaction"


class ProtocolChanged(ConflictError):
    """A concurrent commit changed the database's format version."""

    reason = "protocol_changed"


class ConcurrentDuplicateKey(ConflictError):
    """A concurrent commit inserted a primary key value this transaction also inserts."""

    reason = "duplicate_key"
    help = "retry the transaction: it will see the other commit's rows"


class RetriesExhausted(ConflictError):
    """The commit kept losing races to non-conflicting commits until the retry limit."""

    reason = "retries_exhausted"
    help = "contention is high; retry later or raise max_commit_attempts"


class CommitOutcomeUnknown(MereError):
    """The commit's put may or may not have landed, and reading it back failed.

    The transaction's data files are kept: if the commit landed they are live.
    """

    help = "check db.history() for the commit id before retrying; no file was deleted"

    def __init__(self, message: str, *, version: int, commit_id: str) -> None:
        super().__init__(message)
        self.version = version
        self.commit_id = commit_id


# --- maintenance, exports, optional dependencies, verification ---------------------


class RetentionTooShort(MereError):
    """A retention below the configured minimum was asked for without ``force=True``."""


class ExportTargetExists(MereError):
    """The export target already holds a database (or one was created there concurrently)."""


class DeltaExportError(MereError):
    """The table cannot be exported as Delta Lake, or the target is taken."""


class MissingDependency(MereError, ImportError):
    """An optional dependency (obstore, for cloud stores) is not installed."""


class VerifyError(MereError):
    """A verify run cannot start or could not finish (not an anomaly: those are reported)."""
