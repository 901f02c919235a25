#!/usr/bin/env bash
# The simulator demo: install, then simulate the bundled Philly-derived workload (workload 2:
# successive-halving hyper-parameter apps) on the paper's 256-GPU cluster scaled to 1/8
# (machine counts x 0.125, so that 40 apps contend for GPUs) under Themis and
# four baselines - fifo (YARN CapacityScheduler's queue order), fairshare (FairScheduler /
# DRF), gavel (Gavel's finish-time fairness) and tiresias - and print one line per policy.
# summary.json, apps.json and the titled plots land in out/demo/ (or $1).
# DEMO_APPS (default 40): how many of the trace's apps to simulate; DEMO_CLUSTER (default
# default:0.125): the cluster (themis sim --cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
out="${1:-out/demo}"
policies=themis,fifo,fairshare,gavel,tiresias
apps=${DEMO_APPS:-40}
cluster=${DEMO_CLUSTER:-default:0.125}
echo "demo-sim: $apps apps of the bundled trace, workload 2, cluster $cluster;" \
  "Themis and $(tr -cd , <<<"$policies" | wc -c) baselines"
themis sim --trace builtin --workload 2 --max-apps "$apps" --cluster "$cluster" --no-progress \
  --policies "$policies" --out "$out"
echo "plots: $(ls "$out"/*.png | tr '\n' ' ')"
echo "summary: $out/summary.json (every metric; docs/simulator.md explains them)"
