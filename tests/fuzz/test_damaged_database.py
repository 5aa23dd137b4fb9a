"""A damaged or odd database directory: each case has a defined outcome, asserted here.

These tests pin down what mere does today with:

* unexpected files in ``_log/``, ``tables/`` and the root -- ignored;
* a file named like a commit far beyond the log -- ignored while the
  latest-version hint is good; without the hint the listing fallback takes it
  as the latest version and every read fails with CorruptLog naming the gap
  below it;
* a newer format version (in version 0, in a later commit, in a checkpoint)
  -- FormatVersionError at and after it, older versions still readable;
* a gap (a commit file missing in the middle of the log) -- versions below
  it read; at and above it CorruptLog naming the missing file as a gap in the
  log (tests/core/test_log_gaps.py). If the hint points below the gap, the
  turns' note of a local directory still finds it; without turns (a cloud
  store) discovery stops there: the database looks shorter, and the next
  commit *fills the gap*, after which the orphaned commits above it are part
  of the history again, on top of a base they were not written against;
* a checkpoint that disagrees with the log -- trusted: versions at and after
  it read the checkpoint's state; one claiming another version, or not
  Parquet at all, is CorruptLog for versions at and after it.

Whether each outcome is the right one is a decision for the format (see the
report of the proof issue); these tests make any change to them deliberate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere
from mere.log.actions import FORMAT_VERSION
from mere.log.checkpoint import encode_checkpoint
from mere.log.keys import CHECKPOINT_HINT, LATEST_HINT, checkpoint_key, commit_key
from mere.storage import LocalStore

COMMITS = 6  # appends of x = 0..5, at versions 2..7


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A database: version 1 creates table t, versions 2..7 append x = 0..5."""
    path = tmp_path / "db"
    db = mere.connect(str(path))
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(COMMITS):
        db.table("t").append([{"x": i}])
    assert db.version == COMMITS + 1
    db.close()
    return path


def xs(root: Path, version: int | None = None) -> list[int]:
    db = mere.connect(str(root), create=False)
    snapshot = db.snapshot(version=version)
    return sorted(snapshot.table("t").scan().column("x").to_pylist())


def set_hint(root: Path, key: str, version: int) -> None:
    LocalStore(str(root)).put(key, json.dumps({"version": version}).encode())


def remove(root: Path, key: str) -> None:
    (root / key).unlink()


# --- unexpected files ---------------------------------------------------------------------


STRAY = [
    "_log/notes.txt",
    "_log/00000000000000000005.json.bak",
    "_log/abc.json",
    "_log/-1.json",
    "_log/0000000000000000000x.json",
    "_log/00000000000000000002.checkpoint.parquet.tmp",
    "_log/5.json",
    "tables/README",
    "tables/0123/part-x.parquet",
    "README.txt",
]


@pytest.mark.parametrize("hint", [True, False], ids=["with-hint", "without-hint"])
def test_stray_files_are_ignored(root: Path, hint: bool) -> None:
    for name in STRAY:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("garbage")
    table_id = mere.connect(str(root), create=False).snapshot().table("t").id
    (root / "tables" / table_id / "part-0000.parquet").write_text("not parquet")
    if not hint:
        remove(root, LATEST_HINT)
    db = mere.connect(str(root), create=False)
    assert db.version == COMMITS + 1
    assert xs(root) == list(range(COMMITS))
    assert xs(root, 3) == [0, 1]
    db.table("t").append([{"x": 99}])
    assert db.version == COMMITS + 2


def test_a_stray_future_commit_name_is_ignored_only_while_the_hint_is_good(root: Path) -> None:
    (root / "_log" / "00000000000000000100.json").write_text("garbage")
    assert mere.connect(str(root), create=False).version == COMMITS + 1
    remove(root, LATEST_HINT)
    db = mere.connect(str(root), create=False)  # connecting only finds the latest version
    with pytest.raises(mere.CorruptLog, match=f"{commit_key(COMMITS + 2)}: .*a gap in the log"):
        _ = db.version
    assert xs(root, 3) == [0, 1]  # explicit older versions still read


