"""The fast paths of a primary-key check agree with the plain answers.

A keyed append hashes its keys once (the hashes are found again by the Arrow
memory they came from), answers "no duplicates in the batch" from distinct
hashes, chooses files by a :class:`~mere.txn.keyindex.KeyIndex` handed on
from commit to commit, and probes their filters through unions of eight. Each
shortcut is checked against the long way round: the exact count, a fresh
hash, a freshly built index, every filter on its own, and a Python set of the
keys a table holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.data import keyfilter
from mere.data.keyfilter import KeyFilter, Probe, key_hashes
from mere.txn import keys as keys_module
from mere.txn.keyindex import KeyIndex, key_index

SIG = [["k", "int"]]
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    keyfilter.CACHE.clear()
    yield
    keyfilter.CACHE.clear()


# --- hashing once -----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50),
    cut=st.integers(0, 50),
)
def test_kept_hashes_are_those_of_the_rows_asked_about(values: list[int], cut: int) -> None:
    """Slices share their parent's memory: each is told apart by its offset and length."""
    table = pa.table({"k": pa.array(values, pa.int64())})
    cut = min(cut, len(values))
    for part in (table, table.slice(cut), table.slice(0, cut), table.slice(cut, 1)):
        fresh = pa.table({"k": pa.array(part.column(0).to_pylist(), pa.int64())})
        expected = keyfilter._hashes(fresh) if fresh.num_rows else np.zeros(0, np.uint64)
        assert key_hashes(part).tolist() == expected.tolist()
        assert key_hashes(part).tolist() == expected.tolist()  # kept, and still right


VALUES = st.one_of(
    st.lists(st.integers(-3, 3), min_size=0, max_size=30).map(lambda v: pa.array(v, pa.int64())),
    st.lists(st.sampled_from([0.0, -0.0, 1.5, float("nan")]), max_size=30).map(
        lambda v: pa.array(v, pa.float64())
    ),
    st.lists(st.sampled_from(["", "a", "b", "ab"]), max_size=30).map(
        lambda v: pa.array(v, pa.string())
    ),
)


@settings(max_examples=80, deadline=None)
@given(columns=st.lists(VALUES, min_size=1, max_size=2))
def test_distinct_hashes_answer_duplicates_as_counting_does(
    columns: list[pa.Array],
) -> None:
    n = min(len(c) for c in columns)
    keys = pa.table({f"c{i}": c.slice(0, n) for i, c in enumerate(columns)})
    fast = keys_module.duplicates_within(keys)
    exact = keys_module._counted(keys) if n >= 2 else None
    if exact is None:
        assert fast.num_rows == 0
        return
    exact = exact.filter(pa.compute.greater(exact["count_all"], 1)).select(keys.column_names)
    assert sorted(map(repr, fast.to_pylist())) == sorted(map(repr, exact.to_pylist()))


# --- probing through unions ---------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 3, 40, 41, 400]), min_size=1, max_size=30),
    grouping=st.randoms(use_true_random=False),
    seed=st.integers(0, 2**32 - 1),
)
def test_probing_through_unions_agrees_with_each_filter(
    sizes: list[int], grouping: object, seed: int
) -> None:
    """Files of one size in unions (some members not probed), the others one by one."""
    rng = np.random.default_rng(seed)
    cache = keyfilter.FilterCache()
    store = mere.connect(f"memory://unions-{uuid.uuid4().hex}").store
    built: list[tuple[KeyFilter, np.ndarray]] = []
    for i, n in enumerate(sizes):
        hashes = rng.integers(0, 2**64, n, dtype=np.uint64)
        flt = KeyFilter.build(SIG, hashes)
        built.append((flt, hashes))
        cache.put(store, f"f{i}", flt)
    found = cache.locate(store, [f"f{i}" for i in range(len(sizes))], SIG)
    by_size: dict[int, list[int]] = {}
    for i in grouping.sample(range(len(sizes)), len(sizes)):  # type: ignore[attr-defined]
        by_size.setdefault(int(found.blocks[i]), []).append(i)
    unions: list[keyfilter.Unions] = []
    for size, files in by_size.items():
        words: list[np.ndarray] = []
        members: list[list[int]] = []
        for at in range(0, len(files) - keyfilter.UNION_FILES + 1, keyfilter.UNION_FILES):
            group = files[at : at + keyfilter.UNION_FILES]
            parts = [cache.words_at(found.generation, int(found.offsets[i]), size) for i in group]
            words.append(keyfilter.Unions.union([p for p in parts if p is not None]))
            members.append([i if rng.random() < 0.8 else -1 for i in group])
        if words:
            unions.append(
                keyfilter.Unions(size, np.concatenate(words), np.array(members, np.int64))
            )
    held = np.concatenate([h for _, h in built])
    for wanted in (
        rng.integers(0, 2**64, 300, dtype=np.uint64),  # absent
        np.concatenate([rng.integers(0, 2**64, 50, dtype=np.uint64), rng.choice(held, 3)]),
    ):
        probe = Probe.of(wanted)
        got = cache.probe_at(found.generation, found.offsets, found.blocks, probe, unions)
        assert got is not None
        expected = [int(flt.may_contain(probe).any()) for flt, _ in built]
        assert got.tolist() == expected


# --- the index handed on, against a table's keys --------------------------------------------


