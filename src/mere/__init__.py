"""mere: a serverless ACID database for analytics on object storage.

One put-if-absent log for the whole database gives multi-table atomic
commits, snapshot isolation up to serializable, and time travel, with
immutable Parquet data files and no server::

    import mere
    db = mere.connect("file:///data/lake")
    with db.transaction() as tx:
        tx.table("orders").append(orders)
        tx.table("lineitem").append(items)
"""

from mere.database import Database, Table, connect
from mere.errors import (
    AlreadyExists,
    CommitOutcomeUnknown,
    ConcurrentAppend,
    ConcurrentCreateTable,
    ConcurrentDeleteDelete,
    ConcurrentDeleteRead,
    ConcurrentDuplicateKey,
    ConcurrentMetadataChange,
    ConcurrentTransaction,
    ConflictError,
    ConstraintViolation,
    CorruptDataFile,
    CorruptInlinedFile,
    CorruptLog,
    DatabaseNotFound,
    DataFileMissing,
    DeltaExportError,
    DuplicateKey,
    ExportTargetExists,
    FormatVersionError,
    InvalidArgument,
    InvalidCommit,
    InvalidExpression,
    InvalidKey,
    InvalidName,
    MereError,
    MissingDependency,
    NotWritten,
    ObjectNotFound,
    ProtocolChanged,
    RetentionTooShort,
    RetriesExhausted,
    SchemaMismatch,
    StorageError,
    TableExists,
    TableNotFound,
    TransactionClosed,
    VerifyError,
    VersionNotFound,
)
from mere.snapshot import Snapshot, TableSnapshot
from mere.txn import Transaction, TxTable

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "CommitOutcomeUnknown",
    "ConcurrentAppend",
    "ConcurrentCreateTable",
    "ConcurrentDeleteDelete",
    "ConcurrentDeleteRead",
    "ConcurrentDuplicateKey",
    "ConcurrentMetadataChange",
    "ConcurrentTransaction",
    "ConflictError",
    "ConstraintViolation",
    "CorruptDataFile",
    "CorruptInlinedFile",
    "CorruptLog",
    "DataFileMissing",
    "Database",
    "DatabaseNotFound",
    "DeltaExportError",
    "DuplicateKey",
    "ExportTargetExists",
    "FormatVersionError",
    "InvalidArgument",
    "InvalidCommit",
    "InvalidExpression",
    "InvalidKey",
    "InvalidName",
    "MereError",
    "MissingDependency",
    "NotWritten",
    "ObjectNotFound",
    "ProtocolChanged",
    "RetentionTooShort",
    "RetriesExhausted",
    "SchemaMismatch",
    "Snapshot",
    "StorageError",
    "Table",
    "TableExists",
    "TableNotFound",
    "TableSnapshot",
    "Transaction",
    "TransactionClosed",
    "TxTable",
    "VerifyError",
    "VersionNotFound",
    "__version__",
    "connect",
]