# --- format versions ------------------------------------------------------------------------


#: A format version this mere does not read.
NEWER = FORMAT_VERSION + 1


def test_a_newer_format_in_version_0_refuses_the_database(root: Path) -> None:
    path = root / commit_key(0)
    text = path.read_text().replace('"formatVersion":1', f'"formatVersion":{NEWER}')
    path.unlink()
    path.write_text(text)
    with pytest.raises(mere.FormatVersionError, match=f"format version {NEWER}"):
        _ = mere.connect(str(root), create=False).version


def test_a_newer_format_in_a_later_commit_refuses_it_and_what_follows(root: Path) -> None:
    latest = COMMITS + 1
    lines = (root / commit_key(latest)).read_text().splitlines()
    lines.insert(1, json.dumps({"protocol": {"formatVersion": NEWER}}))
    LocalStore(str(root)).put_if_absent(commit_key(latest + 1), ("\n".join(lines) + "\n").encode())
    with pytest.raises(mere.FormatVersionError):
        xs(root)
    assert xs(root, latest) == list(range(COMMITS))


def test_a_newer_checkpoint_format_is_refused(root: Path) -> None:
    db = mere.connect(str(root), create=False)
    state = db.state_at(5)
    raw = encode_checkpoint(5, state.timestamp, list(state.live_actions()))
    table = pq.read_table(pa.BufferReader(raw))
    metadata = {**table.schema.metadata, b"mere.formatVersion": str(NEWER).encode()}
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(metadata), sink)
    LocalStore(str(root)).put_if_absent(checkpoint_key(5), bytes(sink.getvalue()))
    with pytest.raises(mere.FormatVersionError, match="checkpoint"):
        xs(root)
    assert xs(root, 4) == [0, 1, 2]


def add_commit(root: Path, *lines: dict[str, object]) -> int:
    """Write, as the next version, a commit of the latest one's commitInfo and ``lines``."""
    latest = mere.connect(str(root), create=False).version
    info = (root / commit_key(latest)).read_text().splitlines()[0]
    text = "\n".join([info, *(json.dumps(line) for line in lines)]) + "\n"
    LocalStore(str(root)).put_if_absent(commit_key(latest + 1), text.encode())
    return latest + 1


def rewrite_manifest(root: Path, version: int, change: Callable[[pa.Table], pa.Table]) -> None:
    """Replace the checkpoint manifest at ``version`` by ``change`` of it; the commits it
    covers are removed, so that only the checkpoint can be read."""
    key = root / checkpoint_key(version)
    table = change(pq.read_table(key))
    key.unlink()
    pq.write_table(table, key)
    for v in range(version):
        remove(root, commit_key(v))


def test_a_checkpoint_whose_protocol_row_is_newer_is_refused(root: Path) -> None:
    """Only the manifest's metadata was checked: the newer protocol row was taken, and an
    append committed into a database this mere cannot read."""
    db = mere.connect(str(root), create=False)
    version = db.checkpoint()

    def newer(table: pa.Table) -> pa.Table:
        kinds = table.column("kind").to_pylist()
        payloads = table.column("payload").to_pylist()
        changed = [
            json.dumps({"formatVersion": NEWER}) if k == "protocol" else p
            for k, p in zip(kinds, payloads, strict=True)
        ]
        return table.set_column(
            table.schema.get_field_index("payload"), "payload", pa.array(changed, pa.string())
        )

    rewrite_manifest(root, version, newer)
    db = mere.connect(str(root), create=False)
    with pytest.raises(mere.CorruptLog, match="protocol row says format version"):
        db.table("t").append([{"x": 9}])
    assert sorted(p.name for p in (root / "_log").glob("*.json")) == [
        commit_key(v)[len("_log/") :] for v in range(version, version + 1)
    ]


