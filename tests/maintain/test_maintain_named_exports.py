"""Named exports and tags: minimal and partial exports, recorded in the source, kept from expiry.

docs/format.md §11.5, §11.6 and §11.8. A minimal export's target references
the source's data files by absolute URI; the source records the export
(``export`` action, format version 2) and, until ``drop_export``, its expiry
keeps the exported version readable and its vacuum keeps every shared file,
whatever the retention. A tag is the same without a target.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from maintain_helpers import EVENTS, events, ids_of, wait_a_little

import mere
from mere.cli import cli
from mere.errors import CorruptLog, FormatVersionError, InvalidCommit, InvalidName
from mere.log.actions import (
    AddFile,
    CommitInfo,
    DropExport,
    Export,
    Protocol,
    decode_commit,
    encode_commit,
)
from mere.log.keys import checkpoint_key, commit_key
from mere.maintain import ExportExists, ExportNotFound
from mere.snapshot.state import DatabaseState
from mere.storage import LocalStore

ZERO = timedelta(0)
export_module = importlib.import_module("mere.maintain.export")
common_module = importlib.import_module("mere.maintain.common")
vacuum_module = importlib.import_module("mere.maintain.vacuum")


# --- helpers ------------------------------------------------------------------------------------


def source(path: Path) -> mere.Database:
    """A partitioned table filled by four appends (two files each)."""
    db = mere.connect(path)
    db.create_table("events", EVENTS, partition_by=["part"])
    for b in range(4):
        db.table("events").append(events(range(b * 10, b * 10 + 10)))
    db.create_table("other", pa.schema([("x", pa.int64())]))
    db.table("other").append([{"x": 1}, {"x": 2}])
    return db


def rows(table: mere.TableSnapshot | mere.Table) -> list[tuple[Any, ...]]:
    """Every row, sorted: what a version of the table holds."""
    data = table.scan()
    return sorted(tuple(r.values()) for r in data.to_pylist())


def churn(db: mere.Database) -> None:
    """More commits, deletes and a compaction: the exported version's files stop being live."""
    db.table("events").append(events(range(100, 110)))
    db.table("events").delete("id < 25")
    db.table("events").update("id = 30", {"amount": "1.0"})
    db.table("events").compact()
    db.table("other").delete("x = 1")
    wait_a_little()


def cleanup(db: mere.Database) -> tuple[mere.maintain.ExpireResult, mere.maintain.VacuumResult]:
    """Expire and vacuum with zero retention (forced): everything not protected goes."""
    expired = db.expire(ZERO, force=True)
    vacuumed = db.vacuum(ZERO, force=True)
    return expired, vacuumed


def data_keys(db: mere.Database) -> set[str]:
    return {m.key for m in db.store.list("tables/")}


def log_keys(db: mere.Database) -> set[str]:
    return {m.key for m in db.store.list("_log/") if not m.key.endswith(("_latest", "_checkpoint"))}


def target_adds(target: mere.Database) -> list[AddFile]:
    return [a for a in target.log.read_commit(0).actions if isinstance(a, AddFile)]


# --- minimal exports -----------------------------------------------------------------------------


