"""Key filters (mere.data.keyfilter): no false negatives, and key checks that skip files.

A filter answers "this file certainly holds none of these keys" or "it may";
the first must never be wrong, so every key a filter was built from is found
again, for every key type and through a sidecar's bytes. Built on a table,
filters let a keyed append read only the files they cannot rule out, and
every duplicate is still refused, with or without them.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.data import keyfilter
from mere.data.keyfilter import KeyFilter, Probe, key_hashes

SIG = [["k", "x"]]

ints = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
texts = st.text(max_size=12)
COLUMN_TYPES = [
    (ints, pa.int64()),
    (st.integers(-(2**31), 2**31 - 1), pa.int32()),
    (st.integers(0, 2**64 - 1), pa.uint64()),
    (floats, pa.float64()),
    (texts, pa.string()),
    (st.binary(max_size=12), pa.binary()),
    (st.dates(), pa.date32()),
    (st.datetimes(), pa.timestamp("us")),
    (st.decimals(-(10**6), 10**6, places=2, allow_nan=False), pa.decimal128(10, 2)),
    (st.booleans(), pa.bool_()),
]


@st.composite
def key_tables(draw: st.DrawFn) -> pa.Table:
    kinds = draw(st.lists(st.sampled_from(COLUMN_TYPES), min_size=1, max_size=3))
    n = draw(st.integers(0, 60))
    return pa.table(
        {
            f"c{i}": pa.array(draw(st.lists(strategy, min_size=n, max_size=n)), type_)
            for i, (strategy, type_) in enumerate(kinds)
        }
    )


@settings(max_examples=150, deadline=None)
@given(keys=key_tables())
def test_a_filter_holds_every_key_it_was_built_from(keys: pa.Table) -> None:
    built = KeyFilter.build(SIG, key_hashes(keys))
    for flt in (built, KeyFilter.from_bytes(built.to_bytes())):
        assert flt.may_contain(Probe.of(key_hashes(keys))).all()
        # row by row, as a probe of one new key sees it
        for i in range(min(keys.num_rows, 5)):
            assert flt.may_contain(Probe.of(key_hashes(keys.slice(i, 1)))).all()


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40), other=ints)
def test_widening_keeps_hashes_and_absent_keys_are_mostly_ruled_out(
    values: list[int], other: int
) -> None:
    narrow = pa.table({"k": pa.array(values, pa.int32())})
    wide = pa.table({"k": pa.array(values, pa.int64())})
    assert (key_hashes(narrow) == key_hashes(wide)).all()
    floats32 = pa.table({"k": pa.array([float(v) for v in values], pa.float32())})
    floats64 = pa.table({"k": pa.array([float(np.float32(v)) for v in values], pa.float64())})
    assert (key_hashes(floats32) == key_hashes(floats64)).all()
    assert key_hashes(pa.table({"k": [other]}))[0] != key_hashes(pa.table({"k": [~other]}))[0]


def test_equal_floats_hash_alike_and_the_false_positive_rate_is_small() -> None:
    signed = key_hashes(pa.table({"k": [0.0, -0.0, math.nan, -math.nan]}))
    assert signed[0] == signed[1] and signed[2] == signed[3]
    flt = KeyFilter.build(SIG, key_hashes(pa.table({"k": np.arange(100_000)})))
    absent = flt.may_contain(Probe.of(key_hashes(pa.table({"k": np.arange(10**9, 10**9 + 10**5)}))))
    assert absent.mean() < 1e-3


@settings(max_examples=60, deadline=None)
@given(hashes=st.lists(st.integers(0, 2**64 - 1), max_size=300))
def test_a_filter_sets_exactly_the_bits_of_its_keys(hashes: list[int]) -> None:
    """format.md §6.1: in block b of each key, bit ((l * S_i) mod 2^32) >> 27 of word i."""
    values = np.array(hashes, dtype=np.uint64)
    flt = KeyFilter.build(SIG, values)
    expected = np.zeros_like(flt.words)
    for h in hashes:
        block = ((h >> 32) * len(flt.words)) >> 32
        for i, salt in enumerate(keyfilter._SALTS.tolist()):
            expected[block, i] |= 1 << ((((h & 0xFFFFFFFF) * salt) & 0xFFFFFFFF) >> 27)
    assert (flt.words == expected).all()


def test_corrupt_sidecars_do_not_decode() -> None:
    good = KeyFilter.build(SIG, key_hashes(pa.table({"k": [1, 2, 3]}))).to_bytes()
    for bad in (b"", b"MKF1", good[:-1], b"XKF1" + good[4:], good + b"\0" * 4):
        with pytest.raises(keyfilter.CorruptKeyFilter):
            KeyFilter.from_bytes(bad)


def _damaged_bits(sidecar: bytes) -> list[bytes]:
    """The sidecar with its header kept and its bits lost (a torn, non-durable put) or flipped."""
    (length,) = struct.unpack_from("<I", sidecar, 4)
    head, bits = sidecar[: 8 + length], sidecar[8 + length :]
    flipped = bytearray(bits)
    flipped[len(bits) // 2] ^= 0x10
    return [head + bytes(len(bits)), head + bytes(flipped)]


def test_sidecars_whose_bits_were_lost_or_changed_do_not_decode() -> None:
    """A filter that lost its bits rules out every key: a duplicate would commit."""
    good = KeyFilter.build(SIG, key_hashes(pa.table({"k": list(range(500))}))).to_bytes()
    assert KeyFilter.from_bytes(good).rows == 500
    for bad in _damaged_bits(good):
        with pytest.raises(keyfilter.CorruptKeyFilter, match="checksum"):
            KeyFilter.from_bytes(bad)


# --- on tables -----------------------------------------------------------------------------

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(keyfilter, "MIN_SIDECAR_ROWS", 0)  # sidecars for these small files too
    keyfilter.CACHE.clear()
    yield
    keyfilter.CACHE.clear()


def keyed(uri: str, files: int = 8, per: int = 500) -> mere.Database:
    db = mere.connect(uri)
    db.create_table("t", SCHEMA, primary_key=["id"])
    order = 2 * np.random.default_rng(3).permutation(files * per)  # even keys: odd ones are new
    for i in range(files):  # random keys: statistics rule no file out
        part = order[i * per : (i + 1) * per]
        db.table("t").append(pa.table({"id": part, "v": [str(k) for k in part]}, schema=SCHEMA))
    return db


def data_reads(db: mere.Database, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Data files opened from now on (key filters and log reads left out)."""
    store = db.store
    opened: list[str] = []
    original = store.open_input

    def open_input(key: str) -> pa.NativeFile:
        if key.endswith(".parquet"):
            opened.append(key)
        return original(key)

    monkeypatch.setattr(store, "open_input", open_input)
    return opened


