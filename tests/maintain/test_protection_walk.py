"""What live tags and exports keep is the same when their versions are walked in order.

Vacuum and check learn every live export's files. They rebuilt each export's
version on its own (a checkpoint and a replay each); they now replay from one
exported version to the next. These compare the kept keys with that simple
per-version rule over a log with tags, minimal and partial exports, files
leaving (deletes, compaction, a dropped table), inlined files, expired versions
and a tag island below the oldest commit.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa

import mere
from mere.log.actions import is_external_path
from mere.maintain.common import Protection, exported_tables, shared_files

ZERO = timedelta(0)


def reference(db: mere.Database) -> dict[str, set[str]]:
    """Key -> exports keeping it, each export's versions rebuilt on their own."""
    by_key: dict[str, set[str]] = {}
    for export in db.state_at(db.version).exports.values():
        if not export.protects:
            continue
        state = db.state_at(export.version)
        since = db.state_at(export.since) if export.since is not None else None
        for meta, add in shared_files(state, since, exported_tables(state, export)):
            if not is_external_path(add.path):
                by_key.setdefault(meta.prefix + add.path, set()).add(export.name)
    return by_key


def walked(db: mere.Database) -> dict[str, set[str]]:
    protection = Protection(db)
    protection.add_state(db.state_at(db.version))
    return protection.by_key


def build(tmp_path: Path) -> mere.Database:
    db = mere.connect(tmp_path / "src", checkpoint_interval=5)
    db.create_table("a", pa.schema([("x", pa.int64())]))
    db.create_table("b", pa.schema([("y", pa.int64())]))
    for i in range(4):
        db.table("a").append([{"x": i}])
    db.tag("island", version=db.version)  # below the oldest commit after expiry
    for i in range(3):
        db.table("a").append(pa.table({"x": pa.array(range(i * 1000, i * 1000 + 500))}))
        db.table("b").append([{"y": i}])
    return db


def test_the_walk_keeps_what_each_version_rebuilt_alone_keeps(tmp_path: Path) -> None:
    db = build(tmp_path)
    since = db.version
    db.tag("t0")
    db.table("a").delete("x < 2")  # files leave the latest version
    db.tag("t1")
    db.table("b").append([{"y": 10}])
    db.tag("t2")  # table a unchanged since t1: the same files
    db.export(tmp_path / "min", mode="minimal", name="m", tables=["b"])
    db.table("a").append([{"x": 99}])
    db.export(tmp_path / "part", mode="partial", name="p", since=since)
    db.table("a").compact()
    db.tag("t3")
    db.tag("gone")
    db.drop_tag("gone")
    db.sql("DROP TABLE b")
    db.table("a").append([{"x": 7}])
    db.tag("old_t", version=since - 2)
    cutoff = db.log.commit_timestamp(since) / 1000
    expired = mere.maintain.expire(db, ZERO, force=True, now=cutoff)
    assert expired.oldest_version > 6  # the island tag's version is below it
    db = mere.connect(tmp_path / "src", create=False)
    expected = reference(db)
    assert {name for names in expected.values() for name in names} >= {
        "island",
        "t0",
        "t1",
        "t2",
        "m",
        "p",
        "t3",
        "old_t",
    }
    assert walked(db) == expected
    assert walked(mere.connect(tmp_path / "src", create=False)) == expected  # nothing cached

    vacuumed = db.vacuum(ZERO, force=True, dry_run=True)
    kept = {key for keys in vacuumed.kept_for_exports.values() for key in keys}
    deleted = set(vacuumed.keys)
    assert not kept & deleted and not deleted & set(expected)
    for name, keys in vacuumed.kept_for_exports.items():
        assert all(name in expected[key] for key in keys)
    assert kept  # files only tags keep (the delete, the compaction, the dropped table)


def test_many_tags_keep_every_tagged_version_s_files(tmp_path: Path) -> None:
    """One file per version, a tag each, files leaving now and then: replayed on, the same."""
    db = mere.connect(tmp_path / "src", checkpoint_interval=7)
    db.create_table("a", pa.schema([("x", pa.int64())]))
    for i in range(30):
        db.table("a").append(pa.table({"x": pa.array(range(i * 100, i * 100 + 100))}))
        if i % 7 == 3:
            db.table("a").delete(f"x < {i * 50}")
        db.tag(f"day{i}")
    expected = reference(db)
    assert walked(mere.connect(tmp_path / "src", create=False)) == expected
    fresh = mere.connect(tmp_path / "src", create=False)
    vacuumed = fresh.vacuum(ZERO, force=True, dry_run=True)
    assert not set(vacuumed.keys) & set(expected)
    check = fresh.check()
    assert not check.findings, check.findings
