"""LocalStore-only behaviour: cross-process races, crashes, symlinks, temp files, fsync.

The multi-process tests use the "forkserver" start method with this module
and ``mere.storage.local`` preloaded, so each child starts in milliseconds
without forking the (possibly multi-threaded) pytest process itself.
"""

from __future__ import annotations

import errno
import functools
import multiprocessing
import multiprocessing.context
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mere.errors import AlreadyExists, InvalidKey, NotWritten, ObjectNotFound, StorageError
from mere.storage import LocalStore, open_store
from mere.storage import local as local_module
from mere.storage.local import TEMP_PREFIX

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX filesystem semantics")

RACE_PROCESSES = 8
RACE_ROUNDS = 50
CRASH_ROUNDS = 30
CRASH_SIZE = 8 * 1024 * 1024
WAIT = 60.0  # upper bound for any single wait on a child process


def disk_files(root: Path) -> list[str]:
    """Every regular file under root, as a key-like relative path, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def listed(store: LocalStore, prefix: str = "") -> list[str]:
    return [meta.key for meta in store.list(prefix)]


# --- child-process bodies (module level so forkserver children can import them) ---


def _race_payload(worker: int, round_: int) -> bytes:
    return f"worker={worker} round={round_};".encode() * 800


def _race_worker(root: str, worker: int, rounds: int, barrier: Any, results: Any) -> None:
    store = LocalStore(root)
    for round_ in range(rounds):
        barrier.wait(timeout=WAIT)
        try:
            store.put_if_absent(f"race/{round_:04d}", _race_payload(worker, round_))
            outcome = "won"
        except AlreadyExists:
            outcome = "lost"
        except Exception as exc:
            outcome = f"error {exc!r}"
        results.put((round_, worker, outcome))


@functools.cache
def _crash_body() -> bytes:
    return random.Random(1234).randbytes(CRASH_SIZE)


def _crash_payload(round_: int, index: int) -> bytes:
    return f"{round_:08d}:{index:08d}|".encode() + _crash_body()


def _crash_writer(root: str, round_: int, ready: Any) -> None:
    store = LocalStore(root)
    _crash_body()
    ready.set()
    index = 0
    while True:
        store.put_if_absent(f"crash/{round_:03d}/{index:06d}", _crash_payload(round_, index))
        index += 1


@pytest.fixture(scope="module")
def mp_context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "mere.storage.local"])
    return context


def _stop(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(timeout=WAIT)


# --- multi-process races and crashes ---------------------------------------------------


@pytest.mark.slow
def test_processes_racing_put_if_absent_have_exactly_one_winner(
    tmp_path: Path, mp_context: Any
) -> None:
    root = tmp_path / "root"
    barrier = mp_context.Barrier(RACE_PROCESSES)
    results = mp_context.Queue()
    processes = [
        mp_context.Process(
            target=_race_worker, args=(str(root), w, RACE_ROUNDS, barrier, results), daemon=True
        )
        for w in range(RACE_PROCESSES)
    ]
    outcomes: dict[int, dict[int, str]] = {r: {} for r in range(RACE_ROUNDS)}
    try:
        for process in processes:
            process.start()
        for _ in range(RACE_PROCESSES * RACE_ROUNDS):
            round_, worker, outcome = results.get(timeout=WAIT)
            outcomes[round_][worker] = outcome
        for process in processes:
            process.join(timeout=WAIT)
            assert process.exitcode == 0
    finally:
        _stop(processes)
        results.close()
        results.join_thread()
    store = LocalStore(root)
    for round_, by_worker in outcomes.items():
        assert sorted(by_worker.values()).count("won") == 1, (round_, by_worker)
        assert set(by_worker.values()) == {"won", "lost"}, (round_, by_worker)
        (winner,) = (w for w, outcome in by_worker.items() if outcome == "won")
        assert store.get(f"race/{round_:04d}") == _race_payload(winner, round_)
    assert listed(store) == [f"race/{r:04d}" for r in range(RACE_ROUNDS)]
    assert disk_files(root) == listed(store)  # no temp file left behind by anyone


@pytest.mark.slow
def test_sigkill_during_put_if_absent_never_exposes_a_partial_object(
    tmp_path: Path, mp_context: Any
) -> None:
    root = tmp_path / "root"
    store = LocalStore(root)
    rng = random.Random(42)
    rounds_with_temp_left = 0
    for round_ in range(CRASH_ROUNDS):
        ready = mp_context.Event()
        child = mp_context.Process(
            target=_crash_writer, args=(str(root), round_, ready), daemon=True
        )
        child.start()
        try:
            assert ready.wait(timeout=WAIT)
            time.sleep(rng.uniform(0.0, 0.1))
            os.kill(child.pid, signal.SIGKILL)
            child.join(timeout=WAIT)
            assert child.exitcode == -signal.SIGKILL
        finally:
            _stop([child])
        prefix = f"crash/{round_:03d}/"
        keys = listed(store, prefix)
        for key in keys:  # whatever is visible is complete and correct
            assert store.get(key) == _crash_payload(round_, int(key.rsplit("/", 1)[1]))
        assert keys == [f"{prefix}{i:06d}" for i in range(len(keys))]
        on_disk = [k for k in disk_files(root) if k.startswith(prefix)]
        temps = [k for k in on_disk if k.rsplit("/", 1)[1].startswith(TEMP_PREFIX)]
        assert sorted(set(on_disk) - set(temps)) == keys
        assert len(temps) <= 1
        rounds_with_temp_left += bool(temps)
        # The next key the killed writer would have made is either absent or
        # complete; a new writer can claim it if absent.
        next_key = f"{prefix}{len(keys):06d}"
        with pytest.raises(ObjectNotFound):
            store.get(next_key)
        store.put_if_absent(next_key, b"after the crash")
        assert store.get(next_key) == b"after the crash"
    assert all(TEMP_PREFIX not in key for key in listed(store))
    # Killing a writer that spends nearly all its time between creating and
    # unlinking its temp file leaves temp files behind; they are invisible to
    # list, and remove_temp_files sweeps them.
    assert rounds_with_temp_left > 0
    assert store.remove_temp_files(older_than=3600) == 0  # all fresh: kept
    assert store.remove_temp_files(older_than=0) == rounds_with_temp_left
    assert disk_files(root) == listed(store)


# --- symlinks ------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_bytes(b"secret")
    return directory


def test_symlinked_directory_pointing_outside_is_never_followed(
    local_store: LocalStore, outside: Path
) -> None:
    root = Path(local_store.root)
    (root / "evil").symlink_to(outside, target_is_directory=True)
    for key in ("evil/secret.txt", "evil/new.txt", "evil/sub/new.txt"):
        with pytest.raises(InvalidKey):
            local_store.put_if_absent(key, b"x")
        with pytest.raises(InvalidKey):
            local_store.put(key, b"x")
        with pytest.raises(InvalidKey):
            local_store.get(key)
        with pytest.raises(InvalidKey):
            local_store.head(key)
        with pytest.raises(InvalidKey):
            local_store.exists(key)
        with pytest.raises(InvalidKey):
            local_store.open_input(key)
        with pytest.raises(InvalidKey):
            local_store.delete(key)
    for prefix in ("evil/", "evil/s", "evil/sub/"):
        with pytest.raises(InvalidKey):
            local_store.list(prefix)
    assert listed(local_store) == []  # list does not descend into symlinks
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"secret"


@pytest.mark.parametrize("swapped", ["tables/t", "tables"])
def test_a_directory_swapped_for_a_symlink_after_use_is_never_followed(
    swapped: str, local_store: LocalStore, outside: Path
) -> None:
    # The store remembers resolved directories: a directory it resolved before,
    # replaced since by a symlink out of the root (itself or a parent of it),
    # must be resolved again, not trusted.
    root = Path(local_store.root)
    local_store.put_if_absent("tables/t/a", b"x")
    assert local_store.get("tables/t/a") == b"x"
    shutil.rmtree(root / swapped)
    (root / swapped).symlink_to(outside, target_is_directory=True)
    for key in ("tables/t/b", "tables/t/a"):
        with pytest.raises(InvalidKey):
            local_store.put_if_absent(key, b"escaped")
        with pytest.raises(InvalidKey):
            local_store.get(key)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_symlinked_file_pointing_outside_is_never_followed(
    local_store: LocalStore, outside: Path
) -> None:
    root = Path(local_store.root)
    (root / "link").symlink_to(outside / "secret.txt")
    with pytest.raises(InvalidKey):
        local_store.get("link")
    with pytest.raises(InvalidKey):
        local_store.put("link", b"overwrite")
    with pytest.raises(InvalidKey):
        local_store.put_if_absent("link", b"overwrite")
    with pytest.raises(InvalidKey):
        local_store.delete("link")
    assert (outside / "secret.txt").read_bytes() == b"secret"
    assert (root / "link").is_symlink()
    assert listed(local_store) == []


def test_symlink_within_root_can_be_read_but_is_not_listed(local_store: LocalStore) -> None:
    root = Path(local_store.root)
    local_store.put_if_absent("real/x", b"data")
    (root / "alias").symlink_to(root / "real", target_is_directory=True)
    assert local_store.get("alias/x") == b"data"
    assert listed(local_store) == ["real/x"]


def test_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target", target_is_directory=True)
    store = LocalStore(tmp_path / "link")
    store.put_if_absent("a/b", b"ok")
    assert store.get("a/b") == b"ok"
    assert listed(store, "a/") == ["a/b"]
    assert (tmp_path / "target" / "a" / "b").read_bytes() == b"ok"


# --- temp files ------------------------------------------------------------------------


def test_temp_files_are_invisible_and_their_names_reserved(local_store: LocalStore) -> None:
    root = Path(local_store.root)
    local_store.put_if_absent("d/real", b"1")
    (root / "d" / f"{TEMP_PREFIX}0123456789abcdef").write_bytes(b"partial")
    (root / f"{TEMP_PREFIX}deadbeef").write_bytes(b"partial")
    (root / f"{TEMP_PREFIX}dir").mkdir()
    (root / f"{TEMP_PREFIX}dir" / "x").write_bytes(b"partial")
    assert listed(local_store) == ["d/real"]
    assert listed(local_store, "d/.mere") == []
    assert listed(local_store, f"{TEMP_PREFIX}dir/") == []
    for key in (f"{TEMP_PREFIX}x", f"d/{TEMP_PREFIX}0123456789abcdef", f"{TEMP_PREFIX}dir/x"):
        with pytest.raises(InvalidKey):
            local_store.put_if_absent(key, b"")
        with pytest.raises(InvalidKey):
            local_store.get(key)
    assert local_store.remove_temp_files(older_than=0) == 3  # two files, one directory
    assert local_store.get("d/real") == b"1"
    assert not (root / "d" / f"{TEMP_PREFIX}0123456789abcdef").exists()
    assert not (root / f"{TEMP_PREFIX}dir").exists()


def test_a_plain_dot_name_is_a_valid_key(local_store: LocalStore) -> None:
    local_store.put_if_absent(".mere-not-temp", b"1")
    assert listed(local_store) == [".mere-not-temp"]


def test_no_temp_file_left_when_put_if_absent_loses(local_store: LocalStore) -> None:
    local_store.put_if_absent("k/v", b"first")
    with pytest.raises(AlreadyExists):
        local_store.put_if_absent("k/v", b"second")
    assert disk_files(Path(local_store.root)) == ["k/v"]


def test_link_failure_removes_temp_and_raises_storage_error(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_link(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "link", broken_link)
    with pytest.raises(StorageError) as info:
        local_store.put_if_absent("dir/key", b"data")
    assert not isinstance(info.value, AlreadyExists)
    # a failed link may still have made the name (NFS): of unknown outcome, not NotWritten
    assert not isinstance(info.value, NotWritten)
    assert "dir/key" in str(info.value)
    assert disk_files(Path(local_store.root)) == []


def test_fsync_failure_removes_temp_and_writes_nothing(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated fsync failure")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StorageError, match="k1"):
        local_store.put_if_absent("k1", b"data")
    assert disk_files(Path(local_store.root)) == []


def test_interrupt_mid_write_removes_temp(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted_write(fd: int, data: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "write", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        local_store.put_if_absent("k", b"data")
    with pytest.raises(KeyboardInterrupt):
        local_store.put("k", b"data")
    monkeypatch.undo()
    assert disk_files(Path(local_store.root)) == []


def test_replace_failure_in_put_removes_temp(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_store.put("hint", b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "simulated rename failure")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StorageError):
        local_store.put("hint", b"new")
    monkeypatch.undo()
    assert local_store.get("hint") == b"old"
    assert disk_files(Path(local_store.root)) == ["hint"]


# --- durability --------------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_put_if_absent_fsyncs_file_directory_and_new_parents(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    root = os.path.realpath(local_store.root)
    local_store.put_if_absent("new/deep/key", b"data")
    assert Path(synced[0]).name.startswith(TEMP_PREFIX)  # the data, before the link
    assert synced[1:] == [f"{root}/new/deep", f"{root}/new", root]
    synced.clear()
    local_store.put_if_absent("new/deep/key2", b"data")  # parents exist: file + its dir
    assert len(synced) == 2
    assert synced[1] == f"{root}/new/deep"
    synced.clear()
    local_store.put("new/hint", b"h")  # overwrites are not fsynced
    assert synced == []


# --- construction, paths, conflicts -----------------------------------------------------


def test_root_is_created_and_uri_round_trips(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "a" / "b" / "root")
    assert (tmp_path / "a" / "b" / "root").is_dir()
    assert store.uri == (tmp_path / "a" / "b" / "root").as_uri()
    store.put_if_absent("k", b"v")
    reopened = open_store(store.uri)
    assert isinstance(reopened, LocalStore)
    assert reopened.get("k") == b"v"
    assert open_store(str(tmp_path / "a" / "b" / "root")).get("k") == b"v"


def test_uri_of_a_root_with_special_characters_round_trips(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "with space#and%percent")
    store.put_if_absent("k", b"v")
    reopened = open_store(store.uri)
    assert isinstance(reopened, LocalStore)
    assert reopened.root == store.root


def test_relative_root_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalStore("rel")
    assert store.root == str(tmp_path / "rel")
    monkeypatch.chdir("/")
    store.put_if_absent("k", b"v")
    assert (tmp_path / "rel" / "k").read_bytes() == b"v"


def test_root_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageError):
        LocalStore(tmp_path / "file")


def test_key_and_directory_conflicts_raise_storage_error(local_store: LocalStore) -> None:
    local_store.put_if_absent("a/b", b"1")
    # "a" is a directory here; it is not an existing object, so not AlreadyExists
    with pytest.raises(StorageError) as info:
        local_store.put_if_absent("a", b"2")
    assert not isinstance(info.value, AlreadyExists)
    with pytest.raises(StorageError):
        local_store.put("a", b"2")
    # "a/b" is a file, so nothing can live below it
    for key in ("a/b/c", "a/b/c/d"):
        with pytest.raises(StorageError) as info:
            local_store.put_if_absent(key, b"3")
        assert not isinstance(info.value, AlreadyExists)
        with pytest.raises(ObjectNotFound):
            local_store.get(key)
    assert disk_files(Path(local_store.root)) == ["a/b"]
    assert local_store.get("a/b") == b"1"


def test_segment_too_long_for_the_filesystem_is_invalid(local_store: LocalStore) -> None:
    with pytest.raises(InvalidKey):
        local_store.put_if_absent("x" * 300, b"")
    with pytest.raises(InvalidKey):
        local_store.get("x" * 300)
    with pytest.raises(InvalidKey):
        local_store.put("d/" + "x" * 300, b"")


def test_open_input_is_memory_mapped(local_store: LocalStore) -> None:
    local_store.put_if_absent("f", b"0123456789")
    source = local_store.open_input("f")
    assert isinstance(source, pa.MemoryMappedFile)
    source.seek(3)
    assert source.read(4) == b"3456"
    local_store.delete("f")  # the mapping outlives the name on POSIX
    source.seek(0)
    assert source.read() == b"0123456789"
    source.close()
    with pytest.raises(ObjectNotFound):
        local_store.open_input("f")


def test_directory_is_not_an_object(local_store: LocalStore) -> None:
    local_store.put_if_absent("dir/x", b"1")
    with pytest.raises(ObjectNotFound):
        local_store.open_input("dir")
    local_store.delete("dir")
    assert local_store.get("dir/x") == b"1"


def test_removing_the_root_later_is_a_storage_error(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root")
    (tmp_path / "root").rmdir()
    with pytest.raises(StorageError):
        store.put_if_absent("a/b", b"")
    assert not (tmp_path / "root").exists()
    assert listed(store) == []


# --- listing a big directory --------------------------------------------------------------


@pytest.fixture
def big_log(local_store: LocalStore) -> Iterator[tuple[LocalStore, int]]:
    count = 20_000
    log = Path(local_store.root) / "_log"
    log.mkdir()
    for version in range(count):
        fd = os.open(log / f"{version:020d}.json", os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
    (log / f"{TEMP_PREFIX}aaaa").touch()
    yield local_store, count


def test_listing_the_tail_of_a_big_directory(big_log: tuple[LocalStore, int]) -> None:
    store, count = big_log
    started = time.perf_counter()
    tail = listed_after(store, "_log/", f"_log/{count - 4:020d}.json")
    assert tail == [f"_log/{v:020d}.json" for v in range(count - 3, count)]
    assert [m.key for m in store.list("_log/0000000000000001999")] == [
        f"_log/{v:020d}.json" for v in range(19990, 20000)
    ]
    elapsed = time.perf_counter() - started
    assert elapsed < 5.0  # scandir + sort, stat only what is yielded (~50 ms here)
    everything = listed(store, "_log/")
    assert len(everything) == count
    assert everything == sorted(everything)


def listed_after(store: LocalStore, prefix: str, start_after: str) -> list[str]:
    return [meta.key for meta in store.list(prefix, start_after=start_after)]


# --- files written by other programs (Spark's Parquet writer) ----------------------------


def test_link_if_absent_publishes_a_staged_file_without_copying(local_store: LocalStore) -> None:
    staging = local_store.temp_directory("tables/t/", "spark")
    assert Path(staging).parent == Path(local_store.root, "tables", "t")
    source = Path(staging, "part-0.parquet")
    source.write_bytes(b"rows")
    inode = source.stat().st_ino
    assert listed(local_store) == []  # staged files are not objects
    local_store.link_if_absent("tables/t/p=1/a.parquet", str(source))
    assert local_store.get("tables/t/p=1/a.parquet") == b"rows"
    assert Path(local_store.root, "tables/t/p=1/a.parquet").stat().st_ino == inode
    assert not source.exists()
    assert listed(local_store) == ["tables/t/p=1/a.parquet"]


def test_link_if_absent_never_replaces_an_object(local_store: LocalStore) -> None:
    local_store.put_if_absent("k", b"first")
    staging = local_store.temp_directory("", "spark")
    source = Path(staging, "f")
    source.write_bytes(b"second")
    with pytest.raises(AlreadyExists):
        local_store.link_if_absent("k", str(source))
    assert local_store.get("k") == b"first"
    assert source.read_bytes() == b"second"  # left for the caller to remove
    with pytest.raises(InvalidKey):
        local_store.link_if_absent("../escape", str(source))
    with pytest.raises(StorageError):
        local_store.link_if_absent("missing-source", str(Path(staging, "nope")))
    assert not Path(local_store.root, "missing-source").exists()


def test_abandoned_temp_directories_are_swept_only_when_all_of_them_is_old(
    local_store: LocalStore,
) -> None:
    staging = Path(local_store.temp_directory("tables/t/", "spark"))
    (staging / "sub").mkdir()
    (staging / "sub" / "part-0.parquet").write_bytes(b"x")
    old = time.time() - 7200
    for path in (staging, staging / "sub"):
        os.utime(path, (old, old))
    # A file written a moment ago (a job still running) keeps the directory.
    assert local_store.remove_temp_files(older_than=3600) == 0
    os.utime(staging / "sub" / "part-0.parquet", (old, old))
    assert local_store.remove_temp_files(older_than=3600, dry_run=True) == 1
    assert staging.exists()
    assert local_store.remove_temp_files(older_than=3600) == 1
    assert not staging.exists()


def test_temp_directory_makes_the_directories_it_creates_durable(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table's first files arrive through its staging directory: their parents must last."""
    synced: list[str] = []
    real = local_module._fsync_dir
    monkeypatch.setattr(local_module, "_fsync_dir", lambda p: (synced.append(p), real(p)))
    local_store.temp_directory("tables/t/", "spark")
    root = Path(local_store.root)
    assert str(root) in synced and str(root / "tables") in synced  # entries of tables/, t/
    assert str(root / "tables" / "t") in synced  # the entry of the staging directory


def test_link_if_absent_takes_only_staged_files_inside_the_root(
    local_store: LocalStore, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.parquet"
    outside.write_bytes(b"x")
    with pytest.raises(InvalidKey):
        local_store.link_if_absent("k", str(outside))
    assert outside.exists() and listed(local_store) == []


def test_a_commit_on_a_read_only_filesystem_fails_definitely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating the temp file failed, so nothing was written; the commit was still sent
    three times and reported as one whose outcome is unknown (check db.history())."""
    import mere
    from mere.errors import CommitOutcomeUnknown, NotWritten

    db = mere.connect(str(tmp_path / "db"))
    version = db.version
    real_open = os.open
    opened: list[str] = []

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if TEMP_PREFIX in os.fspath(path):
            opened.append(os.fspath(path))
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(NotWritten, match="Read-only file system") as info:
        db.create_table("t", pa.schema([("a", pa.int64())]))
    assert not isinstance(info.value, CommitOutcomeUnknown)
    assert len(opened) == 1
    monkeypatch.undo()
    assert mere.connect(str(tmp_path / "db"), create=False).version == version