@pytest.fixture(params=["memory", "local"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"memory://filters-{uuid.uuid4().hex}" if request.param == "memory" else str(tmp_path)


def test_new_keys_read_only_files_the_filters_cannot_rule_out(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = keyed(uri)
    store = db.store
    files = db.snapshot().table("t").files
    # the first keyed appends built a filter for every committed file they read
    db.table("t").append(pa.table({"id": [3999, 4001], "v": ["x", "y"]}, schema=SCHEMA))
    sidecars = {m.key for m in store.list("tables/") if m.key.endswith(keyfilter.SUFFIX)}
    assert len(sidecars) >= len(files)
    keyfilter.CACHE.clear()  # another process: reads the sidecars, not the data files
    prefix = files[0].table_id and f"tables/{files[0].table_id}/"
    base = {prefix + f.path for f in db.snapshot().table("t").files}
    last = base - {prefix + f.path for f in files}  # the append above: no filter yet
    opened = data_reads(db, monkeypatch)
    new = range(3, 2 * 8 * 500, 26)  # odd: absent, spread over every file's range
    db.table("t").append(pa.table({"id": new, "v": ["n"] * len(new)}, schema=SCHEMA))
    # of the 9 committed files: the one without a filter, and perhaps one false positive
    assert len((set(opened) & base) - last) <= 1, opened
    opened.clear()
    with pytest.raises(mere.DuplicateKey, match=r"\(1234\)"):
        db.table("t").append(pa.table({"id": [5, 1234], "v": ["a", "b"]}, schema=SCHEMA))
    assert 1 <= len(set(opened) & base) <= 2, opened


def test_every_duplicate_is_refused_with_filters_in_place(uri: str) -> None:
    db = keyed(uri, files=4, per=200)
    rng = np.random.default_rng(5)
    for round_ in range(30):
        if round_ % 10 == 5:
            keyfilter.CACHE.clear()
        old = 2 * int(rng.integers(0, 800))
        version = db.version
        with pytest.raises(mere.DuplicateKey):
            db.table("t").append(
                pa.table({"id": [4 * round_ + 1, old], "v": ["a", "b"]}, schema=SCHEMA)
            )
        assert db.version == version
        db.table("t").append(
            pa.table({"id": [old, 4 * round_ + 3], "v": ["s", "s"]}, schema=SCHEMA),
            on_duplicate="skip",
        )
    ids = db.table("t").scan(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 800 + 30


def _foreign(sidecar: bytes, i: int) -> bytes:
    """Garbage, or a good filter of other columns holding no key of the file."""
    empty = KeyFilter.build(SIG, key_hashes(pa.table({"k": [-1]})))
    return b"garbage" if i % 2 else empty.to_bytes()


def _lost_bits(sidecar: bytes, i: int) -> bytes:
    return _damaged_bits(sidecar)[0]


@pytest.mark.parametrize("damage", [_foreign, _lost_bits], ids=["foreign", "lost bits"])
def test_corrupt_or_foreign_sidecars_are_read_around(
    uri: str, damage: Callable[[bytes, int], bytes]
) -> None:
    db = keyed(uri, files=3, per=100)
    db.table("t").append(pa.table({"id": [299, 301], "v": ["x", "y"]}, schema=SCHEMA))  # filters
    store = db.store
    sidecars = sorted(m.key for m in store.list("tables/") if m.key.endswith(keyfilter.SUFFIX))
    assert sidecars
    for i, key in enumerate(sidecars):
        damaged = damage(store.get(key), i)
        store.delete(key)
        store.put_if_absent(key, damaged)
    keyfilter.CACHE.clear()  # another process
    held = db.table("t").scan(columns=["id"]).column("id").to_pylist()
    for key in held[:: max(1, len(held) // 20)]:
        with pytest.raises(mere.DuplicateKey):
            db.table("t").append(pa.table({"id": [key], "v": ["d"]}, schema=SCHEMA))


def test_a_changed_key_does_not_use_the_old_keys_filters(tmp_path: Path) -> None:
    db = mere.connect(tmp_path)
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    db.create_table("t", schema, primary_key=["a"])
    db.table("t").append(pa.table({"a": [1, 2], "b": [7, 8]}, schema=schema))
    db.table("t").append(pa.table({"a": [3], "b": [9]}, schema=schema))  # filters on a
    with db.transaction() as tx:
        tx.alter_table("t").set_primary_key(["b"])
    with pytest.raises(mere.DuplicateKey, match=r"\(8\)"):
        db.table("t").append(pa.table({"a": [4], "b": [8]}, schema=schema))


def test_small_files_get_no_sidecar(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyfilter, "MIN_SIDECAR_ROWS", 300)
    db = keyed(uri, files=3, per=200)
    db.table("t").append(pa.table({"id": [599, 601], "v": ["x", "y"]}, schema=SCHEMA))
    assert not [m.key for m in db.store.list("tables/") if m.key.endswith(keyfilter.SUFFIX)]
    with pytest.raises(mere.DuplicateKey):
        db.table("t").append(pa.table({"id": [2, 3], "v": ["x", "y"]}, schema=SCHEMA))


def test_vacuum_deletes_a_sidecar_with_its_data_file_only(tmp_path: Path) -> None:
    db = keyed(str(tmp_path), files=3, per=50)
    db.table("t").append(pa.table({"id": [149, 151], "v": ["x", "y"]}, schema=SCHEMA))
    store = db.store

    def sidecars() -> set[str]:
        return {m.key for m in store.list("tables/") if m.key.endswith(keyfilter.SUFFIX)}

    before = sidecars()
    assert before
    db.vacuum(retention=dt.timedelta(0), force=True)  # nothing removed yet: all kept
    assert sidecars() == before
    db.table("t").compact()
    db.vacuum(retention=dt.timedelta(0), force=True)
    prefix = f"tables/{db.table('t').describe()['id']}/"
    live = {prefix + f.path for f in db.snapshot().table("t").files}
    assert all(keyfilter.data_key_of(k) in live for k in sidecars())
    assert not (before & sidecars())


def test_a_merge_publishing_files_still_meets_keys_held_elsewhere(uri: str) -> None:
    """The files a merge publishes are not re-read: their keys are checked against the rest."""
    db = keyed(uri, files=4, per=100)
    ids = sorted(db.table("t").scan(columns=["id"]).column("id").to_pylist())
    version = db.version
    with pytest.raises(mere.DuplicateKey, match=rf"\({ids[-1]}\)"):
        (  # updates a row of one file to a key another file holds
            db.table("t")
            .merge(pa.table({"v": [str(ids[0])], "nid": [ids[-1]]}), "t.v = s.v")
            .when_matched_update({"id": "s.nid"})
            .execute()
        )
    with pytest.raises(mere.DuplicateKey, match=rf"\({ids[5]}\)"):
        (  # inserts a key held by a file the merge does not rewrite
            db.table("t")
            .merge(pa.table({"id": [ids[5]], "v": ["none"]}, schema=SCHEMA), "t.v = s.v")
            .when_not_matched_insert_all()
            .execute()
        )
    assert db.version == version
    moved = (
        db.table("t")
        .merge(pa.table({"v": [str(ids[0])], "nid": [1]}), "t.v = s.v")
        .when_matched_update({"id": "s.nid"})
        .execute()
    )
    assert moved.num_target_rows_updated == 1


# --- probing many files at once, and the files a transaction wrote -------------------------


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=12),
    budget=st.integers(2_000, 60_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_probing_the_cached_filters_at_once_agrees_with_each_filter(
    sizes: list[int], budget: int, seed: int
) -> None:
    """The arena keeps every cached filter intact through moves and evictions."""
    rng = np.random.default_rng(seed)
    cache = keyfilter.FilterCache(max_bytes=budget)
    store = mere.connect(f"memory://probe-{uuid.uuid4().hex}").store
    built: dict[str, tuple[KeyFilter, pa.Table]] = {}
    for i, n in enumerate(sizes):
        keys = pa.table({"k": rng.integers(-(2**62), 2**62, n)})
        flt = KeyFilter.build(SIG if i % 5 else [["k", "int"]], key_hashes(keys))
        built[f"f{i}"] = (flt, keys)
        cache.put(store, f"f{i}", flt)
    names = [*built, "absent"]
    held = pa.concat_tables([k for _, k in built.values()])
    for wanted in (
        pa.table({"k": rng.integers(-(2**62), 2**62, 500)}),  # absent keys
        held.take(rng.integers(0, held.num_rows, 3)),  # some a file holds
    ):
        probe = Probe.of(key_hashes(wanted))
        status, unsaved = cache.probe(store, names, SIG, probe)
        assert not unsaved
        for name, state in zip(names, status.tolist(), strict=True):
            cached = name in built and cache.get(store, name) is not None
            if not cached or built[name][0].signature != SIG:
                assert state == -1
            else:
                assert state == int(built[name][0].may_contain(probe).any())
        for name, (flt, keys) in built.items():  # what stays cached is the filter put
            found = cache.get(store, name)
            if found is not None:
                assert (found[0].words == flt.words).all()
                assert found[0].may_contain(Probe.of(key_hashes(keys))).all()


def test_a_keyed_append_reads_back_no_file_it_writes(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its keys are checked from memory, its filter built from them; a commit that wins
    its race works out no inserted keys at all."""
    db = keyed(uri, files=4, per=200)
    prefix = f"tables/{db.table('t').describe()['id']}/"
    opened = data_reads(db, monkeypatch)
    before = {f.path for f in db.snapshot().table("t").files}
    new = [1, 3, 5, 799]
    db.table("t").append(pa.table({"id": new, "v": ["n"] * 4}, schema=SCHEMA))
    (written,) = {f.path for f in db.snapshot().table("t").files} - before
    assert prefix + written not in opened
    assert len(set(opened)) <= 1, opened  # a false positive of a filter at most
    opened.clear()
    with pytest.raises(mere.DuplicateKey, match=r"\(3\)"):  # the filter built from memory
        db.table("t").append(pa.table({"id": [7, 3], "v": ["a", "b"]}, schema=SCHEMA))
    assert prefix + written in opened  # read because its filter holds 3
    with db.transaction() as tx:
        tx.table("t").append(pa.table({"id": [9], "v": ["x"]}, schema=SCHEMA))
        opened.clear()
    assert opened == []  # the commit read nothing


def test_keys_held_in_memory_follow_savepoints_and_rewrites(uri: str) -> None:
    db = keyed(uri, files=2, per=50)

    def one(key: int, v: str = "x") -> pa.Table:
        return pa.table({"id": [key], "v": [v]}, schema=SCHEMA)

    with db.transaction() as tx:
        t = tx.table("t")
        t.append(one(1001))
        with pytest.raises(mere.DuplicateKey, match=r"\(1001\)"):
            with tx.savepoint():
                t.append(one(1003))
                t.append(one(1001, "again"))
        t.append(one(1003))  # rolled back above: free again
        t.update("id = 1001", {"id": 1005})  # rewrites the file this transaction wrote
        t.append(one(1001, "back"))
        with pytest.raises(mere.DuplicateKey, match=r"\(1005\)"):
            t.append(one(1005))
        with pytest.raises(mere.DuplicateKey, match=r"\(0\)"):
            t.append(one(0))  # a committed key
    got = db.table("t").scan(filter="id > 1000").sort_by("id").to_pylist()
    assert got == [
        {"id": 1001, "v": "back"},
        {"id": 1003, "v": "x"},
        {"id": 1005, "v": "x"},
    ]


def test_integer_keys_consider_only_the_files_whose_range_holds_one(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not every file within the range of all new keys: clustered keys skip the gaps."""
    db = mere.connect(uri)
    db.create_table("t", SCHEMA, primary_key=["id"])
    for i in range(10):  # file i holds the even keys 200 i .. 200 i + 198
        ids = list(range(200 * i, 200 * i + 200, 2))
        db.table("t").append(pa.table({"id": ids, "v": ["x"] * len(ids)}, schema=SCHEMA))
    for m in list(db.store.list("tables/")):
        if m.key.endswith(keyfilter.SUFFIX):
            db.store.delete(m.key)
    keyfilter.CACHE.clear()  # no filter anywhere: every admitted file is read
    opened = data_reads(db, monkeypatch)
    db.table("t").append(pa.table({"id": [151, 1751], "v": ["n", "n"]}, schema=SCHEMA))
    assert len(set(opened)) == 2, opened  # files 0 and 8, not the 7 between
    with pytest.raises(mere.DuplicateKey, match=r"\(1752\)"):
        db.table("t").append(pa.table({"id": [-5, 1752], "v": ["n", "n"]}, schema=SCHEMA))


@pytest.mark.parametrize(
    "type_, values",
    [
        (pa.int32(), [-(2**31), -7, 0, 2**31 - 1]),
        (pa.uint64(), [0, 5, 2**63 + 11, 2**64 - 1]),
        (pa.int8(), [-128, -1, 127]),
    ],
)
def test_integer_keys_of_every_width_and_sign_find_their_duplicates(
    uri: str, type_: pa.DataType, values: list[int]
) -> None:
    schema = pa.schema([pa.field("id", type_), pa.field("v", pa.string())])
    db = mere.connect(uri)
    db.create_table("t", schema, primary_key=["id"])
    for value in values:
        db.table("t").append(pa.table({"id": [value], "v": ["x"]}, schema=schema))
    for value in values:
        with pytest.raises(mere.DuplicateKey):
            db.table("t").append(pa.table({"id": [value], "v": ["y"]}, schema=schema))
        keyfilter.CACHE.clear()
    assert db.table("t").scan(columns=["id"]).num_rows == len(values)


def test_inlined_files_get_filters_in_memory_and_no_sidecar(uri: str) -> None:
    db = mere.connect(uri)
    db.set_properties({"inlineLimit": "1048576"})
    db.create_table("t", SCHEMA, primary_key=["id"])
    for i in range(4):  # 5,000 rows each: past MIN_SIDECAR_ROWS, still inlined
        ids = list(range(i, 20_000, 4))
        db.table("t").append(pa.table({"id": ids, "v": ["x"] * len(ids)}, schema=SCHEMA))
    assert all(f.inline is not None for f in db.snapshot().table("t").files)
    for round_ in range(2):  # held filters, then read anew as a fresh process does
        if round_:
            keyfilter.CACHE.clear()
        db.table("t").append(pa.table({"id": [20_001 + round_], "v": ["n"]}, schema=SCHEMA))
        with pytest.raises(mere.DuplicateKey, match=r"\(9\)"):
            db.table("t").append(pa.table({"id": [9], "v": ["d"]}, schema=SCHEMA))
    assert not [m.key for m in db.store.list("tables/") if m.key.endswith(keyfilter.SUFFIX)]
