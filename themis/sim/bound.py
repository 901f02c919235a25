"""A lower bound on the worst app's excess rho that no scheduler can beat on a trace.

Every scheduler the simulator runs (section 6.1) is a schedule of the same apps on the
same GPUs, so a relaxation of "run these apps" that every such schedule satisfies bounds
them all. This module solves one: **preemptive, divisible phases with release times,
deadlines and parallelism caps** (docs/evaluation.md, "The yardstick").

For app i (arrival a_i) and its phase p, with G the cluster's GPUs:

* the phase's GPU-time W_ip = S_min sum_j w_j + restart_s * n_p: each job's serial work
  at the least slowdown of any placement (a job may run on fewer GPUs than it asks, at a
  tighter placement; Eq. 1's rate is linear in its GPUs), plus one restart pause per job
  holding at least one GPU (section 6.2.3: every job of a phase starts with an empty GPU
  set, and its first GPUs start a pause);
* its shortest length D_p = restart_s + max(W'_p / G, max_j min_{k <= min(d_j, G)}
  S(k) w_j / k), W'_p the work without pauses, and its largest width
  R_p = min(G, sum_j min(d_j, G)) GPUs;
* phase p cannot start before r_ip = a_i + sum_{q<p} D_q (the earlier phases, each no
  shorter than D_q, run one after the other: section 4.3.2) and must end by
  l_ip = d_i - sum_{q>p} D_q, where d_i is the app's deadline for a target value rho of
  the metric: d_i = a_i + rho * scale_i (``scale_i``: see :data:`METRICS`).

Every schedule the simulator can produce gives each phase at least W_ip GPU-seconds inside
[r_ip, l_ip] at no more than R_p GPUs at a time, with at most G GPUs busy in all; so if
these divisible tasks cannot meet their windows, no schedule reaches rho. Feasibility of
preemptive tasks with windows and rate caps on G identical processors is a maximum-flow
problem over the intervals between consecutive window ends (Federgruen and Groenevelt,
1986): source -> task (W_ip), task -> interval (R_p * length) for the intervals inside the
task's window, interval -> sink (G * length); feasible iff the maximum flow equals the total
work. The bound is the least feasible rho, found by bisection to a relative 1e-3 (rounded
down: the returned value is never above the true least rho of the relaxation). Capacities
are integers for scipy's max-flow; works are rounded down and capacities up, which only
loosens the relaxation, so the bound stays a bound.

What the relaxation leaves out - so real schedules can be above it by that much: leases
(a GPU granted at t is not free before its lease ends, so an app arriving at a busy
cluster waits), moves after a job's first start (each pays another pause), gang placement
of a job's GPUs, and the order of jobs inside a phase. It is exact on hand-built cases without
those effects (tests/unit/test_bound.py).

scipy's ``maximum_flow`` (Dinic's algorithm, C) is used rather than an LP: the feasibility
problem is a flow, and a 48-app, 7-phase trace takes tens of milliseconds per probe.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from themis.mechanism.topology import Topology
from themis.sim.state import best_slowdowns, floor_time, phase_shapes
from themis.sim.workload import AppSpec

REL_TOL = 1e-3
_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of one app as the relaxation sees it."""

    work: float  # W_ip, GPU-seconds
    length: float  # D_p, seconds
    width: int  # R_p, GPUs


@dataclass(frozen=True, slots=True)
class AppTasks:
    id: str
    arrival: float
    phases: tuple[Phase, ...]

    @property
    def floor(self) -> float:
        """The app's least completion time in the relaxation (at most floor_time)."""
        return sum(p.length for p in self.phases)


def app_tasks(spec: AppSpec, topo: Topology, restart_s: float) -> AppTasks:
    g = len(topo)
    slow = best_slowdowns(topo, spec.profile)
    # a job may run on fewer GPUs than its demand, at a tighter placement: the least
    # GPU-time of a job is at the least slowdown, its least length at the best k <= d_j
    least = min(slow[1:])
    phases = []
    for ph in spec.phases:
        serial = [(it * spec.jobs[i].serial_iter_time, min(spec.jobs[i].max_demand, g))
                  for i, it in ph]
        total = sum(w for w, _ in serial) * least
        longest = max(w * min(slow[k] / k for k in range(1, d + 1)) for w, d in serial)
        width = min(g, sum(d for _, d in serial))
        phases.append(Phase(work=total + restart_s * len(serial),
                            length=restart_s + max(total / g, longest), width=width))
    return AppTasks(spec.id, spec.arrival, tuple(phases))


