#!/usr/bin/env bash
# The whole test suite, from a fresh clone: Python deps, lint, types, unit + integration
# tests, the Maven build with its JUnit tests, and (when Docker can be set up) the
# dockerised mini-cluster tests. Fails on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
T0=$SECONDS
stage() { echo; echo "==== $* ($(( (SECONDS - T0) / 60 )) min in) ===="; }
# Every stage has a hard time limit, so a hang fails the run with a message instead of
# running into CI's own limit. Minutes; override with THEMIS_STAGE_TIMEOUT_MIN.
# A typical run takes 35-50 minutes; the limits only catch hangs.
limit() {
  local m="${THEMIS_STAGE_TIMEOUT_MIN:-$1}" rc=0; shift
  timeout --kill-after=30 "${m}m" "$@" || rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then echo "test.sh: TIMED OUT after ${m} min: $*" >&2; fi
  return $rc
}

stage "setup (python)"
limit 12 scripts/setup.sh dev,train

stage "lint (ruff) and types (mypy)"
"$PY" -m ruff check themis tests bench
"$PY" -m mypy

if [[ -f pom.xml ]]; then
  stage "maven build + JUnit (rm-plugin)"
  # -ntp: no download progress noise, but test classes and results are shown.
  limit 12 mvn -B -ntp verify
fi

stage "pytest (unit + integration)"
# pytest exits 5 when it collects nothing: that must fail this script, and it does
# (set -e), but say so explicitly.
set +e
limit 20 "$PY" -m pytest -q -m "not docker" --durations=15 tests
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests" >&2; exit 1; fi
[[ $rc -eq 0 ]] || exit $rc

if [[ -x scripts/docker-setup.sh && "${THEMIS_SKIP_DOCKER:-0}" != "1" ]]; then
  stage "docker mini-cluster (testcontainers)"
  limit 6 scripts/docker-setup.sh
  # --with-tf: the e2e tests (tests/integration/test_am_e2e.py) run real TensorFlow jobs
  limit 20 docker/build.sh --with-tf
  set +e
  export THEMIS_REQUIRE_DOCKER=1  # a skipped mini-cluster test fails this stage
  limit 25 "$PY" -m pytest -q -m docker --durations=15 tests/integration
  rc=$?
  set -e
  if [[ $rc -eq 5 ]]; then echo "test.sh: the docker stage collected no tests" >&2; exit 1; fi
  [[ $rc -eq 0 ]] || exit $rc
fi
echo; echo "test.sh: all stages passed in $(( (SECONDS - T0) / 60 )) min"
