"""Fixtures for the storage tests: one ``store`` fixture per backend.

The behaviour suite runs against every backend through ``store``: memory,
local, a fault-free FaultyStore, S3 (a moto server) and Azure Blob (Azurite),
the last two started once per test session by ``tests/cloud/cloud_servers.py``
(each test gets an empty prefix of its own). Tests that need one backend take
``local_store`` or ``memory_store`` directly.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mere.storage import FaultyStore, LocalStore, MemoryStore, ObjectStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cloud"))
import cloud_servers


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


@pytest.fixture(
    params=[
        "memory",
        "local",
        "faulty",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """Every backend in turn: memory, local (on tmp_path), a fault-free FaultyStore, S3, Azure."""
    created: ObjectStore
    if request.param == "memory":
        created = MemoryStore()
    elif request.param == "local":
        created = LocalStore(tmp_path / "root")
    elif request.param == "s3":
        created = cloud_servers.s3_store(cloud_servers.moto().endpoint)
    elif request.param == "azure":
        created = cloud_servers.azure_store(cloud_servers.azurite().endpoint)
    else:
        created = FaultyStore(MemoryStore())
    yield created
    created.close()
    inner = created.inner if isinstance(created, FaultyStore) else created
    if isinstance(inner, MemoryStore):
        MemoryStore.forget(inner.name)
