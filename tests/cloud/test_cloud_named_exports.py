"""Minimal and partial exports across stores: a cloud source and a local target, and the reverse.

The target's adds name the source's files by absolute URI; a reader opens that
store through ``open_store`` of its root, configured by the environment (as
any store opened from a URI is), so each test points the cloud's environment
variables at the test server. See tests/maintain/test_maintain_named_exports.py
for the behaviour on one store.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import cloud_servers
import pyarrow as pa
import pytest
from cloud_servers import Cloud

import mere
from mere.log.actions import AddFile

ZERO = timedelta(0)
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def environment(cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``open_store("s3://...")`` / ``open_store("az://...")`` reach the test server."""
    endpoint = cloud.server.endpoint
    if cloud.name == "s3":
        for key, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }.items():
            monkeypatch.setenv(key, value)
    else:
        for key, value in {
            "AZURE_STORAGE_ACCOUNT_NAME": cloud_servers.AZURITE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": cloud_servers.AZURITE_KEY,
            "AZURE_STORAGE_ENDPOINT": f"{endpoint}/{cloud_servers.AZURITE_ACCOUNT}",
            "AZURE_ALLOW_HTTP": "true",
        }.items():
            monkeypatch.setenv(key, value)


def fill(db: mere.Database) -> None:
    db.create_table("t", SCHEMA, partition_by=["part"])
    for b in range(3):
        db.table("t").append([{"id": i, "part": "ab"[i % 2]} for i in range(b * 10, b * 10 + 10)])


def churn(db: mere.Database) -> None:
    db.table("t").append([{"id": 100, "part": "a"}])
    db.table("t").delete("id < 15")
    db.table("t").compact()


def cleanup(db: mere.Database) -> mere.maintain.VacuumResult:
    db.expire(ZERO, force=True)
    return db.vacuum(ZERO, force=True)


def ids(table: mere.Table | mere.TableSnapshot) -> list[int]:
    return sorted(table.scan(["id"]).column("id").to_pylist())


def external_paths(target: mere.Database) -> list[str]:
    commit = target.log.read_commit(0)
    return [a.path for a in commit.actions if isinstance(a, AddFile) and "://" in a.path]


def test_minimal_export_from_a_cloud_source_to_a_local_target(
    cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment(cloud, monkeypatch)
    db = mere.connect(cloud.store())
    fill(db)
    expected = ids(db.table("t"))

    result = db.export(tmp_path / "min", mode="minimal", name="q3-close")

    assert result.files_referenced == result.files == 6 and result.files_copied == 0
    target = mere.connect(tmp_path / "min", create=False)
    paths = external_paths(target)
    assert len(paths) == 6 and all(p.startswith(f"{db.uri}/tables/") for p in paths)
    assert ids(target.table("t")) == expected
    churn(db)
    vacuumed = cleanup(db)
    assert vacuumed.kept_for_exports["q3-close"]
    assert ids(mere.connect(tmp_path / "min", create=False).table("t")) == expected
    assert ids(db.snapshot(version="q3-close").table("t")) == expected

    db.drop_export("q3-close")
    vacuumed = cleanup(db)
    assert vacuumed.files_deleted >= 4
    scheme = db.uri.split("://")[0]
    with pytest.raises(mere.DataFileMissing, match=f"data file {scheme}://.*/tables/"):
        mere.connect(tmp_path / "min", create=False).table("t").scan()


def test_minimal_export_from_a_local_source_to_a_cloud_target(
    cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment(cloud, monkeypatch)
    db = mere.connect(tmp_path / "src")
    fill(db)
    expected = ids(db.table("t"))
    store = cloud.store()

    db.export(store, mode="minimal", name="to-cloud")

    target = mere.connect(store, create=False)
    assert all(p.startswith(f"{db.uri}/tables/") for p in external_paths(target))
    assert not list(store.list("tables/"))
    churn(db)
    cleanup(db)
    assert ids(target.table("t")) == expected
    assert ids(mere.connect(store.uri, create=False).table("t")) == expected  # from the URI
    target.table("t").append([{"id": 500, "part": "b"}])  # the target writes its own files
    assert ids(target.table("t")) == [*expected, 500]

    db.drop_export("to-cloud")
    cleanup(db)
    with pytest.raises(mere.DataFileMissing, match=f"{db.uri}/tables/"):
        target.table("t").scan()


def test_partial_export_from_a_cloud_source_copies_what_came_after_since(
    cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment(cloud, monkeypatch)
    db = mere.connect(cloud.store())
    fill(db)
    since = db.version
    db.table("t").append([{"id": 50, "part": "a"}, {"id": 51, "part": "b"}])
    expected = ids(db.table("t"))

    result = db.export(tmp_path / "part", mode="partial", since=since, name="p")

    assert (result.files_referenced, result.files_copied) == (6, 2)
    target = mere.connect(tmp_path / "part", create=False)
    assert len(list(target.store.list("tables/"))) == 2
    churn(db)
    db.table("t").delete("id >= 0")
    kept = cleanup(db).kept_for_exports["p"]
    assert len(kept) == 6
    assert ids(mere.connect(tmp_path / "part", create=False).table("t")) == expected
