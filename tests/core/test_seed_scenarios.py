"""The two scenarios of the seed design, as stories."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string())])


def test_concurrent_create_of_the_same_table_fails_for_the_second(db_uri: str) -> None:
    first = mere.connect(db_uri)
    second = mere.connect(db_uri)
    late = second.transaction()

    with first.transaction() as tx:
        tx.create_table("x", SCHEMA)
        tx.table("x").append([{"a": 1, "b": "one"}, {"a": 2, "b": "two"}])

    late.create_table("x", SCHEMA)
    late.table("x").append([{"a": 3, "b": "three"}])
    with pytest.raises(mere.ConcurrentCreateTable) as err:
        late.commit()

    assert err.value.winning_version == 1
    assert err.value.table == "x"
    assert first.table("x").scan().num_rows == 2


def test_reader_keeps_its_snapshot_while_writer_sees_its_own_rows(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("x", SCHEMA)
    db.table("x").append([{"a": 1, "b": "one"}, {"a": 2, "b": "two"}])

    reader = db.transaction()
    writer = db.transaction()
    writer.table("x").append([{"a": 3, "b": "three"}])

    assert writer.table("x").scan().num_rows == 3
    assert reader.table("x").scan().num_rows == 2
    writer.commit()
    assert reader.table("x").scan().num_rows == 2
    reader.commit()

    assert mere.connect(db_uri).table("x").scan().num_rows == 3
