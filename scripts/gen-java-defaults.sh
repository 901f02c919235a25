#!/usr/bin/env bash
# Regenerate the committed rm-plugin/src/main/java/org/themis/yarn/EngineDefaults.java from the
# Python engine's constants (themis/yarn/javagen.py says which and why).
#   scripts/gen-java-defaults.sh           # writes the file
#   scripts/gen-java-defaults.sh --check   # exits 1 when it is stale (as tests/unit/test_javagen.py)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="$REPO/rm-plugin/src/main/java/org/themis/yarn/EngineDefaults.java"
case "${1:-}" in
  "") mode=--write ;;
  --check) mode=--check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
# this checkout's Python package, whatever else is installed
cd "$REPO"
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m themis.yarn.javagen "$mode" --file "$OUT"
