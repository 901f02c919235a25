#!/usr/bin/env bash
# The whole test suite, from a fresh clone: Python dependencies from the lock, lint, types,
# the layout's import contracts, the Maven build with its JUnit tests, pytest (unit + integration; the tests that import
# TensorFlow in a process of their own), and the dockerised mini-cluster tests.
#
# Every stage runs even when an earlier one failed (only a failed setup stops the run), and
# the run ends with one line per stage - passed / FAILED / skipped / TIMED OUT / CRASHED
# (signal) with its time - followed by the names of the failing tests. Each stage's full
# output is also kept in out/test-logs/<stage>.log. Exit status: 0 when every stage that
# ran passed, 1 otherwise.
#
# Environment: PYTHON (default python3); THEMIS_SKIP_DOCKER=1 skips the mini-cluster stage;
# THEMIS_DOCKER_LOCK=FILE runs the Docker stages under `flock FILE` (a machine shared by
# several checkouts: the mini-cluster uses host networking, so one at a time);
# THEMIS_STAGE_TIMEOUT_MIN overrides every stage's time limit (minutes; the limits only
# catch hangs).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
LOGS=out/test-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
T0=$SECONDS
SUMMARY=()
FAILURES=()
ANY_FAILED=0

# stage NAME LIMIT_MIN KIND CMD...: run CMD under a time limit, tee its output to the
# stage's log, and record one summary line. KIND is pytest, maven or plain: how failing
# tests are named.
stage() {
  local name="$1" limit="${THEMIS_STAGE_TIMEOUT_MIN:-$2}" kind="$3"; shift 3
  local log="$LOGS/${name//[^A-Za-z0-9]/-}.log" current="$LOGS/.current-${name//[^A-Za-z0-9]/-}"
  local t=$SECONDS rc status
  echo; echo "==== $name ($(( (SECONDS - T0) / 60 )) min in) ===="
  rm -f "$current"
  THEMIS_PYTEST_CURRENT="$PWD/$current" timeout --kill-after=30 "${limit}m" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then
    status="passed"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    status="TIMED OUT after ${limit} min"
  elif [[ $kind == pytest && $rc -eq 5 ]]; then
    status="FAILED (collected no tests)"
  elif [[ $rc -gt 128 ]]; then
    status="CRASHED (killed by SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))))"
  else
    status="FAILED (exit $rc)"
  fi
  [[ $rc -ne 0 ]] && ANY_FAILED=1
  SUMMARY+=("$(printf '%-44s %-34s %4d s' "$name" "$status" $(( SECONDS - t )))")
  if [[ $rc -ne 0 ]]; then
    local names=""
    case $kind in
      pytest) names=$(grep -E '^(FAILED|ERROR) ' "$log" | cut -c1-200) ;;
      maven) names=$(grep -E '^\[ERROR\]   [A-Za-z_$][A-Za-z0-9_$.]*[.:]' "$log" | sed 's/^\[ERROR\] *//' | cut -c1-200) ;;
    esac
    if [[ -z "$names" && -s "$current" ]]; then
      names="$(cat "$current") (running when the stage ended)"
    fi
    [[ -n "$names" ]] && while IFS= read -r l; do FAILURES+=("$name: $l"); done <<<"$names"
  fi
  return $rc
}

skip() { SUMMARY+=("$(printf '%-44s %-34s %4s' "$1" "skipped ($2)" "-")"); }

# in_background FUNCTION: run FUNCTION's stages beside the next ones (their output goes to
# out/test-logs/background.out and each stage's own log; the console shows the others);
# join_background adds their summary lines and failures. Two lanes, once Maven has packaged
# the jars (no tests; copies in out/ci-jars/, so that the JUnit run's repackaging of
# rm-plugin/target and submarine-am/target cannot change them under a test): Docker's
# engine, the images and the mini-cluster tests (the longest stage; its jobs mostly sleep
# through their steps and leases) in the background, and the JUnit tests, the Hadoop lines,
# the pytest integration, TensorFlow, unit and fuzz tests in the foreground. The JUnit ITs
# and the pytest integration tests time rounds, restarts and lease ends, and run beside
# each other on two cores they missed; beside a mini-cluster they pass
# (docs/development.md).
in_background() {
  ( SUMMARY=(); FAILURES=(); ANY_FAILED=0
    "$1"
    BG_SUMMARY=("${SUMMARY[@]}"); BG_FAILURES=("${FAILURES[@]}"); BG_FAILED=$ANY_FAILED
    declare -p BG_SUMMARY BG_FAILURES BG_FAILED 2>/dev/null \
      | sed -e 's/^declare -- /declare -g /' -e 's/^declare -\([a-z]*\) /declare -g\1 /' \
      > "$LOGS/.background"
  ) > "$LOGS/background.out" 2>&1 &
  BG_PID=$!
  echo; echo "==== in the background: $1 (output: $LOGS/background.out) ===="
}
join_background() {
  BG_SUMMARY=(); BG_FAILURES=(); BG_FAILED=1  # (unless the background's state says else)
  echo; echo "==== waiting for the background stages ($(( (SECONDS - T0) / 60 )) min in) ===="
  wait "$BG_PID"
  cat "$LOGS/background.out"
  # shellcheck disable=SC1091
  [[ -f $LOGS/.background ]] && source "$LOGS/.background"
  SUMMARY+=("${BG_SUMMARY[@]}"); FAILURES+=("${BG_FAILURES[@]}")
  [[ $BG_FAILED -ne 0 ]] && ANY_FAILED=1
}

