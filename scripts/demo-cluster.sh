#!/usr/bin/env bash
# Themis on a real (dockerised) YARN cluster, end to end, on a fresh machine:
#   1. Docker (scripts/docker-setup.sh), images (docker/build.sh --with-tf), the AM jar (Maven);
#   2. the mini-cluster (RM with the Themis plugin, 3 NMs with 4/2/2 GPUs on 2 racks, HDFS),
#      with short leases so that GPUs change hands during the demo;
#   3. two competing hyper-parameter-group apps (examples/am/digits-hyperband.yaml, two seeds);
#   4. their fairness live (themis status, refreshed), until both finish;
#   5. a short report: per-app rho over time, GPU time, reallocations, a plot (PNG).
#
#   scripts/demo-cluster.sh [--keep] [--out DIR]
#   scripts/demo-cluster.sh --compare [--out DIR]   (default out/cluster-compare)
#
# --compare: after step 1, one app mix (three Hyperband apps of three sizes, submitted 0 s,
#   60 s and 120 s apart) twice, each on a fresh mini-cluster: under the stock
#   CapacityScheduler (no Themis plugin, the AMs without an arbiter) and under Themis
#   (bench/bench_cluster_compare.py; per app rho = JCT / T_id, JCT, GPU time; a plot).
#   THEMIS_COMPARE_RUNS (default stock,themis; add themis-served-now or themis-inf for the
#   other orders of starving apps),
#   THEMIS_COMPARE_LEASE_MS (default 120000).
#
# Environment: THEMIS_DEMO_LEASE_MS (default 20000), THEMIS_DEMO_KNOB (f, default 0.8),
#   THEMIS_DEMO_SKIP_BUILD=1 (use existing images/jar).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
KEEP=0
COMPARE=0
OUT=
while [[ $# -gt 0 ]]; do
  case $1 in
    --keep) KEEP=1 ;;
    --compare) COMPARE=1 ;;
    --out) OUT=$2; shift ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
  shift
done
if [[ -z $OUT ]]; then
  if [[ $COMPARE == 1 ]]; then OUT=$ROOT/out/cluster-compare; else OUT=$ROOT/out/demo-cluster; fi
fi
LEASE_MS=${THEMIS_DEMO_LEASE_MS:-20000}
KNOB=${THEMIS_DEMO_KNOB:-0.8}
say() { echo; echo "==== $* ===="; }
mkdir -p "$OUT"

if [[ ${THEMIS_DEMO_SKIP_BUILD:-0} != 1 ]]; then
  say "docker, images, AM jar"
  scripts/docker-setup.sh
  mvn -q -B -DskipTests package   # the RM plugin and AM jars, before the images take them
  docker/build.sh --with-tf
fi

if [[ $COMPARE == 1 ]]; then
  say "one app mix under the stock CapacityScheduler and under Themis"
  # each run brings its own mini-cluster up and takes it down (bench_cluster_compare.py)
  exec "$PY" bench/bench_cluster_compare.py --out "$OUT" \
    --runs "${THEMIS_COMPARE_RUNS:-stock,themis}" --lease-ms "${THEMIS_COMPARE_LEASE_MS:-120000}"
fi

say "mini-cluster (lease ${LEASE_MS} ms, f = ${KNOB})"
export THEMIS_CONF_OVERRIDES="yarn.resourcemanager.themis.lease-duration-ms=${LEASE_MS};yarn.resourcemanager.themis.grace-period-ms=10000;yarn.resourcemanager.themis.fairness-knob=${KNOB}"
docker/minicluster.sh up
# the RM and WebHDFS at their containers' addresses (docker/minicluster.sh hosts)
RM_IP=$(docker/minicluster.sh hosts | awk '$1 == "rm" {print $2}')
NN_IP=$(docker/minicluster.sh hosts | awk '$1 == "nn" {print $2}')
export THEMIS_RM_URL=http://$RM_IP:8088 THEMIS_WEBHDFS_URL=http://$NN_IP:9870
cleanup() { if [[ $KEEP == 0 ]]; then docker/minicluster.sh down; fi; }
trap cleanup EXIT

