#!/usr/bin/env bash
# The Themis mini-cluster on this machine: NameNode, DataNode, ResourceManager (+ Themis plugin
# when built in), and NodeManagers with fake yarn.io/gpu on two racks. Each daemon is a host of its
# own: a container with its own network namespace, host name and fixed address on the
# mini-cluster's Docker bridge network (created here); see docs/minicluster.md.
# With --ha: two ResourceManagers (rm1, rm2, each with the plugin) and a ZooKeeper server (zk):
# automatic failover with the embedded elector, work-preserving recovery in ZKRMStateStore.
# With --secure: Kerberos (realm THEMIS.TEST, an MIT KDC on the host kdc), SPNEGO on the web
# endpoints, HDFS permissions and YARN queue ACLs enforced (docs/minicluster.md, "Secure profile").
# With --labels: YARN node labels as docker/conf/node-labels.json says (an exclusive label gpu on
# nm1 and nm2, nm3 without GPUs in the default partition, queue ml with access to gpu, queue
# default without; docs/minicluster.md, "Node labels"), applied with rmadmin once the cluster runs.
#
#   docker/minicluster.sh up [--ha|--secure|--labels] [--no-wait]  start (replaces a running
#                                          mini-cluster), wait until ready (with --ha: one RM
#                                          active, the other standby; with --secure: also HDFS
#                                          laid out for the users; with --labels: also the nodes
#                                          labeled, so no --no-wait)
#   docker/minicluster.sh down [--network] stop and remove the containers (and the network)
#   docker/minicluster.sh status           containers, RM nodes (GPU totals, racks), HDFS
#   docker/minicluster.sh logs [NAME]      daemon logs (NAME: nn dn rm nm1 nm2 nm3, with --ha zk rm1
#                                          rm2 instead of rm, with --secure also kdc; default all,
#                                          tails)
#   docker/minicluster.sh wait             wait until ready (RM sees all NMs, WebHDFS answers)
#   docker/minicluster.sh hosts            each host's name and address (for scripts)
#   docker/minicluster.sh active-rm        the active RM's host name (rm without HA)
#
# Environment:
#   THEMIS_IMAGE      image for NN/DN/RM (default themis/yarn, else themis/hadoop)
#   THEMIS_NM_IMAGE   image for the NMs (default themis/yarn-tf, else THEMIS_IMAGE)
#   THEMIS_NMS        NodeManagers as "name:gpus:rack ..." (default "nm1:4:/rack1 nm2:2:/rack1 nm3:2:/rack2")
#   THEMIS_MC_TIMEOUT seconds to wait for readiness (default 180)
#   THEMIS_MC_NET     name of the Docker network (default themis-mc-net)
#   THEMIS_MC_SUBNET  its /24, as the first three octets (default 172.31.0: nn .2, dn .3, rm .4,
#                     zk .5, rm1 .6, rm2 .7, kdc .8, the i-th NodeManager .(10+i); the machine
#                     is .1)
#   THEMIS_MC_HA=1    same as up --ha (THEMIS_ZK_TIMEOUT_MS: the RMs' ZooKeeper session timeout,
#                     default 4000: how long a killed active RM keeps its leadership)
#   THEMIS_MC_SECURE=1 same as up --secure
#   THEMIS_MC_LABELS=1 same as up --labels
#   THEMIS_MC_KRB_DIR the secure profile's shared directory (default $TMPDIR or /tmp, then
#                     themis-mc-krb): the kdc host writes keytabs/<host|user>.keytab and
#                     krb5.conf (the KDC by address, for this machine) there; the other hosts
#                     mount it read-only at /krb. up --secure empties it first
#   THEMIS_SCHEDULER, THEMIS_CONF_OVERRIDES, THEMIS_CS_OVERRIDES: passed to the RM (see
#                     docker/bin/themis-daemon); with --labels they come after the profile's
#                     own settings, so they win
#   THEMIS_MOUNT_SRC=1 bind-mount this checkout's themis/ package, docker/conf/*-site.xml,
#                     docker/bin/themis-daemon and RM plugin jar (rm-plugin/target) over the
#                     images' copies (iterate without rebuilding the images)
set -euo pipefail

