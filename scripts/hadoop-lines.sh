#!/usr/bin/env bash
# Builds the RM plugin and the AM against each supported Hadoop line and runs the JUnit suite
# (unit tests + MiniYARNCluster ITs with the real Python engine) on each line's
# ResourceManager: the Maven profiles hadoop-3.3 (3.3.6), hadoop-3.4 (3.4.3) and hadoop-3.5
# (3.5.0, the default line) of the root pom.xml, each building into <module>/target/hadoop-3.x/
# (the default build in <module>/target/ is left alone).
#
# Then, over the three lines' builds (a line whose tests were not asked for is compiled only):
# every main class file must be a Java 8 class file (major version 52), and the class files
# must be byte-identical across the lines, which is what makes one jar serve all of them.
#
# Prints one summary line per Hadoop line (tests, failures, errors, skipped, time) and the
# failing tests; each line's Maven output is kept in out/hadoop-lines/hadoop-<line>.log.
# Exit status: 0 when everything passed, 1 when a build, a test or a check failed, 2 on a
# usage error.
set -uo pipefail
cd "$(dirname "$0")/.."

ALL_LINES=(3.3 3.4 3.5)
declare -A VERSION=([3.3]=3.3.6 [3.4]=3.4.3 [3.5]=3.5.0)
# --quick: the unit tests and the ITs that together reach every version-sensitive part of the
# plugin: tryCommit, decUnconfirmedRes and the placement pre-check (LeaseEnforcementIT), the
# scheduling monitor and the RM's own enforcement (EnforcementWithoutMonitorIT), metrics2 and
# the MXBean (ThemisMetricsIT), the Python engine over Py4J and app diagnostics (StockAppsIT),
# work-preserving RM restart and container recovery (RmRestartIT), RM HA: the transition to
# active and standby, embedded elector, failover and failback (RmHaIT), the CapacityScheduler
# queue capacities read for the queues' GPU shares (QueuesIT).
QUICK_TESTS='*Test,LeaseEnforcementIT,EnforcementWithoutMonitorIT,ThemisMetricsIT,StockAppsIT,RmRestartIT,RmHaIT,QueuesIT,SecureRmIT'

