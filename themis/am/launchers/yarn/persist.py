"""The YARN AM's durable state in HDFS (``<app dir>/state.json``): the core's state
(Hyperband, per-job runs and failures), the agent's secret and cluster size, GPU-seconds,
run numbering and reallocations. A new AM attempt resumes from it (docs/am.md)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING

from themis.am.launchers.yarn.records import Reallocation
from themis.hadoop.webhdfs import WebHdfsError

if TYPE_CHECKING:
    from themis.am.launchers.yarn.am import AppMaster

log = logging.getLogger("themis.am.launchers.yarn.am")


def state_path(am: AppMaster) -> str:
    return f"{am.app_dir}/state.json"

def load_state(am: AppMaster) -> bool:
    if am.hdfs is None:
        return False
    try:
        raw = am.hdfs.read_latest(state_path(am))
    except WebHdfsError as e:
        log.warning("cannot read saved state: %s", e)
        return False
    if raw is None:
        return False
    try:
        d = json.loads(raw)
        am.core.restore(d)
    except (ValueError, AttributeError) as e:
        log.warning("saved state unusable (%s): starting the app from scratch", e)
        return False
    am.start_time = float(d.get("start_time", am.start_time))
    am._saved_secret = d.get("agent_secret") or None
    am._saved_cluster_gpus = int(d.get("cluster_gpus", 0))
    am.gpu_seconds = float(d.get("gpu_seconds", 0.0))
    am.busy_gpu_seconds = float(d.get("busy_gpu_seconds", 0.0))
    am.launcher.next_run = int(d.get("next_run", 1))
    am.launcher.reallocations = [Reallocation(**r) for r in d.get("reallocations", [])]
    log.info("resumed from HDFS state of attempt %s: bracket %d rung %d, %d jobs",
             d.get("attempt"), am.hb.bracket_index, am.hb.rung_index, len(am.hb.jobs))
    return True

def save_state(am: AppMaster, force: bool = False) -> None:
    if am.hdfs is None or not (am._dirty or force):
        return
    now = am.clock()
    if not force and now - am._last_save < 2.0:
        return
    doc = {
        **am.core.to_state(), "app_id": am.app_id, "attempt": am.attempt,
        "start_time": am.start_time, "saved": now,
        "agent_secret": getattr(am.agent, "secret", None) or am._saved_secret,
        "cluster_gpus": am.bidder.cluster_gpus if am.bidder else 0,
        "gpu_seconds": am.gpu_seconds, "busy_gpu_seconds": am.busy_gpu_seconds,
        "next_run": am.launcher.next_run,
        "reallocations": [asdict(r) for r in am.reallocations],
    }
    try:
        am.hdfs.write_atomic(state_path(am), json.dumps(doc).encode())
        am._dirty = False
        am._last_save = now
    except WebHdfsError as e:
        log.warning("cannot save state: %s", e)
