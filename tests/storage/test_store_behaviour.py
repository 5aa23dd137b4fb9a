"""The ObjectStore contract, checked against every backend (see conftest ``store``)."""

from __future__ import annotations

import array
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from mere.errors import AlreadyExists, InvalidKey, ObjectNotFound, StorageError
from mere.storage import FaultyStore, LocalStore, MemoryStore, ObjectMeta, ObjectStore
from mere.storage._obstore import ObstoreStore

BAD_KEYS = [
    "../x",
    "a/../../b",
    "/abs",
    "a//b",
    "a\\b",
    "a\x00b",
    "",
    "x" * 2000,
    "a/",
    "./a",
    "a/.",
    "..",
]


def keys(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [meta.key for meta in store.list(prefix, start_after)]


# --- create, read, overwrite ---------------------------------------------------


def test_put_if_absent_then_get(store: ObjectStore) -> None:
    store.put_if_absent("_log/00000000000000000001.json", b'{"v": 1}')
    assert store.get("_log/00000000000000000001.json") == b'{"v": 1}'


def test_second_put_if_absent_raises_and_keeps_original(store: ObjectStore) -> None:
    store.put_if_absent("k", b"first")
    with pytest.raises(AlreadyExists) as info:
        store.put_if_absent("k", b"second, longer contents")
    assert info.value.key == "k"
    assert isinstance(info.value, StorageError)
    assert store.get("k") == b"first"
    assert store.head("k").size == len(b"first")


def test_put_overwrites(store: ObjectStore) -> None:
    store.put("_last_checkpoint", b"old and long")
    store.put("_last_checkpoint", b"new")
    assert store.get("_last_checkpoint") == b"new"
    assert store.head("_last_checkpoint").size == 3


def test_put_if_absent_after_put_raises(store: ObjectStore) -> None:
    store.put("k", b"hint")
    with pytest.raises(AlreadyExists):
        store.put_if_absent("k", b"other")
    assert store.get("k") == b"hint"


def test_empty_object(store: ObjectStore) -> None:
    store.put_if_absent("empty", b"")
    assert store.get("empty") == b""
    assert store.head("empty").size == 0
    assert store.open_input("empty").read() == b""


def test_large_object(store: ObjectStore) -> None:
    data = bytes(range(256)) * (5 * 4096)  # 5 MiB
    store.put_if_absent("big/blob.parquet", data)
    assert store.get("big/blob.parquet") == data


def test_unicode_and_odd_but_valid_keys(store: ObjectStore) -> None:
    names = ["tables/ünïcødé/part 1.parquet", "a.b/c-d_e=f/g~h", "date=2024-01-01/x#1", ".hidden"]
    for i, name in enumerate(names):
        store.put_if_absent(name, str(i).encode())
    for i, name in enumerate(names):
        assert store.get(name) == str(i).encode()
    assert keys(store) == sorted(names)


# --- data types ------------------------------------------------------------------


def test_accepts_pyarrow_buffer(store: ObjectStore) -> None:
    buffer = pa.py_buffer(b"arrow bytes")
    store.put_if_absent("buf", buffer)
    store.put("buf2", buffer)
    assert store.get("buf") == b"arrow bytes"
    assert store.get("buf2") == b"arrow bytes"


def test_accepts_memoryview(store: ObjectStore) -> None:
    store.put_if_absent("mv", memoryview(b"0123456789")[2:6])
    assert store.get("mv") == b"2345"
    numbers = array.array("i", [1, 2, 3])
    store.put("ints", memoryview(numbers))
    assert store.get("ints") == numbers.tobytes()


def test_stored_bytes_do_not_alias_a_mutable_source(store: ObjectStore) -> None:
    source = bytearray(b"abc")
    store.put_if_absent("alias", memoryview(source))
    source[0] = ord("z")
    assert store.get("alias") == b"abc"


def test_open_input_reads_back(store: ObjectStore) -> None:
    data = b"".join(i.to_bytes(4, "little") for i in range(10_000))
    store.put_if_absent("data/file.bin", data)
    source = store.open_input("data/file.bin")
    try:
        assert source.size() == len(data)
        source.seek(400)
        assert source.read(8) == data[400:408]
        source.seek(0)
        assert source.read() == data
    finally:
        source.close()


# --- missing keys ------------------------------------------------------------------


def test_get_and_head_of_missing_raise_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as info:
        store.get("nope/missing.json")
    assert info.value.key == "nope/missing.json"
    with pytest.raises(ObjectNotFound):
        store.head("nope/missing.json")
    with pytest.raises(ObjectNotFound):
        store.open_input("nope/missing.json")


def test_a_key_prefix_is_not_an_object(store: ObjectStore) -> None:
    store.put_if_absent("dir/file", b"x")
    for missing in ("dir", "dir/file/deeper"):
        with pytest.raises(ObjectNotFound):
            store.get(missing)
        with pytest.raises(ObjectNotFound):
            store.head(missing)
        assert not store.exists(missing)
        store.delete(missing)  # not an error
    assert store.get("dir/file") == b"x"


def test_exists(store: ObjectStore) -> None:
    assert not store.exists("k")
    store.put_if_absent("k", b"v")
    assert store.exists("k")
    store.delete("k")
    assert not store.exists("k")


def test_head_reports_size_and_mtime(store: ObjectStore) -> None:
    before = time.time()
    store.put_if_absent("h", b"12345")
    meta = store.head("h")
    assert meta == ObjectMeta("h", 5, meta.modified)
    assert before - 5 <= meta.modified <= time.time() + 5


# --- listing -----------------------------------------------------------------------


def test_list_is_sorted_regardless_of_write_order(store: ObjectStore) -> None:
    names = [f"_log/{v:020d}.json" for v in (5, 1, 10, 3, 2, 100, 4)]
    for name in names:
        store.put_if_absent(name, name.encode())
    assert keys(store, "_log/") == sorted(names)
    metas = list(store.list("_log/"))
    assert [m.size for m in metas] == [len(m.key) for m in metas]


def test_list_empty_results(store: ObjectStore) -> None:
    assert keys(store) == []
    store.put_if_absent("a/b", b"")
    assert keys(store, "zzz") == []
    assert keys(store, "missing/dir/") == []
    assert keys(store, "a/c") == []
    assert keys(store, "a/b/") == []  # a/b is an object, not a directory
    assert keys(store, start_after="a/b") == []
    assert keys(store, "a/", start_after="z") == []


def test_list_partial_name_prefix(store: ObjectStore) -> None:
    for v in (1, 2, 10, 1000):
        store.put_if_absent(f"_log/{v:020d}.json", b"")
    store.put_if_absent("_log/_last_checkpoint", b"")
    store.put_if_absent("_logbook", b"")
    assert keys(store, "_log/000") == [f"_log/{v:020d}.json" for v in (1, 2, 10, 1000)]
    assert keys(store, "_log/0000000000000000000") == [f"_log/{v:020d}.json" for v in (1, 2)]
    assert keys(store, "_log/_") == ["_log/_last_checkpoint"]
    assert keys(store, "_log") == [
        *(f"_log/{v:020d}.json" for v in (1, 2, 10, 1000)),
        "_log/_last_checkpoint",
        "_logbook",
    ]
    assert keys(store, "_log/") == keys(store, "_log")[:-1]


def test_list_nested_keys_in_byte_order(store: ObjectStore) -> None:
    # '-' (0x2d) and '.' (0x2e) sort before '/' (0x2f): a directory's children
    # must not be emitted before a sibling file named "<dir>-..." or "<dir>.x".
    names = [
        "t/a/x",
        "t/a/b/c",
        "t/a-b",
        "t/a.txt",
        "t/a0",
        "t/ab/c",
        "t/b",
        "t/A",
        "top",
        "t/a/b-c",
        "t/a/b/d/e/f",
    ]
    for name in names:
        store.put_if_absent(name, b"")
    assert keys(store) == sorted(names)
    assert keys(store, "t/a") == sorted(n for n in names if n.startswith("t/a"))
    assert keys(store, "t/a/") == sorted(n for n in names if n.startswith("t/a/"))
    assert keys(store, "t/a/b") == ["t/a/b-c", "t/a/b/c", "t/a/b/d/e/f"]
    assert keys(store, "t/a/b/") == ["t/a/b/c", "t/a/b/d/e/f"]
    assert keys(store, "t/a/b/d/e/f") == ["t/a/b/d/e/f"]


def test_list_start_after(store: ObjectStore) -> None:
    names = ["_log/" + f"{v:020d}.json" for v in range(1, 11)] + ["a/x/1", "a/x/2", "a/y", "b"]
    for name in names:
        store.put_if_absent(name, b"")
    ordered = sorted(names)
    for cut in ordered:
        assert keys(store, start_after=cut) == [n for n in ordered if n > cut]
    # start_after need not be a key, and may sit inside or between "directories"
    for cut in [
        "",
        "_",
        "_log/",
        "_log/0000000000000000000",
        "a",
        "a/",
        "a/x",
        "a/x/",
        "a/x/1a",
        "a/z",
    ]:
        assert keys(store, start_after=cut) == [n for n in ordered if n > cut], cut
    assert keys(store, "_log/", start_after=f"_log/{7:020d}.json") == [
        f"_log/{v:020d}.json" for v in (8, 9, 10)
    ]
    assert keys(store, "a/x/", start_after="a/x/1") == ["a/x/2"]


def test_list_sees_writes_and_deletes_immediately(store: ObjectStore) -> None:
    for i in range(50):
        store.put_if_absent(f"p/{i:03d}", b"")
        assert keys(store, "p/")[-1] == f"p/{i:03d}"
    store.delete("p/010")
    assert "p/010" not in keys(store, "p/")
    assert len(keys(store, "p/")) == 49


def test_list_many_keys(store: ObjectStore) -> None:
    names = [f"many/{(i * 7919) % 3000:06d}" for i in range(3000)]
    for name in names:
        store.put(name, b"")
    assert keys(store, "many/") == sorted(names)
    assert keys(store, "many/0029") == [f"many/0029{i:02d}" for i in range(100)]
    assert keys(store, "many/", start_after="many/002990") == [
        f"many/{i:06d}" for i in range(2991, 3000)
    ]


# --- delete ------------------------------------------------------------------------


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_if_absent("d/k", b"v")
    store.delete("d/k")
    store.delete("d/k")
    store.delete("never/existed")
    with pytest.raises(ObjectNotFound):
        store.get("d/k")
    assert keys(store) == []
    store.put_if_absent("d/k", b"again")  # a deleted key can be created again
    assert store.get("d/k") == b"again"


# --- invalid keys --------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_KEYS, ids=repr)
def test_invalid_keys_rejected_everywhere(store: ObjectStore, bad: str, tmp_path: Path) -> None:
    operations = {
        "put_if_absent": lambda: store.put_if_absent(bad, b"evil"),
        "put": lambda: store.put(bad, b"evil"),
        "get": lambda: store.get(bad),
        "head": lambda: store.head(bad),
        "exists": lambda: store.exists(bad),
        "delete": lambda: store.delete(bad),
        "open_input": lambda: store.open_input(bad),
    }
    for name, operation in operations.items():
        with pytest.raises(InvalidKey):
            operation()
            pytest.fail(f"{name} accepted {bad!r}")
    assert keys(store) == []
    # nothing was written anywhere under tmp_path (the local root is tmp_path/root)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []


@pytest.mark.parametrize("bad", ["../", "/", "a//", "../x", "a/../b", "/abs", "a\\b", "x\x00"])
def test_invalid_list_prefix_rejected_on_call(store: ObjectStore, bad: str) -> None:
    with pytest.raises(InvalidKey):
        store.list(bad)


def test_invalid_key_is_a_storage_error() -> None:
    assert issubclass(InvalidKey, StorageError)


# --- concurrency -----------------------------------------------------------------------


def race_once(store: ObjectStore, key: str, contenders: int) -> dict[int, str]:
    """Release ``contenders`` threads at a barrier to create ``key``; return who won."""
    barrier = threading.Barrier(contenders)
    outcomes: dict[int, str] = {}

    def attempt(worker: int) -> None:
        barrier.wait(timeout=10)
        try:
            store.put_if_absent(key, f"worker {worker}".encode() * 100)
            outcomes[worker] = "won"
        except AlreadyExists:
            outcomes[worker] = "lost"

    threads = [threading.Thread(target=attempt, args=(w,)) for w in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    return outcomes


def test_threads_racing_put_if_absent_have_one_winner(store: ObjectStore) -> None:
    for round_ in range(20):
        key = f"race/{round_:03d}"
        outcomes = race_once(store, key, 8)
        winners = [w for w, outcome in outcomes.items() if outcome == "won"]
        assert len(outcomes) == 8
        assert len(winners) == 1
        assert store.get(key) == f"worker {winners[0]}".encode() * 100


# --- identity ----------------------------------------------------------------------------


def test_uri_names_the_backend(store: ObjectStore) -> None:
    inner = store.inner if isinstance(store, FaultyStore) else store
    if isinstance(inner, LocalStore):
        assert store.uri == Path(inner.root).as_uri()
        assert store.uri.startswith("file:///")
    elif isinstance(inner, ObstoreStore):
        prefix = {"s3": "s3://", "azure": "az://", "gcs": "gs://"}[inner.backend]
        assert store.uri.startswith(prefix)
    else:
        assert isinstance(inner, MemoryStore)
        assert store.uri == "memory://" + inner.name
    assert store.uri in repr(store)
