"""Clear errors at the API's boundaries, and one rule for names and moments (issue 12).

Each test is a call a new user made that failed with a raw or misleading
error, or that behaved differently on two paths.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pytest

import mere

KS = pa.schema([pa.field("k", pa.int64()), pa.field("s", pa.string())])


@pytest.fixture
def db() -> mere.Database:
    database = mere.connect(f"memory://bounds-{uuid.uuid4().hex}")
    database.create_table("t", KS)
    database.table("t").append([{"k": 1, "s": "a"}])
    return database


def test_an_empty_uri_is_refused_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for uri in ("", "  "):
        with pytest.raises(mere.InvalidArgument, match="must not be empty"):
            mere.connect(uri)
    assert list(tmp_path.iterdir()) == []


def test_a_row_that_does_not_fit_names_its_column_and_row(db: mere.Database) -> None:
    with pytest.raises(mere.SchemaMismatch, match=r"column 'k' \(int64\): row 1 holds 'x'"):
        db.table("t").append([{"k": 2, "s": "b"}, {"k": "x", "s": "c"}])
    assert db.table("t").scan().num_rows == 1


@pytest.mark.parametrize("mode", ["strict", "merge"])
def test_missing_keys_are_null_in_both_schema_modes(db: mere.Database, mode: str) -> None:
    db.table("t").append([{"k": 2}, {"s": "only s"}], schema_mode=mode)  # type: ignore[arg-type]
    got = sorted(db.table("t").scan().to_pylist(), key=lambda r: (r["k"] is None, r["k"]))
    assert got == [{"k": 1, "s": "a"}, {"k": 2, "s": None}, {"k": None, "s": "only s"}]


def test_dict_keys_match_columns_ignoring_case(db: mere.Database) -> None:
    db.table("t").append([{"K": 2, "S": "b"}])
    assert sorted(db.table("t").scan().column("k").to_pylist()) == [1, 2]
    with pytest.raises(mere.SchemaMismatch, match="twice"):
        db.table("t").append([{"k": 3, "K": 4}])


def test_a_new_key_after_the_first_row_is_merged(db: mere.Database) -> None:
    db.table("t").append([{"k": 2}, {"k": 3, "extra": 1.5}], schema_mode="merge")
    assert "extra" in db.table("t").schema.names


def test_update_names_columns_ignoring_case_and_hints_at_quoting(db: mere.Database) -> None:
    db.table("t").update("k = 1", {"S": "'b'"})
    assert db.table("t").scan().column("s").to_pylist() == ["b"]
    with pytest.raises(mere.InvalidExpression, match="text constant in quotes"):
        db.table("t").update(None, {"s": "zzz"})


def test_a_table_name_differing_only_in_case_is_explained(db: mere.Database) -> None:
    with pytest.raises(mere.TableExists, match="table names ignore case"):
        db.create_table("T", KS)


@pytest.mark.parametrize(
    "moment",
    [
        "2999-01-01",
        "2999-01-01T00:00:00Z",
        "2999-01-01 00:00:00+01:00",
        date(2999, 1, 1),
        datetime(2999, 1, 1),
        datetime(2999, 1, 1, tzinfo=UTC),
    ],
)
def test_time_travel_takes_every_form_of_a_moment(db: mere.Database, moment: object) -> None:
    assert db.snapshot(timestamp=moment).version == db.version  # type: ignore[arg-type]


def test_a_naive_datetime_is_utc(db: mere.Database) -> None:
    committed = db.snapshot().timestamp  # aware, UTC
    naive = committed.replace(tzinfo=None)
    assert db.snapshot(timestamp=naive).version == db.version


def test_a_bad_moment_is_a_clear_error(db: mere.Database) -> None:
    with pytest.raises(mere.InvalidArgument, match="not an ISO 8601 timestamp"):
        db.snapshot(timestamp="yesterday")
