"""Workload 2 (section 6.1): the same app arrivals, each app turned into a
successive-halving (Hyperband bracket) app with more tasks per job.

For an app with m jobs: n = the power of two >= m (at most 64) hyper-parameter sets; job k
reuses trace job k mod m with its serial iteration time varied +-20% (hyper-parameters such
as batch size change it, footnote 4) and a random convergence scale tau. There are
log2(n)+1 phases; the app's budget B (its original serial work) is split evenly over the
phases (as in section 4.3.3), so phase i runs n/2^i jobs for I_i = B/(P * J_i * median)
iterations each. After each phase the half with the lowest loss 1/sqrt(1 + iters/tau)
survives (fastest convergence). Max demand per job = trace demand x ``demand_mult``
(capped at ``max_demand``), the same in every phase.
"""

from __future__ import annotations

import math
import random
import statistics

from themis.sim.workload import AppSpec, JobSpec, Workload, loss_rank_key

MAX_JOBS = 64


def to_successive_halving(
    app: AppSpec, rng: random.Random, demand_mult: int = 2, max_demand: int = 16
) -> AppSpec:
    m = len(app.jobs)
    n = 1
    while n < min(m, MAX_JOBS):
        n *= 2
    n = max(n, 2)
    jobs = []
    for k in range(n):
        base = app.jobs[k % m]
        jobs.append(
            JobSpec(
                f"{app.id}-h{k}",
                base.serial_iter_time * rng.uniform(0.8, 1.2),
                min(max_demand, base.max_demand * demand_mult),
                base.tau * rng.uniform(0.3, 3.0),
            )
        )
    phases_n = int(math.log2(n)) + 1
    per_phase = app.total_work / phases_n
    alive = list(range(n))
    done = [0.0] * n
    phases = []
    for _ in range(phases_n):
        med = statistics.median(jobs[i].serial_iter_time for i in alive)
        iters = per_phase / (len(alive) * med)
        phases.append(tuple((i, iters) for i in alive))
        for i in alive:
            done[i] += iters
        alive = sorted(alive, key=lambda i: loss_rank_key(done[i], jobs[i].tau, i))
        alive = sorted(alive[: max(1, len(alive) // 2)])
    return AppSpec(app.id, app.arrival, tuple(jobs), tuple(phases), app.placement, app.model)


def workload2(w: Workload, seed: int = 0, demand_mult: int = 2) -> Workload:
    rng = random.Random(seed)
    apps = [to_successive_halving(a, rng, demand_mult) for a in w.apps]
    return Workload(apps, {**w.meta, "workload": 2, "demand_mult": demand_mult})
