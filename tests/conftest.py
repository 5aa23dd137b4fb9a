"""Shared fixtures: a fresh database on every store backend."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.storage import MemoryStore

ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lay out CLI output as for a pipe, whatever runs the tests (xdist workers set COLUMNS=80)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(params=["memory", "local"])
def db_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URI of a fresh, empty location on each backend."""
    if request.param == "memory":
        name = f"test-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        MemoryStore.forget(name)
    else:
        yield str(tmp_path / "db")


@pytest.fixture
def db(db_uri: str) -> mere.Database:
    return mere.connect(db_uri)


@pytest.fixture
def orders_schema() -> pa.Schema:
    return ORDERS
