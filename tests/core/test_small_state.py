"""Small databases pay nothing for the columnar state of live files.

A table's files are columns so that a million of them load and filter in
bulk; a small table replayed from its commits keeps them as the objects its
commits decoded, and builds columns only when a scan plans over them. A
commit applied to a cached state does not derive the table's column layout
again. Before, opening a 1,000-commit database cost 1.2x what it did before
the columnar state (docs/benchmarks.md, Metadata at scale).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

import mere
import mere.snapshot.files as files_module
from mere.log.columns import FileLayout
from mere.storage import MemoryStore

COMMITS = 40


@pytest.fixture
def small() -> mere.Database:
    """A table of COMMITS one-row files (one removed and one re-added), no checkpoint."""
    db = mere.connect(MemoryStore(), checkpoint_interval=10_000)
    db.create_table("t", pa.schema([("id", pa.int64()), ("note", pa.string())]))
    for i in range(COMMITS):
        db.table("t").append([{"id": i, "note": f"n{i}"}])
    db.table("t").delete("id = 3")
    return db


def no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("columns built")

    monkeypatch.setattr(files_module, "adds_to_columns", refuse)


def test_opening_and_listing_a_small_table_builds_no_columns(
    small: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_columns(monkeypatch)
    fresh = mere.connect(small.store, create=False)
    state = fresh.latest_state().table_by_name("t")
    assert state is not None
    files = state.files
    assert len(files) == COMMITS - 1
    assert state.rows == COMMITS - 1
    objects = list(files.values())
    assert [a.path for a in objects] == list(files)
    assert all(files[a.path] is a for a in objects)
    assert sorted(a.rows for a in objects) == [1] * (COMMITS - 1)
    assert len(fresh.snapshot().table("t").files) == COMMITS - 1


def test_a_scan_of_a_small_table_reads_what_it_did(small: mere.Database) -> None:
    fresh = mere.connect(small.store, create=False)
    table = fresh.table("t")
    assert table.scan(filter="id = 7").column("note").to_pylist() == ["n7"]
    assert table.scan(filter="id = 3").num_rows == 0
    assert sorted(table.scan().column("id").to_pylist()) == [i for i in range(COMMITS) if i != 3]
    assert fresh.latest_state().tables == small.latest_state().tables


def test_a_commit_on_a_cached_state_derives_no_layout(
    small: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    small.table("t").append([{"id": 100, "note": "warm"}])  # the cached state is current
    derived = []
    of = FileLayout.of

    def counted(meta: Any) -> FileLayout:
        derived.append(meta.name)
        return of(meta)

    monkeypatch.setattr(FileLayout, "of", staticmethod(counted))
    for i in range(5):
        small.table("t").append([{"id": 200 + i, "note": "x"}])
    assert derived == []
    assert small.table("t").scan(filter="id >= 200").num_rows == 5


def test_a_checkpointing_commit_without_inlined_data_imports_no_maintenance_verbs() -> None:
    """Flushing inlined files is for format 3; importing mere.maintain cost ~60 ms of the
    first checkpointing commit of every writer process."""
    script = (
        "import sys, pyarrow as pa, mere\n"
        "from mere.storage import MemoryStore\n"
        "db = mere.connect(MemoryStore(), checkpoint_interval=5)\n"
        "db.create_table('t', pa.schema([('x', pa.int64())]))\n"
        "for i in range(6):\n"
        "    db.table('t').append([{'x': i}])\n"
        "assert db.latest_state().protocol.format_version < 3\n"
        "print('mere.maintain' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"
