#!/usr/bin/env bash
# Set everything up and run the checks: ruff, mypy, then the test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
echo "== ruff"; .venv/bin/ruff check
echo "== mypy"; .venv/bin/mypy
# Two worker processes (pytest-xdist), each taking the next test when it is free:
# most tests wait on a disk, a server or a child process part of the time.
workers="${MERE_TEST_WORKERS:-2}"
echo "== pytest ($workers workers)"
.venv/bin/python -m pytest -p no:cacheprovider -n "$workers" --dist worksteal "$@"
