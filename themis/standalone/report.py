"""``report.json`` and ``report.png`` of a standalone run.

Report layout (times are seconds since the driver started; rho ``null`` = infinite, i.e.
the app held no GPU)::

    {"version": 1, "status": "completed" | "timeout" | "interrupted" | "failed",
     "duration_s", "config": {...}, "cluster": {"gpus": [...]},
     "apps": {name: {"completed", "state", "submit_s", "completion_s", "jct_s",
                     "gpu_seconds_leased", "gpu_seconds_jobs", "steps_done",
                     "steps_planned", "objective": {"metric", "goal", "target"},
                     "target_reached": job | null,
                     "best": {"job", "loss", "config"},  # loss: the objective's value
                     "top": [{"id", "value", "metric", "steps", "status", "config"}],
                     "rho": [[t, rho, rho_reported, gpus, running_jobs], ...],
                     "held": [[t, [gpu ids]], ...], "allocations": [...],
                     "max_tick_s",
                     "jobs": {job: {"config", "status", "rung", "steps_done",
                                    "target_steps", "loss", "serial_iter_time_s",
                                    "objective_source", "missing_objective",
                                    "tags" (only when missing),
                                    "checkpoints", "segments": [
                                        {"index", "gpus", "t_start", "t_stop", "t_end",
                                         "target_steps", "start_step", "restored_from",
                                         "end_step", "reason", "exit_status",
                                         "stopped_by"}]}}}},
     "rounds": [{"round", "t", "bidders", "grants": [{"app", "gpus", "via",
                 "start", "expiry"}]}],
     "moves": [{"gpu", "from", "to", "t", "at_lease_expiry"}],
     "resumes": [{"app", "job", "segment", "restored_from", "start_step"}]}
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from themis.am.launchers.local.appmaster import AppMaster
from themis.am.objective import trial_json
from themis.arbiter.loop import RoundStats
from themis.mechanism.round import RoundOutcome


def _num(x: float | None, nd: int = 4) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(x, nd)


def rounds_json(stats: Sequence[RoundStats], outcomes: Sequence[RoundOutcome], t0: float
                ) -> list[dict[str, Any]]:
    out = []
    for st, oc in zip(stats, outcomes, strict=False):
        out.append({
            "round": st.round_id,
            "t": round(st.allocation_sent - t0, 3),
            "bidders": list(oc.bidders),
            "grants": [{"app": g.app_id, "gpus": list(g.gpus), "via": g.via,
                        "start": round(g.start - t0, 3), "expiry": round(g.expiry - t0, 3)}
                       for g in oc.grants],
        })
    return out


def gpu_moves(rounds: Sequence[Mapping[str, Any]], eps: float = 0.5) -> list[dict[str, Any]]:
    """GPUs granted to a different app than their previous holder. ``at_lease_expiry``:
    the previous lease ran to its expiry (else it was given back early, e.g. the app
    finished)."""
    last: dict[str, tuple[str, float]] = {}
    moves = []
    for r in rounds:
        for g in r["grants"]:
            for gid in g["gpus"]:
                prev = last.get(gid)
                if prev is not None and prev[0] != g["app"]:
                    moves.append({"gpu": gid, "from": prev[0], "to": g["app"],
                                  "t": g["start"], "round": r["round"],
                                  "at_lease_expiry": g["start"] >= prev[1] - eps})
                last[gid] = (g["app"], g["expiry"])
    return moves


def app_json(am: AppMaster, t0: float) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    gpu_s_jobs = 0.0
    for job_id, job in sorted(am.hb.jobs.items()):
        runner = am.runners.get(job_id)
        segs = runner.segments if runner else []
        for s in segs:
            if s.t_end is not None:
                gpu_s_jobs += (s.t_end - s.t_start) * len(s.gpus)
        jobs[job_id] = {
            "config": job.config,
            "status": str(job.status),
            "rung": job.rung,
            "steps_done": job.steps_done,
            "target_steps": job.target_steps,
            "loss": _num(job.loss),
            "serial_iter_time_s": _num(job.serial_iter_time, 5),
            # where the objective's value came from; a trial without one: the tags it wrote
            "objective_source": am.core.record(job_id).objective_source or None,
            "missing_objective": am.core.record(job_id).missing_objective,
            **({"tags": am.core.record(job_id).tags}
               if am.core.record(job_id).missing_objective else {}),
            "checkpoints": runner.checkpoint_steps() if runner else [],
            "segments": [s.to_json(t0) for s in segs],
        }
    best = am.hb.best()
    submit = am.start_time - t0 if am.start_time else None
    return {
        "completed": am.state == "done",
        "state": am.state,
        "error": am.error,
        "submit_s": _num(submit, 3),
        "completion_s": _num(am.end_time - t0, 3) if am.end_time else None,
        "jct_s": _num(am.end_time - am.start_time, 3) if am.end_time else None,
        "gpu_seconds_leased": round(am.gpu_seconds, 2),
        "gpu_seconds_jobs": round(gpu_s_jobs, 2),
        "steps_done": am.steps_done(),
        "steps_planned": am.planned_steps,
        "objective": am.spec.objective.to_dict(),
        "target_reached": am.hb.target_reached,
        "best": None if best is None else {"job": best.id, "loss": _num(best.loss),
                                           "config": best.config},
        "top": [trial_json(j, am.spec.objective) for j in am.hb.top(5)],
        "max_tick_s": round(am.max_tick_s, 3),
        "final_rho_reported": _num(am.samples[-1].rho_reported) if am.samples else None,
        "rho": [[s.t, _num(s.rho), _num(s.rho_reported), s.gpus, s.running]
                for s in am.samples],
        "held": [[t, g] for t, g in am.held_changes],
        "allocations": am.allocations,
        "jobs": jobs,
    }


def resumes(apps: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, app in apps.items():
        for job_id, job in app["jobs"].items():
            for s in job["segments"]:
                if s["restored_from"]:
                    out.append({"app": name, "job": job_id, "segment": s["index"],
                                "restored_from": s["restored_from"],
                                "start_step": s["start_step"]})
    return out


def held_at(app: Mapping[str, Any], t: float) -> int:
    """GPUs ``app`` (a report's app entry) held at time ``t``."""
    n = 0
    for at, gpus in app["held"]:
        if at > t:
            break
        n = len(gpus)
    return n


def held_steps(report: Mapping[str, Any]) -> tuple[list[float], dict[str, list[int]]]:
    """Every instant at which some app's held GPUs changed (plus the end of the run), and
    per app the GPUs it held from each instant on: step functions for a stacked plot."""
    apps = report["apps"]
    times = sorted({h[0] for a in apps.values() for h in a["held"]})
    if times:
        times.append(max(times[-1], report["duration_s"]))
    return times, {name: [held_at(a, t) for t in times] for name, a in apps.items()}


def overlap_s(report: Mapping[str, Any], min_apps: int = 2) -> float:
    """Seconds during which at least ``min_apps`` apps held GPUs at the same time."""
    times, stacks = held_steps(report)
    return sum(t1 - t0 for k, (t0, t1) in enumerate(itertools.pairwise(times))
               if sum(1 for v in stacks.values() if v[k] > 0) >= min_apps)


def write_report(path: Path, report: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False, allow_nan=False) + "\n")
    tmp.replace(path)


