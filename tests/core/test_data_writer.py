"""The data-file writer: a large write encoded in parallel slices, and string
statistics taken from the Parquet footer, each checked against the files' own rows."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import mere
from mere.data import writer
from mere.data.values import MAX_STAT_STRING, stat_to_json
from mere.storage import FaultyStore, MemoryStore

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("ls", pa.large_string()),
        pa.field("f", pa.float64()),
    ]
)


def rows(n: int, start: int = 0) -> pa.Table:
    words = ["zebra", "é", "Ápple", "", None, "ü" * 3, "a" * 300, "b" * 5000]
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "s": [words[i % 6] for i in range(start, start + n)],  # short strings, nulls
            "ls": [None if i % 7 else words[(i // 7) % 8] for i in range(start, start + n)],
            "f": [math.nan if i % 11 == 0 else i / 3 for i in range(start, start + n)],
        },
        schema=SCHEMA,
    )


def expected_stats(data: pa.Table) -> dict[str, Any]:
    """What format.md §7 says a file holding ``data`` records, from its rows."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    for name in data.column_names:
        col = data.column(name)
        if col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        lo, hi = stat_to_json(mm["min"]), stat_to_json(mm["max"])
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    return {
        "numRecords": data.num_rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": {n: data.column(n).null_count for n in data.column_names},
        "nanCount": {"f": pc.sum(pc.is_nan(data.column("f"))).as_py() or 0},
    }


def file_rows(db: mere.Database, table: str) -> list[tuple[dict[str, Any], pa.Table]]:
    snap = db.snapshot().table(table)
    store = db.store
    out = []
    for f in snap.files:
        data = pq.read_table(pa.BufferReader(store.get(f"tables/{snap.id}/{f.path}")))
        out.append((f.stats, data))
    return out


@pytest.mark.parametrize("n", [1, 700, 5000])
def test_statistics_match_the_rows_of_each_file(n: int, tmp_path: Any) -> None:
    db = mere.connect(str(tmp_path / "db"), target_file_size=16 * 1024)
    db.create_table("t", SCHEMA)
    db.table("t").append(rows(n))
    files = file_rows(db, "t")
    assert sum(d.num_rows for _, d in files) == n
    for stats, data in files:
        assert stats == expected_stats(data)


def test_a_large_write_is_encoded_in_ordered_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "SLICE_MIN_BYTES", 1)
    monkeypatch.setattr(writer, "WRITE_THREADS", 3)
    name = "writer-slices"
    try:
        db = mere.connect(f"memory://{name}", target_file_size=1024 * 1024)
        db.create_table("t", SCHEMA)
        db.table("t").append(rows(10))  # a small file opened first: finished before the slices
        with db.transaction() as tx:
            tx.table("t").append(rows(30_000, start=10))
        db.table("t").append(rows(5, start=30_010))
        files = file_rows(db, "t")
        assert len(files) == 5  # the first append, three slices, the last append
        scanned, written = db.table("t").scan(), rows(30_015)
        assert scanned.select(["id", "s", "ls"]).equals(written.select(["id", "s", "ls"]))
        assert pc.fill_null(scanned["f"], -1.0).to_pylist() == pytest.approx(
            written["f"].to_pylist(), nan_ok=True
        )
        for stats, data in files:
            assert stats == expected_stats(data)
    finally:
        MemoryStore.forget(name)


def test_mostly_distinct_columns_are_written_without_a_dictionary(tmp_path: Any) -> None:
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", SCHEMA)
    db.table("t").append(rows(5000))
    ((_, _),) = file_rows(db, "t")
    snap = db.snapshot().table("t")
    path = tmp_path / "db" / "tables" / snap.id / snap.files[0].path
    group = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {
        group.column(i).path_in_schema: group.column(i).has_dictionary_page
        for i in range(group.num_columns)
    }
    assert dictionary == {"id": False, "s": True, "ls": True, "f": False}


