"""Benchmark: the split auction against the exact one, on the same instances.

    python bench/bench_split_auction.py [--sizes 256x100,1024x200] [--reps 10] [--policies default,p512]

Instances as bench/bench_auction.py makes them (``random_instance(gpus, apps, seed=rep)``,
the auction's RNG ``random.Random(rep)``). On each instance the exact auction (``--solver``)
and each split policy run one after the other, so that the VM's load hits both alike.
Prints one JSON object per size: per mode the median / p95 wall time of ``run_auction``
(ms), and per split policy against the exact auction on the instances where both ran:
the time ratio, the proportional-fair objective ratio split / exact (the sum over the
served apps of log(rho_current / rho), starving apps' rho_current taken as the largest
finite rho bid, i.e. the auction's gains without the starvation constant M; min, median),
the starving apps served (exact - split, summed), and the fraction of apps whose
proportional-fair bundle, and whose final allocation, changed in size.

Policies: ``default`` (SplitPolicy()), ``pN`` (N GPUs per part, split at any size),
``rN`` (the same with POP's random deal of bidders), ``mN`` (machines, not racks, dealt).

``--instances symmetric``: instead, the round benches' identical apps (bench_round_500.py
``--symmetric``: 4 jobs of 2 GPUs, iteration times and progress from a few values), APPS of
them drawn (seeded) from 5 x APPS registered ones, none holding a GPU (all starving, as
when every lease ends together), bidding for every GPU of a uniform cluster of 8-GPU
machines in 2 racks (GPUS / 8 of them): the exact auction's worst case
(bench/RESULTS.md, "500 registered apps on 256 GPUs").

    python bench/bench_split_auction.py --instances symmetric --sizes 256x100 --reps 3 \
        --solver auto-fast --policies m128,m64,m32
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_round_500

from themis.arbiter.cluster_backend import uniform_cluster
from themis.mechanism.auction import AuctionResult, run_auction
from themis.mechanism.bids import BidTable, make_bid_table
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.instances import Instance, random_instance
from themis.mechanism.solvers import SplitPolicy, SplitSolver, make_solver


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def policy(spec: str) -> SplitPolicy:
    if spec == "default":
        return SplitPolicy()
    kind, n = spec[0], int(spec[1:])
    return SplitPolicy(min_gpus=1, part_gpus=n, min_part_bidders=1,
                       group="machine" if kind == "m" else "rack",
                       bidders="random" if kind == "r" else "footprint")


def symmetric_instance(n_gpus: int, n_apps: int, seed: int) -> Instance:
    """``--instances symmetric`` (module docstring)."""
    offer = uniform_cluster(max(1, n_gpus // 8), 8, racks=2).free_gpus()
    ks = random.Random(seed).sample(range(5 * n_apps), n_apps)
    ctx = FairnessContext(now=time.time(), cluster_gpus=len(offer), n_avg=5.0 * n_apps)
    return Instance(offer, [make_bid_table(bench_round_500.make_app(f"app-{k}", k, True), [],
                                           offer, ctx) for k in ks])


def pf_terms(tables: list[BidTable], pf: dict[str, tuple[str, ...]]) -> tuple[int, float]:
    """(starving apps served, sum of finite log gains) of a proportional-fair allocation."""
    ref = max((b.rho for t in tables for b in t.bids), default=1.0)
    served, total = 0, 0.0
    for t in tables:
        bundle = pf.get(t.app_id)
        if not bundle:
            continue
        rho = min(b.rho for b in t.bids if tuple(sorted(b.gpus)) == bundle)
        if math.isinf(t.rho_current):
            served += 1
            total += math.log(ref / rho)
        else:
            total += math.log(t.rho_current / rho)
    return served, total


def changed(tables: list[BidTable], a: dict[str, tuple[str, ...]],
            b: dict[str, tuple[str, ...]]) -> float:
    return sum(len(a.get(t.app_id, ())) != len(b.get(t.app_id, ())) for t in tables) / len(tables)


def timed(inst_offer: list, tables: list[BidTable], solver: object, seed: int
          ) -> tuple[AuctionResult, float]:
    t = time.perf_counter()
    r = run_auction(inst_offer, tables, solver, random.Random(seed))  # type: ignore[arg-type]
    return r, (time.perf_counter() - t) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256x100,1024x200",
                    help="GPUSxAPPS list (default %(default)s)")
    ap.add_argument("--reps", type=int, default=10,
                    help="instances per size, seeds 0..reps-1 (default %(default)s)")
    ap.add_argument("--solver", default="open-fast",
                    help="the exact auction's back-end (default %(default)s)")
    ap.add_argument("--policies", default="default,p512",
                    help="split policies, see above (default %(default)s)")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="per size: start no new instance once the exact auction used this "
                    "many seconds there; the splits then stop too (default %(default)s)")
    ap.add_argument("--instances", choices=("random", "symmetric"), default="random",
                    help="random instances (bench_auction.py's) or the round benches' "
                    "identical starving apps, see above (default %(default)s)")
    ap.add_argument("--no-exact-above", type=int, default=2048,
                    help="offers of more GPUs: split policies only, no comparison (default "
                    "%(default)s)")
    args = ap.parse_args()
    specs = args.policies.split(",")
    out = []
    for size in args.sizes.split(","):
        n_gpus, n_apps = (int(x) for x in size.split("x"))
        run_exact = n_gpus <= args.no_exact_above
        exact_ms: list[float] = []
        split_ms: dict[str, list[float]] = {s: [] for s in specs}
        cmp: dict[str, list[dict[str, float]]] = {s: [] for s in specs}
        parts: dict[str, str] = {}
        spent = 0.0
        for rep in range(args.reps):
            inst = (symmetric_instance if args.instances == "symmetric" else
                    random_instance)(n_gpus, n_apps, seed=rep)
            ex = None
            if run_exact:
                ex, ms = timed(inst.offer, inst.tables, make_solver(args.solver), rep)
                exact_ms.append(ms)
                spent += ms / 1e3
            for s in specs:
                r, ms = timed(inst.offer, inst.tables,
                              SplitSolver(make_solver(args.solver), policy(s)), rep)
                split_ms[s].append(ms)
                parts[s] = r.solver
                if ex is not None:
                    ne, fe = pf_terms(inst.tables, ex.proportional_fair)
                    ns, fs = pf_terms(inst.tables, r.proportional_fair)
                    cmp[s].append({
                        "seed": rep, "exact_ms": exact_ms[-1], "split_ms": ms,
                        "objective_ratio": fs / fe if fe else 1.0,
                        "objective_ratio_with_M": r.objective / ex.objective,
                        "starving_lost": ne - ns,
                        "pf_bundle_changed": changed(inst.tables, ex.proportional_fair,
                                                     r.proportional_fair),
                        "allocation_changed": changed(inst.tables, ex.allocation, r.allocation),
                    })
            print(json.dumps({"size": size, "seed": rep,
                              "exact_ms": round(exact_ms[-1], 1) if ex else None,
                              **{s: round(split_ms[s][-1], 1) for s in specs},
                              **{f"{s}_obj": round(cmp[s][-1]["objective_ratio"], 4)
                                 for s in specs if ex is not None}}),
                  file=sys.stderr, flush=True)
            if spent > args.budget_s:
                break
        row: dict[str, object] = {"size": size, "instances": len(split_ms[specs[0]])}
        if exact_ms:
            row["exact"] = {"median_ms": statistics.median(exact_ms), "p95_ms": pct(exact_ms, 0.95),
                            "max_ms": max(exact_ms)}
        for s in specs:
            ms = split_ms[s]
            entry: dict[str, object] = {"solver": parts[s], "median_ms": statistics.median(ms),
                                        "p95_ms": pct(ms, 0.95), "max_ms": max(ms)}
            if cmp[s]:
                c = cmp[s]
                ratios = [x["objective_ratio"] for x in c]
                entry.update({
                    "speedup_median": statistics.median(x["exact_ms"] / x["split_ms"] for x in c),
                    "objective_ratio_min": min(ratios),
                    "objective_ratio_median": statistics.median(ratios),
                    "within_1pct": sum(r >= 0.99 for r in ratios),
                    "objective_ratio_with_M_min": min(x["objective_ratio_with_M"] for x in c),
                    "starving_lost": sum(x["starving_lost"] for x in c),
                    "pf_bundle_changed_median": statistics.median(x["pf_bundle_changed"] for x in c),
                    "allocation_changed_median": statistics.median(
                        x["allocation_changed"] for x in c),
                })
            row[s] = entry
        out.append(row)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
