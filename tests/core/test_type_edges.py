"""Column types at their edges: primary keys, casts and values Arrow holds but Python does not."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere

ZONED = pa.timestamp("us", tz="+05:30")
#: 9999-12-31 23:59:59 UTC: a valid instant, but year 10000 in local time (+05:30).
LAST_INSTANT = 253402300799 * 10**6


def test_a_zoned_timestamp_key_past_year_9999_in_local_time_is_checked(
    db: mere.Database,
) -> None:
    """A new key whose local time Python cannot hold raised a raw OverflowError."""
    db.create_table("z", pa.schema([("v", ZONED), ("x", pa.int32())]), primary_key=["v"])
    table = db.table("z")
    table.append(pa.table({"v": pa.array([0], pa.int64()).cast(ZONED), "x": [1]}))
    late = pa.array([LAST_INSTANT], pa.int64()).cast(ZONED)
    table.append(pa.table({"v": late, "x": [2]}))
    assert sorted(table.scan().column("x").to_pylist()) == [1, 2]
    with pytest.raises(mere.DuplicateKey, match="10000-01-01"):
        table.append(pa.table({"v": late, "x": [3]}))
    assert table.scan().num_rows == 2
