"""The Spin model of the commit protocol: it holds, and its mutants are caught.

``src/mere/txn/commit_protocol.pml`` models writers racing with put-if-absent,
ambiguous put outcomes resolved by reading back the commit id, and rebase
with the conflict rule (see the model's header and docs/format.md, "What the
model proves"). Each test runs ``spin -a``, compiles the verifier with the C
compiler and runs ``./pan``:

* the model's assertions and its LTL formula hold in every configuration
  tried (exhaustive search, no error);
* each mutant -- the snapshot rule, guessing instead of reading back, a put
  that overwrites -- violates the property that it should, which shows the
  properties are not vacuous.

Without ``spin`` these tests are skipped, except in CI (``CI=true``), where a
missing ``spin`` fails them: CI must run the model.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import mere.txn

MODEL = Path(mere.txn.__file__).parent / "commit_protocol.pml"
SPIN = shutil.which("spin")
CC = shutil.which("gcc") or shutil.which("cc")
TIMEOUT = 300


@dataclass(frozen=True)
class Verification:
    """What ``./pan`` said."""

    errors: int
    states: int
    output: str


@pytest.fixture(autouse=True)
def _tools() -> None:
    missing = [name for name, path in (("spin", SPIN), ("a C compiler", CC)) if path is None]
    if not missing:
        return
    reason = f"{' and '.join(missing)} not installed (apt-get install -y spin gcc)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must check the commit protocol model: {reason}")
    pytest.skip(reason)


def verify(workdir: Path, defines: tuple[str, ...] = (), *, liveness: bool = False) -> Verification:
    """Generate, compile and run the verifier for the model with ``-D`` defines."""
    assert SPIN is not None and CC is not None
    shutil.copy(MODEL, workdir / MODEL.name)

    def call(*args: str) -> str:
        done = subprocess.run(
            args, cwd=workdir, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
        assert done.returncode == 0 or args[0] == "./pan", done.stdout + done.stderr
        return done.stdout + done.stderr

    call(SPIN, *(f"-D{d}" for d in defines), "-a", MODEL.name)
    flags = [] if liveness else ["-DSAFETY", "-DNOCLAIM"]
    call(CC, "-O2", "-w", *flags, "-o", "pan", "pan.c")
    output = call("./pan", "-m200000", *(["-a", "-N", "terminates"] if liveness else []))
    errors = re.search(r"errors: (\d+)", output)
    states = re.search(r"(\d+) states, stored", output)
    assert errors is not None and states is not None, output
    return Verification(int(errors.group(1)), int(states.group(1)), output)


@pytest.mark.parametrize(
    "defines",
    [
        pytest.param(("NW=2", "AMBIG=2"), id="2-writers-2-keys-ambiguous-puts"),
        pytest.param(("NW=3", "SMALL=1", "AMBIG=0"), id="3-writers-2-keys"),
        pytest.param(("NW=3", "NK=1"), id="3-writers-1-key-ambiguous-puts"),
    ],
)
def test_the_protocol_model_holds(tmp_path: Path, defines: tuple[str, ...]) -> None:
    result = verify(tmp_path, defines)
    assert result.errors == 0, result.output
    assert "assertion violations\t+" in result.output
    assert "invalid end states\t+" in result.output  # no writer can get stuck
    assert "search depth too small" not in result.output
    assert result.states > 100_000  # the search explored a real space


def test_every_writer_terminates(tmp_path: Path) -> None:
    result = verify(tmp_path, ("NW=2", "AMBIG=2"), liveness=True)
    assert result.errors == 0, result.output
    assert "never claim         \t+ (terminates)" in result.output


@pytest.mark.parametrize(
    ("mutant", "violated"),
    [
        ("SNAPSHOT", r"val==seen"),  # 4: serializability
        ("GUESS", r"status\[i\]!=2\)\|\|\(n==0"),  # 3: a failed transaction landed
        ("NO_READBACK", r"status\[i\]!=2\)\|\|\(n==0"),
        ("OVERWRITE", r"status\[i\]!=1\)\|\|\(\(n==1\)"),  # 2: a lost commit
    ],
)
def test_a_broken_protocol_is_caught(tmp_path: Path, mutant: str, violated: str) -> None:
    result = verify(tmp_path, ("NW=2", mutant))
    assert result.errors >= 1, result.output
    assert re.search(r"assertion violated .*" + violated, result.output), result.output
