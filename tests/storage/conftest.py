"""Fixtures for the storage tests: one ``store`` fixture per backend.

The behaviour suite runs against every backend through ``store``; tests
that need one backend take ``local_store`` or ``memory_store`` directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mere.storage import FaultyStore, LocalStore, MemoryStore, ObjectStore


@pytest.fixture
def memory_store() -> Iterator[MemoryStore]:
    """A fresh private in-memory store, forgotten afterwards."""
    store = MemoryStore()
    yield store
    MemoryStore.forget(store.name)


@pytest.fixture
def local_store(tmp_path: Path) -> LocalStore:
    """A LocalStore rooted at ``tmp_path/root`` (so tests can check nothing leaks beside it)."""
    return LocalStore(tmp_path / "root")


@pytest.fixture(params=["memory", "local", "faulty"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """Every backend in turn: memory, local (on tmp_path), and a fault-free FaultyStore."""
    created: ObjectStore
    if request.param == "memory":
        created = MemoryStore()
    elif request.param == "local":
        created = LocalStore(tmp_path / "root")
    else:
        created = FaultyStore(MemoryStore())
    yield created
    created.close()
    inner = created.inner if isinstance(created, FaultyStore) else created
    if isinstance(inner, MemoryStore):
        MemoryStore.forget(inner.name)
