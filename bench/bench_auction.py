"""Benchmark: agent bid generation and full auctions (all N+1 solves) per back-end.

    python bench/bench_auction.py [--sizes 64x10,256x50,1024x200] [--reps 5] [--solvers ...]

Prints median and p95 in milliseconds and the ratio to the paper's Gurobi figures
(bid generation 29 ms median / 334 ms p95; auction 354 ms / 1398 ms, section 6.2.3).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from themis.mechanism.auction import run_auction
from themis.mechanism.bids import make_bid_table
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.instances import heterogeneous_cluster, random_app, random_instance
from themis.mechanism.solvers import SolverError, make_solver

PAPER_BID_MS = (29.0, 334.0)
PAPER_AUCTION_MS = (354.0, 1398.0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def bench_bids(n_gpus: int, samples: int) -> list[float]:
    rng = random.Random(1)
    offer = heterogeneous_cluster(n_gpus)
    ctx = FairnessContext(now=1e5, cluster_gpus=2 * n_gpus, n_avg=10.0)
    out = []
    for k in range(samples):
        app = random_app(rng, f"a{k}", ctx.now)
        t = time.perf_counter()
        make_bid_table(app, [], offer, ctx)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64x10,256x50,1024x200", help="GPUSxAPPS list")
    ap.add_argument("--reps", type=int, default=5, help="auction instances per size")
    ap.add_argument("--solvers", default="highs,gurobi,auto-fast", help="back-ends to time")
    ap.add_argument("--budget-s", type=float, default=120.0, help="skip a back-end's remaining reps at a size once it used this many seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--exact-payments", action="store_true",
                    help="compute every hidden payment c_i exactly (default: as the arbiter "
                    "does, only as exactly as the GPUs kept need; same allocations)")
    args = ap.parse_args()
    rows = []
    for size in args.sizes.split(","):
        n_gpus, n_apps = (int(x) for x in size.split("x"))
        bids = bench_bids(n_gpus, 200)
        rows.append({"what": "bids", "gpus": n_gpus, "apps": 1, "backend": "agent",
                     "median_ms": statistics.median(bids), "p95_ms": pct(bids, 0.95), "n": len(bids),
                     "vs_paper_median": PAPER_BID_MS[0] / statistics.median(bids)})
        for name in args.solvers.split(","):
            try:
                solver = make_solver(name)
            except SolverError as exc:
                print(f"# {name}: unavailable ({exc})", file=sys.stderr)
                continue
            times: list[float] = []
            spent = 0.0
            note = ""
            for rep in range(args.reps):
                inst = random_instance(n_gpus, n_apps, seed=rep)
                t = time.perf_counter()
                try:
                    run_auction(inst.offer, inst.tables, solver, random.Random(rep),
                                exact_payments=args.exact_payments)
                except SolverError as exc:
                    note = f"failed: {exc}"
                    break
                dt = time.perf_counter() - t
                times.append(dt * 1e3)
                spent += dt
                if spent > args.budget_s:
                    note = f"stopped after {rep + 1} reps (budget)"
                    break
            if times:
                med = statistics.median(times)
                rows.append({"what": "auction", "gpus": n_gpus, "apps": n_apps,
                             "backend": name + ("/exact" if args.exact_payments else ""),
                             "median_ms": med, "p95_ms": pct(times, 0.95), "n": len(times),
                             "vs_paper_median": PAPER_AUCTION_MS[0] / med,
                             "note": note or (f"last solve: {solver.name}" if solver.name != name else "")})
            else:
                rows.append({"what": "auction", "gpus": n_gpus, "apps": n_apps, "backend": name,
                             "median_ms": float("nan"), "p95_ms": float("nan"), "n": 0,
                             "vs_paper_median": float("nan"), "note": note})
            print(rows[-1], file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'what':8} {'gpus':>5} {'apps':>5} {'backend':10} {'median ms':>10} {'p95 ms':>10} {'n':>3} {'paper/ours':>10}  note")
        for r in rows:
            print(f"{r['what']:8} {r['gpus']:>5} {r['apps']:>5} {r['backend']:10} {r['median_ms']:>10.2f} "
                  f"{r['p95_ms']:>10.2f} {r['n']:>3} {r['vs_paper_median']:>10.2f}  {r.get('note', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