def plot_report(report: Mapping[str, Any], path: Path) -> None:
    """Three panels: live rho per app, GPUs held per app, and which job ran on which GPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = report["apps"]
    gpus = report["cluster"]["gpus"]
    colors = {name: f"C{i % 10}" for i, name in enumerate(apps)}
    fig, (ax1, ax2, ax3) = plt.subplots(
        3, 1, figsize=(9, 8), sharex=True,
        gridspec_kw={"height_ratios": [2, 1.3, max(1.3, 0.25 * len(gpus))]})
    finite = [r[1] for a in apps.values() for r in a["rho"] if r[1] is not None]
    cap = max(finite) * 1.15 if finite else 2.0
    for name, a in apps.items():
        ts = [r[0] for r in a["rho"]]
        ys = [r[1] if r[1] is not None else math.nan for r in a["rho"]]
        ax1.plot(ts, ys, color=colors[name], label=name)
        inf_t = [r[0] for r in a["rho"] if r[1] is None]
        if inf_t:
            ax1.plot(inf_t, [cap] * len(inf_t), "|", color=colors[name], alpha=0.6)
    times, stacks = held_steps(report)
    if times:
        ax2.stackplot(times, *stacks.values(), step="post", labels=list(stacks),
                      colors=[colors[n] for n in stacks], alpha=0.85)
    ax1.set_ylabel("rho (live)")
    ax1.set_ylim(bottom=0, top=cap * 1.05)
    ax1.legend(loc="upper right", fontsize=8)
    ax1.set_title(f"themis standalone: {len(apps)} apps, {len(gpus)} GPUs, lease "
                  f"{report['config']['lease_s']:g}s, f={report['config']['fairness_knob']:g}"
                  " (| = no GPU, rho infinite)", fontsize=10)
    ax2.set_ylabel("GPUs held (stacked)")
    ax2.set_ylim(0, len(gpus))  # (held counts come from each master's 0.5 s ticks)
    row = {g: i for i, g in enumerate(gpus)}
    for name, a in apps.items():
        for job in a["jobs"].values():
            for s in job["segments"]:
                end = s["t_end"] if s["t_end"] is not None else report["duration_s"]
                for g in s["gpus"]:
                    if g in row:
                        ax3.barh(row[g], end - s["t_start"], left=s["t_start"], height=0.7,
                                 color=colors[name], alpha=0.85, edgecolor="black",
                                 linewidth=0.3)
    for r in report["rounds"]:
        ax3.axvline(r["t"], color="grey", linewidth=0.4, linestyle=":")
    ax3.set_yticks(range(len(gpus)), gpus, fontsize=7)
    ax3.set_ylabel("job processes per GPU")
    ax3.set_xlabel("time (s); dotted lines = rounds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
