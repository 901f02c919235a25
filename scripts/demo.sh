#!/usr/bin/env bash
# Fresh-machine demo of the full system: install the Python package, then build and start
# the dockerised YARN mini-cluster (RM with the Themis plugin, 3 NodeManagers with 4/2/2
# GPUs on 2 racks, HDFS), submit two competing Hyperband apps with real TensorFlow jobs,
# show their fairness live and end with a report (per-app rho, GPU time, moves, plot).
# Options are those of scripts/demo-cluster.sh (--keep, --out DIR). About 15-25 minutes on
# 2 cores, most of it the first image build. The simulator demo is scripts/demo-sim.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev,train
exec scripts/demo-cluster.sh "$@"
