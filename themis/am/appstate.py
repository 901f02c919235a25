"""The Hyperband part of an AM's durable state (YARN: HDFS ``<app dir>/state.json``): jobs,
configurations, steps, values, the bracket/rung and the sampler's RNG. It is saved within
:meth:`themis.am.core.AmCore.to_state` (with the per-job run and failure counts); a new AM
attempt (YARN AM retry) loads it and resumes; the jobs resume from their own checkpoints."""

from __future__ import annotations

from typing import Any

from themis.am.hyperband import Hyperband, HyperbandJob, JobStatus


def hyperband_to_dict(hb: Hyperband) -> dict[str, Any]:
    state = hb._rng.getstate()
    return {
        "bracket_index": hb.bracket_index,
        "rung_index": hb.rung_index,
        "target_reached": hb.target_reached,
        "rng": [state[0], list(state[1]), state[2]],
        "jobs": [
            {"id": j.id, "config": j.config, "bracket": j.bracket, "rung": j.rung,
             "target_steps": j.target_steps, "rung_start_steps": j.rung_start_steps,
             "steps_done": j.steps_done, "loss": j.loss,
             "serial_iter_time": j.serial_iter_time, "status": j.status.value}
            for j in hb.jobs.values()
        ],
    }


def restore_hyperband(hb: Hyperband, d: dict[str, Any]) -> None:
    """Overwrite a freshly built ``hb`` (same spec) with saved progress."""
    hb.bracket_index = int(d["bracket_index"])
    hb.rung_index = int(d["rung_index"])
    hb.target_reached = d.get("target_reached")
    rng = d["rng"]
    hb._rng.setstate((rng[0], tuple(rng[1]), rng[2]))
    hb.jobs = {}
    for j in d["jobs"]:
        hb.jobs[j["id"]] = HyperbandJob(
            id=j["id"], config=dict(j["config"]), bracket=int(j["bracket"]), rung=int(j["rung"]),
            target_steps=int(j["target_steps"]), rung_start_steps=int(j["rung_start_steps"]),
            steps_done=int(j["steps_done"]), loss=j["loss"],
            serial_iter_time=j["serial_iter_time"], status=JobStatus(j["status"]))
