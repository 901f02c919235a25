#!/usr/bin/env bash
# Build the mini-cluster images with NO container registry.
#
#   docker/build.sh [--with-tf] [--no-plugin] [--rebuild-base] [--only base|hadoop|yarn|tf]
#
# Images (all tagged themis/*:latest):
#   themis/base    debootstrap --variant=minbase bookworm rootfs (+ JRE 17, python3, venv),
#                  `docker import`-ed. The rootfs tarball is cached in $CACHE (see below).
#   themis/hadoop  themis/base + the Hadoop jars, resolved from Maven Central by Maven on the
#                  host (docker/hadoop-deps/pom.xml) + docker/conf + the daemon launcher.
#   themis/yarn    themis/hadoop + our RM plugin jar (rm-plugin/target) + our Python package
#                  in /opt/themis/venv (wheels built on the host with pip, installed offline).
#   themis/yarn-tf themis/yarn + tensorflow-cpu (only with --with-tf or THEMIS_WITH_TF=1);
#                  used for the NodeManagers when present.
#
# Environment:
#   THEMIS_DOCKER_CACHE   cache dir (default ~/.cache/themis-docker)
#   THEMIS_DEBIAN_MIRROR  Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   HADOOP_VERSION        override the Hadoop version (default: root pom.xml's hadoop.version)
#   THEMIS_WITH_TF=1      same as --with-tf
#   THEMIS_TF_SPEC        pip requirement for TensorFlow (default tensorflow-cpu)
#   THEMIS_PLUGIN_JAR     put this RM plugin jar into themis/yarn as it is: no check against
#                         rm-plugin/'s sources, no Maven (e.g. a jar built elsewhere, or while
#                         rm-plugin/ is being edited)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${THEMIS_DOCKER_CACHE:-$HOME/.cache/themis-docker}
MIRROR=${THEMIS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
WITH_TF=${THEMIS_WITH_TF:-0}
TF_SPEC=${THEMIS_TF_SPEC:-tensorflow-cpu}
TF_EXTRAS=${THEMIS_TF_EXTRAS:-"tensorboard scikit-learn"}  # the jobs' and the runners' other needs
PLUGIN=1
REBUILD_BASE=0
ONLY=""

say() { echo "[build] $*" >&2; }
die() { echo "[build] ERROR: $*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --with-tf) WITH_TF=1 ;;
    --no-plugin) PLUGIN=0 ;;
    --rebuild-base) REBUILD_BASE=1 ;;
    --only) ONLY=${2:?--only needs an argument}; shift ;;
    -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

DOCKER=docker
[[ -x /usr/bin/docker ]] && DOCKER=/usr/bin/docker
# Classic builder: no BuildKit frontend image to pull, no buildx plugin needed.
export DOCKER_BUILDKIT=0
if ! "$DOCKER" info >/dev/null 2>&1; then
  say "no docker daemon answers: running scripts/docker-setup.sh"
  bash "$ROOT/scripts/docker-setup.sh" || die "docker is not available (scripts/docker-setup.sh failed)"
  [[ -x /usr/bin/docker ]] && DOCKER=/usr/bin/docker
fi