@pytest.mark.parametrize("fmt", [0, -1])
def test_a_format_version_below_1_is_corrupt(root: Path, fmt: int) -> None:
    version = add_commit(root, {"protocol": {"formatVersion": fmt}})
    with pytest.raises(mere.CorruptLog, match=f"line 2: .*{fmt}"):
        xs(root)
    assert xs(root, version - 1) == list(range(COMMITS))


def test_a_format_version_that_goes_back_is_corrupt(tmp_path: Path) -> None:
    """A database at format 4 read a later protocol of 1 and went on writing Parquet inlined
    data under a format that does not allow it."""
    db = mere.connect(str(tmp_path), inline_limit=65536)
    db.create_table("t", pa.schema([("x", pa.int64())]))
    version = add_commit(tmp_path, {"protocol": {"formatVersion": 1}})
    db = mere.connect(str(tmp_path), create=False)
    with pytest.raises(mere.CorruptLog, match="format version goes back from 4 to 1"):
        db.table("t").append([{"x": 1}])
    assert db.snapshot(version - 1).table("t").scan().num_rows == 0


def test_a_table_whose_partition_columns_change_is_corrupt(tmp_path: Path) -> None:
    """Its older files read NULL in the new partition column."""
    db = mere.connect(str(tmp_path))
    schema = pa.schema([("x", pa.int64()), ("p", pa.string())])
    db.create_table("t", schema, partition_by=["p"])
    db.table("t").append([{"x": 1, "p": "a"}])
    created = (tmp_path / commit_key(1)).read_text().splitlines()
    meta = next(json.loads(line) for line in created if line.startswith('{"metadata"'))
    meta["metadata"]["partitionColumns"] = []
    version = add_commit(tmp_path, meta)
    with pytest.raises(mere.CorruptLog, match="changes its partition columns"):
        mere.connect(str(tmp_path), create=False).table("t").scan()
    assert db.snapshot(version - 1).table("t").scan().to_pylist() == [{"x": 1, "p": "a"}]


def test_a_checkpoint_part_without_a_partition_column_is_corrupt(tmp_path: Path) -> None:
    """Every file's partition value read NULL."""
    db = mere.connect(str(tmp_path))
    db.create_table("t", pa.schema([("x", pa.int64()), ("p", pa.string())]), partition_by=["p"])
    db.table("t").append([{"x": 1, "p": "a"}])
    version = db.checkpoint()
    (part,) = (tmp_path / "_log").glob(f"{version:020d}.checkpoint.*.parquet")
    table = pq.read_table(part).drop_columns(["partition:p"])
    part.unlink()
    pq.write_table(table, part)
    for v in range(version):
        remove(tmp_path, commit_key(v))
    with pytest.raises(mere.CorruptLog, match="has no column 'partition:p'"):
        mere.connect(str(tmp_path), create=False).table("t").scan()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_commit_that_is_not_strict_json_is_corrupt(root: Path, literal: str) -> None:
    """mere never writes NaN or Infinity in a commit (its encoder refuses them); a reader that
    took them would read a commit a strict JSON reader rejects."""
    latest = COMMITS + 1
    lines = (root / commit_key(latest)).read_text().splitlines()
    lines[1] = lines[1].replace('"nullCount"', f'"bogus":{literal},"nullCount"', 1)
    assert literal in lines[1]
    LocalStore(str(root)).put_if_absent(commit_key(latest + 1), ("\n".join(lines) + "\n").encode())
    with pytest.raises(mere.CorruptLog, match=f"{literal} is not JSON"):
        xs(root)


def test_a_commit_name_with_other_digits_is_not_a_commit(root: Path) -> None:
    """Python's ``\\d`` matches any Unicode digit: such a name parsed as a version."""
    from mere.log.keys import parse_log_key

    assert parse_log_key("_log/" + "\u0661" * 20 + ".json") is None
    assert parse_log_key(commit_key(7)) is not None


# --- a gap in the log ----------------------------------------------------------------------------


