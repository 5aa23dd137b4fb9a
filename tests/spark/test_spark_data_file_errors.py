"""The data source's split reads name a damaged data file, as the core's reads do."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere
from mere.spark import _core
from mere.storage import open_store


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _overwrite(path: Path) -> None:
    """Another valid Parquet file: a split read opened it unchecked (another file's rows,
    or pyarrow's raw cast error)."""
    pq.write_table(pa.table({"k": ["a"] * 3}), path, row_group_size=1)


@pytest.mark.parametrize("damage", [_truncate, _overwrite], ids=["truncated", "overwritten"])
@pytest.mark.parametrize("parts", [1, 2])
def test_a_damaged_file_read_in_parts_is_a_corrupt_data_file_error(uri, parts, damage):
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("k", pa.int64())]))
    db.table("t").append(pa.table({"k": list(range(1000))}))
    table = db.snapshot().table("t")
    add = table.files[0]
    damage(Path(uri, table.meta.prefix, add.path))
    with pytest.raises(mere.CorruptDataFile, match=f"{table.meta.prefix}{add.path}.*'t'"):
        list(_core.iter_row_groups(open_store(uri), table.meta, add, ["k"], 0, parts))