def test_minimal_export_reads_its_version_until_dropped(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    version = db.version
    expected = {name: rows(db.snapshot(version).table(name)) for name in ("events", "other")}
    before = data_keys(db)

    result = db.export(tmp_path / "min", mode="minimal", name="q3-close")

    assert result.name == "q3-close" and result.mode == "minimal"
    assert result.source_version == version and result.registered_version == version + 1
    assert result.files_copied == 0 and result.files_referenced == result.files == 9
    assert data_keys(db) == before  # nothing copied, nothing written under tables/
    target = mere.connect(tmp_path / "min", create=False)
    assert target.version == 0
    assert {n: rows(target.table(n)) for n in ("events", "other")} == expected
    adds = target_adds(target)
    assert all(a.path.startswith(f"{db.uri}/tables/") for a in adds)
    assert target.properties["mere.externalFiles"] == "true"
    assert target.state_at(0).protocol == Protocol(2)
    assert not list(target.store.list("tables/"))  # the target holds no data file
    info = db.exports()
    assert [(i.name, i.version, i.mode, i.target, i.keeps) for i in info] == [
        ("q3-close", version, "minimal", target.uri, True)
    ]

    churn(db)
    shared = {f"tables/{a.table_id}/{a.path.rsplit(f'/tables/{a.table_id}/', 1)[1]}" for a in adds}
    not_live = shared - {
        f"tables/{db.snapshot().table(n).id}/{f.path}"
        for n in ("events", "other")
        for f in db.snapshot().table(n).files
    }
    assert not_live, "churn left every exported file live"
    dry = db.vacuum(ZERO, force=True, dry_run=True)
    assert set(dry.kept_for_exports["q3-close"]) == not_live
    assert not set(dry.keys) & shared
    expired, vacuumed = cleanup(db)

    assert expired.oldest_version == db.version
    assert expired.kept_for_exports == {"q3-close": [checkpoint_key(version)]}
    assert expired.export_checkpoints_written == [version]
    assert set(vacuumed.kept_for_exports["q3-close"]) == not_live
    assert vacuumed.files_kept_for_exports == len(not_live)
    assert vacuumed.files_deleted > 0  # the churn's own garbage went
    assert shared <= data_keys(db)
    # The export still reads exactly its version, and so does the source by name and number.
    fresh_target = mere.connect(tmp_path / "min", create=False)
    assert {n: rows(fresh_target.table(n)) for n in ("events", "other")} == expected
    fresh = mere.connect(tmp_path / "src", create=False)
    assert rows(fresh.snapshot(version="q3-close").table("events")) == expected["events"]
    assert rows(fresh.snapshot(version="Q3-CLOSE").table("other")) == expected["other"]
    assert rows(fresh.snapshot(version).table("events")) == expected["events"]
    with pytest.raises(mere.VersionNotFound):
        fresh.snapshot(version - 1)  # expired: only the exported version is an island

    dropped = db.drop_export("q3-close")
    assert dropped == db.version and db.exports() == []
    expired, vacuumed = cleanup(db)
    assert checkpoint_key(version) in expired.keys
    assert not_live <= set(vacuumed.keys) and vacuumed.kept_for_exports == {}
    with pytest.raises(mere.DataFileMissing, match=r"data file file://.*/tables/.*\.parquet"):
        fresh_target.table("events").scan()
    gone = next(iter(not_live))
    with pytest.raises(mere.DataFileMissing) as missing:
        for name in ("events", "other"):
            fresh_target.table(name).scan()
    assert str(missing.value).count("does not exist") == 1
    assert any(key in str(missing.value) for key in not_live), gone
    with pytest.raises(ExportNotFound, match="no export or tag named 'q3-close'"):
        fresh.snapshot(version="q3-close")
    with pytest.raises(mere.VersionNotFound):
        mere.connect(tmp_path / "src", create=False).snapshot(version)


def test_minimal_export_of_some_tables_at_an_older_version(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    old = db.version - 2  # before "other" existed: only events
    expected = rows(db.snapshot(old).table("events"))
    churn(db)

    result = db.export(tmp_path / "min", old, ["events"], "minimal", name="old_events")

    assert result.tables == ["events"] and result.source_version == old
    target = mere.connect(tmp_path / "min", create=False)
    assert target.tables() == ["events"] and rows(target.table("events")) == expected
    [info] = db.exports()
    assert info.tables == ["events"] and info.version == old
    _, vacuumed = cleanup(db)
    assert vacuumed.kept_for_exports["old_events"]
    assert rows(mere.connect(tmp_path / "min", create=False).table("events")) == expected
    with pytest.raises(mere.TableNotFound):
        db.export(tmp_path / "nope", old, ["other"], "minimal", name="nope")
    assert not (tmp_path / "nope").exists()


def test_a_minimal_export_keeps_working_as_a_database(tmp_path: Path) -> None:
    """The target is a database of its own: it writes, compacts and vacuums its own files only."""
    db = source(tmp_path / "src")
    db.export(tmp_path / "min", mode="minimal", name="m")
    target = mere.connect(tmp_path / "min", create=False)
    target.table("events").append(events(range(200, 203)))
    target.table("events").delete("id < 5")
    target.table("events").compact()
    expected = rows(target.table("events"))
    shared = data_keys(db)
    result = target.vacuum(ZERO, force=True)
    assert all(key.startswith("tables/") for key in result.keys)
    assert data_keys(db) == shared  # the target's vacuum never reaches into the source
    assert rows(mere.connect(tmp_path / "min", create=False).table("events")) == expected
    with pytest.raises(InvalidCommit, match=r"mere\.externalFiles"):
        target.set_properties({"mere.externalFiles": None})
    # A minimal export of an export would reference a third database's files: refused.
    target_old = mere.connect(tmp_path / "min", create=False)
    with pytest.raises(ValueError, match="mode='full'"):
        target_old.export(tmp_path / "chain", version=0, mode="minimal", name="chain")
    # A full export of it copies the shared files in: an independent database.
    full = target_old.export(tmp_path / "full", version=0)
    copy = mere.connect(tmp_path / "full", create=False)
    assert full.files == len(target_adds(copy))
    assert all("://" not in a.path for a in target_adds(copy))
    assert "mere.externalFiles" not in copy.properties
    assert rows(copy.table("events")) == rows(target_old.snapshot(0).table("events"))


# --- partial exports -----------------------------------------------------------------------------


def test_partial_export_shares_what_the_source_had_at_since_and_copies_the_rest(
    tmp_path: Path,
) -> None:
    db = source(tmp_path / "src")
    since = db.version  # 4 appends of events, and other
    db.table("events").append(events(range(50, 60)))
    db.table("events").delete("part = 'a' AND id < 10")  # rewrites a file live at since
    version = db.version
    expected = rows(db.snapshot(version).table("events"))
    at_since = db.snapshot(since).table("events").files
    at_version = db.snapshot(version).table("events").files
    old_paths = {f.path for f in at_since}
    shared_paths = {f.path for f in at_version if f.path in old_paths}
    copied_paths = {f.path for f in at_version if f.path not in old_paths}
    assert shared_paths and copied_paths

    result = db.export(
        tmp_path / "part", mode="partial", since=since, tables=["events"], name="partial-1"
    )

    assert result.since == since and result.files_referenced == len(shared_paths)
    assert result.files_copied == len(copied_paths)
    target = mere.connect(tmp_path / "part", create=False)
    assert rows(target.table("events")) == expected
    table_id = db.snapshot().table("events").id
    copied_keys = {m.key for m in target.store.list("tables/")}
    assert copied_keys == {f"tables/{table_id}/{p}" for p in copied_paths}
    external = {a.path for a in target_adds(target) if "://" in a.path}
    assert external == {f"{db.uri}/tables/{table_id}/{p}" for p in shared_paths}
    [info] = db.exports()
    assert (info.mode, info.since, info.version) == ("partial", since, version)

    churn(db)
    db.table("events").delete("id >= 0")  # nothing of the exported version stays live
    expired, vacuumed = cleanup(db)
    assert expired.kept_for_exports["partial-1"] == sorted(
        [checkpoint_key(since), checkpoint_key(version)]
    )
    kept = set(vacuumed.kept_for_exports["partial-1"])
    assert kept == {f"tables/{table_id}/{p}" for p in shared_paths}
    # The copied files were the source's too: not shared, so the source's vacuum took them.
    assert not {f"tables/{table_id}/{p}" for p in copied_paths} & data_keys(db)
    assert rows(mere.connect(tmp_path / "part", create=False).table("events")) == expected
    # The source keeps the version's log and the shared files, not what the export copied:
    # reading the source by the export's name needs those (a tag or minimal export keeps all).
    assert db.snapshot(version="partial-1").version == version
    with pytest.raises(mere.DataFileMissing):
        db.snapshot(version="partial-1").table("events").scan()

    db.drop_export("partial-1")
    _, vacuumed = cleanup(db)
    assert kept <= set(vacuumed.keys)
    with pytest.raises(mere.DataFileMissing, match=f"{db.uri}/tables/{table_id}/"):
        mere.connect(tmp_path / "part", create=False).table("events").scan()
    assert copied_keys <= {m.key for m in target.store.list("tables/")}  # its own copies stay


def test_partial_export_since_its_own_version_is_minimal_and_since_zero_copies_all(
    tmp_path: Path,
) -> None:
    db = source(tmp_path / "src")
    same = db.export(tmp_path / "a", mode="partial", since=db.version, name="a")
    assert same.files_copied == 0 and same.files_referenced == same.files
    db.tag("start", version=0)
    everything = db.export(tmp_path / "b", mode="partial", since="start", name="b")
    assert everything.files_referenced == 0 and everything.files_copied == everything.files
    target = mere.connect(tmp_path / "b", create=False)
    assert "mere.externalFiles" not in target.properties  # nothing shared: a plain database
    assert rows(target.table("events")) == rows(db.table("events"))


# --- tags ------------------------------------------------------------------------------------


def test_tag_keeps_a_version_readable_by_name(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    expected = rows(db.table("events"))
    info = db.tag("before-cleanup")
    assert (info.name, info.mode, info.target, info.version) == (
        "before-cleanup",
        "tag",
        None,
        db.version - 1,
    )
    first = db.tag("first_rows", version=2)
    assert first.version == 2
    again = db.tag("same-as-before", version="before-cleanup")
    assert again.version == info.version
    churn(db)
    db.drop_table("other")
    expired, vacuumed = cleanup(db)
    assert set(expired.kept_for_exports) == {"before-cleanup", "first_rows", "same-as-before"}
    assert (
        vacuumed.kept_for_exports["before-cleanup"] == vacuumed.kept_for_exports["same-as-before"]
    )
    fresh = mere.connect(tmp_path / "src", create=False)
    assert rows(fresh.snapshot(version="before-cleanup").table("events")) == expected
    assert fresh.snapshot(version="before-cleanup").tables() == ["events", "other"]
    assert ids_of(fresh.snapshot(version="first_rows").table("events")) == list(range(10))
    # The CLI reads by name too.
    out = CliRunner().invoke(
        cli, ["scan", str(tmp_path / "src"), "events", "--version", "before-cleanup", "--json"]
    )
    assert out.exit_code == 0, out.output
    assert len(out.stdout.splitlines()) == len(expected)  # JSON lines, one a row

    with pytest.raises(ValueError, match="not a tag"):
        db.export(tmp_path / "m", mode="minimal", name="an-export")
        db.drop_tag("an-export")
    db.drop_tag("before-cleanup")
    db.drop_export("same-as-before")  # drop_export ends tags too
    _, vacuumed = cleanup(db)
    assert vacuumed.files_deleted > 0
    with pytest.raises(ExportNotFound):
        db.snapshot(version="before-cleanup")
    assert ids_of(db.snapshot(version="first_rows").table("events")) == list(range(10))
    assert [i.name for i in db.exports()] == ["an-export", "first_rows"]


# --- bad input -------------------------------------------------------------------------------


def state_of(db: mere.Database, where: Path) -> tuple[int, set[str], set[str], list[str]]:
    """Everything a refused call must leave alone (and what exists next to the source)."""
    return (
        db.version,
        log_keys(db),
        data_keys(db),
        sorted(p.name for p in where.iterdir()),
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda db, t: db.tag("taken"), ExportExists, "'taken' is taken"),
        (lambda db, t: db.tag("TAKEN"), ExportExists, "is taken"),
        (
            lambda db, t: db.export(t / "x", mode="minimal", name="Taken"),
            ExportExists,
            "is taken",
        ),
        (lambda db, t: db.drop_export("unknown"), ExportNotFound, "no export or tag named"),
        (lambda db, t: db.drop_tag("unknown"), ExportNotFound, "no export or tag named"),
        (lambda db, t: db.snapshot(version="unknown"), ExportNotFound, "'taken'"),
        (lambda db, t: db.snapshot(version="3"), ExportNotFound, "pass the int 3"),
        (lambda db, t: db.tag("1st"), InvalidName, "invalid export name"),
        (lambda db, t: db.tag("a b"), InvalidName, "invalid export name"),
        (lambda db, t: db.tag(""), InvalidName, "invalid export name"),
        (lambda db, t: db.tag("x" * 129), InvalidName, "invalid export name"),
        (lambda db, t: db.tag("../up"), InvalidName, "invalid export name"),
        (
            lambda db, t: db.export(t / "x", mode="minimal", name="-x"),
            InvalidName,
            "invalid export name",
        ),
        (lambda db, t: db.drop_export("a/b"), InvalidName, "invalid export name"),
        (lambda db, t: db.tag(7), InvalidName, "must be a string"),  # type: ignore[arg-type]
        (
            lambda db, t: db.export(t / "src", mode="minimal", name="self"),
            ValueError,
            "onto itself",
        ),
        (
            lambda db, t: db.export(t / "src" / "inside", mode="minimal", name="in"),
            ValueError,
            "inside the other",
        ),
        (
            lambda db, t: db.export(t / "src" / "tables" / "x", name="full-in"),
            ValueError,
            "inside the other",
        ),
        (
            lambda db, t: db.export(f"file://{t}/src", mode="minimal", name="uri"),
            ValueError,
            "onto itself",
        ),
        (lambda db, t: db.export(t / "x", mode="minimal"), ValueError, "needs a name"),
        (lambda db, t: db.export(t / "x", mode="partial", name="p"), ValueError, "since="),
        (
            lambda db, t: db.export(t / "x", mode="full", since=1, name="f"),
            ValueError,
            "only applies to partial",
        ),
        (
            lambda db, t: db.export(t / "x", 2, mode="partial", since=3, name="p"),
            ValueError,
            "at or before",
        ),
        (
            lambda db, t: db.export(t / "x", mode="copy", name="c"),  # type: ignore[arg-type]
            ValueError,
            "mode must be",
        ),
        (lambda db, t: db.tag("v", version=99), mere.VersionNotFound, "does not exist"),
        (
            lambda db, t: db.export(t / "existing", mode="minimal", name="e"),
            mere.ExportTargetExists,
            "already holds",
        ),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    tmp_path: Path, call: Any, error: type[Exception], message: str
) -> None:
    db = source(tmp_path / "src")
    mere.connect(tmp_path / "existing")
    db.tag("taken")
    before = state_of(db, tmp_path)
    with pytest.raises(error, match=message):
        call(db, tmp_path)
    assert state_of(db, tmp_path) == before
    assert [i.name for i in db.exports()] == ["taken"]


def test_a_vacuumed_version_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    old = db.version
    churn(db)
    db.vacuum(ZERO, force=True)  # the old version's removed files are gone; its log is not
    before = state_of(db, tmp_path)
    with pytest.raises(mere.DataFileMissing, match="cannot be exported or tagged"):
        db.tag("too-late", version=old)
    with pytest.raises(mere.DataFileMissing):
        db.export(tmp_path / "late", old, mode="minimal", name="late")
    assert state_of(db, tmp_path) == before and db.exports() == []


# --- the format -----------------------------------------------------------------------------


def test_the_first_export_moves_the_database_to_format_version_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = source(tmp_path / "src")
    assert db.state_at(db.version).protocol == Protocol(1)
    db.checkpoint()  # a checkpoint of a version 1 database says so
    old_checkpoint = db.log.read_checkpoint(db.version)
    assert any(a == Protocol(1) for a in old_checkpoint.actions)

    db.tag("t1")
    commit = db.log.read_commit(db.version)
    assert commit.info.operation == "CREATE TAG"
    assert commit.actions == (
        Protocol(2),
        Export("t1", db.version - 1, "tag", None, None, None, commit.actions[1].created_time),  # type: ignore[union-attr]
    )
    line = db.store.get(commit_key(db.version)).decode().splitlines()[2]
    body = json.loads(line)["export"]
    assert body == {
        "name": "t1",
        "version": db.version - 1,
        "mode": "tag",
        "target": None,
        "tables": None,
        "since": None,
        "createdTime": body["createdTime"],
    }
    db.export(tmp_path / "m", tables=["events"], mode="minimal", name="m1")
    second = db.log.read_commit(db.version)
    assert not any(isinstance(a, Protocol) for a in second.actions)  # upgraded once
    db.checkpoint()
    checkpoint = db.log.read_checkpoint(db.version)
    assert sorted(a.name for a in checkpoint.actions if isinstance(a, Export)) == ["m1", "t1"]
    restored = DatabaseState.from_checkpoint(checkpoint)
    assert set(restored.exports) == {"t1", "m1"}
    db.drop_export("t1")
    assert db.log.read_commit(db.version).actions == (DropExport("t1"),)
    assert list(db.latest_state().exports) == ["m1"]

    # An older mere (format version 1) refuses, never misreads: the source and the target.
    for module in ("mere.log.actions", "mere.log.checkpoint"):
        monkeypatch.setattr(importlib.import_module(module), "FORMAT_VERSION", 1)
    with pytest.raises(FormatVersionError, match="format version 2"):
        mere.connect(tmp_path / "src", create=False).snapshot()
    with pytest.raises(FormatVersionError):
        _ = mere.connect(tmp_path / "m", create=False).version
    assert rows(mere.connect(tmp_path / "src", create=False).snapshot(1).table("events")) == []


INFO = CommitInfo("c" * 32, 1, 0, "serializable", "TEST")


def apply(state: DatabaseState, *actions: Any) -> DatabaseState:
    data = encode_commit(INFO, list(actions))
    return state.apply(decode_commit(commit_key(state.version + 1), state.version + 1, data))


def test_readers_refuse_what_the_format_forbids(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    v1 = db.latest_state()
    tag = Export("t", 1, "tag", None, None, None, 1)
    with pytest.raises(CorruptLog, match="needs format version 2"):
        apply(v1, tag)
    v2 = apply(v1, Protocol(2), tag)
    assert v2.export_by_name("T") == tag
    with pytest.raises(CorruptLog, match="two exports named"):
        apply(v2, Export("T", 2, "tag", None, None, None, 1))
    with pytest.raises(CorruptLog, match="drop of unknown export"):
        apply(v2, DropExport("nope"))
    with pytest.raises(CorruptLog, match="not yet committed"):
        apply(v2, Export("later", v2.version + 1, "tag", None, None, None, 1))
    table_id = v1.table_by_name("events").meta.id  # type: ignore[union-attr]
    external = AddFile(
        table_id,
        f"file:///elsewhere/tables/{table_id}/part-x.parquet",
        1,
        1,
        {"part": "a"},
        None,
        1,
    )
    with pytest.raises(CorruptLog, match=r"mere\.externalFiles"):
        apply(v2, external)
    bad = {"tables": ["x", 1]}, {"mode": "copy"}, {"target": None}, {"since": 0}, {"name": "1x"}
    for change in bad:
        body = {**_export_body(), **change}
        line = json.dumps({"export": body})
        text = encode_commit(INFO, []).decode() + line + "\n"
        with pytest.raises(CorruptLog):
            decode_commit(commit_key(9), 9, text.encode())
    for path in (
        "ftp://host/tables/{id}/x.parquet",
        "file:///a/tables/{other}/x.parquet",
        "file:///a/tables/{id}/../x.parquet",
        "file://tables/{id}/x.parquet",
    ):
        add = json.dumps(
            {
                "add": {
                    "tableId": table_id,
                    "path": path.format(id=table_id, other="0" * 32),
                    "size": 1,
                    "rows": 1,
                    "partitionValues": {},
                    "modificationTime": 1,
                }
            }
        )
        text = encode_commit(INFO, []).decode() + add + "\n"
        with pytest.raises(CorruptLog, match="path"):
            decode_commit(commit_key(9), 9, text.encode())


def _export_body() -> dict[str, Any]:
    return {
        "name": "e",
        "version": 3,
        "mode": "minimal",
        "target": "file:///t",
        "tables": None,
        "since": None,
        "createdTime": 1,
    }


# --- registering while vacuum runs ---------------------------------------------------------------


class PausingStore(LocalStore):
    """A local store whose first data-file deletion waits until released."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.paused = threading.Event()
        self.release = threading.Event()
        self.first: str | None = None

    def delete(self, key: str) -> None:
        if key.startswith("tables/") and self.first is None:
            self.first = key
            self.paused.set()
            assert self.release.wait(30)
        super().delete(key)


def _vacuum_paused(tmp_path: Path, decoy: bool) -> tuple[mere.Database, PausingStore, int, Any]:
    db = source(tmp_path / "src")
    old = db.version
    churn(db)
    if decoy:  # an orphan sorting first: the paused deletion is not one the tag needs
        db.store.put_if_absent("tables/-orphan.parquet", b"x")
        wait_a_little()
    store = PausingStore(tmp_path / "src")
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = mere.connect(store).vacuum(ZERO, force=True)

    thread = threading.Thread(target=run)
    thread.start()
    assert store.paused.wait(30)
    return db, store, old, (thread, outcome)


def test_a_tag_recorded_while_vacuum_runs_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vacuum_module, "DELETE_BATCH", 1)
    db, store, old, (thread, outcome) = _vacuum_paused(tmp_path, decoy=True)
    expected = rows(db.snapshot(old).table("events"))
    # The vacuum marked and decided its first batch (the orphan) before the tag existed;
    # its next batch is marked, and the log read, after the tag is recorded.
    db.tag("kept", version=old)
    store.release.set()
    thread.join(30)
    result = outcome["result"]
    assert store.first == "tables/-orphan.parquet"
    assert result.kept_for_exports["kept"]
    assert (
        rows(mere.connect(tmp_path / "src", create=False).snapshot(version="kept").table("events"))
        == expected
    )
    assert not list(db.store.list("_deleting/"))  # every batch's mark was removed


def test_a_tag_whose_file_a_running_vacuum_deletes_is_dropped_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vacuum decided before the tag existed; its deletion lands after the tag checked.

    No wait of the exporter's can cover a deletion that is merely slow; the
    mark of the batch tells the exporter that one is under way.
    """
    db, store, _, (thread, _outcome) = _vacuum_paused(tmp_path, decoy=False)
    first = store.first

    def files(version: int) -> set[str]:
        snap = db.snapshot(version)
        return {
            f"tables/{snap.table(n).id}/{f.path}"
            for n in snap.tables()
            for f in snap.table(n).files
        }

    old = next(v for v in range(db.version) if first in files(v))  # a version reading it
    looked = threading.Event()
    real_marks = getattr(common_module, "deletion_marks", None)

    def spy(context: Any) -> Any:
        assert real_marks is not None
        marks = real_marks(context)
        looked.set()
        return marks

    monkeypatch.setattr(common_module, "deletion_marks", spy, raising=False)
    tagged: dict[str, Any] = {}

    def make_tag() -> None:
        try:
            tagged["info"] = db.tag("lost", version=old)
        except mere.MereError as exc:
            tagged["error"] = exc

    tagger = threading.Thread(target=make_tag)
    tagger.start()
    deadline = time.monotonic() + 60
    while not looked.is_set() and tagger.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    store.release.set()  # the paused deletion lands after the tag looked (or returned)
    tagger.join(60)
    thread.join(30)
    assert isinstance(tagged.get("error"), mere.DataFileMissing), tagged
    assert "no longer exists" in str(tagged["error"])
    assert db.exports() == []  # recorded, then dropped again: never a tag that lies
    ops = [e["operation"] for e in db.history(limit=2)]
    assert ops == ["DROP TAG", "CREATE TAG"]


def test_a_mark_left_by_a_killed_run_blocks_its_files_until_a_vacuum_sweeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = source(tmp_path / "src")
    old = db.version
    churn(db)
    snap = db.snapshot(old).table("events")
    now_live = {f.path for f in db.snapshot().table("events").files}
    gone = next(f.path for f in snap.files if f.path not in now_live)
    mark = {"verb": "vacuum", "createdTime": 1, "keys": [f"tables/{snap.id}/{gone}"]}
    db.store.put_if_absent("_deleting/killed.json", json.dumps(mark).encode())
    monkeypatch.setattr(common_module, "MARK_WAIT_SECONDS", 0.2)
    with pytest.raises(mere.DataFileMissing, match="still deleting"):
        db.tag("blocked", version=old)
    assert db.exports() == []
    db.tag("fine")  # the latest version's files are not in the mark
    # A week's retention keeps the files; a mark older than the minimum retention goes.
    swept = mere.maintain.vacuum(db, now=time.time() + 2 * 3600)
    assert (swept.stale_marks_deleted, swept.files_deleted) == (1, 0)
    assert db.tag("blocked", version=old).version == old


# --- the CLI ---------------------------------------------------------------------------------


def run(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def test_cli_named_exports_and_tags(tmp_path: Path) -> None:
    src = tmp_path / "src"
    source(src)
    tagged = run("tag", str(src), "start", "--version", "2", "--json")
    assert tagged.exit_code == 0, tagged.output
    assert json.loads(tagged.stdout)["version"] == 2
    made = run(
        "export", str(src), str(tmp_path / "min"), "--mode", "minimal", "--name", "q3-close",
        "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["files_referenced"] == 9
    part = run(
        "export", str(src), str(tmp_path / "part"), "--mode", "partial", "--since", "start",
        "--name", "p", "--version", "q3-close",
    )  # fmt: skip
    assert part.exit_code == 0 and "copied / shared" in part.stdout, part.output
    listed = run("exports", str(src), "--json")
    assert [e["name"] for e in json.loads(listed.stdout)] == ["p", "q3-close", "start"]
    human = run("exports", str(src))
    assert "q3-close" in human.stdout and "minimal" in human.stdout
    assert run("tables", str(src), "--version", "start", "--json").exit_code == 0
    scanned = run("scan", str(src), "events", "--version", "q3-close", "--json")
    assert len(scanned.stdout.splitlines()) == 40
    missing = run("scan", str(src), "events", "--version", "nope")
    assert missing.exit_code == 1 and "no export or tag named 'nope'" in missing.stderr
    assert run("scan", str(src), "events", "--version", "a b").exit_code == 2
    db = mere.connect(src, create=False)
    churn(db)
    vac = run("vacuum", str(src), "--retention", "0", "--force", "--dry-run")
    assert vac.exit_code == 0 and "kept for export q3-close" in vac.stdout
    exp = run("expire", str(src), "--retention", "0", "--force", "--json")
    assert set(json.loads(exp.stdout)["kept_for_exports"]) == {"p", "q3-close", "start"}
    restored = run("restore", str(src), "--version", "start", "--json")
    assert restored.exit_code == 0 and json.loads(restored.stdout)["restored_version"] == 2
    refused = run("drop-tag", str(src), "q3-close")
    assert refused.exit_code == 1 and "not a tag" in refused.stderr
    assert run("drop-export", str(src), "q3-close").exit_code == 0
    assert run("drop-tag", str(src), "start").exit_code == 0
    assert [e["name"] for e in json.loads(run("exports", str(src), "--json").stdout)] == ["p"]
    assert run("drop-export", str(src), "q3-close").exit_code == 1


def test_unnamed_exports_stay_full_copies_and_record_nothing(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    version = db.version
    result = db.export(tmp_path / "copy")
    assert result.name is None and result.registered_version is None
    assert db.version == version and db.exports() == []
    named = db.export(tmp_path / "named", name="full-copy")
    assert named.registered_version == version + 1 and named.files_copied == 9
    [info] = db.exports()
    assert (info.mode, info.keeps) == ("full", False)
    churn(db)
    _, vacuumed = cleanup(db)
    assert vacuumed.kept_for_exports == {}  # a full export keeps nothing
    assert rows(mere.connect(tmp_path / "named", create=False).table("events")) == rows(
        mere.connect(tmp_path / "copy", create=False).table("events")
    )
    with pytest.raises(mere.VersionNotFound, match="expired"):
        db.snapshot(version="full-copy")  # its name resolves; the version is gone


# --- many processes ----------------------------------------------------------------------------

RUN_SECONDS = 15.0
#: Each exporter makes at least this many attempts while the writers run (a slow machine waits).
MIN_ATTEMPTS = 8
MAX_RUN_SECONDS = 120.0
RETENTION = timedelta(seconds=4)


def _writer(db_path: str, first_id: int, stop: Any) -> None:
    """Appends, deletes, updates and compacts until told to stop; conflicts are retried."""
    db = mere.connect(db_path)
    next_id, step = first_id, 0
    while not stop.is_set():
        step += 1
        try:
            if step % 7 == 0:
                db.table("events").compact()
            elif step % 3 == 0:
                db.table("events").delete(f"id < {next_id - 15} AND id % 3 = {step % 3}")
            elif step % 5 == 0:
                db.table("events").update(f"id >= {next_id - 5}", {"amount": "amount + 1"})
            else:
                db.table("events").append(events(range(next_id, next_id + 5)))
                next_id += 5
        except mere.ConflictError:
            continue


def _maintainer(db_path: str, stop: Any) -> None:
    """Expires and vacuums with a short retention (forced) until told to stop."""
    db = mere.connect(db_path)
    while not stop.is_set():
        db.expire(RETENTION, force=True)
        db.vacuum(RETENTION, force=True)


def _exporter(db_path: str, label: str, out: str, targets: str, stop: Any, done: Any) -> None:
    """Creates minimal and partial exports and tags of recent and older versions.

    Each success is recorded with the rows its version holds, read at once
    through the name (and through the target); a refusal (the version was
    expired or vacuumed first) is recorded too. Names ``race-<n>`` are tried by
    every exporter: exactly one may get each.
    """
    db = mere.connect(db_path)
    n = 0
    with open(out, "a") as sink:
        while not stop.is_set():
            n += 1
            kind = ("tag", "minimal", "partial", "race")[n % 4]
            name = f"race-{n // 4}" if kind == "race" else f"{label}-{kind}-{n}"
            back = 0 if kind == "race" else (n * 17) % 50
            record: dict[str, Any] = {"name": name, "kind": kind}
            try:
                version = max(2, db.version - back)  # 2: the first rows
                if kind in ("tag", "race"):
                    version = db.tag(name, version=version).version
                else:
                    target = f"{targets}/{name}"
                    since = {"since": max(2, version - 4)} if kind == "partial" else {}
                    result = db.export(
                        target,
                        version,
                        mode=kind,
                        name=name,
                        **since,  # type: ignore[arg-type]
                    )
                    version = result.source_version
                    record["target"] = target
                    record["target_ids"] = ids_of(
                        mere.connect(target, create=False).table("events")
                    )
                record["version"] = version
                record["ids"] = ids_of(db.snapshot(version=name).table("events"))
                record["outcome"] = "made"
            except (ExportExists, mere.VersionNotFound, mere.DataFileMissing) as exc:
                record["outcome"] = type(exc).__name__
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            with done.get_lock():
                done.value += 1


@pytest.mark.slow
def test_exports_and_tags_made_while_writers_commit_and_vacuum_runs_lose_no_file(
    tmp_path: Path, processes: Any
) -> None:
    db_path = tmp_path / "src"
    db = mere.connect(db_path)
    db.create_table("events", EVENTS, partition_by=["part"])
    db.table("events").append(events(range(100)))
    db.tag("origin")  # the format upgrade, before the writers start
    origin = ids_of(db.table("events"))
    targets = tmp_path / "targets"
    targets.mkdir()
    stop = processes.context.Event()
    children = [processes.start(_writer, str(db_path), 1000 * (w + 1), stop) for w in range(2)]
    children.append(processes.start(_maintainer, str(db_path), stop))
    outs = [tmp_path / f"exports-{i}.jsonl" for i in range(2)]
    attempts = [processes.context.Value("i", 0) for _ in outs]
    children += [
        processes.start(_exporter, str(db_path), f"x{i}", str(out), str(targets), stop, done)
        for i, (out, done) in enumerate(zip(outs, attempts, strict=True))
    ]
    started = time.monotonic()
    while time.monotonic() - started < RUN_SECONDS or (
        min(a.value for a in attempts) < MIN_ATTEMPTS
        and time.monotonic() - started < MAX_RUN_SECONDS
    ):
        time.sleep(0.2)
    stop.set()
    processes.join(children)
    assert [child.exitcode for child in children] == [0] * len(children)

    records = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    made = [r for r in records if r["outcome"] == "made"]
    assert len([r for r in made if r["kind"] != "race"]) >= 4, records
    assert {r["kind"] for r in made} >= {"tag", "minimal", "partial"}, records
    races: dict[str, list[str]] = {}
    for r in records:
        if r["kind"] == "race":
            races.setdefault(r["name"], []).append(r["outcome"])
    for name, outcomes in races.items():
        assert outcomes.count("made") <= 1, (name, outcomes)
        if len(outcomes) == 2:
            assert sorted(outcomes) == ["ExportExists", "made"], (name, outcomes)

    # Nothing is retained but what the exports keep: every one still reads its version.
    db = mere.connect(db_path, create=False)
    cleanup(db)
    live = {info.name: info for info in db.exports()}
    assert set(live) == {"origin"} | {r["name"] for r in made}
    assert ids_of(db.snapshot(version="origin").table("events")) == origin
    for r in made:
        assert live[r["name"]].version == r["version"]
        if r["kind"] != "partial":  # a partial export's copied files are not the source's to keep
            assert ids_of(db.snapshot(version=r["name"]).table("events")) == r["ids"], r
        if "target" in r:
            target = mere.connect(r["target"], create=False)
            assert ids_of(target.table("events")) == r["target_ids"] == r["ids"], r
    # Dropping them all lets vacuum reclaim what they kept.
    for name in live:
        db.drop_export(name)
    _, vacuumed = cleanup(db)
    assert vacuumed.kept_for_exports == {} and vacuumed.files_deleted > 0
    assert ids_of(db.table("events")) == ids_of(mere.connect(db_path, create=False).table("events"))


def test_a_kept_checkpoint_below_the_oldest_commit_does_not_hide_later_versions(
    tmp_path: Path,
) -> None:
    """Time travel probes the automatic checkpoint below its target: an island must not stop it."""
    db = mere.connect(tmp_path / "src", checkpoint_interval=5)
    db.create_table("t", pa.schema([("x", pa.int64())]))
    while db.version < 5:
        db.table("t").append([{"x": db.version}])
    db.tag("five", version=5)  # the automatic checkpoint at 5 becomes an island below
    while db.version < 13:
        db.table("t").append([{"x": db.version}])
    expected = {
        v: sorted(db.snapshot(v).table("t").scan().column("x").to_pylist()) for v in (7, 8, 9)
    }
    cutoff = db.log.commit_timestamp(7) / 1000
    expired = mere.maintain.expire(db, ZERO, force=True, now=cutoff)
    assert expired.oldest_version == 7 and expired.kept_for_exports == {"five": [checkpoint_key(5)]}
    fresh = mere.connect(tmp_path / "src", create=False)
    fresh.snapshot()  # caches the latest state: older versions use the interval probe (5)
    for version, xs in expected.items():
        assert sorted(fresh.snapshot(version).table("t").scan().column("x").to_pylist()) == xs
    assert fresh.snapshot(version="five").version == 5


def test_a_tag_of_a_minimal_export_target_keeps_its_own_files(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    db.export(tmp_path / "min", mode="minimal", name="m")
    target = mere.connect(tmp_path / "min", create=False)
    target.table("events").append(events(range(300, 305)))
    version = target.version
    expected = rows(target.table("events"))
    target.table("events").delete("id < 20 OR id >= 300")  # external and own files stop being live
    target.tag("before", version=version)
    _, vacuumed = cleanup(target)
    assert vacuumed.kept_for_exports["before"]  # its own files, never the source's
    assert all(not key.startswith("file:") for key in vacuumed.kept_for_exports["before"])
    assert rows(target.snapshot(version="before").table("events")) == expected
