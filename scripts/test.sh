#!/usr/bin/env bash
# The whole test suite, from a fresh clone: Python deps, lint, types, unit + integration
# tests, the Maven build with its JUnit tests, and (when Docker can be set up) the
# dockerised mini-cluster tests. Fails on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
stage() { echo; echo "==== $* ===="; }

stage "setup (python)"
scripts/setup.sh dev,train

stage "lint (ruff) and types (mypy)"
"$PY" -m ruff check themis tests bench
"$PY" -m mypy

if [[ -f pom.xml ]]; then
  stage "maven build + JUnit (rm-plugin)"
  mvn -q -B verify
fi

stage "pytest (unit + integration)"
# pytest exits 5 when it collects nothing: that must fail this script, and it does
# (set -e), but say so explicitly.
set +e
"$PY" -m pytest -q -m "not docker" tests
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests" >&2; exit 1; fi
[[ $rc -eq 0 ]] || exit $rc

if [[ -x scripts/docker-setup.sh && "${THEMIS_SKIP_DOCKER:-0}" != "1" ]]; then
  stage "docker mini-cluster (testcontainers)"
  scripts/docker-setup.sh
  docker/build.sh
  set +e
  "$PY" -m pytest -q -m docker tests/integration
  rc=$?
  set -e
  if [[ $rc -ne 0 && $rc -ne 5 ]]; then exit $rc; fi
fi
echo; echo "test.sh: all stages passed"
