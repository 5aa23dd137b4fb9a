"""A retention of the wrong type is a mere error (InvalidArgument), as other verbs answer."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import pytest

import mere
from mere.errors import InvalidArgument


@pytest.fixture
def one_table(db: mere.Database) -> mere.Database:
    db.create_table("a", pa.schema([("id", pa.int64())]))
    db.table("a").append([{"id": 1}])
    return db


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda db: db.vacuum(0), "retention must be a datetime.timedelta, not int"),
        (lambda db: db.expire(3600), "retention must be a datetime.timedelta, not int"),
        (
            lambda db: db.vacuum(timedelta(hours=2), min_retention=5),
            "min_retention must be a datetime.timedelta, not int",
        ),
        (
            lambda db: db.expire(timedelta(hours=2), min_retention=1.5),
            "min_retention must be a datetime.timedelta, not float",
        ),
    ],
    ids=["vacuum-int", "expire-int", "vacuum-min-int", "expire-min-float"],
)
def test_retention_not_a_timedelta_is_invalid_argument(
    one_table: mere.Database, call: Callable[[mere.Database], object], message: str
) -> None:
    """vacuum(0), expire(3600), min_retention=5 raised builtins.TypeError; nothing changes."""
    before = sorted(m.key for m in one_table.store.list(""))
    with pytest.raises(InvalidArgument, match=message):
        call(one_table)
    assert sorted(m.key for m in one_table.store.list("")) == before