def test_a_large_write_uploads_wave_by_wave(monkeypatch: pytest.MonkeyPatch) -> None:
    """Encoded files wait for their upload in bounded memory, not the whole write's."""
    monkeypatch.setattr(writer, "SLICE_MIN_BYTES", 1)
    monkeypatch.setattr(writer, "WRITE_THREADS", 2)
    monkeypatch.setattr(writer, "WAVE_FILES", 1)
    store = FaultyStore(MemoryStore())
    puts_at_finish: list[int] = []
    finish = writer._finish_file

    def recording(f: Any) -> Any:
        puts_at_finish.append(store.calls["put_if_absent"])
        return finish(f)

    monkeypatch.setattr(writer, "_finish_file", recording)
    db = mere.connect(store, target_file_size=64 * 1024)
    db.create_table("t", SCHEMA)
    before = store.calls["put_if_absent"]
    db.table("t").append(rows(40_000))
    assert len(puts_at_finish) >= 4
    assert puts_at_finish[-1] > before  # files of earlier waves were uploaded already
    scanned = db.table("t").scan()
    assert scanned.select(["id", "s", "ls"]).equals(rows(40_000).select(["id", "s", "ls"]))
    for stats, data in file_rows(db, "t"):
        assert stats == expected_stats(data)


# --- statistics of small pieces, from Python values ------------------------------

from datetime import UTC, date, datetime, timedelta  # noqa: E402
from decimal import Decimal  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mere.log.inlined import (  # noqa: E402
    arrow_stream_head,
    decode_inlined,
    encode_arrow_stream,
)

SMALL_TYPES: list[tuple[pa.DataType, Any]] = [
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.int8(), st.integers(-128, 127)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.bool_(), st.booleans()),
    (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    (pa.float32(), st.sampled_from([0.0, -0.0, 1.5, -2.25, math.nan, math.inf, 3.0e38])),
    (pa.string(), st.text(max_size=5)),
    (pa.string(), st.text(min_size=250, max_size=260)),  # about MAX_STAT_STRING
    (pa.date32(), st.dates()),
    (pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.just(UTC))),
    (pa.timestamp("ms"), st.datetimes(min_value=datetime(1900, 1, 1))),
    (pa.timestamp("us"), st.datetimes()),
    (pa.timestamp("s", tz="UTC"), st.datetimes(timezones=st.just(UTC))),
    (pa.date64(), st.dates()),
    (
        pa.timestamp("s", tz="Europe/Berlin"),
        st.integers(-(10**9), 10**10).map(
            lambda s: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=s)
        ),
    ),
    (pa.timestamp("ns"), st.integers(-(2**62), 2**62)),
    (pa.decimal128(9, 2), st.decimals(-(10**6), 10**6, places=2).map(Decimal)),
    (pa.binary(), st.binary(max_size=3)),
    (pa.float16(), st.just(None)),
]


def _file_stats(
    pieces: list[pa.Table], small_rows: int, inline_arrow: bool = False
) -> dict[str, Any]:
    """The statistics of the one file a writer makes of ``pieces`` (with
    ``inline_arrow``: inlined as an Arrow stream, which has no footer)."""
    db = mere.connect(MemoryStore())
    db.create_table("t", pieces[0].schema)
    meta = db.begin().table("t").meta
    saved = writer.SMALL_PIECE_ROWS
    writer.SMALL_PIECE_ROWS = small_rows
    limit = 1 << 20 if inline_arrow else 0
    try:
        w = writer.DataFileWriter(
            MemoryStore(), meta, inline_limit=limit, inline_arrow=inline_arrow
        )
        for piece in pieces:
            w.write(piece)
        (add,) = w.finish()
    finally:
        writer.SMALL_PIECE_ROWS = saved
    assert (add.inline[:4] if add.inline else None) == (b"\xff" * 4 if inline_arrow else None)
    return dict(add.stats)


@st.composite
def small_pieces(draw: Any) -> list[pa.Table]:
    kind = draw(st.integers(0, len(SMALL_TYPES) - 1))
    type_, values = SMALL_TYPES[kind]
    out = []
    for _ in range(draw(st.integers(1, 3))):
        column = draw(st.lists(st.none() | values, min_size=1, max_size=6))
        out.append(pa.table({"c": pa.array(column, type_)}))
    return out


@settings(max_examples=300, deadline=None)
@given(small_pieces())
def test_small_piece_statistics_equal_the_kernels(pieces: list[pa.Table]) -> None:
    """Python-value statistics of a few rows (the one-row commit's path) are
    exactly those of the compute kernels, piece after piece into one file:
    nulls, NaN (counted, never a bound; only NaN: no bounds), infinities (no
    bounds), -0.0 beside 0.0, time zones, decimals, and the types it declines."""
    assert _file_stats(pieces, small_rows=1_000) == _file_stats(pieces, small_rows=0)


