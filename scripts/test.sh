#!/usr/bin/env bash
# Set everything up and run the checks: ruff, mypy, then the test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
echo "== ruff"; .venv/bin/ruff check
echo "== mypy"; .venv/bin/mypy
echo "== pytest"; .venv/bin/python -m pytest -p no:cacheprovider "$@"
