"""A round with 500 registered apps on 256 GPUs over real gRPC (issue 22's target: under
500 ms median with 100 bidders at f = 0.8).

The arbiter (gRPC server + round loop) runs in this process on 127.0.0.1 over 32 machines x
8 GPUs in 2 racks; the 500 agents are real :class:`AgentClient` threads with the default
:class:`ModelBidder`, spread over ``--procs`` spawned processes (one channel each). The apps
differ (seeded): 1-4 jobs of 1, 2 or 4 GPUs at most, different progress, arrival and
step times, some with a later phase (``--symmetric`` uses bench_rounds.py's identical apps
instead, the auction's symmetric worst case). Rounds are triggered by lease expiry.

A round = offers queued by the arbiter -> last Allocation received by any agent (same
machine, same clock), split into: offer -> all bids in (agents building and sending their
tables), the auction solve, and the rest (the arbiter's bookkeeping and sending the
allocations). The first round (the registration burst) is excluded. ``--profile FILE``
writes a cProfile of the arbiter's round thread over the measured rounds (the bid calls
run on the gRPC threads, outside it).

    python bench/bench_round_500.py --rounds 12
    python bench/bench_round_500.py --rounds 12 --profile /tmp/round.prof
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_rounds import pct, worker  # bench/ is the script's directory

from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job
from themis.mechanism.solvers import DEFAULT_SOLVER


def make_app(name: str, k: int, symmetric: bool) -> AppModel:
    if symmetric:  # bench_rounds.py's apps
        jobs = [Job(f"j{j}", 0.5 + 0.1 * ((k + j) % 5), 2000 + 100 * (k % 7), 2)
                for j in range(4)]
        return AppModel(name, time.time() - 10 * (k % 11), jobs, [FuturePhase(2, 500)],
                        AppKind.SUCCESSIVE_HALVING)
    rng = random.Random(k)
    jobs = [Job(f"j{j}", rng.uniform(0.2, 2.0), rng.uniform(200, 5000),
                rng.choice((1, 2, 2, 4))) for j in range(rng.randint(1, 4))]
    future = [FuturePhase(rng.randint(1, 2), rng.uniform(200, 2000))] if rng.random() < 0.5 \
        else []
    kind = AppKind.SUCCESSIVE_HALVING if future or len(jobs) > 1 else AppKind.SINGLE_JOB
    return AppModel(name, time.time() - rng.uniform(0, 600), jobs, future, kind)


def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = ArbiterConfig(lease_s=args.lease, bid_timeout_s=5.0, warning_s=args.lease / 4,
                        fairness_knob=args.knob, heartbeat_s=5.0, round_delay_s=0.2,
                        solver=args.solver, seed=1, lease_spread_s=args.lease_spread)
    srv = ArbiterServer(uniform_cluster(args.machines, args.gpus_per_machine, racks=2), cfg,
                        max_workers=2 * args.agents + 64)  # a stream per agent + bid calls
    srv.start(0)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    out: Any = ctx.Queue()
    names = [f"app-{i}" for i in range(args.agents)]
    make = functools.partial(make_app, symmetric=args.symmetric)
    ps = [ctx.Process(target=worker, args=(srv.address, names[p::args.procs], stop, out, make))
          for p in range(args.procs)]
    for p in ps:
        p.start()
    srv.core.wait_rounds(1, timeout=300)
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:  # the round thread: offers, waiting for bids, auction, grants
        plain = srv.core._round

        def profiled() -> None:
            prof.runcall(plain)
        srv.core._round = profiled  # type: ignore[method-assign]
    ok = srv.core.wait_rounds(args.rounds + 1, timeout=120 + args.rounds * (args.lease + 30))
    if prof is not None:
        prof.dump_stats(args.profile)
    time.sleep(0.5)
    stop.set()
    recv: dict[int, float] = {}
    rejected = 0
    for _ in ps:
        r, rej = out.get(timeout=120)
        rejected += rej
        for rid, t in r.items():
            recv[rid] = max(recv.get(rid, 0.0), t)
    for p in ps:
        p.join(timeout=60)
    stats = [s for s in srv.core.stats if s.round_id > 1 and s.round_id in recv][:args.rounds]
    srv.stop(0)
    lat = [(recv[s.round_id] - s.offer_sent) * 1e3 for s in stats]
    bids = [(s.bids_closed - s.offer_sent) * 1e3 for s in stats]
    solve = [s.solve_ms for s in stats]
    rest = [x - b - v for x, b, v in zip(lat, bids, solve, strict=True)]

    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 1) if xs else None

    return {
        "agents": args.agents, "gpus": args.machines * args.gpus_per_machine,
        "lease_s": args.lease, "lease_spread_s": srv.core.config.spread_s,
        "apps": "symmetric" if args.symmetric else "varied", "solver": args.solver,
        "rounds": len(stats), "complete": ok,
        "bidders": med([float(s.bidders) for s in stats]),
        "bids_in": med([float(s.bids) for s in stats]),
        "gpus_offered": med([float(s.gpus) for s in stats]),
        "median_ms": med(lat), "p95_ms": round(pct(lat, 0.95), 1) if lat else None,
        "offer_to_bids_median_ms": med(bids), "solve_median_ms": med(solve),
        "rest_median_ms": med(rest),
        "median_excl_solve_ms": med([x - v for x, v in zip(lat, solve, strict=True)]),
        "rejected_bids": rejected,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=500, help="registered apps (default 500)")
    ap.add_argument("--rounds", type=int, default=12,
                    help="rounds measured, after the first (default 12)")
    ap.add_argument("--procs", type=int, default=2,
                    help="processes the agent threads are spread over (default 2)")
    ap.add_argument("--lease", type=float, default=3.0,
                    help="lease in seconds; every expiry triggers a round (default 3)")
    ap.add_argument("--lease-spread", type=float, default=None, metavar="S",
                    help="spread of a round's lease lengths in seconds (lease +- S/2); 0: "
                         "every lease ends together, so each round offers every GPU to the "
                         "100 worst-off of 500 apps (the target's case) (default: the "
                         "arbiter's, half the lease)")
    ap.add_argument("--knob", type=float, default=0.8,
                    help="fairness knob f: the worst-off (1-f) of the apps bid (default 0.8)")
    ap.add_argument("--machines", type=int, default=32, help="machines (default 32)")
    ap.add_argument("--gpus-per-machine", type=int, default=8,
                    help="GPUs per machine (default 8)")
    ap.add_argument("--solver", default=DEFAULT_SOLVER,
                    help=f"auction solver chain (default {DEFAULT_SOLVER}, the arbiter's)")
    ap.add_argument("--symmetric", action="store_true",
                    help="bench_rounds.py's identical apps (the auction's worst case)")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="write a cProfile of the arbiter process over the measured rounds")
    print(json.dumps(run(ap.parse_args())), flush=True)


if __name__ == "__main__":
    main()
