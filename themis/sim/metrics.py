"""Metrics of section 6.1: finish-time fairness rho per app (T_sh actual / T_id with the
app's N_avg), max and median rho, total GPU time, placement score (1/S, GPU-time weighted
per app), app completion time, and the scheduler's decision time per round."""

from __future__ import annotations

import statistics
from typing import Any

from themis.sim.engine import SimResult


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def summarize(r: SimResult) -> dict[str, Any]:
    rhos = [a.rho for a in r.apps]
    out: dict[str, Any] = {
        "max_rho": max(rhos),
        "median_rho": statistics.median(rhos),
        "gpu_time_hours": sum(a.gpu_time for a in r.apps) / 3600,
        "avg_jct_hours": statistics.fmean(a.jct for a in r.apps) / 3600,
        "mean_placement_score": statistics.fmean(a.placement_score for a in r.apps),
        "apps": len(r.apps),
        "wall_s": r.wall_s,
        "rounds": r.rounds,
        "makespan_hours": r.makespan / 3600,
        "decision_ms_median": percentile(r.round_ms, 50),
        "decision_ms_p95": percentile(r.round_ms, 95),
        "restarts": sum(a.restarts for a in r.apps),
        "frac_rho_le_1": sum(1 for x in rhos if x <= 1.0) / len(rhos),
    }
    out.update(r.extra)
    return out


def per_app(r: SimResult) -> list[dict[str, Any]]:
    return [
        {
            "id": a.id,
            "rho": a.rho,
            "jct_h": a.jct / 3600,
            "gpu_h": a.gpu_time / 3600,
            "placement_score": a.placement_score,
            "n_avg": a.n_avg,
            "kind": a.kind,
            "placement": a.placement,
            "restarts": a.restarts,
        }
        for a in r.apps
    ]