def test_a_gap_makes_versions_from_it_unreadable(root: Path) -> None:
    remove(root, commit_key(4))
    set_hint(root, LATEST_HINT, COMMITS + 1)  # above the gap (below it, see the next test)
    db = mere.connect(str(root), create=False)
    gap = f"{commit_key(4)}: .*missing but later versions exist.*a gap in the log"
    for read in (lambda: db.version, lambda: xs(root), lambda: xs(root, 4)):
        with pytest.raises(mere.CorruptLog, match=gap):
            read()
    with pytest.raises(mere.CorruptLog, match=gap):
        db.table("t").append([{"x": 99}])
    assert xs(root, 3) == [0, 1]
    remove(root, LATEST_HINT)  # the listing fallback finds the top, then the same gap
    with pytest.raises(mere.CorruptLog, match=gap):
        _ = mere.connect(str(root), create=False).version


def test_a_gap_below_the_hint_is_met_where_writers_take_turns(root: Path) -> None:
    """The turns' note says versions above the gap were committed (format §3)."""
    remove(root, commit_key(5))
    set_hint(root, LATEST_HINT, 2)
    with pytest.raises(mere.CorruptLog, match="a gap in the log"):
        _ = mere.connect(str(root), create=False).version
    with pytest.raises(mere.CorruptLog, match="a gap in the log"):
        mere.connect(str(root), create=False).table("t").append([{"x": 99}])
    assert not (root / commit_key(5)).exists()


def test_a_gap_below_the_hint_is_filled_by_the_next_commit_without_turns(root: Path) -> None:
    """Hazard: with the hint below a gap and no turns (as on a cloud store), a writer
    commits into it and revives what follows."""
    remove(root, commit_key(5))
    set_hint(root, LATEST_HINT, 2)
    db = mere.connect(LocalStore(str(root), turns=False), create=False)
    assert db.version == 4  # probing stops at the gap
    assert db.table("t").append([{"x": 99}]) == 5  # the gap is filled
    again = mere.connect(str(root), create=False)
    assert again.version == COMMITS + 1  # the orphaned versions 6 and 7 are back
    assert xs(root) == [0, 1, 2, 4, 5, 99]  # x=3 (old version 5) is gone, 99 sits before 4, 5
    assert [h["version"] for h in again.history()] == list(range(COMMITS + 1, -1, -1))


# --- checkpoints that disagree with the log -----------------------------------------------------


def test_a_checkpoint_that_disagrees_with_the_log_is_trusted(root: Path) -> None:
    db = mere.connect(str(root), create=False)
    wrong = db.state_at(2)  # x = [0], written as the checkpoint of version 5
    LocalStore(str(root)).put_if_absent(
        checkpoint_key(5),
        encode_checkpoint(5, db.state_at(5).timestamp, list(wrong.live_actions())),
    )
    set_hint(root, CHECKPOINT_HINT, 5)
    assert xs(root, 4) == [0, 1, 2]  # below it: the log
    assert xs(root, 5) == [0]  # at it: the checkpoint, silently (the log says [0..3])
    assert xs(root) == [0, 4, 5]  # above it: the checkpoint plus the commits after it


def test_a_checkpoint_claiming_another_version_is_corrupt(root: Path) -> None:
    db = mere.connect(str(root), create=False)
    state = db.state_at(5)
    LocalStore(str(root)).put_if_absent(
        checkpoint_key(5), encode_checkpoint(4, state.timestamp, list(state.live_actions()))
    )
    with pytest.raises(mere.CorruptLog, match="claims version 4"):
        xs(root)
    assert xs(root, 4) == [0, 1, 2]


def test_a_checkpoint_that_is_not_parquet_is_corrupt_from_its_version_on(root: Path) -> None:
    LocalStore(str(root)).put_if_absent(checkpoint_key(5), b"garbage")
    for version in (None, 5, 6):
        with pytest.raises(mere.CorruptLog, match="unreadable Parquet"):
            xs(root, version)
    assert xs(root, 4) == [0, 1, 2]  # the log itself is intact, but is not used instead