say "submitting two competing Hyperband apps"
APPS=()
for i in 0 1; do
  spec=$OUT/app$i.yaml
  # Jobs of ~30 s per phase-1 configuration (40 steps a unit at 250 ms a step): longer
  # than a lease, so that both apps' 5 first-phase jobs (10 GPUs asked of 8) compete
  # across several lease expiries and GPUs change hands with checkpoint and resume.
  sed -e "s/^name: .*/name: demo-hb-$i/" -e "s/seed: 0/seed: $i/" \
      -e "s/--step-sleep-ms 100/--step-sleep-ms 250/" examples/am/digits-hyperband.yaml >"$spec"
  app=$("$PY" -m themis.cli submit "$spec" | tail -n1)
  echo "submitted $app ($spec)"
  APPS+=("$app")
  sleep 3
done

say "fairness, live (themis status --watch)"
t0=$SECONDS
while :; do
  "$PY" -m themis.cli status --all "${APPS[@]:0:0}" 2>/dev/null | grep -E "^(application|[0-9])" || true
  states=$(for a in "${APPS[@]}"; do curl -s "$THEMIS_RM_URL/ws/v1/cluster/apps/$a" \
    | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["app"]["state"])' 2>/dev/null || echo UNKNOWN; done)
  if ! grep -qvE 'FINISHED|FAILED|KILLED' <<<"$states"; then break; fi
  if ((SECONDS - t0 > ${THEMIS_DEMO_TIMEOUT:-1800})); then echo "demo: timeout"; break; fi
  sleep 3
done

say "report"
LEASE_MS=$LEASE_MS "$PY" - "$OUT" "${APPS[@]}" <<'EOF'
import json, os, sys
from themis.client.cluster import Cluster
out, apps = sys.argv[1], sys.argv[2:]
c = Cluster.from_env()
rows, docs = [], {}
for a in apps:
    app = c.app(a)
    st = c.am_status(a) or {}
    docs[a] = {"app": app, "status": st}
    hist = [h for h in st.get("history", []) if h[2] is not None]
    rhos = [h[2] for h in hist]
    moves = st.get("reallocations", [])
    lat = sorted(m["latency_s"] for m in moves)
    rows.append((a, app["name"], app["finalStatus"], st.get("gpu_seconds", 0.0),
                 max(rhos) if rhos else float("nan"), rhos[-1] if rhos else float("nan"),
                 len(moves), lat[len(lat) // 2] if lat else float("nan"),
                 (st.get("best") or {}).get("loss")))
json.dump(docs, open(f"{out}/report.json", "w"), indent=1)
print(f"{'app':<32} {'name':<10} {'final':<10} {'GPU-s':>7} {'max rho':>8} {'last rho':>9} {'moves':>6} {'median move s':>14} best loss")
for r in rows:
    print(f"{r[0]:<32} {r[1]:<10} {r[2]:<10} {r[3]:>7.0f} {r[4]:>8.3f} {r[5]:>9.3f} {r[6]:>6} {r[7]:>14.2f} {r[8]}")
# Sharing: how long both apps held GPUs at the same time (from each app's GPU history).
def held_at(h, t):
    g = 0
    for x in h:
        if x[0] > t:
            break
        g = x[1]
    return g
hists = [d["status"].get("history", []) for d in docs.values()]
times = sorted({x[0] for h in hists for x in h})
both = sum(b - a for a, b in zip(times, times[1:]) if all(held_at(h, a) > 0 for h in hists))
span = (times[-1] - times[0]) if times else 0.0
print(f"both apps held GPUs at the same time for {both:.0f} s of {span:.0f} s; "
      f"moves (jobs stopped at a lease end and resumed): {sum(r[6] for r in rows)}")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    t0 = min((d["status"].get("start_time") or 0) for d in docs.values())
    for a, d in docs.items():
        h = d["status"].get("history", [])
        ax1.plot([x[0] - t0 for x in h], [x[2] if x[2] is not None else float("nan") for x in h], label=d["app"]["name"])
        ax2.step([x[0] - t0 for x in h], [x[1] for x in h], where="post", label=d["app"]["name"])
    ax1.set_ylabel("rho (finish-time fairness)"); ax1.legend(); ax1.set_yscale("log")
    ax2.set_ylabel("GPUs held"); ax2.set_xlabel("time since the first app started (s)"); ax2.legend()
    ax1.set_title("Themis on the YARN mini-cluster: two Hyperband apps, 8 GPUs, lease "
                  f"{int(os.environ.get('LEASE_MS', '0')) / 1000:g} s")
    fig.tight_layout(); fig.savefig(f"{out}/fairness.png", dpi=100)
    print(f"plot: {out}/fairness.png")
except Exception as e:  # noqa: BLE001
    print(f"(no plot: {e})")
print(f"report: {out}/report.json")
EOF
