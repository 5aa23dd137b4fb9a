"""Shared fixtures of the verify tests: a fast place for databases that clients share."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for a database several processes share, in RAM when possible.

    A local store fsyncs every commit and data file; on tmpfs that costs
    nothing, which makes the multi-process runs several times faster on a
    slow disk. Falls back to pytest's temporary directory.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="mere-verify-test-", dir=shm))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path
