"""A create-only put of a key that exists costs the local store no write and no fsync.

Losing a commit race is the common case with many writers on one log; the
loser's put must fail fast instead of writing and syncing a temp file first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mere.errors import AlreadyExists
from mere.storage import LocalStore
from mere.storage import local as local_module


def test_a_taken_key_fails_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(str(tmp_path))
    store.put_if_absent("_log/00000000000000000001.json", b"winner")
    syncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(local_module.os, "fsync", counting_fsync)
    with pytest.raises(AlreadyExists):
        store.put_if_absent("_log/00000000000000000001.json", b"loser")
    assert syncs == []
    assert store.get("_log/00000000000000000001.json") == b"winner"
    assert sorted(os.listdir(tmp_path / "_log")) == ["00000000000000000001.json"]