# The background lane: Docker's engine, the images (and the headless browser that a
# mini-cluster test opens themis preview's report in), then the mini-cluster tests.
docker_lane() {
  if [[ "${THEMIS_SKIP_DOCKER:-0}" == "1" ]]; then
    skip "docker mini-cluster" "THEMIS_SKIP_DOCKER=1"
  elif [[ $JARS_OK -ne 1 ]]; then  # (the image build would run Maven beside mvn verify)
    skip "docker mini-cluster" "the jars were not packaged"
  elif ! stage "docker engine (scripts/docker-setup.sh)" 8 plain scripts/docker-setup.sh; then
    skip "docker mini-cluster" "no Docker engine"
  elif ! THEMIS_PLUGIN_JAR="${CI_JARS[plugin]:-}" stage "docker images (build.sh --with-tf)" 25 \
      plain "${LOCK[@]}" docker/build.sh --with-tf; then
    skip "docker mini-cluster" "images not built"
  else
    stage "browser (scripts/browser-setup.sh)" 10 plain scripts/browser-setup.sh
    export THEMIS_REQUIRE_DOCKER=1  # a skipped mini-cluster test fails this stage
    # the AM jar that the tests' `themis submit` uploads: the copy (themis.hadoop.jars)
    [[ -n ${CI_JARS[am]:-} ]] && export THEMIS_AM_JAR="${CI_JARS[am]}"
    stage "docker mini-cluster" 60 pytest \
      "${LOCK[@]}" "${PYTEST[@]}" -m docker tests/integration
  fi
}

# pytest exits 5 when it collects nothing; stage() counts that as a failure.
PYTEST=("$PY" -m pytest -q --durations=15 -p no:cacheprovider)

if stage "setup (python, locked versions)" 15 plain scripts/setup.sh dev,train; then
  declare -A CI_JARS=()
  JARS_OK=1
  if [[ -f pom.xml ]]; then
    JARS_OK=0
    if stage "maven: the jars (package, no tests)" 10 maven mvn -B -ntp -q package -DskipTests
    then
      rm -rf out/ci-jars && mkdir -p out/ci-jars
      JARS_OK=1
      for j in rm-plugin/target/themis-rm-plugin-*.jar submarine-am/target/themis-submarine-am-*.jar; do
        cp "$j" out/ci-jars/ || JARS_OK=0
        case $j in rm-plugin/*) CI_JARS[plugin]=$PWD/out/ci-jars/${j##*/} ;;
                   *) CI_JARS[am]=$PWD/out/ci-jars/${j##*/} ;; esac
      done
    fi
  fi
  LOCK=()
  [[ -n "${THEMIS_DOCKER_LOCK:-}" ]] && LOCK=(flock "$THEMIS_DOCKER_LOCK")
  in_background docker_lane
  # (the checks after the lane's start: the mini-cluster lane is the longer one)
  stage "lint (ruff)" 5 plain "$PY" -m ruff check themis tests bench
  stage "types (mypy --strict)" 10 plain "$PY" -m mypy
  # the layout's contracts ([tool.importlinter] in pyproject.toml; docs/architecture.md)
  stage "layout (lint-imports)" 5 plain \
    "$("$PY" -c 'import sys, os; print(os.path.dirname(sys.executable))')/lint-imports"
  if [[ -f pom.xml ]]; then
    stage "maven build + JUnit" 20 maven mvn -B -ntp verify
    # the other Hadoop lines: the same Java 8 classes against 3.3.6 and 3.4.3, the unit tests
    # and the ITs that reach line-specific code (scripts/hadoop-lines.sh --help; docs/yarn.md);
    # they build in target/hadoop-3.x/, not over the jars the mini-cluster reads
    stage "maven: Hadoop 3.3 + 3.4 lines (quick)" 20 maven \
      scripts/hadoop-lines.sh --lines 3.3,3.4 --quick
  fi
  stage "pytest (integration)" 30 pytest \
    "${PYTEST[@]}" -m "not docker and not tensorflow" tests/integration
  stage "pytest (TensorFlow in-process)" 20 pytest \
    "${PYTEST[@]}" -m "tensorflow and not docker" tests
  stage "pytest (unit + fuzz)" 25 pytest \
    "${PYTEST[@]}" -m "not docker and not tensorflow" tests/unit tests/fuzz
  join_background
else
  skip "everything else" "setup failed"
fi

echo
echo "==== test.sh summary ($(( (SECONDS - T0) / 60 )) min; logs in $LOGS/) ===="
printf '%s\n' "${SUMMARY[@]}"
if [[ ${#FAILURES[@]} -gt 0 ]]; then
  echo "failing:"
  printf '  %s\n' "${FAILURES[@]}"
fi
if [[ $ANY_FAILED -eq 0 ]]; then echo "test.sh: all stages passed"; else echo "test.sh: FAILED"; fi
exit $ANY_FAILED
