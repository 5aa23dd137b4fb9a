"""The actions a commit is made of, and their newline-delimited JSON encoding.

A commit file holds one JSON object per line; each object has exactly one
key naming the action (``commitInfo``, ``protocol``, ``database``,
``metadata``, ``add``, ``remove``, ``dropTable``, ``txn``, and from format
version 2 ``export`` and ``dropExport``) whose value holds its fields.
``commitInfo`` is always the first line. ``docs/format.md`` specifies every
field.

Decoding is strict: anything malformed raises :class:`~mere.errors.CorruptLog`
naming the file, never another exception.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from mere.errors import CorruptLog, FormatVersionError
from mere.log.inlined import inline_kind_error
from mere.schema import schema_from_json, schema_to_json
from mere.storage.base import check_key

#: The newest format version this mere reads and writes (docs/format.md §2.2).
FORMAT_VERSION = 4
#: The format version a new database starts at: it moves to a newer one only
#: when it first uses what needs it, so older readers keep reading the rest.
BASE_FORMAT_VERSION = 1
#: Named exports and tags (``export``/``dropExport``) and absolute data paths need this.
EXPORTS_FORMAT_VERSION = 2
#: Inlined data files (an ``add`` carrying its Parquet bytes, §2.5) need this.
INLINE_FORMAT_VERSION = 3
#: Inlined data files carried as Arrow IPC streams (§2.5) need this.
ARROW_INLINE_FORMAT_VERSION = 4
#: What an ``export`` action's ``mode`` may be; the last three keep files from vacuum.
EXPORT_MODES = ("full", "partial", "minimal", "tag")
ISOLATION_LEVELS = ("snapshot", "write_serializable", "serializable")
_TABLE_ID = re.compile(r"[0-9a-f]{32}\Z")


@dataclass(frozen=True)
class CommitInfo:
    """Who committed what, when: always the first action of a commit."""

    commit_id: str
    timestamp: int  # milliseconds since the epoch; never below the previous commit's
    read_version: int | None
    isolation: str
    operation: str
    parameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    engine: str = "mere"
    #: True when the transaction only added rows without reading or removing any:
    #: such commits never invalidate reads below the serializable level.
    is_blind_append: bool = False


@dataclass(frozen=True)
class Protocol:
    """The format version a reader must understand to read the database."""

    format_version: int


@dataclass(frozen=True)
class DatabaseMeta:
    """Database-wide identity and settings: in version 0, and in any commit that changes them."""

    id: str
    properties: dict[str, str]
    created_time: int


@dataclass(frozen=True)
class TableMeta:
    """A table's full metadata; the latest one per table id wins.

    The first ``metadata`` action for an id creates the table.
    """

    id: str
    name: str
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    properties: dict[str, str]
    created_time: int

    @property
    def prefix(self) -> str:
        """The key prefix under which the table's data files live."""
        return f"tables/{self.id}/"


@dataclass(frozen=True)
class AddFile:
    """A data file that becomes part of a table.

    ``path`` is relative to the table's prefix. ``partition_values`` holds
    each partition column's canonical text (None for null). ``stats`` is the
    JSON statistics object (``numRecords``, ``minValues``, ``maxValues``,
    ``nullCount``), decoded against the schema only when a scan needs it.
    """

    table_id: str
    path: str
    size: int
    rows: int
    partition_values: dict[str, str | None]
    stats: dict[str, Any] | None
    modification_time: int
    data_change: bool = True
    #: The file's Parquet bytes when it is inlined in the log (format version 3):
    #: no object exists at ``path``, which stays the file's identity.
    inline: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RemoveFile:
    """A data file that stops being part of a table (a tombstone for vacuum)."""

    table_id: str
    path: str
    deletion_timestamp: int
    data_change: bool = True
    size: int | None = None
    rows: int | None = None


@dataclass(frozen=True)
class DropTable:
    """The table stops existing; its files are garbage once unreferenced."""

    table_id: str
    name: str


