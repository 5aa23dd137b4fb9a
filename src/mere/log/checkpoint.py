"""Checkpoints: the full state at one version, as one Parquet file.

A checkpoint lets a reader skip replaying every commit since version 0. It is
written create-only next to the commits (``_log/<version>.checkpoint.parquet``)
and holds one row per live action: the protocol, the database and table
metadata, every live data file and every application transaction marker.
Data files get real columns (path, size, rows, ...) so that loading a million
of them does not mean parsing a million JSON objects; the rarer actions keep
their JSON body in ``payload``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from mere.errors import CorruptLog, FormatVersionError
from mere.log.actions import (
    FORMAT_VERSION,
    Action,
    AddFile,
    AppTxn,
    DatabaseMeta,
    Export,
    Protocol,
    TableMeta,
    _Bad,
    _data_path,
    _str_dict,
    action_from_json,
    action_to_json,
)

CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("table_id", pa.string()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("modification_time", pa.int64()),
        pa.field("partition_values", pa.string()),
        pa.field("stats", pa.string()),
        pa.field("payload", pa.string()),
    ]
)
_KINDS = {
    Protocol: "protocol",
    DatabaseMeta: "database",
    TableMeta: "metadata",
    AppTxn: "txn",
    Export: "export",
}


@dataclass(frozen=True)
class CheckpointData:
    version: int
    timestamp: int  # the commit timestamp of ``version``
    actions: list[Action]


def encode_checkpoint(version: int, timestamp: int, actions: Iterable[Action]) -> bytes:
    """Serialize the live actions of a version into checkpoint bytes."""
    cols: dict[str, list[object]] = {f.name: [] for f in CHECKPOINT_SCHEMA}
    fmt = FORMAT_VERSION
    for a in actions:
        if isinstance(a, Protocol):
            fmt = a.format_version  # a database still at an older format keeps it readable
        row: dict[str, object] = dict.fromkeys(cols)
        if isinstance(a, AddFile):
            row.update(
                kind="add",
                table_id=a.table_id,
                path=a.path,
                size=a.size,
                rows=a.rows,
                modification_time=a.modification_time,
                partition_values=json.dumps(a.partition_values, ensure_ascii=False),
                stats=None if a.stats is None else json.dumps(a.stats, ensure_ascii=False),
            )
        else:
            kind = _KINDS[type(a)]
            row.update(kind=kind, payload=json.dumps(action_to_json(a)[kind], ensure_ascii=False))
            if isinstance(a, TableMeta):
                row["table_id"] = a.id
        for name, value in row.items():
            cols[name].append(value)
    table = pa.Table.from_pydict(cols, schema=CHECKPOINT_SCHEMA).replace_schema_metadata(
        {
            "mere.version": str(version),
            "mere.timestamp": str(timestamp),
            "mere.formatVersion": str(fmt),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return bytes(sink.getvalue())


def decode_checkpoint(key: str, data: bytes) -> CheckpointData:
    """Parse checkpoint bytes; CorruptLog naming ``key`` on any defect."""
    try:
        table = pq.read_table(pa.BufferReader(_arrow_owned(data)))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptLog(key, f"unreadable Parquet: {exc}") from None
    meta = table.schema.metadata or {}
    try:
        version = int(meta[b"mere.version"])
        timestamp = int(meta[b"mere.timestamp"])
        fmt = int(meta[b"mere.formatVersion"])
    except (KeyError, ValueError):
        raise CorruptLog(key, "missing or invalid mere.* metadata") from None
    if fmt > FORMAT_VERSION:
        raise FormatVersionError(
            f"checkpoint {key} has format version {fmt}; this mere reads up to {FORMAT_VERSION}",
            help="upgrade mere",
        )
    if not table.schema.equals(CHECKPOINT_SCHEMA.with_metadata(table.schema.metadata)):
        raise CorruptLog(key, "unexpected checkpoint columns")
    actions: list[Action] = []
    try:
        columns = {name: table.column(name).to_pylist() for name in table.column_names}
        for i, kind in enumerate(columns["kind"]):
            if kind == "add":
                table_id, path = columns["table_id"][i], columns["path"][i]
                if not isinstance(table_id, str) or not isinstance(path, str):
                    raise _Bad(f"row {i}: add without table id or path")
                stats = columns["stats"][i]
                parts = _str_dict(
                    json.loads(columns["partition_values"][i] or "{}"), "partitionValues", True
                )
                stats = None if stats is None else json.loads(stats)
                if stats is not None and not isinstance(stats, dict):
                    raise _Bad(f"row {i}: stats must be an object")
                actions.append(
                    AddFile(
                        table_id=table_id,
                        path=_data_path(table_id, path),
                        size=_int(columns["size"][i]),
                        rows=_int(columns["rows"][i]),
                        partition_values=parts,
                        stats=stats,
                        modification_time=_int(columns["modification_time"][i]),
                    )
                )
            elif kind in _KINDS.values():
                payload = json.loads(columns["payload"][i] or "null")
                action = action_from_json({kind: payload})
                if isinstance(action, AddFile) or not isinstance(action, tuple(_KINDS)):
                    raise _Bad(f"row {i}: unexpected action")
                actions.append(action)  # type: ignore[arg-type]
            else:
                raise _Bad(f"row {i}: unknown kind {kind!r}")
    except (_Bad, ValueError, TypeError) as exc:
        raise CorruptLog(key, str(exc)) from None
    return CheckpointData(version, timestamp, actions)


def _arrow_owned(data: bytes) -> pa.Buffer:
    """A copy of ``data`` in memory Arrow allocated.

    ``pq.read_table`` may drop its last reference to its source on one of
    Arrow's threads after it returns. Releasing a buffer that wraps Python
    bytes takes the GIL there; if the interpreter is finalizing by then,
    CPython ends that thread with ``pthread_exit``, whose unwinding through
    Arrow's C++ frames aborts the process ("terminate called without an
    active exception"). An Arrow-owned buffer is released without the GIL.
    """
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


def _int(value: object) -> int:
    if not isinstance(value, int) or value < 0:
        raise _Bad("missing or negative integer field")
    return value
