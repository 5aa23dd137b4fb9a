"""Fixtures of the maintenance tests: a database path, and child processes."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.process
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

WAIT = 60.0  # upper bound for any single wait on a child process


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "db"


@pytest.fixture
def mp_context(request: pytest.FixtureRequest) -> multiprocessing.context.BaseContext:
    """A multiprocessing context that does not fork the pytest process itself."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["mere", request.module.__name__])
    return context


class Processes:
    """The child processes of one test; anything still running at teardown is killed."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self.context = context
        self.started: list[multiprocessing.process.BaseProcess] = []

    def start(self, target: Callable[..., None], *args: Any) -> multiprocessing.process.BaseProcess:
        process = self.context.Process(target=target, args=args, daemon=True)
        process.start()
        self.started.append(process)
        return process

    def join(self, processes: Iterable[multiprocessing.process.BaseProcess]) -> None:
        chosen = list(processes)
        deadline = time.monotonic() + WAIT
        for process in chosen:
            process.join(max(0.0, deadline - time.monotonic()))
        assert not [p for p in chosen if p.is_alive()], "child processes still running"

    def kill_all(self) -> None:
        for process in self.started:
            if process.is_alive():
                process.kill()
        for process in self.started:
            process.join(WAIT)
            if not process.is_alive():
                process.close()


@pytest.fixture
def processes(mp_context: multiprocessing.context.BaseContext) -> Iterator[Processes]:
    group = Processes(mp_context)
    yield group
    group.kill_all()