mkdir -p "$CACHE"
T0=$SECONDS
stamp() { say "$1 done in $((SECONDS - ${2:-T0}))s"; }
want() { [[ -z $ONLY || $ONLY == "$1" ]]; }
image_label() { "$DOCKER" image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

# ---------------------------------------------------------------------------------------------
# (a) themis/base: debootstrap rootfs imported into Docker
# ---------------------------------------------------------------------------------------------
# krb5-*: the secure profile (docker/minicluster.sh up --secure): an MIT KDC on the kdc host
# (krb5-kdc, kadmin.local from krb5-admin-server) and kinit/klist for logins inside containers
BASE_PKGS=openjdk-17-jre-headless,python3,python3-venv,python3-pip,procps,curl,ca-certificates,netbase,iproute2,less,krb5-kdc,krb5-admin-server,krb5-user
BASE_KEY=$(printf '%s|%s|%s|v1' "$SUITE" "$BASE_PKGS" "$(uname -m)" | sha256sum | cut -c1-12)
ROOTFS_TAR=$CACHE/rootfs-$SUITE-$BASE_KEY.tar

build_base() {
  local t=$SECONDS
  if [[ $REBUILD_BASE == 0 && $(image_label themis/base:latest themis.rootfs) == "$BASE_KEY" ]]; then
    say "themis/base:latest is up to date (rootfs $BASE_KEY)"; return
  fi
  if [[ $REBUILD_BASE == 1 || ! -s $ROOTFS_TAR ]]; then
    if ! command -v debootstrap >/dev/null 2>&1 && [[ ! -x /usr/sbin/debootstrap ]]; then
      bash "$ROOT/scripts/docker-setup.sh" || die "debootstrap missing and scripts/docker-setup.sh failed"
    fi
    [[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
    local dir
    dir=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$dir'" EXIT
    say "debootstrap --variant=minbase $SUITE (+ $BASE_PKGS) from $MIRROR (takes a few minutes)"
    PATH=/usr/sbin:/sbin:$PATH debootstrap --variant=minbase --include="$BASE_PKGS" \
      "$SUITE" "$dir" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -n 30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    cat >"$dir/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
EOF
    chroot "$dir" apt-get clean
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/usr/share/doc/* \
      "$dir"/usr/share/man/* "$dir"/usr/share/locale/* "$dir"/var/log/*.log "$dir"/tmp/* || true
    # hostname/hosts come from docker at run time
    : >"$dir/etc/hostname"
    tar --numeric-owner -C "$dir" -cf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf "$dir"; trap - EXIT
    stamp "rootfs tarball $(du -h "$ROOTFS_TAR" | cut -f1)" "$t"
  else
    say "using cached rootfs $ROOTFS_TAR"
  fi
  "$DOCKER" import \
    --change "LABEL themis.rootfs=$BASE_KEY" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64' \
    --change 'CMD ["/bin/bash"]' \
    "$ROOTFS_TAR" themis/base:latest >/dev/null
  stamp "themis/base" "$t"
}

# ---------------------------------------------------------------------------------------------
# (b) themis/hadoop: Hadoop jars from Maven Central + conf + launcher
# ---------------------------------------------------------------------------------------------
hadoop_version() {
  if [[ -n ${HADOOP_VERSION:-} ]]; then echo "$HADOOP_VERSION"; return; fi
  local v=""
  if [[ -f $ROOT/pom.xml ]]; then
    v=$(sed -n 's:.*<hadoop.version>\([^<]*\)</hadoop.version>.*:\1:p' "$ROOT/pom.xml" | head -n1)
  fi
  echo "${v:-3.5.0}"
}
HV=$(hadoop_version)
# jars cached per Hadoop version and per content of the deps pom
HKEY=$(sha256sum "$HERE/hadoop-deps/pom.xml" | cut -c1-8)
HDIR=$CACHE/hadoop-$HV-$HKEY
HLIB=$HDIR/lib

build_hadoop() {
  local t=$SECONDS
  if [[ ! -f $HDIR/.complete ]]; then
    command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven)"
    say "resolving Hadoop $HV jars from Maven Central (docker/hadoop-deps/pom.xml)"
    rm -rf "$HDIR"
    mvn -B -q -f "$HERE/hadoop-deps/pom.xml" -Dhadoop.version="$HV" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$HLIB" \
      || die "mvn dependency:copy-dependencies failed for Hadoop $HV"
    # Logging: Hadoop 3.4+/3.5 use reload4j via slf4j-reload4j; keep exactly one slf4j binding.
    touch "$HDIR/.complete"
    stamp "Hadoop jars ($(ls "$HLIB" | wc -l) jars, $(du -sh "$HLIB" | cut -f1))" "$t"
  fi
  local ctx=$CACHE/ctx-hadoop tests_jar
  rm -rf "$ctx"; mkdir -p "$ctx/lib" "$ctx/webapps-root"
  # webapps/ (NameNode/DataNode HTTP servers, WebHDFS) come from the hadoop-hdfs tests jar;
  # the jar itself (test classes) stays out of the image.
  tests_jar=$(ls "$HLIB"/hadoop-hdfs-*-tests.jar 2>/dev/null | head -n1 || true)
  [[ -n $tests_jar ]] || die "hadoop-hdfs tests jar missing from $HLIB (needed for webapps/)"
  (cd "$ctx/webapps-root" && python3 -c 'import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); z.extractall(".", [n for n in z.namelist() if n.startswith("webapps/")])' "$tests_jar")
  find "$HLIB" -maxdepth 1 -name '*.jar' ! -name '*-tests.jar' -exec cp -l {} "$ctx/lib/" \; 2>/dev/null \
    || find "$HLIB" -maxdepth 1 -name '*.jar' ! -name '*-tests.jar' -exec cp {} "$ctx/lib/" \;
  # rack mapping by host alias (docker/topology): compiled against the same Hadoop jars
  command -v javac >/dev/null 2>&1 || die "javac not found (apt-get install openjdk-17-jdk-headless)"
  mkdir -p "$ctx/topology-classes"
  javac -nowarn --release 17 -cp "$HLIB/*" -d "$ctx/topology-classes" \
    "$HERE"/topology/src/org/themis/docker/*.java || die "javac of docker/topology failed"
  (cd "$ctx/topology-classes" && python3 -c 'import os,sys,zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for d, _, fs in os.walk("."):
        for f in fs: z.write(os.path.join(d, f))' "$ctx/lib/themis-docker-topology.jar")
  rm -rf "$ctx/topology-classes"
  cp -a "$HERE/conf" "$ctx/conf"
  cp -a "$HERE/bin" "$ctx/bin"
  cp "$HERE/hadoop/Dockerfile" "$ctx/Dockerfile"
  "$DOCKER" build -q -t themis/hadoop:latest --build-arg HADOOP_VERSION="$HV" "$ctx" >/dev/null \
    || die "docker build themis/hadoop failed"
  rm -rf "$ctx"
  stamp "themis/hadoop (Hadoop $HV)" "$t"
}

# ---------------------------------------------------------------------------------------------
# (c) themis/yarn: plugin jar + Python package; themis/yarn-tf: + TensorFlow CPU
# ---------------------------------------------------------------------------------------------
find_plugin_jar() {
  # the main artifact: prefer a shaded/"-all" jar, never sources/javadoc/tests/original-
  ls -1 "$ROOT"/rm-plugin/target/*.jar 2>/dev/null \
    | grep -Ev -- '-(sources|javadoc|tests)\.jar$|/original-' | sort | tail -n1 || true
}

PYVER=3.11  # bookworm's python3; wheels are built on the host for this version
host_python() {
  local p
  for p in python$PYVER python3; do
    if command -v "$p" >/dev/null 2>&1 && [[ $("$p" -c 'import sys;print("%d.%d"%sys.version_info[:2])') == "$PYVER" ]]; then
      echo "$p"; return
    fi
  done
  die "need a host Python $PYVER to build wheels for the image's python3 $PYVER"
}

build_yarn() {
  local t=$SECONDS ctx=$CACHE/ctx-yarn jar=""
  rm -rf "$ctx"; mkdir -p "$ctx/plugin" "$ctx/wheels"
  if [[ $PLUGIN == 1 && -n ${THEMIS_PLUGIN_JAR:-} ]]; then
    [[ -f $THEMIS_PLUGIN_JAR ]] || die "THEMIS_PLUGIN_JAR=$THEMIS_PLUGIN_JAR: no such file"
    jar=$(cd "$(dirname "$THEMIS_PLUGIN_JAR")" && pwd)/$(basename "$THEMIS_PLUGIN_JAR")
  elif [[ $PLUGIN == 1 ]]; then
    jar=$(find_plugin_jar)
    # A jar older than the plugin's sources would put yesterday's scheduler in the image.
    if [[ -n $jar && -n $(find "$ROOT/rm-plugin/src" "$ROOT/rm-plugin/pom.xml" -newer "$jar" -type f 2>/dev/null | head -n1) ]]; then
      say "plugin jar is older than rm-plugin/ sources: rebuilding it"
      jar=""
    fi
    if [[ -z $jar ]]; then
      [[ -f $ROOT/pom.xml ]] || die "no root pom.xml: cannot build the plugin jar"
      say "building the plugin jar: 'mvn -q -DskipTests package' at the repo root"
      (cd "$ROOT" && mvn -B -q -DskipTests package) || die "the Maven build of the plugin jar failed"
      jar=$(find_plugin_jar)
      [[ -n $jar ]] || die "mvn package produced no rm-plugin/target/*.jar"
    fi
  fi
  if [[ -n $jar ]]; then
    cp "$jar" "$ctx/plugin/"
    # runtime deps the plugin declares but does not shade (if the module copies them there)
    if [[ -d $ROOT/rm-plugin/target/lib ]]; then cp "$ROOT"/rm-plugin/target/lib/*.jar "$ctx/plugin/" 2>/dev/null || true; fi
    say "plugin jar: ${jar#"$ROOT"/}"
  else
    say "no plugin jar: the RM will run the stock CapacityScheduler"
  fi
  # Python package: wheels built on the host (pip cache makes rebuilds fast), installed offline,
  # at the versions of requirements/lock.txt (the image holds only those wheels).
  local py
  py=$(host_python)
  say "building wheels for the themis package and its dependencies with $py"
  # build from a copy: an in-tree setuptools build would leave build/ and *.egg-info in the repo
  local src=$CACHE/pysrc
  rm -rf "$src"; mkdir -p "$src"
  cp -a "$ROOT/pyproject.toml" "$ROOT/themis" "$src/"
  for f in README.md LICENSE setup.py setup.cfg MANIFEST.in; do [[ -e $ROOT/$f ]] && cp -a "$ROOT/$f" "$src/"; done
  [[ -e $src/README.md ]] || echo "# themis-yarn" >"$src/README.md"
  find "$src" -name __pycache__ -prune -exec rm -rf {} +
  # THEMIS_SKIP_JARS=1: no Maven in the copy; the image carries the plugin jar in
  # /opt/themis/plugin and the AM jar is uploaded by the submitting client.
  THEMIS_SKIP_JARS=1 "$py" -m pip wheel -q -c "$ROOT/requirements/lock.txt" --wheel-dir "$ctx/wheels" "$src" 2>"$CACHE/pip-wheel.log" \
    || { tail -n 20 "$CACHE/pip-wheel.log" >&2; die "pip wheel failed (log: $CACHE/pip-wheel.log)"; }
  cp "$HERE/yarn/Dockerfile" "$ctx/Dockerfile"
  "$DOCKER" build -q -t themis/yarn:latest "$ctx" >/dev/null || die "docker build themis/yarn failed"
  rm -rf "$ctx" "$src"
  stamp "themis/yarn" "$t"
}

build_tf() {
  local t=$SECONDS ctx=$CACHE/ctx-tf py
  py=$(host_python)
  rm -rf "$ctx"; mkdir -p "$ctx/wheels"
  say "building/fetching wheels for $TF_SPEC (large: ~600 MB)"
  # + what the training jobs and the AM use besides TensorFlow (the package's "train" extra),
  # at the versions of requirements/lock.txt
  "$py" -m pip wheel -q -c "$ROOT/requirements/lock.txt" --wheel-dir "$ctx/wheels" "$TF_SPEC" $TF_EXTRAS 2>"$CACHE/pip-wheel-tf.log" \
    || { tail -n 20 "$CACHE/pip-wheel-tf.log" >&2; die "pip wheel $TF_SPEC failed"; }
  cp "$HERE/yarn-tf/Dockerfile" "$ctx/Dockerfile"
  "$DOCKER" build -q -t themis/yarn-tf:latest --build-arg TF_SPEC="$TF_SPEC" \
    --build-arg TF_EXTRAS="$TF_EXTRAS" "$ctx" >/dev/null \
    || die "docker build themis/yarn-tf failed"
  rm -rf "$ctx"
  stamp "themis/yarn-tf" "$t"
}

want base && build_base
want hadoop && build_hadoop
want yarn && build_yarn
if [[ $ONLY == tf || ($WITH_TF == 1 && -z $ONLY) ]]; then
  build_tf
elif want yarn && "$DOCKER" image inspect themis/yarn-tf:latest >/dev/null 2>&1; then
  say "NOTE: themis/yarn-tf is FROM the previous themis/yarn: rebuild it with '$0 --only tf' (or --with-tf)"
fi

# A rebuilt image leaves its predecessor untagged (2-3 GB for yarn-tf): remove the untagged
# ones of this project (they inherit the base image's label), or repeated rebuilds fill the
# disk. Other projects' images are not touched.
"$DOCKER" image prune -f --filter label=themis.rootfs >/dev/null 2>&1 || true
say "all done in $((SECONDS - T0))s"
"$DOCKER" images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep '^themis/' | sort >&2 || true
