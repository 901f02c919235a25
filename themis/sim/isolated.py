"""Isolated-share completion times, the denominator of Gavel's finish-time fairness.

Gavel (Narayanan et al., OSDI 2020) defines rho = JCT / JCT_isolated, where JCT_isolated
is the completion time an app would have in an isolated 1/N share of the cluster, N the
number of apps in the system. Its simulator obtains it by replaying the trace under an
"isolated" policy that gives every active app 1/N of the cluster. We do the same, as a
fluid replay (no placement slowdown, no restart pauses, no leases):

* while N apps are active, each owns g = R_C / N GPUs (a fraction when N > R_C);
* an app runs its plan's phases one after the other; a phase with shape
  (:class:`~themis.mechanism.model.PhaseShape`) advances at 1 / T_phase(g) of its work per
  second, T_phase(g) = max(sum_j w_j / g, max_j w_j / min(d_j, g)) - the fluid schedule
  that runs every job at a rate proportional to its remaining work, which keeps the
  phase's shape and is optimal while g is constant;
* N changes at arrivals and at isolated completions (the isolated run's own N, not the
  measured policy's), so the denominator is the same for every policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from themis.sim.state import phase_shapes
from themis.sim.workload import AppSpec


def isolated_finish_times(apps: Sequence[AppSpec], cluster_gpus: int) -> dict[str, float]:
    """App id -> completion time (finish - arrival) in the isolated 1/N-share replay."""
    if cluster_gpus < 1:
        raise ValueError(f"cluster_gpus={cluster_gpus} must be >= 1")
    pending = sorted(apps, key=lambda a: (a.arrival, a.id))
    shapes = {a.id: phase_shapes(a) for a in pending}
    arrival = {a.id: a.arrival for a in pending}
    # active app -> [phase index, fraction of the phase left]
    active: dict[str, list[float]] = {}
    out: dict[str, float] = {}
    now = 0.0
    k = 0
    while k < len(pending) or active:
        if not active:
            now = max(now, pending[k].arrival)
        while k < len(pending) and pending[k].arrival <= now:
            active[pending[k].id] = [0.0, 1.0]
            k += 1
        g = cluster_gpus / len(active)
        rates: dict[str, float] = {}
        for app_id, (p, _) in active.items():
            t = shapes[app_id][int(p)].time(g)
            rates[app_id] = math.inf if t <= 0 else 1.0 / t
        # the next event: an arrival or the first phase to finish
        ends = [(left / rates[a] if math.isfinite(rates[a]) else 0.0, a)
                for a, (_, left) in active.items()]
        dt, _ = min(ends)
        if k < len(pending):
            dt = min(dt, pending[k].arrival - now)
        dt = max(0.0, dt)
        now += dt
        done: list[str] = []
        for app_id, state in active.items():
            rate = rates[app_id]
            state[1] = 0.0 if not math.isfinite(rate) else state[1] - rate * dt
            if state[1] <= 1e-9:
                state[0] += 1
                state[1] = 1.0
                if int(state[0]) >= len(shapes[app_id]):
                    done.append(app_id)
        for app_id in done:
            del active[app_id]
            out[app_id] = now - arrival[app_id]
    return out