@dataclass(frozen=True)
class AppTxn:
    """An application's idempotency marker: (app_id, version) was committed."""

    app_id: str
    version: int
    last_updated: int


@dataclass(frozen=True)
class Export:
    """A named version of the database: an export to ``target``, or a tag (format version 2).

    ``mode`` is one of :data:`EXPORT_MODES`. ``tables`` names the exported
    tables as of ``version`` (None: all of them). A ``partial`` export shares
    the files that were already live at version ``since`` and copied the
    rest. While it is live, a ``minimal``, ``partial`` or ``tag`` export keeps
    its version readable and the files it shares from vacuum and expiry.
    """

    name: str
    version: int
    mode: str
    target: str | None
    tables: tuple[str, ...] | None
    since: int | None
    created_time: int

    @property
    def protects(self) -> bool:
        """Whether the export keeps its version and files from expiry and vacuum."""
        return self.mode != "full"


@dataclass(frozen=True)
class DropExport:
    """The named export or tag ends: what it kept may now be expired and vacuumed."""

    name: str


Action = (
    Protocol
    | DatabaseMeta
    | TableMeta
    | AddFile
    | RemoveFile
    | DropTable
    | AppTxn
    | Export
    | DropExport
)


@dataclass(frozen=True)
class Commit:
    """A decoded commit file."""

    version: int
    info: CommitInfo
    actions: tuple[Action, ...]


# --- encoding ------------------------------------------------------------------


def action_to_json(action: Action | CommitInfo) -> dict[str, Any]:
    match action:
        case CommitInfo():
            return {
                "commitInfo": {
                    "commitId": action.commit_id,
                    "timestamp": action.timestamp,
                    "readVersion": action.read_version,
                    "isolation": action.isolation,
                    "operation": action.operation,
                    "operationParameters": action.parameters,
                    "operationMetrics": action.metrics,
                    "engine": action.engine,
                    "isBlindAppend": action.is_blind_append,
                }
            }
        case Protocol():
            return {"protocol": {"formatVersion": action.format_version}}
        case DatabaseMeta():
            return {
                "database": {
                    "id": action.id,
                    "properties": action.properties,
                    "createdTime": action.created_time,
                }
            }
        case TableMeta():
            return {
                "metadata": {
                    "id": action.id,
                    "name": action.name,
                    "schema": schema_to_json(action.schema),
                    "partitionColumns": list(action.partition_columns),
                    "properties": action.properties,
                    "createdTime": action.created_time,
                }
            }
        case AddFile():
            add: dict[str, Any] = {
                "tableId": action.table_id,
                "path": action.path,
                "size": action.size,
                "rows": action.rows,
                "partitionValues": action.partition_values,
                "stats": action.stats,
                "modificationTime": action.modification_time,
                "dataChange": action.data_change,
            }
            if action.inline is not None:
                add["inline"] = base64.b64encode(action.inline).decode("ascii")
            return {"add": add}
        case RemoveFile():
            body: dict[str, Any] = {
                "tableId": action.table_id,
                "path": action.path,
                "deletionTimestamp": action.deletion_timestamp,
                "dataChange": action.data_change,
            }
            if action.size is not None:
                body["size"] = action.size
            if action.rows is not None:
                body["rows"] = action.rows
            return {"remove": body}
        case DropTable():
            return {"dropTable": {"tableId": action.table_id, "name": action.name}}
        case AppTxn():
            return {
                "txn": {
                    "appId": action.app_id,
                    "version": action.version,
                    "lastUpdated": action.last_updated,
                }
            }
        case Export():
            return {
                "export": {
                    "name": action.name,
                    "version": action.version,
                    "mode": action.mode,
                    "target": action.target,
                    "tables": None if action.tables is None else list(action.tables),
                    "since": action.since,
                    "createdTime": action.created_time,
                }
            }
        case DropExport():
            return {"dropExport": {"name": action.name}}
    raise TypeError(f"not an action: {action!r}")