PREFIX=themis-mc
LABEL=themis.minicluster=1
TIMEOUT=${THEMIS_MC_TIMEOUT:-180}
NMS=${THEMIS_NMS:-"nm1:4:/rack1 nm2:2:/rack1 nm3:2:/rack2"}
NET=${THEMIS_MC_NET:-themis-mc-net}
SUBNET=${THEMIS_MC_SUBNET:-172.31.0}

# the fixed address of a mini-cluster host (nn, dn, rm, or the i-th name of THEMIS_NMS)
addr_of() {
  case $1 in
    nn) echo "$SUBNET.2" ;; dn) echo "$SUBNET.3" ;; rm) echo "$SUBNET.4" ;;
    zk) echo "$SUBNET.5" ;; rm1) echo "$SUBNET.6" ;; rm2) echo "$SUBNET.7" ;; kdc) echo "$SUBNET.8" ;;
    *) local i=0 s
       for s in $NMS; do
         i=$((i + 1))
         [[ ${s%%:*} == "$1" ]] && { echo "$SUBNET.$((10 + i))"; return; }
       done
       echo "unknown host $1" >&2; return 1 ;;
  esac
}
NN_URL=http://$(addr_of nn):9870
HA=${THEMIS_MC_HA:-0}
HA_IDS=rm1,rm2
SECURE=${THEMIS_MC_SECURE:-0}
LABELS=${THEMIS_MC_LABELS:-0}
LABELS_FILE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/conf/node-labels.json
KRB_DIR=${THEMIS_MC_KRB_DIR:-${TMPDIR:-/tmp}/themis-mc-krb}
REALM=THEMIS.TEST

say() { echo "[minicluster] $*" >&2; }
die() { echo "[minicluster] ERROR: $*" >&2; exit 1; }

DOCKER=docker
[[ -x /usr/bin/docker ]] && DOCKER=/usr/bin/docker
if ! "$DOCKER" info >/dev/null 2>&1; then
  say "no docker daemon answers: running scripts/docker-setup.sh"
  bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/scripts/docker-setup.sh" || die "docker is not available (scripts/docker-setup.sh failed)"
  [[ -x /usr/bin/docker ]] && DOCKER=/usr/bin/docker
fi

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }
pick_images() {
  IMAGE=${THEMIS_IMAGE:-}
  if [[ -z $IMAGE ]]; then
    if have_image themis/yarn:latest; then IMAGE=themis/yarn:latest
    elif have_image themis/hadoop:latest; then IMAGE=themis/hadoop:latest
    else die "no themis/yarn or themis/hadoop image: run docker/build.sh first"; fi
  fi
  NM_IMAGE=${THEMIS_NM_IMAGE:-}
  if [[ -z $NM_IMAGE ]]; then
    if have_image themis/yarn-tf:latest; then NM_IMAGE=themis/yarn-tf:latest; else NM_IMAGE=$IMAGE; fi
  fi
}

