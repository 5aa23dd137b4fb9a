"""Upkeep verbs answer an argument of the wrong type with a mere error, as other verbs do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.errors import InvalidArgument


@pytest.fixture
def one_table(db: mere.Database) -> mere.Database:
    db.create_table("a", pa.schema([("id", pa.int64())]))
    db.table("a").append([{"id": 1}])
    return db


@pytest.mark.parametrize("order", ["sort_by", "zorder_by"])
def test_compact_order_columns_as_one_string_is_invalid_argument(
    one_table: mere.Database, order: str
) -> None:
    """A string for the column list raised builtins.TypeError, not a mere error."""
    before = one_table.version
    kwargs: dict[str, Any] = {order: "id"}
    with pytest.raises(InvalidArgument, match=f"{order} must be a list of column names"):
        one_table.table("a").compact(**kwargs)
    assert one_table.version == before


def test_export_tables_as_one_string_is_invalid_argument(
    one_table: mere.Database, tmp_path: Path
) -> None:
    """export(tables="a") raised builtins.TypeError; nothing is written to the target."""
    target = tmp_path / "copy"
    with pytest.raises(InvalidArgument, match="tables must be a list of table names"):
        one_table.export(str(target), tables="a")
    assert not target.exists() or not any(target.iterdir())


def test_restore_tables_as_one_string_is_invalid_argument(one_table: mere.Database) -> None:
    """restore(tables="a") raised builtins.TypeError; nothing is committed."""
    one_table.table("a").append([{"id": 2}])
    before = one_table.version
    with pytest.raises(InvalidArgument, match="tables must be a list of table names"):
        one_table.restore(version=before - 1, tables="a")
    assert one_table.version == before
    assert one_table.table("a").scan().num_rows == 2
