#!/usr/bin/env bash
# Set everything up and run the TPC-H example pipeline (examples/tpch_pipeline.py):
# generate TPC-H data, load it with Spark in one transaction, run concurrent refresh
# writers and invariant-checking readers, then TPC-H queries in Spark SQL with time travel.
# Arguments go to the pipeline, e.g. scripts/example.sh --scale-factor 1 --writers 4
set -euo pipefail
cd "$(dirname "$0")/.."

# Spark 4 needs Java 17 or newer.
java_major() {
  local java=java
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java="$JAVA_HOME/bin/java"; fi
  "$java" -version 2>&1 | sed -nE '1s/.*version "(1\.)?([0-9]+).*/\2/p'
}
if ! command -v java >/dev/null 2>&1 && ! { [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; }; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing Java 17 for Spark (openjdk-17-jre-headless)" >&2
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "error: Spark needs Java 17 and no 'java' was found." >&2
    echo "Install it, e.g. 'sudo apt-get install openjdk-17-jre-headless', or set JAVA_HOME." >&2
    exit 1
  fi
fi
major="$(java_major)"
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  echo "error: Spark needs Java 17 or newer, found: $(java -version 2>&1 | head -n 1)" >&2
  echo "Install openjdk-17-jre-headless (or set JAVA_HOME to a Java 17+)." >&2
  exit 1
fi

bash scripts/setup.sh example,sql
exec .venv/bin/python examples/tpch_pipeline.py "$@"