nm_names() { local s; for s in $NMS; do printf '%s ' "${s%%:*}"; done; }
# the running mini-cluster is the HA one when its rm1 container exists (status, wait, logs)
detect_ha() {
  if "$DOCKER" inspect "$PREFIX-rm1" >/dev/null 2>&1; then HA=1; fi
}
# the running mini-cluster is the secure one when its kdc container exists; its shared
# directory is what that container mounts at /krb
detect_secure() {
  local src
  src=$("$DOCKER" inspect -f '{{range .Mounts}}{{if eq .Destination "/krb"}}{{.Source}}{{end}}{{end}}' \
    "$PREFIX-kdc" 2>/dev/null) || return 0
  SECURE=1
  [[ -n $src ]] && KRB_DIR=$src
  return 0
}
# the running mini-cluster is the labeled one when its RM carries the profile's container label
# (status and wait then expect the profile's NodeManagers)
detect_labels() {
  if [[ $("$DOCKER" inspect -f '{{index .Config.Labels "themis.minicluster.profile"}}' \
    "$PREFIX-rm" 2>/dev/null) == labels ]]; then
    LABELS=1
    NMS=$(label_profile nms)
  fi
  return 0
}
# label_profile FIELD: docker/conf/node-labels.json as this script uses it. yarn_site,
# capacity_scheduler: "key=value;..." (the form of THEMIS_CONF_OVERRIDES); nms: THEMIS_NMS with
# the profile's nm_gpus; rmadmin: one rmadmin call a line, its arguments separated by tabs (as
# tests/integration/minicluster.py label_admin_args); nodes: "host label" a line
label_profile() {
  python3 - "$LABELS_FILE" "$1" "$NMS" <<'EOF'
import json, sys
path, field, nms = sys.argv[1], sys.argv[2], sys.argv[3].split()
with open(path) as f:
    p = json.load(f)
if field in ("yarn_site", "capacity_scheduler"):
    print(";".join(f"{k}={v}" for k, v in p[field].items()))
elif field == "nms":
    out = []
    for s in nms:
        name, gpus, rack = s.split(":", 2)
        out.append(f"{name}:{p['nm_gpus'].get(name, gpus)}:{rack}")
    print(" ".join(out))
elif field == "rmadmin":
    nodes = " ".join(f"{n}={label}" for n, label in sorted(p["nodes"].items()))
    print("-addToClusterNodeLabels\t" + ",".join(p["cluster_labels"]))
    print("-replaceLabelsOnNode\t" + nodes)
    print("-refreshQueues")
elif field == "nodes":
    for n, label in sorted(p["nodes"].items()):
        print(n, label)
else:
    sys.exit(f"label_profile: unknown field {field}")
EOF
}
rm_names() { if [[ $HA == 1 ]]; then echo "zk ${HA_IDS//,/ }"; else echo rm; fi; }
all_names() { echo "$([[ $SECURE == 1 ]] && echo "kdc ")nn dn $(rm_names) $(nm_names)"; }
# the active RM's host name: rm, or with HA the RM id whose REST API says ACTIVE ("" if none)
active_rm() {
  local id
  [[ $HA == 1 ]] || { echo rm; return; }
  for id in ${HA_IDS//,/ }; do
    if python3 - "http://$(addr_of "$id"):8088/ws/v1/cluster/info" <<'EOF' 2>/dev/null; then
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
    sys.exit(0 if json.load(r)["clusterInfo"].get("haState") == "ACTIVE" else 1)
EOF
      echo "$id"; return
    fi
  done
  echo ""
}

# The rack table the RM reads: rendered from THEMIS_NMS (each NM by name and by address) and
# mounted over the image's copy.
topology_file() {
  local f=${TMPDIR:-/tmp}/themis-mc-topology.table s name rest
  : >"$f"
  for s in $NMS; do
    name=${s%%:*}; rest=${s#*:}
    echo "$name ${rest#*:}" >>"$f"
    echo "$(addr_of "$name") ${rest#*:}" >>"$f"
  done
  echo "$f"
}

# The network: a user-defined bridge with a fixed /24; every host's name is in every host's
# /etc/hosts (--add-host), so no DNS is needed.
ensure_network() {
  local have
  have=$("$DOCKER" network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$NET" \
    2>/dev/null || true)
  if [[ -z $have ]]; then
    "$DOCKER" network create --driver bridge --subnet "$SUBNET.0/24" --gateway "$SUBNET.1" \
      --label "$LABEL" "$NET" >/dev/null \
      || die "cannot create the Docker network $NET ($SUBNET.0/24)"
    say "network $NET: $SUBNET.0/24"
  elif [[ $have != "$SUBNET.0/24" ]]; then
    die "Docker network $NET exists with subnet $have, not $SUBNET.0/24 (docker network rm $NET)"
  fi
}

host_args() { # --add-host for every mini-cluster host
  local n
  for n in $(all_names); do printf -- '--add-host %s:%s ' "$n" "$(addr_of "$n")"; done
}
# the HA settings every daemon renders into its yarn-site.xml (docker/bin/themis-daemon)
ha_env() {
  [[ $HA == 1 ]] || return 0
  printf -- '-e THEMIS_RM_HA=%s -e THEMIS_ZK_ADDRESS=zk:2181 -e THEMIS_ZK_TIMEOUT_MS=%s ' \
    "$HA_IDS" "${THEMIS_ZK_TIMEOUT_MS:-4000}"
}

# the secure profile's settings for every daemon (docker/bin/themis-daemon, THEMIS_SECURE): the
# shared directory read-only (the kdc host mounts it read-write itself, see cmd_up)
secure_args() {
  [[ $SECURE == 1 && $1 != kdc ]] || return 0
  printf -- '-e THEMIS_SECURE=1 -v %s:/krb:ro ' "$KRB_DIR"
}

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SITE_PACKAGES=/opt/themis/venv/lib/python3.11/site-packages

run() { # name image role [docker args...]
  local name=$1 image=$2 role=$3; shift 3
  local mounts=()
  if [[ ${THEMIS_MOUNT_SRC:-0} == 1 ]]; then
    mounts=(-v "$SRC_ROOT/themis:$SITE_PACKAGES/themis:ro"
      -v "$SRC_ROOT/docker/bin/themis-daemon:/usr/local/bin/themis-daemon:ro")
    local f
    for f in core-site hdfs-site yarn-site mapred-site; do
      mounts+=(-v "$SRC_ROOT/docker/conf/$f.xml:/opt/hadoop/conf.template/$f.xml:ro")
    done
    mounts+=(-v "$SRC_ROOT/docker/conf/secure:/opt/hadoop/conf.template/secure:ro")
    local jar=$SRC_ROOT/rm-plugin/target/themis-rm-plugin-0.1.0.jar
    [[ -f $jar ]] && mounts+=(-v "$jar:/opt/themis/plugin/themis-rm-plugin-0.1.0.jar:ro")
  fi
  # shellcheck disable=SC2046
  "$DOCKER" run -d --name "$PREFIX-$name" --label "$LABEL" --network "$NET" \
    --ip "$(addr_of "$name")" --hostname "$name" $(host_args) $(ha_env) $(secure_args "$name") \
    --stop-timeout 5 "${mounts[@]}" "$@" "$image" "$role" >/dev/null \
    || die "cannot start $PREFIX-$name"
}

cmd_down() {
  local ids
  ids=$("$DOCKER" ps -aq --filter "label=$LABEL")
  if [[ -n $ids ]]; then
    # shellcheck disable=SC2086
    "$DOCKER" rm -f $ids >/dev/null
    say "removed $(echo "$ids" | wc -w) container(s)"
  else
    say "no mini-cluster containers"
  fi
  if [[ ${1:-} == --network ]] && "$DOCKER" network inspect "$NET" >/dev/null 2>&1; then
    "$DOCKER" network rm "$NET" >/dev/null && say "removed network $NET"
  fi
}

# Secure profile: this machine's client side. The generated krb5.conf (the KDC by address)
# and a ticket cache of admin's, refreshed when it is missing or expired; curl --negotiate then
# does SPNEGO for the readiness checks (KRB5_CONFIG and KRB5CCNAME are exported for it).
krb_login() {
  [[ $SECURE == 1 ]] || return 0
  export KRB5_CONFIG=$KRB_DIR/krb5.conf KRB5CCNAME=FILE:$KRB_DIR/admin.ccache
  [[ -s $KRB_DIR/krb5.conf && -s $KRB_DIR/keytabs/admin.keytab ]] || return 1
  klist -s 2>/dev/null || kinit -kt "$KRB_DIR/keytabs/admin.keytab" "admin@$REALM" 2>/dev/null
}

# ready: RM lists every NM RUNNING with its GPU total, and WebHDFS answers with a live DataNode
# (secure profile: checked as admin with SPNEGO, and HDFS laid out for the users).
check_ready() {
  local quiet=${1:-0} rm
  if ! krb_login; then
    [[ $quiet == 1 ]] || echo "  not ready: no Kerberos login as admin (kdc host: keytabs in $KRB_DIR/keytabs?)"
    return 1
  fi
  rm=$(active_rm)
  if [[ -z $rm ]]; then
    [[ $quiet == 1 ]] || echo "  not ready: no ResourceManager is active (${HA_IDS})"
    return 1
  fi
  if [[ $HA == 1 && $quiet != 1 ]]; then
    echo "  active ResourceManager: $rm ($(addr_of "$rm")); standby: $(echo "${HA_IDS//,/ }" | tr ' ' '\n' | grep -vx "$rm" | tr '\n' ' ')"
  fi
  python3 - "http://$(addr_of "$rm"):8088" "$NN_URL" "$NMS" "$quiet" "$SECURE" <<'EOF'
import json, subprocess, sys, urllib.request
rm, nn, spec, quiet = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4] == "1"
secure = sys.argv[5] == "1"
want = {s.split(":")[0]: (int(s.split(":")[1]), s.split(":", 2)[2]) for s in spec}
def get(url):
    if secure:  # SPNEGO: curl with the ticket cache of krb_login
        r = subprocess.run(["curl", "-sSf", "--max-time", "5", "--negotiate", "-u", ":", url],
                           capture_output=True, text=True)
        if r.returncode:
            raise OSError(r.stderr.strip() or f"curl exit {r.returncode}")
        return json.loads(r.stdout)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)
problems = []
try:
    nodes = (get(rm + "/ws/v1/cluster/nodes").get("nodes") or {}).get("node", [])
except Exception as e:  # noqa: BLE001
    nodes, problems = [], [f"RM REST: {e}"]
seen = {}
for n in nodes:
    gpus = 0
    for ri in (n.get("totalResource", {}).get("resourceInformations", {}) or {}).get("resourceInformation", []):
        if ri.get("name") == "yarn.io/gpu":
            gpus = int(ri.get("value", 0))
    seen[n["nodeHostName"]] = (n["state"], gpus, n.get("rack"), n["id"])
    if not quiet:
        print(f"  node {n['id']:<12} {n['state']:<9} rack={n.get('rack')} gpu={gpus} "
              f"mem={n.get('totalResource', {}).get('memory')}MB vcores={n.get('totalResource', {}).get('vCores')}"
              + (f" labels={n['nodeLabels']}" if n.get("nodeLabels") else ""))
for name, (gpus, rack) in want.items():
    s = seen.get(name)
    if s is None:
        problems.append(f"{name} not registered")
    elif s[0] != "RUNNING" or s[1] != gpus or s[2] != rack:
        problems.append(f"{name}: {s[0]} gpu={s[1]} rack={s[2]} (want RUNNING gpu={gpus} rack={rack})")
try:
    st = get(nn + "/webhdfs/v1/?op=GETFILESTATUS")
    live = get(nn + "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")["beans"][0]["NumLiveDataNodes"]
    safe = get(nn + "/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo")["beans"][0].get("Safemode", "")
    if not quiet:
        print(f"  hdfs: / is {st['FileStatus']['type']}, live DataNodes={live}, safemode={'on' if safe else 'off'}")
    if live < 1:
        problems.append("no live DataNode")
    if safe:
        problems.append("NameNode in safe mode")
    if secure:  # the namenode's HDFS layout ends with the staging dir's mode
        mode = get(nn + "/webhdfs/v1/tmp/hadoop-yarn/staging?op=GETFILESTATUS")["FileStatus"]["permission"]
        if not quiet:
            print(f"  hdfs layout: /tmp/hadoop-yarn/staging mode {mode}")
        if mode != "1777":
            problems.append("HDFS layout not done (/tmp/hadoop-yarn/staging not 1777)")
except Exception as e:  # noqa: BLE001
    problems.append(f"WebHDFS: {e}")
if problems:
    if not quiet:
        print("  not ready: " + "; ".join(problems))
    sys.exit(1)
EOF
}

cmd_wait() {
  local t0=$SECONDS name
  while ! check_ready 1 >/dev/null 2>&1; do
    for name in $(all_names); do
      if [[ $("$DOCKER" inspect -f '{{.State.Running}}' "$PREFIX-$name" 2>/dev/null) != true ]]; then
        "$DOCKER" logs --tail 40 "$PREFIX-$name" >&2 2>&1 || true
        die "container $PREFIX-$name is not running (logs above)"
      fi
    done
    if ((SECONDS - t0 > TIMEOUT)); then
      check_ready 0 || true
      die "mini-cluster not ready after ${TIMEOUT}s (docker/minicluster.sh logs)"
    fi
    sleep 2
  done
  say "ready in $((SECONDS - t0))s"
  check_ready 0
}

# --labels: the profile's labels applied as an admin does (rmadmin in the RM's container), then
# wait until the RM's REST API shows each labeled node with its label and the others with none
label_nodes() {
  local args out t0=$SECONDS
  while IFS=$'\t' read -ra args; do
    out=$("$DOCKER" exec -e HADOOP_USER_NAME=root "$PREFIX-rm" themis-daemon client \
      org.apache.hadoop.yarn.client.cli.RMAdminCLI "${args[@]}" 2>&1) \
      || die "rmadmin ${args[*]} failed: $(tail -n 20 <<<"$out")"
    say "rmadmin ${args[*]}"
  done < <(label_profile rmadmin)
  until python3 - "http://$(addr_of rm):8088" "$(label_profile nodes)" <<'EOF'
import json, sys, urllib.request
rm, want = sys.argv[1], dict(line.split() for line in sys.argv[2].splitlines() if line)
try:
    with urllib.request.urlopen(rm + "/ws/v1/cluster/nodes", timeout=5) as r:
        nodes = (json.load(r).get("nodes") or {}).get("node", [])
except OSError as e:
    sys.exit(f"  RM REST: {e}")
def labels(n):  # a list; a lone label may come as a string
    v = n.get("nodeLabels") or []
    return [v] if isinstance(v, str) else sorted(v)
have = {n["nodeHostName"]: labels(n) for n in nodes}
bad = [f"{h}: {have[h]}" for h in sorted(have) if have[h] != ([want[h]] if h in want else [])]
bad += [f"{h}: not registered" for h in sorted(want) if h not in have]
if bad:
    print("  labels not in place yet: " + "; ".join(bad))
    sys.exit(1)
for h in sorted(have):
    print(f"  node {h}: partition {want.get(h) or '<default>'}")
EOF
  do
    ((SECONDS - t0 > TIMEOUT)) && die "nodes not labeled after ${TIMEOUT}s"
    sleep 2
  done
  say "node labels in place (docker/conf/node-labels.json): queue ml may use them, queue default not"
}

cmd_up() {
  local wait=1 s name rest gpus topo n id
  while (($#)); do
    case $1 in
      --no-wait) wait=0 ;;
      --ha) HA=1 ;;
      --secure) SECURE=1 ;;
      --labels) LABELS=1 ;;
      *) die "up: unknown option $1 (up [--ha|--secure|--labels] [--no-wait])" ;;
    esac
    shift
  done
  [[ $HA == 1 && $SECURE == 1 ]] && die "up: --ha and --secure together are not supported"
  if [[ $LABELS == 1 ]]; then
    [[ $HA == 1 || $SECURE == 1 ]] && die "up: --labels goes with neither --ha nor --secure"
    ((wait)) || die "up: --labels labels the nodes once the cluster is ready: no --no-wait"
    [[ -f $LABELS_FILE ]] || die "no $LABELS_FILE"
    # the profile's settings first: the caller's own overrides come after them and win
    THEMIS_CONF_OVERRIDES="$(label_profile yarn_site);${THEMIS_CONF_OVERRIDES:-}"
    THEMIS_CS_OVERRIDES="$(label_profile capacity_scheduler);${THEMIS_CS_OVERRIDES:-}"
    NMS=$(label_profile nms)
  fi
  pick_images
  cmd_down
  ensure_network
  topo=$(topology_file)
  say "images: $IMAGE (NN/DN/RM), $NM_IMAGE (NMs); NMs: $NMS"
  if [[ $SECURE == 1 ]]; then
    # a fresh realm each time: old keytabs would name keys the new KDC never had
    rm -rf "${KRB_DIR:?}"; mkdir -p "$KRB_DIR"
    run kdc "$IMAGE" kdc -v "$KRB_DIR:/krb"
    say "secure profile: realm $REALM, KDC kdc=$(addr_of kdc); keytabs and krb5.conf in $KRB_DIR"
  fi
  run nn "$IMAGE" namenode
  run dn "$IMAGE" datanode
  if [[ $HA == 1 ]]; then
    run zk "$IMAGE" zookeeper
    for id in ${HA_IDS//,/ }; do
      run "$id" "$IMAGE" resourcemanager -e THEMIS_RM_ID="$id" \
        -e THEMIS_SCHEDULER="${THEMIS_SCHEDULER:-}" -e THEMIS_CONF_OVERRIDES="${THEMIS_CONF_OVERRIDES:-}" \
        -e THEMIS_CS_OVERRIDES="${THEMIS_CS_OVERRIDES:-}" \
        -v "$topo:/opt/hadoop/conf.template/topology.table:ro"
    done
  else
    run rm "$IMAGE" resourcemanager \
      -e THEMIS_SCHEDULER="${THEMIS_SCHEDULER:-}" -e THEMIS_CONF_OVERRIDES="${THEMIS_CONF_OVERRIDES:-}" \
      -e THEMIS_CS_OVERRIDES="${THEMIS_CS_OVERRIDES:-}" \
      --label "themis.minicluster.profile=$(if [[ $LABELS == 1 ]]; then echo labels; else echo plain; fi)" \
      -v "$topo:/opt/hadoop/conf.template/topology.table:ro"
  fi
  local i=0
  for s in $NMS; do
    i=$((i + 1)); name=${s%%:*}; rest=${s#*:}; gpus=${rest%%:*}
    run "$name" "$NM_IMAGE" nodemanager -e THEMIS_NM_NAME="$name" -e THEMIS_NM_INDEX="$i" \
      -e THEMIS_NM_GPUS="$gpus" \
      -v "$topo:/opt/hadoop/conf.template/topology.table:ro"
  done
  say "started: $(for n in $(all_names); do printf '%s=%s ' "$n" "$(addr_of "$n")"; done)(network $NET)"
  ((wait)) && cmd_wait
  if [[ $LABELS == 1 ]]; then label_nodes; fi
  if [[ $SECURE == 1 ]]; then
    say "as a user: KRB5_CONFIG=$KRB_DIR/krb5.conf kinit -kt $KRB_DIR/keytabs/alice.keytab alice;" \
      "curl --negotiate -u : http://$(addr_of rm):8088/ws/v1/cluster/info"
  fi
  return 0
}

cmd_status() {
  "$DOCKER" ps -a --filter "label=$LABEL" --format 'table {{.Names}}\t{{.Status}}\t{{.Image}}'
  check_ready 0 && say "READY" || { say "NOT READY"; return 1; }
}

cmd_logs() {
  local name
  if [[ -n ${1:-} ]]; then "$DOCKER" logs "$PREFIX-$1" 2>&1; return; fi
  for name in $(all_names); do
    echo "===== $PREFIX-$name ====="
    "$DOCKER" logs --tail "${THEMIS_LOG_TAIL:-30}" "$PREFIX-$name" 2>&1 || true
  done
}

[[ ${1:-} == up ]] || { detect_ha; detect_secure; detect_labels; }
case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  wait) cmd_wait ;;
  hosts) for n in $(all_names); do echo "$n $(addr_of "$n")"; done ;;
  active-rm) rm=$(active_rm); [[ -n $rm ]] || die "no ResourceManager is active"; echo "$rm" ;;
  *) sed -n '2,/^set -euo pipefail/{/^set -euo/!p}' "${BASH_SOURCE[0]}"; exit 2 ;;
esac
