"""Metrics of section 6.1 and of the evaluation sweep (docs/evaluation.md).

Per app (:class:`~themis.sim.engine.AppResult`): finish-time fairness rho = JCT / T_id
in both forms of T_id (``paper``: Eq. 1/2's T_cluster x N_avg; ``exact``: the app's plan
on an independent R_C / N_avg share, section 3.2) and Gavel's rho (JCT / JCT in an
isolated 1/N share); rho_floor, the app's rho with the whole cluster to itself from its
arrival (what no scheduler can beat), and excess rho = rho / rho_floor, per definition.

Per run (:func:`summarize`): max, p99, p95 and median of each rho; the fraction of apps
with rho > 1 (sharing-incentive violations by any margin), with rho > 1.05 and with excess
rho > 1.05 (Shockwave's threshold: a violation larger than what restarts and placement
alone cause); max and p99 excess rho; max and p99 stretch (JCT / floor, the quantity
:mod:`themis.sim.bound` bounds); total GPU time, average JCT, makespan, placement score,
restarts and decision times. ``rho`` without a suffix is the run's own form
(``SimConfig.ideal_time``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from themis.sim.engine import AppResult, SimResult

#: Shockwave's threshold (Zheng et al., NSDI 2023): rho above 1.05 is a violation
MARGIN = 1.05

#: rho definitions reported side by side: name -> (rho, rho_floor) of an app
RHOS: dict[str, tuple[Callable[[AppResult], float], Callable[[AppResult], float]]] = {
    "paper": (lambda a: a.rho_paper, lambda a: a.rho_floor_paper),
    "exact": (lambda a: a.rho_exact, lambda a: a.rho_floor_exact),
    "gavel": (lambda a: a.rho_gavel, lambda a: a.rho_floor_gavel),
}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile by linear interpolation between closest ranks (numpy's
    default); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    pos = q / 100 * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    if s[lo] == s[hi]:  # also keeps inf from turning into nan
        return s[lo]
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _dist(prefix: str, values: list[float]) -> dict[str, float]:
    return {
        f"max_{prefix}": max(values),
        f"p99_{prefix}": percentile(values, 99),
        f"p95_{prefix}": percentile(values, 95),
        f"median_{prefix}": statistics.median(values),
    }


def summarize(r: SimResult) -> dict[str, Any]:
    rhos = [a.rho for a in r.apps]
    out: dict[str, Any] = {
        **_dist("rho", rhos),
        "frac_rho_le_1": sum(1 for x in rhos if x <= 1.0) / len(rhos),
        "frac_rho_gt_1": sum(1 for x in rhos if x > 1.0) / len(rhos),
        "frac_rho_gt_105": sum(1 for x in rhos if x > MARGIN) / len(rhos),
        "gpu_time_hours": sum(a.gpu_time for a in r.apps) / 3600,
        "idle_gpu_hours": r.idle_wanted_s / 3600,  # free while apps could use them
        "avg_jct_hours": statistics.fmean(a.jct for a in r.apps) / 3600,
        "mean_placement_score": statistics.fmean(a.placement_score for a in r.apps),
        "apps": len(r.apps),
        "wall_s": r.wall_s,
        "rounds": r.rounds,
        "makespan_hours": r.makespan / 3600,
        "decision_ms_median": percentile(r.round_ms, 50),
        "decision_ms_p95": percentile(r.round_ms, 95),
        "restarts": sum(a.restarts for a in r.apps),
    }
    stretch = [a.jct / a.t_floor for a in r.apps]
    out["max_stretch"] = max(stretch)
    out["p99_stretch"] = percentile(stretch, 99)
    for name, (rho_of, floor_of) in RHOS.items():
        values = [rho_of(a) for a in r.apps]
        excess = [rho_of(a) / floor_of(a) for a in r.apps]
        out.update(_dist(f"rho_{name}", values))
        out[f"frac_rho_{name}_gt_1"] = sum(1 for x in values if x > 1.0) / len(values)
        out[f"frac_rho_{name}_gt_105"] = sum(1 for x in values if x > MARGIN) / len(values)
        out[f"frac_excess_rho_{name}_gt_105"] = (
            sum(1 for x in excess if x > MARGIN) / len(excess))
        out[f"max_excess_rho_{name}"] = max(excess)
        out[f"p99_excess_rho_{name}"] = percentile(excess, 99)
        floors = [floor_of(a) for a in r.apps]
        out[f"median_floor_{name}"] = statistics.median(floors)
        out[f"max_floor_{name}"] = max(floors)
    out.update(r.extra)
    return out


def per_app(r: SimResult) -> list[dict[str, Any]]:
    rows = []
    for a in r.apps:
        row: dict[str, Any] = {
            "id": a.id,
            "arrival_h": a.arrival / 3600,
            "rho": a.rho,
            "jct_h": a.jct / 3600,
            "gpu_h": a.gpu_time / 3600,
            "placement_score": a.placement_score,
            "n_avg": a.n_avg,
            "kind": a.kind,
            "placement": a.placement,
            "restarts": a.restarts,
            "floor_h": a.t_floor / 3600,
            "isolated_h": a.t_iso / 3600,
        }
        for name, (rho_of, floor_of) in RHOS.items():
            row[f"rho_{name}"] = rho_of(a)
            row[f"rho_floor_{name}"] = floor_of(a)
        rows.append(row)
    return rows