def one_index(db: mere.Database) -> tuple[KeyIndex, KeyIndex]:
    """The table's index as handed on from commit to commit, and one built anew."""
    state = db.latest_state().table_by_name("t")
    assert state is not None
    files = state.live
    return key_index(state.meta, files, "id"), KeyIndex.build(state.meta, files, "id")


@settings(max_examples=12, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["append", "append", "append", "delete", "update", "forget"]),
            st.lists(st.integers(0, 60), min_size=1, max_size=6),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_keyed_writes_agree_with_a_set_of_keys(steps: list[tuple[str, list[int]]]) -> None:
    """Random appends (some duplicates), deletes, key updates and forgotten filters on a
    table of many small files: every refusal and acceptance is the set's, and the
    index handed on from commit to commit is the one built anew."""
    db = mere.connect(f"memory://index-{uuid.uuid4().hex}")
    db.create_table("t", SCHEMA, primary_key=["id"])
    held: set[int] = set()
    for i in range(2 * keyfilter.UNION_FILES):  # files of one size: their filters form unions
        ends = [-1 - i, 61 + i]  # a range that holds every key a step writes
        db.table("t").append(pa.table({"id": ends, "v": ["x", "x"]}, schema=SCHEMA))
        held |= set(ends)
    for op, values in steps:
        if op == "append":
            batch = pa.table({"id": values, "v": ["x"] * len(values)}, schema=SCHEMA)
            clash = len(set(values)) < len(values) or bool(held & set(values))
            if clash:
                with pytest.raises(mere.DuplicateKey):
                    db.table("t").append(batch)
            else:
                db.table("t").append(batch)
                held |= set(values)
        elif op == "delete":
            db.table("t").delete(f"id <= {values[0]}")
            held = {k for k in held if k > values[0]}
        elif op == "update":  # shifts the keys above a bound out of the way, when free
            bound = values[0]
            moved = {k + 1000 for k in held if k > bound}
            db.table("t").update(f"id > {bound}", {"id": "id + 1000"})
            held = {k for k in held if k <= bound} | moved
        else:
            keyfilter.CACHE.clear()
        got = db.table("t").scan(columns=["id"]).column(0).to_pylist()
        assert sorted(got) == sorted(held)
        if held:
            kept, fresh = one_index(db)
            assert kept.entries() == fresh.entries()


@settings(max_examples=60, deadline=None)
@given(
    left=st.lists(st.tuples(st.integers(0, 9), st.sampled_from("ab")), max_size=25),
    right=st.lists(st.tuples(st.integers(0, 9), st.sampled_from("ab")), max_size=60),
    columns=st.sampled_from([1, 2]),
)
def test_intersect_is_the_set_of_keys_in_both_whichever_is_larger(
    left: list[tuple[int, str]], right: list[tuple[int, str]], columns: int
) -> None:
    def table(rows: list[tuple[int, str]]) -> pa.Table:
        data = {"k": pa.array([r[0] for r in rows], pa.int64())}
        if columns == 2:
            data["s"] = pa.array([r[1] for r in rows], pa.string())
        return pa.table(data)

    got = keys_module.intersect(table(left), table(right))
    assert got.schema == table(left).schema
    rows = [tuple(r.values()) for r in got.to_pylist()]
    assert len(rows) == len(set(rows))
    shape = (lambda r: (r[0],)) if columns == 1 else (lambda r: r)
    assert set(rows) == {shape(r) for r in left} & {shape(r) for r in right}


def test_a_writer_that_keeps_committing_builds_the_index_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each commit hands the index on (with its change) to the next version's files."""
    db = mere.connect(f"memory://handed-on-{uuid.uuid4().hex}")
    db.create_table("t", SCHEMA, primary_key=["id"])
    builds: list[int] = []
    original = KeyIndex.build

    def counted(*args: object) -> KeyIndex:
        builds.append(1)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(KeyIndex, "build", staticmethod(counted))
    for i in range(12):
        db.table("t").append(pa.table({"id": [i, 100 - i], "v": ["x", "y"]}, schema=SCHEMA))
    with pytest.raises(mere.DuplicateKey, match=r"\(7\)"):
        db.table("t").append(pa.table({"id": [50, 7], "v": ["x", "y"]}, schema=SCHEMA))
    assert len(builds) == 1


@pytest.mark.parametrize(
    "type_, values",
    [
        (pa.int8(), [-128, -1, 0, 127]),
        (pa.int32(), [-(2**31), 5, 2**31 - 1]),
        (pa.uint64(), [0, 2**63 + 11, 2**64 - 1]),
    ],
)
def test_the_index_handed_on_equals_one_built_anew_for_every_integer_type(
    type_: pa.DataType, values: list[int]
) -> None:
    schema = pa.schema([pa.field("id", type_), pa.field("v", pa.string())])
    db = mere.connect(f"memory://types-{uuid.uuid4().hex}")
    db.create_table("t", schema, primary_key=["id"])
    for value in values:
        db.table("t").append(pa.table({"id": [value], "v": ["x"]}, schema=schema))
        with pytest.raises(mere.DuplicateKey):
            db.table("t").append(pa.table({"id": [value], "v": ["y"]}, schema=schema))
    kept, fresh = one_index(db)
    assert kept.entries() == fresh.entries()
    assert sorted(lo for lo, _, _ in kept.entries().values()) == sorted(values)
