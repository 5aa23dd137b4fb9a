"""Data and helpers shared by the Spark tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

ORDERS = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("customer_id", pa.int64()),
        pa.field("amount", pa.float64()),
        pa.field("country", pa.string()),
    ]
)


def orders(start: int, count: int, countries: tuple[str, ...] = ("FR", "DE", "IT")) -> pa.Table:
    """Rows ``start .. start+count-1`` of a small orders table."""
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": ids,
            "customer_id": [i % 7 for i in ids],
            "amount": [float(i) * 1.5 for i in ids],
            "country": [countries[i % len(countries)] for i in ids],
        },
        schema=ORDERS,
    )


def data_files(uri: str) -> list[Path]:
    return sorted(p for p in (Path(uri) / "tables").rglob("*.parquet"))
