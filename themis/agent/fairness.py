"""Finish-time fairness rho = T_sh / T_id (paper section 3.2, Eq. 1 and Eq. 2).

Conventions (documented in docs/mechanism.md):

* An allocation G is assumed binding until the app completes (section 4.3.1).
* A phase's jobs share the phase's GPUs *work-conservingly*: jobs are checkpointed and
  moved at lease boundaries, so a phase with serial works w_j, per-job caps d_j and g GPUs
  lasts ``S(G) * max(sum_j w_j / g, max_j w_j / min(d_j, g))`` - McNaughton's bound for
  preemptible malleable jobs with linear speedup (Eq. 1's ``iter_time(G)`` for one job;
  Eq. 2's ``max_j T(G_j)`` for a phase). This reproduces Table 3 exactly (1, 2, 4, 8, 16
  GPUs -> rho 4, 2, 1, 0.5, 0.34).
* Future successive-halving phases use the median current job's iteration time
  (section 4.3.3).
* T_id = T_cluster * N_avg with T_cluster = B / min(R_C, app_demand_max) (Eq. 2).
* With no GPU at all an unfinished app never finishes: rho = +inf.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from themis.agent.model import AppModel, ModelError
from themis.cluster.topology import Locality


@dataclass(frozen=True, slots=True)
class FairnessContext:
    """Cluster-wide inputs of rho: the clock, R_C (GPUs in the cluster) and N_avg."""

    now: float
    cluster_gpus: int
    n_avg: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.now):
            raise ModelError(f"fairness context: now={self.now!r} must be finite")
        if not isinstance(self.cluster_gpus, int) or self.cluster_gpus < 1:
            raise ModelError(f"fairness context: cluster_gpus={self.cluster_gpus!r} must be >= 1")
        if not math.isfinite(self.n_avg) or self.n_avg < 1.0:
            raise ModelError(f"fairness context: n_avg={self.n_avg!r} must be a number >= 1")


def phase_time(works: Iterable[tuple[float, int]], gpus: int) -> float:
    """Unslowed makespan of jobs ``(serial_work, max_demand)`` on ``gpus`` GPUs."""
    total = 0.0
    longest = 0.0
    for work, cap in works:
        if work <= 0:
            continue
        total += work
        longest = max(longest, work / min(cap, gpus) if gpus > 0 else math.inf)
    if total == 0:
        return 0.0
    if gpus <= 0:
        return math.inf
    return max(total / gpus, longest)


def remaining_time(app: AppModel, gpus: int, slowdown: float = 1.0) -> float:
    """Time to finish the app's remaining plan on ``gpus`` GPUs with slowdown S (Eq. 2's
    sum over phases of T_sh(i))."""
    current = phase_time(((j.work_left, j.max_demand) for j in app.jobs), gpus)
    if not app.future_phases:
        return slowdown * current
    median = app.median_iter_time()
    d = app.job_demand_max
    future = sum(phase_time([(p.iters * median, d)] * p.jobs, gpus) for p in app.future_phases)
    return slowdown * (current + future)


def ideal_time(app: AppModel, ctx: FairnessContext) -> float:
    """T_id = T_cluster * N_avg, T_cluster = B / min(R_C, app_demand_max)."""
    t_cluster = app.total_work() / min(ctx.cluster_gpus, app.app_demand_max)
    return t_cluster * ctx.n_avg


def rho(app: AppModel, gpus: int, locality: Locality, ctx: FairnessContext) -> float:
    """rho(G) for an allocation of ``gpus`` GPUs at ``locality`` (whole allocation, i.e.
    GPUs already held plus the bundle under consideration)."""
    t_id = ideal_time(app, ctx)
    if t_id <= 0:
        raise ModelError(f"app {app.id!r}: ideal finish time is zero (no work?)")
    elapsed = max(0.0, ctx.now - app.start_time)
    s = app.placement.slowdown(locality)
    return (elapsed + remaining_time(app, gpus, s)) / t_id
