"""SIGKILL trials of training job processes under ``themis standalone`` (issue 22's target:
0 lost checkpoints and 0 double grants over >= 20 kill/restart trials).

Each run starts the standalone driver (one machine, ``--gpus`` emulated GPUs, ``--apps``
Hyperband apps of the bundled job: a tiny model, a checkpoint every ``--checkpoint-every``
steps) and SIGKILLs ``--kills-per-run`` of its job processes, each at a random moment
``--min-delay-s``..``--max-delay-s`` after its first training step; the runs together make
``--trials`` kills. Checked per kill (definitions in tests/integration/kill_trials.py):
the job's next segment restored the newest checkpoint that verified after the process had
died (else a lost checkpoint), every checkpoint verifies at the kill and at the end, no two
job processes used one GPU at once, no GPU was granted to an app while another app's lease
on it ran. Also: steps lost per kill (a lower bound), the checkpoint write a kill landed
in, and the 1-minute load average sampled during the runs. Progress goes to stderr; one
JSON object to stdout.

    python bench/bench_kill_trials.py --trials 20
    python bench/bench_kill_trials.py --trials 4 --apps 2 --kills-per-run 4
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.kill_trials import RunResult, run_once, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20, help="job kills in all (default 20)")
    ap.add_argument("--kills-per-run", type=int, default=5,
                    help="kills per standalone run (default 5)")
    ap.add_argument("--apps", type=int, default=1, help="apps per run (default 1)")
    ap.add_argument("--gpus", type=int, default=2, help="emulated GPUs (default 2)")
    ap.add_argument("--checkpoint-every", type=int, default=10,
                    help="steps between checkpoints (default 10)")
    ap.add_argument("--step-ms", type=float, default=30.0,
                    help="emulated step time on one GPU, ms (default 30)")
    ap.add_argument("--lease-s", type=float, default=30.0, help="lease, s (default 30)")
    ap.add_argument("--min-delay-s", type=float, default=0.2,
                    help="earliest kill after a process's first step, s (default 0.2)")
    ap.add_argument("--max-delay-s", type=float, default=4.0,
                    help="latest kill after a process's first step, s (default 4)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the first run (kill times, app configs; default 0)")
    ap.add_argument("--out", type=Path, default=None,
                    help="keep the runs' files here (default: a temporary directory, "
                         "removed at the end)")
    args = ap.parse_args()
    if args.trials < 1 or args.kills_per_run < 1:
        ap.error("--trials and --kills-per-run must be >= 1")
    with tempfile.TemporaryDirectory(prefix="kill-trials-") as tmp:
        root = args.out if args.out is not None else Path(tmp)
        runs: list[RunResult] = []
        n_runs = math.ceil(args.trials / args.kills_per_run)
        for i in range(n_runs):
            kills = min(args.kills_per_run, args.trials - i * args.kills_per_run)
            print(f"run {i + 1}/{n_runs}: {kills} kills, seed {args.seed + i}",
                  file=sys.stderr, flush=True)
            r = run_once(root / f"run-{i}", kills, seed=args.seed + i, apps=args.apps,
                         gpus=args.gpus, step_ms=args.step_ms,
                         checkpoint_every=args.checkpoint_every, lease_s=args.lease_s,
                         min_delay_s=args.min_delay_s, max_delay_s=args.max_delay_s)
            runs.append(r)
            s = summary([r])
            print(f"  {r.seconds:.0f} s, driver status {r.status}; kills {s['trials']}, "
                  f"lost checkpoints {s['lost_checkpoints']}, double use "
                  f"{s['double_gpu_use']}, double grants {s['double_grants']}, restored "
                  f"{s['restored_steps']}, write phases {s['kills_by_write_phase']}",
                  file=sys.stderr, flush=True)
            for p in s["problems"]:
                print(f"  PROBLEM {p}", file=sys.stderr, flush=True)
    print(json.dumps({"apps": args.apps, "gpus": args.gpus,
                      "checkpoint_every": args.checkpoint_every, "step_ms": args.step_ms,
                      "lease_s": args.lease_s, "seed": args.seed, **summary(runs)}))


if __name__ == "__main__":
    main()