@settings(max_examples=200, deadline=None)
@given(small_pieces())
def test_statistics_of_a_file_inlined_as_an_arrow_stream_equal_a_parquet_files(
    pieces: list[pa.Table],
) -> None:
    """A file inlined as an Arrow stream has no footer: its string bounds come
    from its rows, and every statistic is the Parquet file's, small pieces or not."""
    parquet = _file_stats(pieces, small_rows=0)
    assert _file_stats(pieces, small_rows=0, inline_arrow=True) == parquet
    assert _file_stats(pieces, small_rows=1_000, inline_arrow=True) == parquet


@pytest.mark.parametrize(
    "rows",
    [
        pa.table({"c": pa.array([1], pa.int32())}),  # a narrower type
        pa.table({"c": pa.array([b"1"], pa.binary())}),  # another type altogether
    ],
)
def test_rows_not_of_the_file_schema_are_refused_as_parquet_refuses_them(rows: pa.Table) -> None:
    """The Arrow stream path checks the rows' schema as the Parquet writer does
    (writers conform rows first: this is the guard, not the usual path)."""
    db = mere.connect(MemoryStore())
    db.create_table("t", pa.schema([("c", pa.int64())]))
    meta = db.begin().table("t").meta
    for arrow in (False, True):
        w = writer.DataFileWriter(MemoryStore(), meta, inline_limit=1 << 20, inline_arrow=arrow)
        w.write(rows)
        with pytest.raises(ValueError, match="schema does not match"):
            w.finish()


def test_an_arrow_stream_is_the_stream_writers_bytes() -> None:
    """``encode_arrow_stream`` (a schema message kept per table, then each batch)
    writes what pyarrow's stream writer writes; a dictionary column goes through
    the writer itself."""
    table = pa.table({"i": [1, None, 3], "s": ["a", "é", None]})
    rows = pa.concat_tables([table, table.slice(1)])  # two chunks: two batches
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as w:
        w.write_table(rows)
    head = arrow_stream_head(rows.schema)
    assert head is not None
    assert encode_arrow_stream(rows, head).to_pybytes() == sink.getvalue().to_pybytes()
    coded = pa.table({"d": pa.array(["x", "y", "x"]).dictionary_encode()})
    assert arrow_stream_head(coded.schema) is None
    assert decode_inlined(encode_arrow_stream(coded).to_pybytes()).equals(coded)
    nested = pa.table({"l": pa.ListArray.from_arrays([0, 1, 3], coded.column("d").chunk(0))})
    assert arrow_stream_head(nested.schema) is None
    named = pa.table({"dictionary<": ["a column named like the type"]})
    assert arrow_stream_head(named.schema) is not None


