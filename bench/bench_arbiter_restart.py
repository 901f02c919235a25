"""Kill/restart trials of a real arbiter process under live agents (issue 22's target:
0 double grants over >= 20 kill/restart trials).

The arbiter runs as its own process over a static cluster with its lease log
(themis.arbiter.leaselog); ``--agents`` real AgentClients with ModelBidders live in this
process. Each trial SIGKILLs the arbiter at a random moment in (0.1 s, 0.6 lease) after
the previous start and starts a new one on the same port. Counted from what the agents
were told: double grants (a GPU granted to a second app while the first app's lease on it
ran), leases lost (an unexpired lease missing from its agent's Hello after the restart),
leases honoured across restarts. ``--no-log`` runs the same trials without the log (the
control: a restarted arbiter then re-grants leased GPUs). Prints one JSON object.

    python bench/bench_arbiter_restart.py --trials 25
    python bench/bench_arbiter_restart.py --trials 5 --no-log
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.arbiter_restart import run_trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=25, help="kill/restart trials (default 25)")
    ap.add_argument("--agents", type=int, default=12, help="live agents (default 12)")
    ap.add_argument("--machines", type=int, default=2, help="machines (default 2)")
    ap.add_argument("--gpus-per-machine", type=int, default=8,
                    help="GPUs per machine (default 8)")
    ap.add_argument("--lease", type=float, default=5.0, help="lease in seconds (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill times (default 0)")
    ap.add_argument("--no-log", action="store_true",
                    help="run the arbiter without its lease log (the control)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        r = run_trials(Path(tmp), args.trials, agents=args.agents, machines=args.machines,
                       per_machine=args.gpus_per_machine, lease_s=args.lease,
                       use_log=not args.no_log, seed=args.seed)
    print(json.dumps({"lease_log": not args.no_log, "agents": args.agents,
                      "gpus": args.machines * args.gpus_per_machine, "lease_s": args.lease,
                      **r.summary()}))


if __name__ == "__main__":
    main()
