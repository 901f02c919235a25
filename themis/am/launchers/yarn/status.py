"""The YARN AM's status (``GET /`` at its tracking URL, ``themis status``): the app's rho,
GPUs, Hyperband's progress, every job and its latest run, reallocations, and the tail of its
history and allocation log."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from themis.am.launchers.yarn.records import Run, finite_or_none, node_of

if TYPE_CHECKING:
    from themis.am.launchers.yarn.am import AppMaster


def snapshot(am: AppMaster) -> dict[str, Any]:
    now = am.clock()
    held_ids = am.held()
    rho_now = am.current_rho(len(held_ids))
    latest: dict[str, Run] = {}  # a distributed job's: its chief's
    for x in am.runs:
        if x.chief:
            latest[x.job_id] = x
    jobs = []
    for j in sorted(am.hb.jobs.values(), key=lambda j: j.id):
        r = latest.get(j.id)
        info = am.core.record(j.id)
        jobs.append({
            "id": j.id, "config": {k: v for k, v in j.config.items() if k != "_"},
            "status": j.status.value, "bracket": j.bracket, "rung": j.rung,
            "steps": max(j.steps_done, r.steps if r else 0), "target_steps": j.target_steps,
            "loss": finite_or_none(j.loss) if j.loss is not None else None,
            "serial_iter_time": j.serial_iter_time,
            "run": None if r is None else {
                "run_id": r.run_id, "state": r.state, "node": r.node,
                "container": r.container, "gpus": r.gpus,
                "restored_step": r.restored_step, "stop_reason": r.stop_reason},
            "runs": info.runs, "failures": info.failures, "gave_up": info.gave_up,
            "restored_steps": info.restored_steps,
            "objective_source": info.objective_source or None,
            "missing_objective": info.missing_objective,
            **({"tags": info.tags} if info.missing_objective else {}),
        })
    agent = am.agent
    return {
        "app_id": am.app_id, "name": am.spec.name, "kind": am.spec.kind,
        "state": am.state, "message": am.message, "attempt": am.attempt,
        "start_time": am.start_time, "now": now,
        "rho": rho_now,  # null: infinite (no GPU) or finished
        "rho_reported": finite_or_none(am.bidder.current_rho()) if am.bidder else None,
        "gpus": {"held": held_ids, "count": len(held_ids),
                 "by_node": dict(Counter(node_of(g) for g in held_ids)),
                 "in_use": sum(r.gpus for r in am.runs if r.state in
                               ("launched", "running", "stopping")),
                 "max": am.spec.max_gpus()},
        "gpu_seconds": round(am.gpu_seconds, 2),
        "busy_gpu_seconds": round(am.busy_gpu_seconds, 2),
        "agent": None if agent is None else {
            "arbiter": am.arbiter, "epoch": agent.epoch,
            "registered": agent.secret is not None,
            "connected": agent.connected.is_set(),
            "cluster_gpus": am.bidder.cluster_gpus if am.bidder else 0,
            "stats": asdict(agent.stats)},
        "hyperband": {"bracket": am.hb.bracket_index, "rung": am.hb.rung_index,
                      "brackets": len(am.hb.plan), "done": am.hb.done,
                      "progress": round(am.core.progress_fraction(), 4)},
        "objective": am.spec.objective.to_dict(),
        "tensorboard": None if am.tensorboard is None else am.tensorboard.status(),
        "target_reached": am.hb.target_reached,
        "best": am.core.best_json(),
        "top": am.core.top(5),
        "jobs": jobs,
        "reallocations": [{**asdict(x), "latency_s": round(x.latency_s, 3)}
                          for x in am.reallocations],
        "history": am.history[-600:],
        "rounds": am.rounds[-200:],
    }
