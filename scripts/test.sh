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
# pytest with a time limit; pytest exits 5 when it collects nothing, which must fail too.
run_pytest() {
  local m="$1" what="$2" rc=0; shift 2
  limit "$m" "$PY" -m pytest -q --durations=15 "$@" || rc=$?
  if [[ $rc -eq 5 ]]; then echo "test.sh: $what collected no tests" >&2; return 1; fi
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
run_pytest 20 "the pytest stage" -m "not docker" tests

if [[ -x scripts/docker-setup.sh && "${THEMIS_SKIP_DOCKER:-0}" != "1" ]]; then
  stage "docker mini-cluster (testcontainers)"
  limit 6 scripts/docker-setup.sh
  # --with-tf: the e2e tests (tests/integration/test_am_e2e.py) run real TensorFlow jobs
  limit 20 docker/build.sh --with-tf
  export THEMIS_REQUIRE_DOCKER=1  # a skipped mini-cluster test fails this stage
  run_pytest 25 "the docker stage" -m docker tests/integration
fi
echo; echo "test.sh: all stages passed in $(( (SECONDS - T0) / 60 )) min"
