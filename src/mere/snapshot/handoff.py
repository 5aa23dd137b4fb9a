"""Handing a table at one version to other engines: pandas, polars, row counts.

The ``TableSnapshot`` methods ``to_dataset``, ``to_pandas``, ``to_polars`` and
``count`` are thin wrappers over these functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mere.errors import MissingDependency
from mere.log.actions import AddFile, TableMeta
from mere.snapshot.scan import plan_scan, scan_files
from mere.storage.base import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa


def count_rows(
    store: ObjectStore, meta: TableMeta, files: Sequence[AddFile], filter: str | None
) -> int:
    """How many rows match ``filter`` (all rows if None), from the log where it can.

    Without a filter the answer is the sum of the files' row counts (no file is
    opened). With one, files the partition values and statistics rule out are
    skipped, files they show to match entirely count their rows from the log,
    and only the rest are read (just the columns the filter names).
    """
    if filter is None:
        return sum(f.rows for f in files)
    plan = plan_scan(meta, [], filter)
    total, unsure = 0, []
    for add in files:
        if not plan.matches(add):
            continue
        if plan.covers(add):
            total += add.rows
        else:
            unsure.append(add)
    if unsure:
        total += scan_files(store, plan, unsure).num_rows
    return total


def to_polars(table: pa.Table) -> Any:
    """A polars DataFrame of an Arrow table (polars is optional).

    Raises:
        MissingDependency: polars is not installed (``pip install 'mere[polars]'``).
    """
    try:
        import polars
    except ImportError:
        raise MissingDependency(
            "to_polars needs the polars package: install mere[polars]",
            help="pip install 'mere[polars]'",
        ) from None
    return polars.from_arrow(table)


def to_pandas(table: pa.Table) -> Any:
    """A pandas DataFrame of an Arrow table (pandas is optional).

    Raises:
        MissingDependency: pandas is not installed (``pip install 'mere[pandas]'``).
    """
    try:
        import pandas  # noqa: F401 - only to name the extra when it is missing
    except ImportError:
        raise MissingDependency(
            "to_pandas needs the pandas package: install mere[pandas]",
            help="pip install 'mere[pandas]'",
        ) from None
    return table.to_pandas()


__all__ = ["count_rows", "to_pandas", "to_polars"]
