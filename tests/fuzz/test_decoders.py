"""Hostile bytes for the log's decoders: only CorruptLog (or FormatVersionError) comes out.

``decode_commit`` and ``decode_checkpoint`` read files anybody with write
access to the bucket can put there. Whatever the bytes -- random, a valid
commit with bytes flipped, dropped or inserted, any JSON structure, a valid
action with one field replaced by anything -- they must either decode or
raise :class:`~mere.errors.CorruptLog` naming the file
(:class:`~mere.errors.FormatVersionError` for a newer protocol). Anything
else (KeyError, TypeError, RecursionError, an Arrow error, ...) is a bug.

The last part goes one step further: a commit that *decodes* must also be
usable -- applying it, checkpointing the state, scanning with a filter and
listing the history may raise mere's errors but nothing else. Those tests
found six core bugs (integers beyond int64, out-of-range timestamps, stats of
any shape, invalid UTF-8 in a checkpoint, a decimal precision beyond a C int,
a failing checkpoint failing its commit), fixed since.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import CorruptLog, FormatVersionError, MereError
from mere.log.actions import (
    FORMAT_VERSION,
    AddFile,
    AppTxn,
    CommitInfo,
    DatabaseMeta,
    DropTable,
    Protocol,
    RemoveFile,
    TableMeta,
    action_to_json,
    decode_commit,
    encode_commit,
)
from mere.log.checkpoint import CHECKPOINT_SCHEMA, decode_checkpoint, encode_checkpoint
from mere.log.keys import commit_key
from mere.storage import MemoryStore

KEY = "_log/00000000000000000007.json"
CKPT = "_log/00000000000000000007.checkpoint.parquet"
TABLE_ID = "0123456789abcdef0123456789abcdef"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string()), ("x", pa.float64())]
)
META = TableMeta(TABLE_ID, "orders", SCHEMA, ("p",), {"a": "b"}, 1_700_000_000_000)
ADD = AddFile(
    TABLE_ID,
    "p=FR/part-00000000000000000000000000000000.parquet",
    1234,
    10,
    {"p": "FR"},
    {"numRecords": 10, "minValues": {"id": 1}, "maxValues": {"id": 9}, "nullCount": {"id": 0}},
    1_700_000_000_001,
)
ACTIONS: list[Any] = [
    Protocol(1),
    DatabaseMeta("ab" * 16, {"checkpointInterval": "10"}, 1_700_000_000_000),
    META,
    ADD,
    RemoveFile(TABLE_ID, "p=DE/part-1.parquet", 1_700_000_000_002, True, 10, 2),
    DropTable("fedcba9876543210fedcba9876543210", "gone"),
    AppTxn("app", 3, 1_700_000_000_003),
    AddFile(  # an inlined file (format version 3): its bytes travel in the commit
        TABLE_ID,
        "p=FR/part-11111111111111111111111111111111.parquet",
        7,
        1,
        {"p": "FR"},
        None,
        1_700_000_000_001,
        inline=b"PAR1\x00\xffx",
    ),
]
INFO = CommitInfo("c" * 32, 1_700_000_000_004, 6, "serializable", "TRANSACTION")
VALID = encode_commit(INFO, ACTIONS)
CHECKPOINT = encode_checkpoint(
    7, 1_700_000_000_004, [Protocol(1), ACTIONS[1], META, ADD, ACTIONS[6]]
)
ACTION_NAMES = ["commitInfo", "protocol", "database", "metadata", "add", "remove", "dropTable"]
ACTION_NAMES += ["txn"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)

FUZZ = settings(
    max_examples=int(os.environ.get("MERE_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def decodes_or_corrupt(data: bytes, version: int = 7) -> None:
    """Decoding ``data`` returns a commit or raises CorruptLog/FormatVersionError only."""
    try:
        decode_commit(KEY, version, data)
    except (CorruptLog, FormatVersionError):
        pass


def checkpoint_decodes_or_corrupt(data: bytes) -> None:
    try:
        decode_checkpoint(CKPT, data)
    except (CorruptLog, FormatVersionError):
        pass


def test_the_sample_commit_and_checkpoint_are_valid() -> None:
    commit = decode_commit(KEY, 7, VALID)
    assert commit.info == INFO
    assert list(commit.actions) == ACTIONS
    assert decode_checkpoint(CKPT, CHECKPOINT).version == 7


# --- commits ---------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=2000))
@example(b"")
@example(b"\n")
@example(b"[" * 100_000 + b"\n")
@example(b'{"commitInfo": ' * 5000 + b"\n")
@example(b"\xff\xfe\n")
@example(b'{"commitInfo": {}}\n')
def test_random_bytes_are_rejected_cleanly(data: bytes) -> None:
    decodes_or_corrupt(data)


@FUZZ
@given(st.data())
def test_mutated_commits_are_rejected_cleanly(data: st.DataObject) -> None:
    raw = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "drop", "insert", "truncate", "dup-line"]))
        if not raw:
            break
        at = data.draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "drop":
            del raw[at : at + data.draw(st.integers(1, 8))]
        elif op == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "truncate":
            del raw[at:]
        else:
            lines = bytes(raw).split(b"\n")
            lines.insert(at % len(lines), lines[at % len(lines)])
            raw = bytearray(b"\n".join(lines))
    decodes_or_corrupt(bytes(raw), version=data.draw(st.sampled_from([0, 7])))


@FUZZ
@given(
    st.lists(
        st.tuples(st.sampled_from([*ACTION_NAMES, "other"]), json_values), min_size=1, max_size=4
    ),
    st.booleans(),
)
def test_random_json_actions_are_rejected_cleanly(
    lines: list[tuple[str, Any]], first_is_info: bool
) -> None:
    objects = [{name: body} for name, body in lines]
    if first_is_info:
        objects.insert(0, action_to_json(INFO))
    text = "".join(json.dumps(o) + "\n" for o in objects)
    decodes_or_corrupt(text.encode())


@FUZZ
@given(json_values)
def test_random_json_lines_are_rejected_cleanly(value: Any) -> None:
    decodes_or_corrupt(
        (json.dumps(action_to_json(INFO)) + "\n" + json.dumps(value) + "\n").encode()
    )


@FUZZ
@given(st.data())
def test_one_field_of_a_valid_action_replaced_by_anything(data: st.DataObject) -> None:
    objects = [action_to_json(INFO)] + [action_to_json(a) for a in ACTIONS]
    line = data.draw(st.integers(0, len(objects) - 1))
    ((name, body),) = objects[line].items()
    field = data.draw(st.sampled_from(sorted(body)))
    if data.draw(st.booleans()):
        body[field] = data.draw(json_values)
    else:
        del body[field]
    if name == "metadata" and field == "schema" and data.draw(st.booleans()):
        body["schema"] = {"fields": [data.draw(json_values)]}
    decodes_or_corrupt("".join(json.dumps(o) + "\n" for o in objects).encode())


@pytest.mark.parametrize(
    "schema",
    [
        {"fields": [{"name": "x", "type": {"type": "list", "item": "int64"}, "nullable": True}]},
        pytest.param(
            {"fields": [{"name": "x", "type": "decimal128(99999999999, 2)", "nullable": True}]},
            id="decimal-precision-overflow",
        ),
        {"fields": [{"name": "x", "type": "fixed_size_binary[-1]", "nullable": True}]},
        {"fields": [{"name": "x", "type": "timestamp[us, tz=Not/AZone]", "nullable": True}]},
        {"fields": [{"name": "x", "type": {"type": "map"}, "nullable": True}]},
        {"fields": [{"name": "", "type": "int64", "nullable": True}]},
        {"fields": [{"name": "a", "type": "int64"}, {"name": "A", "type": "int64"}]},
    ],
)
def test_hostile_schemas_are_corrupt(schema: dict[str, Any]) -> None:
    meta = action_to_json(META)
    meta["metadata"]["schema"] = schema
    meta["metadata"]["partitionColumns"] = []
    text = json.dumps(action_to_json(INFO)) + "\n" + json.dumps(meta) + "\n"
    decodes_or_corrupt(text.encode())


def test_a_newer_protocol_is_a_format_version_error() -> None:
    lines = [action_to_json(INFO), {"protocol": {"formatVersion": FORMAT_VERSION + 1}}]
    with pytest.raises(FormatVersionError):
        decode_commit(KEY, 0, "".join(json.dumps(o) + "\n" for o in lines).encode())


@pytest.mark.parametrize(
    "path",
    ["../x.parquet", "/etc/passwd", "a/../../x", "a//b", "a\\b", "a\x00b", ".", "x/..", ""],
)
def test_data_paths_that_escape_are_corrupt(path: str) -> None:
    add = action_to_json(ADD)
    add["add"]["path"] = path
    with pytest.raises(CorruptLog, match="path"):
        decode_commit(
            KEY, 7, (json.dumps(action_to_json(INFO)) + "\n" + json.dumps(add) + "\n").encode()
        )


# --- checkpoints -------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=3000))
@example(b"PAR1")
@example(b"PAR1PAR1")
@example(CHECKPOINT[:-1])
def test_random_checkpoint_bytes_are_rejected_cleanly(data: bytes) -> None:
    checkpoint_decodes_or_corrupt(data)


@FUZZ
@given(st.data())
def test_mutated_checkpoints_are_rejected_cleanly(data: st.DataObject) -> None:
    raw = bytearray(CHECKPOINT)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        if data.draw(st.booleans()):
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        else:
            del raw[at : at + data.draw(st.integers(1, 16))]
        if not raw:
            break
    checkpoint_decodes_or_corrupt(bytes(raw))


def _checkpoint_bytes(rows: list[dict[str, Any]], metadata: dict[bytes, bytes]) -> bytes:
    table = pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA).replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue())


strings = st.one_of(st.none(), st.text(max_size=30), json_values.map(json.dumps))
checkpoint_rows = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["protocol", "database", "metadata", "add", "txn", "remove", ""]),
        "table_id": st.one_of(st.none(), st.just(TABLE_ID), st.text(max_size=40)),
        "path": st.one_of(st.none(), st.just("part-1.parquet"), st.text(max_size=20)),
        "size": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "rows": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "modification_time": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "partition_values": strings,
        "stats": strings,
        "payload": strings,
    }
)


@FUZZ
@given(
    st.lists(checkpoint_rows, max_size=5),
    st.dictionaries(
        st.sampled_from([b"mere.version", b"mere.timestamp", b"mere.formatVersion", b"x"]),
        st.one_of(st.just(b"1"), st.just(b"7"), st.binary(max_size=8)),
    ),
)
def test_checkpoints_with_random_rows_are_rejected_cleanly(
    rows: list[dict[str, Any]], metadata: dict[bytes, bytes]
) -> None:
    checkpoint_decodes_or_corrupt(_checkpoint_bytes(rows, metadata))


def test_a_newer_checkpoint_format_is_a_format_version_error() -> None:
    meta = {
        b"mere.version": b"7",
        b"mere.timestamp": b"1",
        b"mere.formatVersion": str(FORMAT_VERSION + 1).encode(),
    }
    with pytest.raises(FormatVersionError):
        decode_checkpoint(CKPT, _checkpoint_bytes([], meta))


def test_a_checkpoint_string_that_is_not_utf8_is_corrupt() -> None:
    bad = b"\xff\xfe"
    offsets = pa.py_buffer(pa.array([0, len(bad)], pa.int32()).buffers()[1])
    kind = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(bad)])
    columns = {f.name: pa.nulls(1, f.type) for f in CHECKPOINT_SCHEMA}
    columns["kind"] = kind
    table = pa.Table.from_pydict(columns, schema=CHECKPOINT_SCHEMA).replace_schema_metadata(
        {"mere.version": "7", "mere.timestamp": "1", "mere.formatVersion": "1"}
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    with pytest.raises(CorruptLog):
        decode_checkpoint(CKPT, bytes(sink.getvalue()))


def test_other_checkpoint_columns_are_corrupt() -> None:
    table = pa.table({"kind": ["protocol"]}).replace_schema_metadata(
        {"mere.version": "7", "mere.timestamp": "1", "mere.formatVersion": "1"}
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    with pytest.raises(CorruptLog):
        decode_checkpoint(CKPT, bytes(sink.getvalue()))


# --- a commit that decodes must be usable ---------------------------------------------------


def _database_with_last_commit(edit: Any) -> tuple[mere.Database, str]:
    """A memory database whose last commit (an append) is edited by ``edit(add, info)``."""
    name = f"fuzz-{id(edit)}-{hash(repr(edit)) & 0xFFFF}"
    MemoryStore.forget(name)
    db = mere.connect(f"memory://{name}", checkpoint_interval=1000)
    db.create_table("t", pa.schema([("x", pa.int64())]))
    db.table("t").append([{"x": 1}])
    version = db.version
    lines = [json.loads(line) for line in db.store.get(commit_key(version)).splitlines()]
    add = next(obj["add"] for obj in lines if "add" in obj)
    edit(add, lines[0]["commitInfo"])
    data = "".join(json.dumps(obj) + "\n" for obj in lines).encode()
    db.store.delete(commit_key(version))  # a memory store: replace the commit in place
    db.store.put_if_absent(commit_key(version), data)
    return mere.connect(f"memory://{name}", create=False), name


def _use(db: mere.Database) -> None:
    """Everything a reader or the next writer does with the latest version."""
    db.table("t").scan()
    db.table("t").scan(filter="x > 0")
    db.table("t").describe()
    db.history()
    _ = db.snapshot().timestamp
    db.log.write_checkpoint(db.version, 0, list(db.latest_state().live_actions()))


def only_mere_errors(edit: Any) -> None:
    try:
        db, name = _database_with_last_commit(edit)
    except MereError:
        return
    try:
        _use(db)
    except MereError:
        pass
    finally:
        MemoryStore.forget(name)


def test_a_plain_commit_is_usable() -> None:
    only_mere_errors(lambda add, info: None)


@pytest.mark.parametrize(
    "field", ["size", "rows", "modificationTime"], ids=["size", "rows", "modification-time"]
)
def test_integers_beyond_int64_are_rejected_by_the_decoder(field: str) -> None:
    only_mere_errors(lambda add, info: add.__setitem__(field, 2**63))


@pytest.mark.parametrize("timestamp", [10**20, -(10**18)], ids=["huge", "negative"])
def test_timestamps_out_of_range_are_rejected_by_the_decoder(timestamp: int) -> None:
    only_mere_errors(lambda add, info: info.__setitem__("timestamp", timestamp))


@given(
    stats=st.dictionaries(
        st.sampled_from(["numRecords", "minValues", "maxValues", "nullCount"]), json_values
    )
)
@settings(max_examples=100, deadline=None, report_multiple_bugs=False)
def test_statistics_of_any_shape_are_rejected_or_ignored(stats: dict[str, Any]) -> None:
    only_mere_errors(lambda add, info: add.__setitem__("stats", stats))


def test_negative_sizes_and_row_counts_are_rejected() -> None:
    """Found no exception, but a table of -5 rows: the decoder should refuse it."""
    db, name = _database_with_last_commit(lambda add, info: add.__setitem__("rows", -5))
    try:
        rows = db.table("t").describe()["rows"]
    except CorruptLog:
        return
    finally:
        MemoryStore.forget(name)
    pytest.fail(f"a negative row count decoded (describe says {rows} rows)")


@given(st.sampled_from(["x", "p"]), json_values)
@settings(max_examples=100, deadline=None)
def test_partition_values_of_any_shape_are_rejected_or_ignored(column: str, value: Any) -> None:
    assume(not isinstance(value, str) and value is not None)
    only_mere_errors(lambda add, info: add.__setitem__("partitionValues", {column: value}))


def test_a_failing_checkpoint_does_not_fail_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong writing a checkpoint, the commit before it stands (format.md §4)."""
    import mere.log.log as log_module

    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise OverflowError("a checkpoint that cannot be encoded")

    name = "fuzz-checkpoint-after-commit"
    MemoryStore.forget(name)
    db = mere.connect(f"memory://{name}", checkpoint_interval=4)
    try:
        db.create_table("t", pa.schema([("x", pa.int64())]))
        db.table("t").append([{"x": 1}])
        db.table("t").append([{"x": 2}])
        monkeypatch.setattr(log_module, "encode_manifest", broken)
        assert db.table("t").append([{"x": 3}]) == 4  # checkpoint due: fails, commit stands
        assert mere.connect(f"memory://{name}").table("t").scan().num_rows == 3
    finally:
        MemoryStore.forget(name)