def test_small_piece_statistics_of_a_one_row_commit() -> None:
    row = pa.table(
        {
            "d": pa.array([date(2026, 1, 31)]),
            "ts": pa.array([datetime(2026, 1, 1, 10, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
            "x": pa.array([math.nan]),
            "s": pa.array(["b", None], pa.string()).slice(0, 1),
            "long": pa.array(["é" * (MAX_STAT_STRING + 1)]),
        }
    )
    stats = _file_stats([row], small_rows=16)
    assert stats["minValues"] == {
        "d": "2026-01-31",
        "ts": "2026-01-01 10:00:00.000000Z",
        "s": "b",
    }
    assert stats["maxValues"] == stats["minValues"]
    assert stats["nanCount"] == {"x": 1}


def test_a_small_file_then_a_large_piece_keeps_exact_string_bounds() -> None:
    """Bounds from Python values (the first, small piece) and from the footer
    (the large piece after it) together cover every row of the file."""
    small = pa.table({"s": pa.array(["zz", "a0"])})
    large = pa.table({"s": pa.array([f"m{i:05d}" for i in range(5_000)])})
    stats = _file_stats([small, large], small_rows=16)
    assert (stats["minValues"]["s"], stats["maxValues"]["s"]) == ("a0", "zz")
    assert stats == _file_stats([small, large], small_rows=0)


def test_a_column_renamed_then_added_again_is_written_under_its_new_physical_name() -> None:
    """Schemas compare equal whatever their fields' metadata (where physical names
    live), so a cache of file schemas keyed by the schema alone gave table ``t``
    the file columns of table ``u`` (same names and types, no renames): ``t``'s
    new ``x`` was written where its old one lives (found by the SQLite oracle)."""
    db = mere.connect(MemoryStore())
    plain = pa.schema([pa.field("k", pa.int64()), pa.field("y", pa.int64())])
    plain = plain.append(pa.field("x", pa.int64()))
    db.create_table("u", plain)
    db.table("u").append([{"k": 0, "y": 1, "x": 2}])
    db.create_table("t", pa.schema([pa.field("k", pa.int64()), pa.field("x", pa.int64())]))
    db.table("t").append([{"k": 0, "x": 10}])
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("x", "y").add_column("x", pa.int64())
    assert db.table("t").schema == plain  # equal, though "y" is stored as "x"
    db.table("u").append([{"k": 1, "y": 3, "x": 4}])
    db.table("t").append([{"k": 1, "y": 11, "x": 21}])
    rows = sorted(db.table("t").scan().to_pylist(), key=lambda r: r["k"])
    assert rows == [{"k": 0, "y": 10, "x": None}, {"k": 1, "y": 11, "x": 21}]


@pytest.mark.parametrize("rows_per_append", [2, 40])  # statistics from Python values, kernels
@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/New_York", "Europe/Paris"])
def test_zoned_timestamp_bounds_are_exact_before_1900(
    tmp_path: Any, zone: str, rows_per_append: int
) -> None:
    """A zone's text has whole-minute offsets; before standard time (local mean time,
    Kolkata +05:53:28) the bound read back 28 seconds late and a filter skipped the
    file holding its match."""
    duckdb = pytest.importorskip("duckdb")
    t = pa.timestamp("s", tz=zone)
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", pa.schema([("id", pa.int64()), ("ts", t)]))
    start = -62135596800 + 86400  # 0001-01-02 00:00:00 UTC
    seconds = [start + 50 * i for i in range(rows_per_append)]
    data = pa.table({"id": range(len(seconds)), "ts": pa.array(seconds, t)})
    db.table("t").append(data)
    for bound in ("0001-01-02 00:00:10+00", "0001-01-02 00:00:40+00"):
        for op in ("<", ">="):
            where = f"ts {op} TIMESTAMPTZ '{bound}'"
            want = duckdb.sql(f"SELECT id FROM data WHERE {where} ORDER BY id").fetchall()
            got = db.table("t").scan(filter=where).sort_by("id").column("id").to_pylist()
            assert got == [i for (i,) in want], where


@pytest.mark.parametrize("checkpointed", [False, True])
def test_zoned_timestamp_bounds_an_older_mere_wrote_are_read_widened(
    tmp_path: Any, checkpointed: bool
) -> None:
    """An older mere wrote them as the zone's local text with a whole-minute offset, which
    before standard time is up to a minute off: a filter skipped the file of its match."""
    import json
    from pathlib import Path

    t = pa.timestamp("us", tz="Asia/Kolkata")
    root = Path(tmp_path) / "db"
    db = mere.connect(str(root))
    db.create_table("t", pa.schema([("ts", t)]))
    moment = pa.array([-3786825600 * 1_000_000], t)  # 1850-01-01 00:00:00 UTC
    db.table("t").append(pa.table({"ts": moment}))
    commit = root / "_log" / f"{db.version:020d}.json"
    lines = [json.loads(line) for line in commit.read_text().splitlines()]
    old_text = pc.cast(moment, pa.string())[0].as_py()  # local time, offset +0553
    assert old_text.endswith("+0553")
    for line in lines:
        if "add" in line:
            line["add"]["stats"]["minValues"]["ts"] = old_text
            line["add"]["stats"]["maxValues"]["ts"] = old_text
    commit.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db = mere.connect(str(root), create=False)
    if checkpointed:
        db.checkpoint()
        db = mere.connect(str(root), create=False)
    for where in (
        "ts = TIMESTAMPTZ '1850-01-01 00:00:00+00'",
        "ts <= TIMESTAMPTZ '1850-01-01 00:00:10+00'",
    ):
        assert db.table("t").scan(filter=where).num_rows == 1, where
    assert db.table("t").scan(filter="ts > TIMESTAMPTZ '1850-01-01 00:02:00+00'").num_rows == 0
