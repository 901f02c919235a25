"""Host, network and storage faults on the dockerised multi-host mini-cluster while competing Themis
apps move jobs at lease ends (issue 35's targets: 0 lost checkpoints, 0 GPUs used by two
containers at once or outside a lease, 0 apps failed by a fault YARN survives; the time from
a fault's end to the job running again).

Starts the mini-cluster (RM, NameNode, DataNode and three NodeManagers on their own
addresses of a Docker network; 30 s leases, 10 s grace, NodeManager liveness expiry 15 s),
submits ``--apps`` trial apps and ``--competitors`` competing apps (single jobs of 2 GPUs
each, ``--steps`` steps of 0.5 s, checkpointing every 5 steps) and injects ``--trials``
faults of each of ``--kinds`` in turn, each at a random moment up to 4 s after the hit
app's job stored a step in its newest run:

* ``nm-lost``: ``docker kill`` of the NodeManager host running the job (started again once
  the job ran elsewhere);
* ``nm-paused``: ``docker pause`` of that host until YARN marks it LOST, then unpause;
* ``am-partition``: iptables DROP of the AM host's traffic to and from the RM host's
  ports 8030 and 8642 (in the host's network namespace) for ``--partition-s`` seconds;
* ``am-latency``: the same traffic through a relay on this machine that holds what the AM
  host sends for 2 s (NAT rules in its namespace; the kernel has no netem), for 60 s;
* ``job-hdfs-partition``: iptables DROP of all traffic between the job's host and the
  NameNode and DataNode hosts (in the host's network namespace) for 40 s;
* ``datanode-lost``: ``docker kill`` of HDFS's only DataNode for 40 s (longer than a
  lease: saves and restores meet HDFS away), then started again;
* ``namenode-restart``: ``docker restart`` of the NameNode host;
* ``nm-disk-full``: the job's NodeManager host's local directories (a tmpfs of 1 GiB on
  every NodeManager host of this cluster) filled with one file until the RM marks the
  node UNHEALTHY and for at least 40 s, then the file deleted.

Definitions of the checks: tests/integration/fault_trials.py. ``--rounds`` rounds of fresh
apps on one cluster. Progress (one JSON line per trial) goes to stderr; one JSON object to
stdout.

    python bench/bench_faults.py                          # 10 trials of each kind
    python bench/bench_faults.py --kinds nm-lost --trials 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.fault_trials import (
    KINDS,
    NM_LOCAL_MB,
    NM_OVERRIDES,
    OVERRIDES,
    PARTITION_S,
    FaultResult,
    run_trials,
)
from tests.integration.minicluster import am_jar_and_mounts, running_minicluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"fault kinds, in turn, comma-separated (default {','.join(KINDS)})")
    ap.add_argument("--trials", type=int, default=10,
                    help="faults of each kind, over all rounds (default 10)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of fresh apps on one cluster; the trials are split between "
                         "them (default 2)")
    ap.add_argument("--apps", type=int, default=2,
                    help="trial apps per round; faults hit them in turn (default 2)")
    ap.add_argument("--competitors", type=int, default=3,
                    help="competing apps per round (default 3: 10 GPUs asked of 8)")
    ap.add_argument("--steps", type=int, default=600,
                    help="steps of each app's job, 0.5 s each (default 600)")
    ap.add_argument("--partition-s", type=float, default=PARTITION_S,
                    help=f"length of an am-partition, s (default {PARTITION_S:g})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first round (default 0)")
    args = ap.parse_args()
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--kinds {args.kinds!r}: {', '.join(KINDS)}, comma-separated")
    if min(args.trials, args.rounds, args.apps) < 1 or args.competitors < 0:
        ap.error("--trials, --rounds and --apps must be >= 1, --competitors >= 0")
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    t0 = time.monotonic()
    total = FaultResult()
    per_round = [args.trials // args.rounds + (r < args.trials % args.rounds)
                 for r in range(args.rounds)]
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp, \
            running_minicluster("faults", conf_overrides=OVERRIDES,
                                nm_conf_overrides=NM_OVERRIDES, nm_local_mb=NM_LOCAL_MB,
                                mounts=am_jar_and_mounts()) as cluster:
        for r, n in enumerate(per_round):
            if n == 0:
                continue
            res = run_trials(cluster, Path(tmp), kinds=kinds, trials=n, apps=args.apps,
                             competitors=args.competitors, steps=args.steps,
                             seed=args.seed + r, partition_s=args.partition_s,
                             down=total.down,
                             emit=lambda line: print(line, file=sys.stderr, flush=True))
            print(json.dumps({"round": r, **res.summary()}), file=sys.stderr, flush=True)
            total.trials += res.trials
            total.apps.update(res.apps)
            total.double_runs += res.double_runs
            total.thaw_runs += res.thaw_runs
            total.thaw_kills += res.thaw_kills
            total.job_containers += res.job_containers
            total.gpu_violations = res.gpu_violations  # every container in the logs so far
            total.cut_off_grants += res.cut_off_grants
            total.unreachable_rounds = res.unreachable_rounds  # the RM's log so far
    out = {**total.summary(), "double_run_details": total.double_runs[:10],
           "gpu_use_violation_details": total.gpu_violations[:10],
           "cut_off_grant_details": total.cut_off_grants[:10],
           "trial_details": [{**t.__dict__, "lost_checkpoint": t.lost_checkpoint}
                             for t in total.trials],
           "wall_s": round(time.monotonic() - t0, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
