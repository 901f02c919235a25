"""Solver chains on the auctions of real gRPC rounds, replayed offline.

The round benchmarks draw different auctions on every run (who bids, and which GPUs each
app prefers, depend on timing), so their solve times scatter by 2x between runs. This
script runs one of them once, keeps every auction (offer, bid tables, the round's random
state, the auction's options), and times each solver chain on exactly those auctions - so
that two versions of the code, or two chains, can be compared on the same instances
(``--save`` the auctions from one checkout, ``--load`` them in another). ``--source``:

* ``rounds``: bench_rounds.py, ``--agents`` identical apps on 64 GPUs (open-fast);
* ``round500``: bench_round_500.py's varied apps, 500 registered on 256 GPUs, 100 bidders,
  every lease ending together (``--lease-spread 0``: each round offers all 256 GPUs), with
  the product's default solver.

    python bench/bench_round_auctions.py [--source rounds] [--agents 100] [--rounds 30]
                                         [--solvers open-fast] [--save F | --load F]
    python bench/bench_round_auctions.py --source round500 --rounds 10 --save r500.pkl
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_round_500
import bench_rounds

import themis.mechanism.round as round_mod
from themis.mechanism.auction import run_auction
from themis.mechanism.solvers import DEFAULT_SOLVER, SolverError, make_solver


def capture(source: str, agents: int, rounds: int) -> list[tuple[Any, ...]]:
    """(offer, tables, random state, positional and keyword options) of every auction of
    one run of the ``source`` benchmark."""
    found: list[tuple[Any, ...]] = []
    original = round_mod.run_auction

    def keep(offer, tables, solver, rng, *args, **kwargs):  # type: ignore[no-untyped-def]
        found.append((list(offer), list(tables), rng.getstate(), args, kwargs))
        return original(offer, tables, solver, rng, *args, **kwargs)

    round_mod.run_auction = keep  # type: ignore[assignment]
    try:
        if source == "rounds":
            bench_rounds.run(agents, rounds, 2, 1.5, 0.8, 8, 8, "open-fast")
        else:
            bench_round_500.run(argparse.Namespace(
                agents=agents, rounds=rounds, procs=2, lease=3.0, lease_spread=0.0, knob=0.8,
                machines=32, gpus_per_machine=8, solver=DEFAULT_SOLVER, symmetric=False,
                profile=None))
    finally:
        round_mod.run_auction = original  # type: ignore[assignment]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("rounds", "round500"), default="rounds",
                    help="the benchmark whose auctions are captured (see above; default "
                         "rounds)")
    ap.add_argument("--agents", type=int, default=None,
                    help="agents of the captured run (default 100 for rounds, 500 for "
                         "round500)")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of the captured run")
    ap.add_argument("--solvers", default="open-fast", help="comma-separated chains to time")
    ap.add_argument("--save", help="write the captured auctions to this file")
    ap.add_argument("--load", help="time the auctions of this file instead of capturing")
    args = ap.parse_args()
    if args.load:
        with open(args.load, "rb") as f:
            auctions = pickle.load(f)
    else:
        agents = args.agents or (100 if args.source == "rounds" else 500)
        auctions = capture(args.source, agents, args.rounds)
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(auctions, f)
    print(f"{len(auctions)} auctions")
    print("| solver | total s | median ms | p95 ms | max ms | handed to the MILP |")
    print("|---|---|---|---|---|---|")
    for name in args.solvers.split(","):
        times: list[float] = []
        milp = 0
        for offer, tables, state, *options in auctions:
            args_, kwargs = options if options else ((), {})  # files saved before options
            rng = random.Random()
            rng.setstate(state)
            try:
                solver = make_solver(name)
            except SolverError as exc:
                print(f"# {name}: unavailable ({exc})", file=sys.stderr)
                break
            t = time.perf_counter()
            run_auction(offer, tables, solver, rng, *args_, **kwargs)
            times.append((time.perf_counter() - t) * 1e3)
            milp += solver.name in ("highs", "gurobi")
        if times:
            ordered = sorted(times)
            print(f"| {name} | {sum(times) / 1e3:.2f} | {statistics.median(times):.1f} "
                  f"| {ordered[int(0.95 * (len(ordered) - 1))]:.1f} | {ordered[-1]:.0f} "
                  f"| {milp} |", flush=True)


if __name__ == "__main__":
    main()