#: One encoder for every line (``json.dumps`` with options builds one per call).
_LINE_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


#: The one decoder for every line: strict JSON, as the encoder writes it (no NaN or Infinity).
_LINE_DECODER = json.JSONDecoder(parse_constant=_not_json)


def encode_commit(info: CommitInfo, actions: list[Action] | tuple[Action, ...]) -> bytes:
    """Serialize a commit: commitInfo first, then the actions, one JSON object a line."""
    lines = [action_to_json(info)] + [action_to_json(a) for a in actions]
    return "".join(_LINE_ENCODER.encode(obj) + "\n" for obj in lines).encode()


# --- decoding -------------------------------------------------------------------


class _Bad(Exception):
    """Internal: a field failed validation (turned into CorruptLog with the file name)."""


def _get(
    obj: dict[str, Any], name: str, kind: type | tuple[type, ...], optional: bool = False
) -> Any:
    if name not in obj or obj[name] is None:
        if optional:
            return None
        raise _Bad(f"missing field {name!r}")
    value = obj[name]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise _Bad(f"field {name!r} has the wrong type ({type(value).__name__})")
    return value


INT64_MAX = 2**63 - 1
#: Timestamps are milliseconds from 1970 up to the end of year 9999.
MAX_TIMESTAMP_MS = 253_402_300_799_999


def _count(obj: dict[str, Any], name: str, optional: bool = False) -> Any:
    """A non-negative integer that fits in int64 (sizes, row counts, versions)."""
    value = _get(obj, name, int, optional)
    if value is not None and not 0 <= value <= INT64_MAX:
        raise _Bad(f"field {name!r} is out of range ({value})")
    return value


def _ms(obj: dict[str, Any], name: str) -> int:
    """A timestamp in milliseconds since the epoch, between 1970 and 9999."""
    value: int = _get(obj, name, int)
    if not 0 <= value <= MAX_TIMESTAMP_MS:
        raise _Bad(f"timestamp {name!r} is out of range ({value})")
    return value


def _table_id(obj: dict[str, Any], name: str = "tableId") -> str:
    value = _get(obj, name, str)
    if not _TABLE_ID.match(value):
        raise _Bad(f"invalid table id {value!r}")
    return str(value)


def _data_path(table_id: str, path: str) -> str:
    try:
        if is_external_path(path):
            external_location(table_id, path)
        else:
            check_key(f"tables/{table_id}/{path}")
    except Exception as exc:
        raise _Bad(f"invalid data file path {path!r}: {exc}") from None
    return path


#: Store URI schemes an absolute data path may name (those ``open_store`` opens).
EXTERNAL_SCHEMES = frozenset(
    {"file", "memory", "s3", "s3a", "az", "azure", "abfs", "abfss", "gs", "gcs"}
)
_EXTERNAL = re.compile(r"([a-z][a-z0-9+.-]*)://")


def is_external_path(path: str) -> bool:
    """Whether a data path is an absolute URI (a file of another database, §11.6).

    A relative path never holds ``//`` (an empty segment), so the two cannot be mixed up.
    """
    return "://" in path


def external_location(table_id: str, path: str) -> tuple[str, str]:
    """Split an absolute data path into (store root URI, key under that root).

    The root is everything before the last ``/tables/<table_id>/``; the key is
    ``tables/<table_id>/`` and the rest, as is (docs/format.md §11.6).

    Raises:
        ValueError: the path is not a well-formed absolute data path of that table.
    """
    match = _EXTERNAL.match(path)
    if match is None or match.group(1) not in EXTERNAL_SCHEMES:
        raise ValueError("an absolute data path must start with a store URI scheme")
    marker = f"/tables/{table_id}/"
    cut = path.rfind(marker)
    if cut <= match.end():
        raise ValueError(f"an absolute data path must hold {marker.lstrip('/')}")
    root, key = path[:cut], path[cut + 1 :]
    if any(ch in "\\?#" or ord(ch) < 32 for ch in root):
        raise ValueError("the store root of an absolute data path holds forbidden characters")
    check_key(key)
    return root, key


