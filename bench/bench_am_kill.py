"""SIGKILL trials of application masters and jobs on the dockerised multi-host mini-cluster
(issue 22's target: 0 lost checkpoints and 0 double grants over >= 20 kill/restart trials).

Starts the mini-cluster (RM, NameNode, DataNode and three NodeManagers on their own
addresses of a Docker network; 30 s leases, 10 s grace, up to 10 AM attempts), submits
``--apps`` single-job apps at once and kills each app ``--kills-per-app`` times in turn,
each at a random moment up to 6 s after its job stored a step in its newest run: its AM
(every process of its container, SIGKILL), its job's processes (the runner spared) or the
RM's Python engine (the plugin starts it again), the ``--kinds`` in turn; ``--rounds``
rounds of fresh apps. Checked (definitions in tests/integration/am_kill_trials.py): the job's next
run started at the last step the killed attempt's run had stored (else a lost checkpoint),
no two containers of one job ran at once, no node used more GPUs than it has and no GPU
container ran outside its app's leases (NodeManager logs, the RM's lease log); every app
SUCCEEDED. Also the time from a kill to the job's next run and the steps lost. Progress
(one JSON line per trial) goes to stderr; one JSON object to stdout.

    python bench/bench_am_kill.py                      # 2 rounds x 2 apps x 5 AM kills
    python bench/bench_am_kill.py --kinds job --rounds 1 --kills-per-app 10
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

from tests.integration.am_kill_trials import OVERRIDES, Result, run_trials
from tests.integration.minicluster import am_jar_and_mounts, running_minicluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of fresh apps, on one cluster (default 2)")
    ap.add_argument("--apps", type=int, default=2, help="apps per round, at once (default 2)")
    ap.add_argument("--kills-per-app", type=int, default=5,
                    help="kills per app (AM kills at most 9: the cluster's 10 attempts; "
                         "default 5)")
    ap.add_argument("--kinds", default="am",
                    help="kinds of kill, in turn, comma-separated: am, job, engine (the RM's "
                         "Python engine; default am)")
    ap.add_argument("--steps", type=int, default=150,
                    help="steps of each app's job, 0.5 s each (default 150)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first round (default 0)")
    args = ap.parse_args()
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or set(kinds) - {"am", "job", "engine"}:
        ap.error(f"--kinds {args.kinds!r}: am, job and/or engine, comma-separated")
    am_kills = sum(1 for k in range(args.kills_per_app) if kinds[k % len(kinds)] == "am")
    if args.kills_per_app < 1 or am_kills > 9 or args.rounds < 1 or args.apps < 1:
        ap.error("--kills-per-app must be >= 1 with at most 9 AM kills; --rounds and --apps "
                 ">= 1")
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    t0 = time.monotonic()
    total = Result()
    with tempfile.TemporaryDirectory(prefix="am-kill-") as tmp, \
            running_minicluster("amkill", conf_overrides=OVERRIDES,
                                mounts=am_jar_and_mounts()) as cluster:
        for r in range(args.rounds):
            res = run_trials(cluster, Path(tmp), apps=args.apps,
                             kills_per_app=args.kills_per_app, steps=args.steps,
                             seed=args.seed + r, kinds=kinds,
                             emit=lambda line: print(line, file=sys.stderr, flush=True))
            print(json.dumps({"round": r, **res.summary()}), file=sys.stderr, flush=True)
            total.trials += res.trials
            total.apps.update(res.apps)
            total.double_runs += res.double_runs  # of this round's apps
            total.job_containers += res.job_containers
            total.gpu_violations = res.gpu_violations  # every container in the logs so far
    out = {**total.summary(), "double_run_details": total.double_runs[:10],
           "gpu_use_violation_details": total.gpu_violations[:10],
           "wall_s": round(time.monotonic() - t0, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
