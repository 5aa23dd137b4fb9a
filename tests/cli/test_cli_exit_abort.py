"""``mere history`` must never abort the process at exit (issue 12).

On a database with a truncated commit older than a checkpoint, ``mere
history`` reads the checkpoint, meets the truncated commit and exits with
status 1; a few runs in a hundred aborted instead ("terminate called without
an active exception", status 134). The cause: ``pq.read_table`` over a
``pa.BufferReader`` wrapping the checkpoint's Python ``bytes`` sometimes
drops its last reference to that buffer on one of Arrow's worker threads
*after* returning. Releasing a Python-owned buffer takes the GIL; when the
interpreter is already finalizing, CPython ends that thread with
``pthread_exit``, whose unwinding through Arrow's C++ frames calls
``std::terminate``. Checkpoints are now decoded from an Arrow-owned copy,
whose release needs no GIL.

The first test catches the cause deterministically (a ``bytearray`` cannot
be resized while anything still holds a view of it); the second runs the CLI
in subprocesses, as the report did, for a bounded time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

import mere
from mere.log.checkpoint import decode_checkpoint
from mere.log.keys import checkpoint_key, commit_key

#: Wall-clock budget of the subprocess test, and its bounds on runs.
BUDGET_SECONDS = 15.0
MIN_RUNS = 4
MAX_RUNS = 60
PARALLEL = 4


def _database(path: Path) -> Path:
    """Commits 0..7 (6 appends), a checkpoint at 7, and commit 3 truncated."""
    db = mere.connect(str(path))
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(6):
        db.table("t").append([{"x": i}])
    assert db.checkpoint() == 7
    db.close()
    commit = path / commit_key(3)
    data = commit.read_bytes()
    commit.unlink()
    commit.write_bytes(data[:-5])
    return path


def test_decoding_a_checkpoint_leaves_arrow_no_view_of_python_memory(tmp_path: Path) -> None:
    raw = (_database(tmp_path / "db") / checkpoint_key(7)).read_bytes()
    assert decode_checkpoint(checkpoint_key(7), raw).version == 7
    for _ in range(300):
        data = bytearray(raw)
        decode_checkpoint(checkpoint_key(7), data)
        # Raises BufferError while an Arrow thread still holds the buffer (and would
        # need the GIL to let go of it, possibly while the interpreter finalizes).
        data.append(0)


def _history(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mere.cli.main", "history", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_history_on_a_truncated_commit_below_a_checkpoint_never_aborts(tmp_path: Path) -> None:
    root = _database(tmp_path / "db")
    deadline = time.monotonic() + BUDGET_SECONDS
    outcomes: list[subprocess.CompletedProcess[str]] = []

    def run(_: int) -> subprocess.CompletedProcess[str] | None:
        if len(outcomes) >= MIN_RUNS and time.monotonic() > deadline:
            return None
        done = _history(root)
        outcomes.append(done)
        return done

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        list(pool.map(run, range(MAX_RUNS)))
    assert len(outcomes) >= MIN_RUNS
    for done in outcomes:
        assert "terminate called" not in done.stderr, done.stderr
        assert done.returncode == 1, (done.returncode, done.stderr)
        assert done.stderr.startswith("error: corrupt log file _log/00000000000000000003.json"), (
            done.stderr
        )
        assert "truncated" in done.stderr
