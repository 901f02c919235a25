#!/usr/bin/env bash
# Dependency drift check: install the NEWEST versions that pyproject.toml's ranges allow
# (ignoring requirements/lock.txt) into a fresh venv, list every package whose version
# differs from the lock, and run the unit suite there - so that a new release that breaks
# the project is seen before a user installing without the lock meets it.
#
#   scripts/drift.sh [pytest args]      default: the unit tests (tests/unit)
#
# Environment: PYTHON (default python3) creates the venv; THEMIS_DRIFT_VENV (default
# out/drift-venv) is where it goes (recreated on every run). Exit status: pytest's.
# Not part of scripts/test.sh: a failure here means "a newer release breaks us" - pin it in
# requirements/constraints.in with the reason, refresh with scripts/lock.sh, and fix or
# report upstream.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${THEMIS_DRIFT_VENV:-out/drift-venv}"
rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
PY="$VENV/bin/python"
THEMIS_UNLOCKED=1 PYTHON="$PY" scripts/setup.sh dev,train
echo "drift: versions that differ from requirements/lock.txt (package: locked -> newest):"
"$PY" - <<'PYEOF'
import importlib.metadata as md
import re

locked = {}
for line in open("requirements/lock.txt", encoding="utf-8"):
    m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
    if m:
        locked[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
n = 0
for dist in sorted(md.distributions(), key=lambda d: d.metadata["Name"].lower()):
    name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
    if name in locked and locked[name] != dist.version:
        print(f"  {name}: {locked[name]} -> {dist.version}")
        n += 1
print(f"drift: {n} package(s) differ")
PYEOF
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(tests/unit)
rc=0
"$PY" -m pytest -q -p no:cacheprovider -m "not docker and not tensorflow" "${args[@]}" || rc=$?
"$PY" -m pytest -q -p no:cacheprovider -m "tensorflow and not docker" "${args[@]}" || {
  r=$?; [[ $r -ne 5 ]] && rc=$r; }
echo "drift: pytest exit status $rc on the newest versions"
exit $rc
