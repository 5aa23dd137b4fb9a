"""The log layer: commit and checkpoint encoding, version discovery, create-only commits."""

from mere.log.actions import (
    FORMAT_VERSION,
    ISOLATION_LEVELS,
    Action,
    AddFile,
    AppTxn,
    Commit,
    CommitInfo,
    DatabaseMeta,
    DropTable,
    Protocol,
    RemoveFile,
    TableMeta,
    decode_commit,
    encode_commit,
)
from mere.log.log import Log, PutOutcome

__all__ = [
    "FORMAT_VERSION",
    "ISOLATION_LEVELS",
    "Action",
    "AddFile",
    "AppTxn",
    "Commit",
    "CommitInfo",
    "DatabaseMeta",
    "DropTable",
    "Log",
    "Protocol",
    "PutOutcome",
    "RemoveFile",
    "TableMeta",
    "decode_commit",
    "encode_commit",
]
