#!/usr/bin/env bash
# Create .venv at the repository root and install mere with the given extras
# (default: dev). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "mere needs Python 3.11 or newer (found $(python3 --version))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! python3 -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv .venv
    else
      echo "python3 -m venv failed: install the python3-venv package" >&2
      exit 1
    fi
  fi
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q -e ".[${extras}]" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c "import mere" || { echo "installing mere failed" >&2; exit 1; }
# Azurite (Microsoft's Azure Blob Storage emulator, from npm) for the Azure tests,
# installed locally into .cache/azurite; only for the dev extras (the test suite).
azurite_ok() { .cache/azurite/node_modules/.bin/azurite-blob --version >/dev/null 2>&1; }
if [[ ",${extras}," == *",dev,"* ]] && ! azurite_ok; then
  if ! command -v npm >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq npm >/dev/null
    else
      echo "npm is missing: the Azure tests need Azurite from npm (apt-get install npm)" >&2
      exit 1
    fi
  fi
  # An interrupted or racing npm install can leave a package without its files;
  # `azurite-blob --version` loads every module, so it tells a usable install.
  for attempt in 1 2 3; do
    rm -rf .cache/azurite && mkdir -p .cache/azurite
    npm install --no-save --no-audit --no-fund --no-package-lock --loglevel=error \
      --prefix .cache/azurite azurite >/dev/null 2>&1 && azurite_ok && break
    [ "$attempt" = 3 ] || npm cache verify >/dev/null 2>&1 || true
  done
  azurite_ok || {
    echo "installing Azurite with npm failed: run" \
      "'npm install --prefix .cache/azurite azurite' to see why" >&2
    exit 1
  }
fi
# spin (the SPIN model checker, from Debian) and a C compiler check the commit
# protocol's Promela model in the tests; only for the dev extras.
if [[ ",${extras}," == *",dev,"* ]] && ! command -v spin >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq spin gcc libc6-dev >/dev/null
  else
    echo "spin is missing: the model test needs it (apt-get install spin gcc)" >&2
    exit 1
  fi
fi