usage() {
  cat <<EOF
usage: scripts/hadoop-lines.sh [--lines LIST] [--quick] [--test-jvm JAVA] [-h|--help]

Builds the plugin and the AM against each Hadoop line, runs the JUnit suite on each, checks
that the class files are Java 8 (major 52) and identical across lines, prints a per-line
summary, and exits non-zero if anything failed.

options:
  --lines LIST  comma-separated Hadoop lines to test, among 3.3 (${VERSION[3.3]}),
                3.4 (${VERSION[3.4]}) and 3.5 (${VERSION[3.5]}); lines left out are still
                compiled for the class-file checks (default: 3.3,3.4,3.5)
  --quick       per line, the unit tests and these ITs instead of the whole suite:
                ${QUICK_TESTS#\*Test,}
                (default: the whole suite, about 3-4 min per line on 2 cores)
  --test-jvm JAVA
                run the tests (and so the mini-cluster's RM) in JAVA, a Java 11+ \`java\`
                binary, instead of the build JDK; the test classes are compiled for its
                version. Hadoop 3.5 needs Java 17+, so with a Java 11 JAVA pass --lines 3.3,3.4
                (default: the build JDK)
  -h, --help    show this help and exit

Logs: out/hadoop-lines/hadoop-<line>.log. Needs mvn, a JDK 17 and python3 (the ITs run the
engine from this checkout: surefire sets PYTHONPATH to the repository root).
EOF
}

die_usage() { echo "hadoop-lines.sh: $1 (see --help)" >&2; exit 2; }

LINES=("${ALL_LINES[@]}")
QUICK=0
TEST_JVM=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --lines)
      [[ $# -ge 2 && -n $2 ]] || die_usage "--lines needs a value, e.g. --lines 3.3,3.4"
      IFS=, read -r -a LINES <<<"$2"
      for l in "${LINES[@]}"; do
        [[ -n $l && -n ${VERSION[$l]:-} ]] \
          || die_usage "unknown Hadoop line '$l' (known: ${ALL_LINES[*]})"
      done
      shift 2 ;;
    --quick) QUICK=1; shift ;;
    --test-jvm)
      [[ $# -ge 2 && -x $2 && -f $2 ]] || die_usage "--test-jvm needs the path of a java binary"
      TEST_JVM=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
done
command -v mvn >/dev/null 2>&1 || { echo "hadoop-lines.sh: no mvn on PATH" >&2; exit 1; }
JVM_ARGS=()
if [[ -n $TEST_JVM ]]; then
  # java.specification.version: 1.8, 11, 17, ...
  spec=$("$TEST_JVM" -XshowSettings:properties -version 2>&1 \
    | sed -n 's/^ *java.specification.version = //p')
  [[ $spec =~ ^[0-9]+$ && $spec -ge 11 ]] \
    || die_usage "--test-jvm $TEST_JVM is Java ${spec:-?}; the tests need Java 11 or newer"
  for l in "${LINES[@]}"; do
    [[ $l == 3.5 && $spec -lt 17 ]] \
      && die_usage "Hadoop ${VERSION[3.5]} needs Java 17+, --test-jvm is Java $spec (--lines 3.3,3.4)"
  done
  JVM_ARGS=("-Djvm=$TEST_JVM" "-Dmaven.compiler.testRelease=$spec")
fi

LOGS=out/hadoop-lines
mkdir -p "$LOGS"
MODULES=(rm-plugin submarine-am)
SUMMARY=()
FAILURES=()
FAILED=0

tested() {
  local l
  for l in "${LINES[@]}"; do [[ $l == "$1" ]] && return 0; done
  return 1
}

# counts DIR: "tests failures errors skipped java" summed over DIR's surefire XML reports
# (java: the java.version the tests ran on)
counts() {
  python3 - "$1" <<'EOF'
import glob, sys
import xml.etree.ElementTree as ET
t = [0, 0, 0, 0]
java = "?"
for f in glob.glob(sys.argv[1] + "/TEST-*.xml"):
    s = ET.parse(f).getroot()
    for i, k in enumerate(("tests", "failures", "errors", "skipped")):
        t[i] += int(s.get(k, "0"))
    for p in s.iter("property"):
        if p.get("name") == "java.version":
            java = p.get("value")
print(*t, java)
EOF
}

for l in "${ALL_LINES[@]}"; do
  log="$LOGS/hadoop-$l.log" t=$SECONDS
  reports="rm-plugin/target/hadoop-$l/surefire-reports"
  for m in "${MODULES[@]}"; do rm -rf "$m/target/hadoop-$l"; done # a fresh build per line
  if tested "$l"; then
    args=(verify "${JVM_ARGS[@]}")
    [[ $QUICK -eq 1 ]] && args+=("-Dtest=$QUICK_TESTS" -Dsurefire.failIfNoSpecifiedTests=false)
    echo "== Hadoop ${VERSION[$l]}: mvn -B -ntp -P hadoop-$l ${args[*]} (log: $log)"
  else
    args=(-DskipTests package)
    echo "== Hadoop ${VERSION[$l]}: compile only (mvn -B -ntp -P hadoop-$l ${args[*]})"
  fi
  mvn -B -ntp -P "hadoop-$l" "${args[@]}" >"$log" 2>&1
  rc=$?
  secs=$(( SECONDS - t ))
  if tested "$l"; then
    read -r n f e s j < <(counts "$reports")
    status=$([[ $rc -eq 0 ]] && echo passed || echo "FAILED (mvn exit $rc)")
    SUMMARY+=("$(printf 'Hadoop %-6s %-20s tests %3d, failures %d, errors %d, skipped %d, Java %-8s %4d s' \
      "${VERSION[$l]}" "$status" "$n" "$f" "$e" "$s" "$j" "$secs")")
  else
    status=$([[ $rc -eq 0 ]] && echo "compiled" || echo "FAILED (mvn exit $rc)")
    SUMMARY+=("$(printf 'Hadoop %-6s %-20s tests not run %41s %4d s' \
      "${VERSION[$l]}" "$status" "" "$secs")")
  fi
  if [[ $rc -ne 0 ]]; then
    FAILED=1
    names=$(grep -E '^\[ERROR\]   [A-Za-z_$][A-Za-z0-9_$.]*[.:]' "$log" | cut -c1-200)
    [[ -z $names ]] && names=$(grep -E '^\[ERROR\]' "$log" | head -n 5 | cut -c1-200)
    # kept as Maven prints them (scripts/test.sh names failing tests from such lines)
    while IFS= read -r x; do FAILURES+=("$x (Hadoop ${VERSION[$l]})"); done <<<"$names"
  fi
done

# Class-file checks over the lines' builds.
CHECKS=()
for m in "${MODULES[@]}"; do
  ref=""
  for l in "${ALL_LINES[@]}"; do
    dir="$m/target/hadoop-$l/classes"
    if [[ ! -d $dir ]]; then
      CHECKS+=("$m: no $dir (build failed)"); FAILED=1; continue
    fi
    # bytes 7-8 of a class file: its major version (52 = Java 8)
    bad=$(find "$dir" -name '*.class' | while read -r c; do
      v=$(od -An -j6 -N2 -tu1 "$c" | awk '{print $1 * 256 + $2}')
      [[ $v -ne 52 ]] && echo "${c#"$dir"/} ($v)"
    done)
    if [[ -n $bad ]]; then
      CHECKS+=("$m, Hadoop ${VERSION[$l]}: class files that are not Java 8 (52): $bad"); FAILED=1
    fi
    sum=$(cd "$dir" && find . -name '*.class' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
    if [[ -z $ref ]]; then
      ref=$sum
    elif [[ $sum != "$ref" ]]; then
      CHECKS+=("$m: class files of Hadoop ${VERSION[$l]} differ from ${VERSION[3.3]}'s"); FAILED=1
    fi
  done
  n=$(find "$m/target/hadoop-3.3/classes" -name '*.class' 2>/dev/null | wc -l)
  [[ -n $ref ]] && CHECKS+=("$m: $n class files (sha256 of the set $ref)")
done
[[ $FAILED -eq 0 ]] && CHECKS+=("all Java 8 (major 52), identical for ${VERSION[3.3]}, ${VERSION[3.4]}, ${VERSION[3.5]}")

echo
echo "==== Hadoop lines ===="
printf '%s\n' "${SUMMARY[@]}"
echo "==== class files ===="
printf '%s\n' "${CHECKS[@]}"
if [[ ${#FAILURES[@]} -gt 0 ]]; then
  echo "==== failing ===="
  printf '%s\n' "${FAILURES[@]}"
fi
if [[ $FAILED -ne 0 ]]; then
  echo "FAILED"
  exit 1
fi
echo "all passed: the plugin's and the AM's class files are the same for every line"
