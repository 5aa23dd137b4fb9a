"""The CLI's value conversions: JSON-safe values, sizes, times, one-line errors."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from mere.cli.main import one_line
from mere.cli.output import human_size, iter_rows, json_value, short_time


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (7, 7),
        (1.5, 1.5),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        ("x", "x"),
        (Decimal("12.30"), "12.30"),
        (Decimal("0E-10"), "0.0000000000"),
        (dt.date(2024, 1, 31), "2024-01-31"),
        (dt.datetime(2024, 1, 31, 10, 0, 1, 500), "2024-01-31T10:00:01.000500"),
        (dt.datetime(2024, 1, 31, tzinfo=dt.UTC), "2024-01-31T00:00:00+00:00"),
        (dt.time(10, 30), "10:30:00"),
        (dt.timedelta(hours=1), "1:00:00"),
        (b"\x00\xff", "AP8="),
        ([1, None, Decimal("1.0")], [1, None, "1.0"]),
        ({"a": dt.date(2024, 1, 1)}, {"a": "2024-01-01"}),
        ([("k", 1)], [["k", 1]]),  # an Arrow map
    ],
)
def test_json_value(value: object, expected: object) -> None:
    assert json_value(value) == expected
    json.dumps(json_value(value), allow_nan=False)


@pytest.mark.parametrize(
    ("months", "days", "nanos", "expected"),
    [  # DuckDB's text for the same interval (`SELECT (INTERVAL ...)::VARCHAR`)
        (14, 0, 0, "1 year 2 months"),
        (0, 1, 0, "1 day"),
        (0, 2, 0, "2 days"),
        (0, 0, -1_000_000_000, "-00:00:01"),
        (0, 0, 0, "00:00:00"),
        (14, 3, 14_706_789_000_000, "1 year 2 months 3 days 04:05:06.789"),
        (-14, -3, 0, "-1 year -2 months -3 days"),
        (0, 0, 1_000, "00:00:00.000001"),
        (1, -1, 0, "1 month -1 day"),
        (0, 0, 360_000_000_000_000, "100:00:00"),
        (-11, 0, 0, "-11 months"),
        (0, 0, -1_500_000_000, "-00:00:01.5"),
        (0, 0, 7, "00:00:00.000000007"),
    ],
)
def test_intervals_read_as_duckdb_prints_them(
    months: int, days: int, nanos: int, expected: str
) -> None:
    value = pa.array([pa.MonthDayNano([months, days, nanos])]).to_pylist()[0]
    assert json_value(value) == expected


def test_iter_rows_handles_every_arrow_type() -> None:
    batch = pa.record_batch(
        {
            "ns": pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns", tz="UTC")),
            "d": pa.array([Decimal("1.50"), None], pa.decimal128(5, 2)),
            "l": pa.array([[1, 2], None], pa.list_(pa.int64())),
            "s": pa.array([{"x": 1}, None], pa.struct([("x", pa.int64())])),
        }
    )
    rows = list(iter_rows(batch))
    assert rows[1] == {"ns": None, "d": None, "l": None, "s": None}
    assert rows[0]["ns"].startswith("2023-11-14T22:13:20.123456789")  # type: ignore[union-attr]
    assert rows[0]["d"] == "1.50"
    assert rows[0]["l"] == [1, 2]
    assert rows[0]["s"] == {"x": 1}


def test_human_size() -> None:
    assert human_size(0) == "0 B"
    assert human_size(1023) == "1023 B"
    assert human_size(1536) == "1.5 KiB"
    assert human_size(5 * 1024**3) == "5.0 GiB"


def test_short_time() -> None:
    assert short_time("2024-01-31T10:00:01.234567+00:00") == "2024-01-31 10:00:01.234"
    assert short_time("2024-01-31T11:00:00+01:00") == "2024-01-31 10:00:00.000"


def test_one_line() -> None:
    assert one_line("bad\n  \x1b[4mtoken\x1b[0m here\n") == "bad token here"
    assert one_line("") == "failed"
