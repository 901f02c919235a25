"""Round latency over loopback gRPC: offer out -> bids in -> allocation out.

The arbiter (gRPC server + round loop) runs in this process on 127.0.0.1; the agents are
threads spread over ``--procs`` worker processes (one shared channel per process), each
a real :class:`AgentClient` with the default :class:`ModelBidder` (make_bid_table on a
Hyperband-like app). Rounds are triggered by lease expiry (``--lease`` seconds).

Latency of a round = (last allocation received by any agent) - (offers queued by the
arbiter), same machine, same wall clock. Also reported: offer -> all bids in, the
auction solve time, and the allocations' delivery (queued by the arbiter -> last one
received). The first round (registration burst) is excluded.

    python bench/bench_rounds.py --agents 10 100 500 --rounds 12
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from themis.agent.client import AgentClient
from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.mechanism.bidder import AllocationInfo, ModelBidder
from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job
from themis.mechanism.solvers import DEFAULT_SOLVER


def make_app(name: str, k: int) -> AppModel:
    jobs = [Job(f"j{j}", 0.5 + 0.1 * ((k + j) % 5), 2000 + 100 * (k % 7), 2) for j in range(4)]
    return AppModel(name, time.time() - 10 * (k % 11), jobs, [FuturePhase(2, 500)],
                    AppKind.SUCCESSIVE_HALVING)


def worker(address: str, names: list[str], stop: Any, out: Any,
           make: Callable[[str, int], AppModel] = make_app) -> None:
    """One process of agents (names ``app-<k>``) on one channel, each bidding for the app
    ``make(name, k)``; puts (round id -> last Allocation received, bids rejected) on ``out``
    once ``stop`` is set."""
    channel = grpc.insecure_channel(address)
    recv: dict[int, float] = {}
    lock = threading.Lock()

    def on_alloc(a: AllocationInfo) -> None:
        t = time.time()
        with lock:
            recv[a.round_id] = max(recv.get(a.round_id, 0.0), t)

    clients = []
    for n in names:
        k = int(n.split("-")[1])
        m = make(n, k)
        clients.append(AgentClient(address, n, ModelBidder(m, time.time), on_allocation=on_alloc,
                                   channel=channel, seed=k).start())
    stop.wait()
    rejected = sum(c.stats.bids_rejected for c in clients)
    for c in clients:
        c.stop(unregister=False, timeout=1.0)
    channel.close()
    out.put((recv, rejected))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def run(n_agents: int, rounds: int, procs: int, lease: float, knob: float,
        machines: int, per_machine: int, solver: str) -> dict[str, Any]:
    cfg = ArbiterConfig(lease_s=lease, bid_timeout_s=max(2.0, lease), warning_s=lease / 4,
                        fairness_knob=knob, heartbeat_s=5.0, round_delay_s=0.2,
                        solver=solver, seed=1)
    srv = ArbiterServer(uniform_cluster(machines, per_machine, racks=2), cfg,
                        max_workers=2 * n_agents + 64)  # a stream per agent + its bid calls
    srv.start(0)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    out: Any = ctx.Queue()
    names = [f"app-{i}" for i in range(n_agents)]
    ps = [ctx.Process(target=worker, args=(srv.address, names[p::procs], stop, out))
          for p in range(procs)]
    for p in ps:
        p.start()
    ok = srv.core.wait_rounds(rounds + 1, timeout=60 + rounds * (lease + 5))
    time.sleep(0.5)
    stop.set()
    recv: dict[int, float] = {}
    rejected = 0
    for _ in ps:
        r, rej = out.get(timeout=60)
        rejected += rej
        for rid, t in r.items():
            recv[rid] = max(recv.get(rid, 0.0), t)
    for p in ps:
        p.join(timeout=30)
    stats = [s for s in srv.core.stats if s.round_id > 1 and s.round_id in recv][:rounds]
    srv.stop(0)
    lat = [(recv[s.round_id] - s.offer_sent) * 1e3 for s in stats]
    bids = [(s.bids_closed - s.offer_sent) * 1e3 for s in stats]
    solve = [s.solve_ms for s in stats]
    rpc = [a - b for a, b in zip(lat, solve, strict=True)]
    delivery = [(recv[s.round_id] - s.allocation_sent) * 1e3 for s in stats]
    return {
        "agents": n_agents, "rounds": len(stats), "complete": ok,
        "bidders": statistics.median([s.bidders for s in stats]) if stats else 0,
        "bids_in": statistics.median([s.bids for s in stats]) if stats else 0,
        "gpus": statistics.median([s.gpus for s in stats]) if stats else 0,
        "median_ms": statistics.median(lat) if lat else float("nan"),
        "p95_ms": pct(lat, 0.95) if lat else float("nan"),
        "bids_median_ms": statistics.median(bids) if bids else float("nan"),
        "solve_median_ms": statistics.median(solve) if solve else float("nan"),
        "rpc_median_ms": statistics.median(rpc) if rpc else float("nan"),
        "rpc_p95_ms": pct(rpc, 0.95) if rpc else float("nan"),
        "delivery_median_ms": statistics.median(delivery) if delivery else float("nan"),
        "rejected_bids": rejected,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[10, 100, 500],
                    help="numbers of agents, one benchmark run each (default 10 100 500)")
    ap.add_argument("--rounds", type=int, default=12,
                    help="rounds measured per run, after the first (default 12)")
    ap.add_argument("--procs", type=int, default=2,
                    help="worker processes the agent threads are spread over (default 2)")
    ap.add_argument("--lease", type=float, default=1.5,
                    help="lease in seconds; every expiry triggers a round (default 1.5)")
    ap.add_argument("--knob", type=float, default=0.8,
                    help="fairness knob f: the worst-off (1-f) of the apps bid (default 0.8)")
    ap.add_argument("--machines", type=int, default=8,
                    help="machines of the static cluster (default 8)")
    ap.add_argument("--gpus-per-machine", type=int, default=8,
                    help="GPUs per machine (default 8)")
    ap.add_argument("--solver", default=DEFAULT_SOLVER,
                    help="auction solver chain or back-end, e.g. auto, auto-fast, open-fast, "
                         f"highs (default {DEFAULT_SOLVER}, the arbiter's)")
    args = ap.parse_args()
    print("| agents | rounds | bidders | bids in | GPUs offered | median ms | p95 ms "
          "| offer->bids median ms | solve median ms | median ms excl. solve | p95 ms excl. solve "
          "| allocations queued->received median ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.agents:
        r = run(n, args.rounds, args.procs, args.lease, args.knob, args.machines,
                args.gpus_per_machine, args.solver)
        print(f"| {r['agents']} | {r['rounds']} | {r['bidders']:g} | {r['bids_in']:g} "
              f"| {r['gpus']:g} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} "
              f"| {r['bids_median_ms']:.1f} | {r['solve_median_ms']:.1f} "
              f"| {r['rpc_median_ms']:.1f} | {r['rpc_p95_ms']:.1f} "
              f"| {r['delivery_median_ms']:.1f} |", flush=True)
        if r["rejected_bids"]:
            print(f"  ({r['rejected_bids']} bids rejected)", flush=True)


if __name__ == "__main__":
    main()
