"""Random auction instances for benchmarks and property tests: a heterogeneous cluster
(8-GPU machines with 4 slots of 2, 4-GPU machines, 1-GPU machines, over racks) and apps
with random jobs, GPUs held and placement sensitivity, bidding with the real agent code."""

from __future__ import annotations

import random
from dataclasses import dataclass

from themis.mechanism.bids import BidTable, make_bid_table
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job
from themis.mechanism.placement import COMPUTE_INTENSIVE, NETWORK_INTENSIVE
from themis.mechanism.topology import Gpu


def heterogeneous_cluster(n_gpus: int, rack_size: int = 8) -> list[Gpu]:
    """~n_gpus GPUs shaped like the paper's 256-GPU cluster (section 6.1, footnote 6):
    half in 8-GPU machines (4 slots x 2), a quarter in 4-GPU machines, the rest 1-GPU."""
    gpus: list[Gpu] = []
    shapes = [(8, 2)] * max(1, n_gpus // 16) + [(4, 1)] * max(1, n_gpus // 16)
    m = 0
    for size, per_slot in shapes:
        for k in range(size):
            if len(gpus) >= n_gpus:
                break
            gpus.append(Gpu(f"m{m}g{k}", f"m{m}", f"r{m // rack_size}", f"s{k // per_slot}"))
        m += 1
    while len(gpus) < n_gpus:
        gpus.append(Gpu(f"m{m}g0", f"m{m}", f"r{m // rack_size}"))
        m += 1
    return gpus


@dataclass
class Instance:
    offer: list[Gpu]
    tables: list[BidTable]


def random_app(rng: random.Random, app_id: str, now: float) -> AppModel:
    n_jobs = rng.choice([1, 1, 2, 4, 8, 16])
    demand = rng.choice([1, 2, 4, 8])
    jobs = [
        Job(f"{app_id}-j{k}", rng.uniform(0.1, 2.0), rng.uniform(1e3, 1e5), demand)
        for k in range(n_jobs)
    ]
    phases = []
    n = n_jobs // 2
    while n >= 1:
        phases.append(FuturePhase(n, rng.uniform(1e3, 1e5)))
        n //= 2
    kind = AppKind.SUCCESSIVE_HALVING if n_jobs > 1 else AppKind.SINGLE_JOB
    placement = NETWORK_INTENSIVE if rng.random() < 0.5 else COMPUTE_INTENSIVE
    start = now - rng.uniform(0, 5e4)
    return AppModel(app_id, start, jobs, phases, kind, placement=placement)


def random_instance(
    n_gpus: int, n_apps: int, seed: int, starving: float = 0.2
) -> Instance:
    """An offer of ``n_gpus`` free GPUs in a cluster twice that size, and ``n_apps`` bid
    tables from the real agent code. A ``starving`` fraction of the apps hold no GPU
    (rho_current = inf); the others hold 1-8 GPUs on the half of the cluster not offered."""
    rng = random.Random(seed)
    cluster = heterogeneous_cluster(2 * n_gpus)
    machines: dict[str, list[Gpu]] = {}
    for g in cluster:
        machines.setdefault(g.machine, []).append(g)
    names = sorted(machines)
    rng.shuffle(names)
    offer: list[Gpu] = []
    busy: list[Gpu] = []
    for m in names:
        (offer if len(offer) < n_gpus else busy).extend(machines[m])
    offer = offer[:n_gpus]
    ctx = FairnessContext(now=1e5, cluster_gpus=len(cluster), n_avg=float(n_apps))
    tables = []
    for a in range(n_apps):
        app = random_app(rng, f"app{a}", ctx.now)
        held: list[Gpu] = []
        if rng.random() >= starving and busy:
            start = rng.randrange(len(busy))
            held = busy[start : start + rng.choice([1, 2, 4, 8])]
        tables.append(make_bid_table(app, held, offer, ctx))
    return Instance(offer, tables)
