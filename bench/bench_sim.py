"""Wall time of the full Workload-2 trace (built-in converted philly-gavel, seed 0, 14 days)
on the default 256-GPU cluster, 10-minute leases, one policy per run.

    python bench/bench_sim.py [--policies themis,gandiva,...] [--max-apps N]
                              [--solver auto-fast|open-fast|...]

Prints one JSON line per policy (wall_s, rounds, decision time, quality metrics)."""

from __future__ import annotations

import argparse
import json
import time

from themis.sim.cluster import default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.loader import load_any
from themis.sim.metrics import summarize
from themis.sim.policies import make_policy
from themis.sim.policies.themis import ThemisPolicy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", default="themis,gandiva,tiresias,optimus,slaq,srtf,srsf",
                   help="comma-separated policies, one run each (default: all but gavel "
                        "and hermes)")
    p.add_argument("--max-apps", type=int, default=0,
                   help="simulate only the first N apps of the trace (default: all)")
    p.add_argument("--lease-minutes", type=float, default=10.0, help="lease (default 10)")
    p.add_argument("--expiry-quantum", type=float, default=120.0,
                   help="lease expiries within this many seconds share a round (default 120)")
    p.add_argument("--solver", default="auto-fast",
                   help="Themis' auction solver chain (default auto-fast; open-fast is what "
                        "a machine without Gurobi gets)")
    args = p.parse_args()
    w = load_any("builtin", 2)
    if args.max_apps:
        w = w.head(args.max_apps)
    topo = default_cluster()
    for name in args.policies.split(","):
        pol = ThemisPolicy(solver=args.solver) if name == "themis" else make_policy(name)
        t0 = time.perf_counter()
        r = Simulator(
            topo,
            w,
            pol,
            SimConfig(
                lease_s=args.lease_minutes * 60,
                expiry_quantum_s=args.expiry_quantum,
                check_invariants=False,
            ),
        ).run()
        s = summarize(r)
        s["wall_s"] = time.perf_counter() - t0
        if isinstance(pol, ThemisPolicy):
            bm, am = sorted(pol.bid_ms), sorted(pol.auction_ms)
            if bm and am:
                s["bid_ms_median"] = bm[len(bm) // 2]
                s["bid_ms_p95"] = bm[int(0.95 * (len(bm) - 1))]
                s["auction_ms_median"] = am[len(am) // 2]
                s["auction_ms_p95"] = am[int(0.95 * (len(am) - 1))]
                s["bid_s_total"] = sum(bm) / 1e3
                s["auction_s_total"] = sum(am) / 1e3
                s["auctions_over_20ms"] = sum(1 for x in am if x > 20.0)
        s["decision_s_total"] = sum(r.round_ms) / 1e3
        print(
            json.dumps(
                {
                    "policy": name,
                    "apps": len(w.apps),
                    **{k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()},
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