def _or_empty(body: dict[str, Any], name: str) -> Any:
    """An optional object field: absent or null is ``{}`` (docs/format.md §2)."""
    value = body.get(name)
    return {} if value is None else value


def _str_dict(obj: Any, what: str, allow_none: bool = False) -> dict[str, Any]:
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and (isinstance(v, str) or (allow_none and v is None))
        for k, v in obj.items()
    ):
        raise _Bad(f"{what} must map names to strings")
    return obj


def action_from_json(obj: Any) -> Action | CommitInfo:
    """Decode one line's object (raises _Bad on anything malformed)."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise _Bad("a line must be an object with exactly one action key")
    ((kind, body),) = obj.items()
    if not isinstance(body, dict):
        raise _Bad(f"action {kind!r} must hold an object")
    if kind == "commitInfo":
        isolation = _get(body, "isolation", str)
        if isolation not in ISOLATION_LEVELS:
            raise _Bad(f"unknown isolation level {isolation!r}")
        return CommitInfo(
            commit_id=_get(body, "commitId", str),
            timestamp=_ms(body, "timestamp"),
            read_version=_count(body, "readVersion", optional=True),
            isolation=isolation,
            operation=_get(body, "operation", str),
            parameters=_get(body, "operationParameters", dict, optional=True) or {},
            metrics=_get(body, "operationMetrics", dict, optional=True) or {},
            engine=_get(body, "engine", str, optional=True) or "",
            is_blind_append=_get(body, "isBlindAppend", bool, optional=True) is True,
        )
    if kind == "protocol":
        format_version = _count(body, "formatVersion")
        if format_version < BASE_FORMAT_VERSION:
            raise _Bad(f"format version {format_version} (versions start at 1)")
        return Protocol(format_version)
    if kind == "database":
        return DatabaseMeta(
            _get(body, "id", str),
            _str_dict(_or_empty(body, "properties"), "properties"),
            _ms(body, "createdTime"),
        )
    if kind == "metadata":
        try:
            schema = schema_from_json(body.get("schema"))
        except (ValueError, KeyError, TypeError, OverflowError, pa.ArrowException) as exc:
            raise _Bad(f"invalid schema: {exc}") from None
        parts = _get(body, "partitionColumns", list)
        if not all(isinstance(p, str) and p in schema.names for p in parts):
            raise _Bad("partition columns must name columns of the schema")
        return TableMeta(
            _table_id(body, "id"),
            _get(body, "name", str),
            schema,
            tuple(parts),
            _str_dict(_or_empty(body, "properties"), "properties"),
            _ms(body, "createdTime"),
        )
    if kind == "add":
        table_id = _table_id(body)
        stats = _get(body, "stats", dict, optional=True)
        size = _count(body, "size")
        inline = _inline(body, size)
        return AddFile(
            table_id=table_id,
            path=_data_path(table_id, _get(body, "path", str)),
            size=size,
            rows=_count(body, "rows"),
            partition_values=_str_dict(_or_empty(body, "partitionValues"), "partitionValues", True),
            stats=stats,
            modification_time=_ms(body, "modificationTime"),
            data_change=bool(_get(body, "dataChange", bool, optional=True) is not False),
            inline=inline,
        )
    if kind == "remove":
        table_id = _table_id(body)
        return RemoveFile(
            table_id=table_id,
            path=_data_path(table_id, _get(body, "path", str)),
            deletion_timestamp=_ms(body, "deletionTimestamp"),
            data_change=bool(_get(body, "dataChange", bool, optional=True) is not False),
            size=_count(body, "size", optional=True),
            rows=_count(body, "rows", optional=True),
        )
    if kind == "dropTable":
        return DropTable(_table_id(body), _get(body, "name", str))
    if kind == "txn":
        return AppTxn(_get(body, "appId", str), _count(body, "version"), _ms(body, "lastUpdated"))
    if kind == "export":
        return _export(body)
    if kind == "dropExport":
        return DropExport(_export_name(body))
    raise _Bad(f"unknown action {kind!r}")


def _inline(body: dict[str, Any], size: int) -> bytes | None:
    """An add's inlined bytes (standard base64 of exactly ``size`` bytes), if any."""
    if "inline" not in body:
        return None  # the usual case, on every add decoded
    text = _get(body, "inline", str, optional=True)
    if text is None:
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise _Bad(f"inline data is not base64: {exc}") from None
    if len(data) != size:
        raise _Bad(f"inline data holds {len(data)} bytes, the add says size {size}")
    wrong = inline_kind_error(data)
    if wrong is not None:
        raise _Bad(wrong)
    return data


_EXPORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,127}\Z")


def _export_name(body: dict[str, Any]) -> str:
    name: str = _get(body, "name", str)
    if not _EXPORT_NAME.match(name):
        raise _Bad(f"invalid export name {name!r}")
    return name


def _export(body: dict[str, Any]) -> Export:
    mode = _get(body, "mode", str)
    if mode not in EXPORT_MODES:
        raise _Bad(f"unknown export mode {mode!r}")
    target = _get(body, "target", str, optional=True)
    if (target is None) != (mode == "tag"):
        raise _Bad("an export has a target, a tag has none")
    tables = _get(body, "tables", list, optional=True)
    if tables is not None and not all(isinstance(t, str) for t in tables):
        raise _Bad("export tables must be a list of table names")
    version = _count(body, "version")
    since = _count(body, "since", optional=True)
    if (since is None) != (mode != "partial"):
        raise _Bad("a partial export has a since version, other modes none")
    if since is not None and since > version:
        raise _Bad("an export's since version is after its version")
    return Export(
        name=_export_name(body),
        version=version,
        mode=mode,
        target=target,
        tables=None if tables is None else tuple(tables),
        since=since,
        created_time=_ms(body, "createdTime"),
    )


def decode_commit(key: str, version: int, data: bytes) -> Commit:
    """Parse a commit file; raises CorruptLog naming ``key`` on any defect.

    Raises:
        CorruptLog: truncated, garbled, or structurally invalid content.
        FormatVersionError: the commit declares a newer format version.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptLog(key, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not text:
        raise CorruptLog(key, "the commit file is empty (0 bytes)")
    if not text.endswith("\n"):
        raise CorruptLog(key, "truncated: the last line has no newline")
    lines = text[:-1].split("\n")
    decoded: list[Action | CommitInfo] = []
    for number, line in enumerate(lines, start=1):
        try:
            decoded.append(action_from_json(_LINE_DECODER.decode(line)))
        except (_Bad, ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise CorruptLog(key, f"line {number}: {exc}") from None
    info = decoded[0]
    if not isinstance(info, CommitInfo):
        raise CorruptLog(key, "the first line must be commitInfo")
    actions: list[Action] = []
    for a in decoded[1:]:
        if isinstance(a, CommitInfo):
            raise CorruptLog(key, "more than one commitInfo")
        if isinstance(a, Protocol) and a.format_version > FORMAT_VERSION:
            raise FormatVersionError(
                f"the database uses format version {a.format_version} (in {key}); this mere "
                f"reads format versions up to {FORMAT_VERSION}",
                help="upgrade mere to read this database",
            )
        actions.append(a)
    if version == 0 and not any(isinstance(a, Protocol) for a in actions):
        raise CorruptLog(key, "version 0 must carry a protocol action")
    return Commit(version, info, tuple(actions))
