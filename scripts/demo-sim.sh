#!/usr/bin/env bash
# The simulator demo: install, then simulate the bundled Philly-derived workload (workload 2,
# Hyperband apps) on the paper's 256-GPU cluster under Themis and three baselines, and print
# the fairness/efficiency summary. Plots and summary.json land in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
out="${1:-out/demo}"
themis sim --trace builtin --workload 2 --max-apps "${DEMO_APPS:-20}" --no-progress \
  --policies themis,gandiva,tiresias --out "$out"
python3 - "$out" <<'PYEOF'
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
print(f"{'policy':10} {'max rho':>8} {'median rho':>10} {'GPU hours':>10} {'avg JCT h':>9} {'placement':>9}")
for p, r in s["policies"].items():
    print(f"{p:10} {r['max_rho']:>8.2f} {r['median_rho']:>10.2f} {r['gpu_time_hours']:>10.1f} "
          f"{r['avg_jct_hours']:>9.1f} {r['mean_placement_score']:>9.3f}")
print(f"plots: {sys.argv[1]}/*.png")
PYEOF
