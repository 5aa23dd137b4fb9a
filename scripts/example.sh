#!/usr/bin/env bash
# Set everything up and run the TPC-H example pipeline (examples/tpch_pipeline.py):
# generate TPC-H data, load it in one transaction, run concurrent refresh writers
# and invariant-checking readers, then TPC-H queries with time travel.
# Arguments go to the pipeline, e.g. scripts/example.sh --scale-factor 1 --writers 4
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh example
exec .venv/bin/python examples/tpch_pipeline.py "$@"