def _feasible(apps: Sequence[AppTasks], deadlines: Sequence[float], gpus: int) -> bool:
    """Whether every phase fits its window (module doc) with ``gpus`` GPUs."""
    windows: list[tuple[float, float, Phase]] = []
    for app, d in zip(apps, deadlines, strict=True):
        start = app.arrival
        tail = app.floor
        for ph in app.phases:
            tail -= ph.length
            end = d - tail
            if end - start < ph.length * (1 - 1e-12):
                return False
            windows.append((start, end, ph))
            start += ph.length
    points = sorted({t for s, e, _ in windows for t in (s, e)})
    lengths = np.diff(np.asarray(points, dtype=float))
    horizon = points[-1] - points[0]
    total_work = sum(ph.work for _, _, ph in windows)
    if total_work <= 0:
        return True
    # integer units: the largest capacity (a sink edge, at most gpus * horizon) fits int32
    unit = max(horizon * gpus, total_work) / (_INT_MAX // 4)
    index = {t: k for k, t in enumerate(points)}
    n_tasks, n_iv = len(windows), len(points) - 1
    source, sink = 0, 1 + n_tasks + n_iv
    rows: list[int] = []
    cols: list[int] = []
    caps: list[int] = []
    demand = 0
    for k, (s, e, ph) in enumerate(windows):
        need = math.floor(ph.work / unit)
        demand += need
        rows.append(source)
        cols.append(1 + k)
        caps.append(need)
        for iv in range(index[s], index[e]):
            rows.append(1 + k)
            cols.append(1 + n_tasks + iv)
            caps.append(math.ceil(ph.width * lengths[iv] / unit))
    for iv in range(n_iv):
        rows.append(1 + n_tasks + iv)
        cols.append(sink)
        caps.append(math.ceil(gpus * lengths[iv] / unit))
    graph = csr_matrix((np.asarray(caps, dtype=np.int32), (rows, cols)),
                       shape=(sink + 1, sink + 1))
    return int(maximum_flow(graph, source, sink).flow_value) >= demand


def least_rho(apps: Sequence[AppTasks], scales: Sequence[float], gpus: int) -> float:
    """The least rho such that every app i can finish by ``arrival_i + rho * scales[i]``
    in the relaxation; NaN for no apps."""
    if not apps:
        return math.nan
    if gpus < 1 or any(not (s > 0 and math.isfinite(s)) for s in scales):
        raise ValueError("gpus must be >= 1 and every scale a finite number > 0")

    def ok(rho: float) -> bool:
        return _feasible(apps, [a.arrival + rho * s for a, s in zip(apps, scales,
                                                                      strict=True)], gpus)

    lo = max(a.floor / s for a, s in zip(apps, scales, strict=True))  # nor its own floor
    if ok(lo):
        return lo
    hi = lo * 2
    while not ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > REL_TOL * lo:
        mid = (lo + hi) / 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return lo


#: metric -> the per-app scale s_i with metric_i = JCT_i / s_i, from the app's floor
#: (:func:`themis.sim.state.floor_time`), its T_id alone and its isolated-share JCT:
#: ``stretch`` = JCT / floor; ``gavel`` = Gavel's excess rho, (JCT / t_iso) / (floor /
#: T_alone). Only metrics whose denominator does not depend on the schedule can be bounded
#: this way (the exact T_id's N_avg does: docs/evaluation.md, "The yardstick").
METRICS: Mapping[str, Callable[[float, float, float], float]] = {
    "stretch": lambda floor, alone, iso: floor,
    "gavel": lambda floor, alone, iso: iso * floor / alone,
}


def bounds(apps: Sequence[AppSpec], topo: Topology, restart_s: float,
           isolated: Mapping[str, float]) -> dict[str, float]:
    """``bound_max_stretch`` and ``bound_max_excess_rho_gavel`` of a trace on ``topo``: no
    schedule has a worst app below them. ``isolated``: app id -> JCT in the isolated 1/N
    share (:func:`themis.sim.isolated.isolated_finish_times`)."""
    g = len(topo)
    tasks = [app_tasks(a, topo, restart_s) for a in apps]
    floors = [floor_time(a, topo, restart_s) for a in apps]
    alone = [sum(s.time(g) for s in phase_shapes(a)) for a in apps]
    out = {}
    for name, scale_of in METRICS.items():
        scales = [scale_of(f, al, isolated[a.id])
                  for a, f, al in zip(apps, floors, alone, strict=True)]
        key = "bound_max_stretch" if name == "stretch" else f"bound_max_excess_rho_{name}"
        out[key] = least_rho(tasks, scales, g)
    return out
