"""Compaction's ordering over column types Arrow's sort kernels do not all cover."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

import mere


def half(values: list[float | None]) -> pa.Array:
    return pa.array(values, pa.float32()).cast(pa.float16())


@pytest.mark.parametrize("order", ["sort_by", "zorder_by"])
def test_a_float16_column_orders_with_nan_above_every_number(db: mere.Database, order: str) -> None:
    """Ordering by a float16 column raised a raw ArrowNotImplementedError (halffloat)."""
    db.create_table("f", pa.schema([("id", pa.int64()), ("v", pa.float16())]))
    table = db.table("f")
    table.append(pa.table({"id": [1, 2], "v": half([1.5, math.nan])}))
    table.append(pa.table({"id": [3, 4, 5], "v": half([None, -2.0, 0.25])}))
    table.compact(**{order: ["v"]})
    rows = table.scan()
    assert rows.column("id").to_pylist() == [4, 5, 1, 2, 3]
    assert rows.schema.field("v").type == pa.float16()
    assert np.isnan(rows.column("v").to_pylist()[3])
