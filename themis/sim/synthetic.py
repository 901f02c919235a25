"""Synthetic workloads with the paper's distributions (section 6.1, Table 4, Fig. 8).

* arrivals: Poisson with mean inter-arrival ``interarrival_s``;
* jobs per app: 10% single-job apps, else log-uniform in [2, ``max_jobs``] (<= 100);
* model: category by Table 4's mix (CV 10%, NLP 60%, Speech 30%), model uniform within the
  category; placement class per :data:`themis.sim.models.TABLE4`, unless
  ``network_fraction`` is given (Figs. 15-16): then each app is network-intensive with that
  probability;
* GPUs per job: 1, 2, 4, 8 with probabilities 0.5, 0.2, 0.2, 0.1 (Fig. 8a's mass at 1-4);
* job length: log-normal with median ``median_job_h`` hours on its GPUs;
* ``successive_halving=True`` turns every multi-job app into a Hyperband app (workload 2).
"""

from __future__ import annotations

import math
import random

from themis.sim.hyperband import to_successive_halving
from themis.sim.models import TABLE4
from themis.sim.workload import AppSpec, JobSpec, Workload, single_phase_app

DEMANDS = ((1, 0.5), (2, 0.2), (4, 0.2), (8, 0.1))


def _choice(rng: random.Random, pairs: tuple[tuple[int, float], ...]) -> int:
    x = rng.random()
    acc = 0.0
    for v, p in pairs:
        acc += p
        if x < acc:
            return v
    return pairs[-1][0]


def synthetic(
    n_apps: int,
    seed: int = 0,
    interarrival_s: float = 1200.0,
    max_jobs: int = 100,
    median_job_h: float = 1.5,
    network_fraction: float | None = None,
    successive_halving: bool = False,
) -> Workload:
    if not 1 <= max_jobs <= 100:
        raise ValueError("max_jobs must be in [1, 100]")
    rng = random.Random(seed)
    cats = list(TABLE4)
    weights = [TABLE4[c][0] for c in cats]
    apps: list[AppSpec] = []
    t = 0.0
    for a in range(n_apps):
        t += rng.expovariate(1.0 / interarrival_s) if a else 0.0
        cat = rng.choices(cats, weights)[0]
        model, pclass, iter_s = rng.choice(TABLE4[cat][1])
        if network_fraction is not None:
            pclass = "network" if rng.random() < network_fraction else "compute"
        if rng.random() < 0.1 or max_jobs == 1:
            m = 1
        else:
            m = min(max_jobs, round(math.exp(rng.uniform(math.log(2), math.log(max_jobs)))))
        demand = _choice(rng, DEMANDS)
        jobs = []
        for k in range(m):
            serial = iter_s * rng.uniform(0.8, 1.2)
            hours = median_job_h * math.exp(rng.gauss(0.0, 0.8))
            iters = hours * 3600 * demand / serial
            jobs.append(
                (JobSpec(f"a{a}-j{k}", serial, demand, iters * rng.uniform(0.05, 0.5)), iters)
            )
        app = single_phase_app(f"a{a}", t, jobs, pclass, model)
        if successive_halving and m > 1:
            app = to_successive_halving(app, rng, demand_mult=1)
        apps.append(app)
    return Workload(apps, {"generator": "synthetic", "seed": seed, "n_apps": n_apps})
