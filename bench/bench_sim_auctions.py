"""Solver chains on the simulator's hardest auctions.

Runs Themis over the full Workload-2 trace (as bench_sim.py), keeps the auctions whose
run took at least --min-ms with the simulator's solver (at most --keep of them, every
--stride-th), then times each solver chain on the same auctions (full auction: the
proportional-fair solve plus one per winner) and checks that every chain reaches the same
optimum and the same kept fractions.

    python bench/bench_sim_auctions.py [--keep 400] [--stride 4] [--min-ms 20]
                                       [--solvers auto-fast,open-fast,highs,gurobi]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import themis.mechanism.round as round_mod
from themis.mechanism.auction import run_auction
from themis.mechanism.solvers import SolverError, make_solver
from themis.sim.cluster import default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.loader import load_any
from themis.sim.policies.themis import ThemisPolicy


def collect(keep: int, min_ms: float) -> list[tuple[list[Any], list[Any]]]:
    """(offer, tables) of the simulator's auctions that took >= min_ms."""
    found: list[tuple[list[Any], list[Any]]] = []
    original = round_mod.run_auction

    def timed(offer, tables, solver, rng):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        out = original(offer, tables, solver, rng)
        if (time.perf_counter() - t) * 1e3 >= min_ms and len(found) < keep:
            found.append((list(offer), list(tables)))
        return out

    round_mod.run_auction = timed
    try:
        w = load_any("builtin", 2)
        Simulator(default_cluster(), w, ThemisPolicy(),
                  SimConfig(check_invariants=False)).run()
    finally:
        round_mod.run_auction = original
    return found


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", type=int, default=400, help="auctions to keep (default 400)")
    ap.add_argument("--stride", type=int, default=4, help="time every k-th kept auction")
    ap.add_argument("--min-ms", type=float, default=20.0,
                    help="keep auctions that took at least this long in the simulation")
    ap.add_argument("--solvers", default="auto-fast,open-fast,highs,gurobi",
                    help="comma-separated solver chains/back-ends to time")
    ap.add_argument("--exact-payments", action="store_true",
                    help="compute every hidden payment c_i exactly and compare them across "
                    "solvers too (default: as the arbiter does, only as exactly as the GPUs "
                    "kept need; the optima are compared)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cases = collect(args.keep, args.min_ms)[:: args.stride]
    print(f"{len(cases)} auctions (collected in {time.perf_counter() - t0:.0f} s)", flush=True)
    ref: list[tuple[float, list[float]]] | None = None
    print(f"{'solver':10} {'total s':>8} {'median ms':>10} {'p95 ms':>8}  same optimum")
    for name in args.solvers.split(","):
        try:
            solver = make_solver(name)
        except SolverError as exc:
            print(f"{name:10} unavailable: {exc}")
            continue
        times, results = [], []
        for offer, tables in cases:
            t = time.perf_counter()
            r = run_auction(offer, tables, solver, random.Random(0),
                            exact_payments=args.exact_payments)
            times.append(time.perf_counter() - t)
            kept = [r.kept_fraction[k] for k in sorted(r.kept_fraction)]
            results.append((r.objective, kept if args.exact_payments else []))
        if ref is None:
            ref, same = results, "(reference)"
        else:
            bad = sum(1 for (a, ca), (b, cb) in zip(ref, results, strict=True)
                      if abs(a - b) > 1e-6 * max(1.0, abs(a))
                      or any(abs(x - y) > 1e-6 for x, y in zip(ca, cb, strict=True)))
            same = "yes" if bad == 0 else f"NO: {bad} differ"
        print(f"{name:10} {sum(times):8.2f} {1e3 * statistics.median(times):10.1f} "
              f"{1e3 * pct(times, 0.95):8.1f}  {same}", flush=True)


if __name__ == "__main__":
    main()
