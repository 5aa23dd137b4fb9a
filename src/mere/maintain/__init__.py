"""Maintenance verbs: history, restore, compact, vacuum, expire, checkpoint, export, tags.

Each verb is a function taking the :class:`~mere.database.Database` (or a
table name) in its own module; ``Database`` and ``Table`` expose them as
methods. They are built only from the log and the transaction primitives, so
every change they make is an ordinary, atomic commit (restore, compaction) or
a deletion of objects no retained version needs (vacuum, expire).
"""

from mere.maintain.check import CheckResult, Finding, check
from mere.maintain.checkpoint import checkpoint
from mere.maintain.common import DataFileMissing, RetentionTooShort
from mere.maintain.compact import CompactResult, compact
from mere.maintain.delta import DeltaExportError, DeltaExportResult, export_delta
from mere.maintain.expire import DEFAULT_LOG_RETENTION, ExpireResult, expire
from mere.maintain.export import (
    ExportExists,
    ExportInfo,
    ExportNotFound,
    ExportResult,
    ExportTargetExists,
    drop_export,
    export,
    list_exports,
    tag,
)
from mere.maintain.history import history
from mere.maintain.restore import RestoreResult, restore
from mere.maintain.vacuum import DEFAULT_RETENTION, VacuumResult, vacuum
from mere.properties import DEFAULT_MIN_RETENTION, MIN_RETENTION_PROPERTY, parse_duration

__all__ = [
    "CheckResult",
    "Finding",
    "check",
    "DEFAULT_LOG_RETENTION",
    "DEFAULT_MIN_RETENTION",
    "DEFAULT_RETENTION",
    "MIN_RETENTION_PROPERTY",
    "CompactResult",
    "DataFileMissing",
    "DeltaExportError",
    "DeltaExportResult",
    "ExpireResult",
    "ExportExists",
    "ExportInfo",
    "ExportNotFound",
    "ExportResult",
    "ExportTargetExists",
    "RestoreResult",
    "RetentionTooShort",
    "VacuumResult",
    "checkpoint",
    "compact",
    "drop_export",
    "expire",
    "export",
    "export_delta",
    "history",
    "list_exports",
    "parse_duration",
    "restore",
    "tag",
    "vacuum",
]
