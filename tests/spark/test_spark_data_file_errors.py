"""The data source's split reads name a damaged data file, as the core's reads do."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere
from mere.spark import _core
from mere.storage import open_store


@pytest.mark.parametrize("parts", [1, 2])
def test_a_truncated_file_read_in_parts_is_a_corrupt_data_file_error(uri, parts):
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("k", pa.int64())]))
    db.table("t").append(pa.table({"k": list(range(1000))}))
    table = db.snapshot().table("t")
    add = table.files[0]
    path = Path(uri, table.meta.prefix, add.path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(mere.CorruptDataFile, match=f"{table.meta.prefix}{add.path}.*'t'"):
        list(_core.iter_row_groups(open_store(uri), table.meta, add, ["k"], 0, parts))


@pytest.mark.parametrize("parts", [1, 2])
def test_a_file_overwritten_by_another_parquet_file_read_in_parts_is_damaged(uri, parts):
    """A split read opened the file without checking it against the log: another
    file's rows, or pyarrow's raw cast error."""
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("k", pa.int64())]))
    db.table("t").append(pa.table({"k": list(range(1000))}))
    table = db.snapshot().table("t")
    add = table.files[0]
    path = Path(uri, table.meta.prefix, add.path)
    pq.write_table(pa.table({"k": ["a"] * 3}), path, row_group_size=1)
    with pytest.raises(mere.CorruptDataFile, match=f"{table.meta.prefix}{add.path}.*'t'"):
        list(_core.iter_row_groups(open_store(uri), table.meta, add, ["k"], 0, parts))
