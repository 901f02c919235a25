"""Solver chains on the auctions of bench_rounds' gRPC rounds, replayed offline.

The in-process round benchmark (bench_rounds.py) draws different auctions on every run
(who bids, and which GPUs each app prefers, depend on timing), so its solve times scatter
by 2x between runs. This script runs it once with --agents agents, keeps every auction
(offer, bid tables, the round's random state), and times each solver chain on exactly
those auctions - so that two versions of the code, or two chains, can be compared on the
same instances (``--save`` the auctions from one checkout, ``--load`` them in another).

    python bench/bench_round_auctions.py [--agents 100] [--rounds 30]
                                         [--solvers open-fast] [--save F | --load F]
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

import bench_rounds

import themis.mechanism.round as round_mod
from themis.mechanism.auction import run_auction
from themis.mechanism.solvers import SolverError, make_solver


def capture(agents: int, rounds: int) -> list[tuple[Any, ...]]:
    """(offer, tables, random state) of every auction of one bench_rounds run."""
    found: list[tuple[Any, ...]] = []
    original = round_mod.run_auction

    def keep(offer, tables, solver, rng):  # type: ignore[no-untyped-def]
        found.append((list(offer), list(tables), rng.getstate()))
        return original(offer, tables, solver, rng)

    round_mod.run_auction = keep  # type: ignore[assignment]
    try:
        bench_rounds.run(agents, rounds, 2, 1.5, 0.8, 8, 8, "open-fast")
    finally:
        round_mod.run_auction = original  # type: ignore[assignment]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=100, help="agents of the captured run")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of the captured run")
    ap.add_argument("--solvers", default="open-fast", help="comma-separated chains to time")
    ap.add_argument("--save", help="write the captured auctions to this file")
    ap.add_argument("--load", help="time the auctions of this file instead of capturing")
    args = ap.parse_args()
    if args.load:
        with open(args.load, "rb") as f:
            auctions = pickle.load(f)
    else:
        auctions = capture(args.agents, args.rounds)
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(auctions, f)
    print(f"{len(auctions)} auctions")
    print("| solver | total s | median ms | p95 ms | max ms | handed to the MILP |")
    print("|---|---|---|---|---|---|")
    for name in args.solvers.split(","):
        times: list[float] = []
        milp = 0
        for offer, tables, state in auctions:
            rng = random.Random()
            rng.setstate(state)
            try:
                solver = make_solver(name)
            except SolverError as exc:
                print(f"# {name}: unavailable ({exc})", file=sys.stderr)
                break
            t = time.perf_counter()
            run_auction(offer, tables, solver, rng)
            times.append((time.perf_counter() - t) * 1e3)
            milp += solver.name in ("highs", "gurobi")
        if times:
            ordered = sorted(times)
            print(f"| {name} | {sum(times) / 1e3:.2f} | {statistics.median(times):.1f} "
                  f"| {ordered[int(0.95 * (len(ordered) - 1))]:.1f} | {ordered[-1]:.0f} "
                  f"| {milp} |", flush=True)


if __name__ == "__main__":
    main()
