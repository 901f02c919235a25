"""What the YARN application master keeps per container run: run records, measured
reallocations, and small id helpers (per-job counters and the bidder are
:mod:`themis.am.core`'s)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: the ``from`` of a ``start`` event the runner reports itself for a job whose first event
#: file appeared before it printed a ``start`` of its own (runner.py; docs/jobs.md): an
#: inference, which the job's own ``start`` replaces (``YarnContainerLauncher.handle_report``)
INFERRED_START = "event files"


# ------------------------------------------------------------------------------ runs
@dataclass
class Run:
    """One attempt to run a job in one container."""

    run_id: int
    job_id: str
    node: str  # NodeId "nm1:8041"
    host: str
    gpus: int
    request_id: int
    state: str = "requested"  # requested -> allocated -> launched -> running -> stopping -> done
    container: str = ""
    stop_reason: str = ""
    exit_status: int | None = None
    restored_step: int | None = None
    restored_from: str | None = None
    steps: int = 0
    t_requested: float = 0.0
    t_allocated: float | None = None
    t_started: float | None = None  # job's "start" event: checkpoint restored, training begins
    start_inferred: bool = False  # that start was the runner's inference (INFERRED_START)
    t_stop: float | None = None
    t_done: float | None = None
    target_steps: int = 0  # the job's step target for this run
    lease_expiry: float | None = None  # when stopped because a lease ran out
    checkpoint_s: float | None = None  # duration of the checkpoint written on stop
    checkpoint_step: int | None = None  # step of that checkpoint
    # a task of a distributed job (themis.am.taskgroup): all runs of one launch share
    # ``group`` (the run id of its chief, worker 0); 0 for a single-process job
    task: str = "worker"
    task_index: int = 0
    group: int = 0

    @property
    def chief(self) -> bool:
        """Worker 0: the run whose job events and progress are the job's."""
        return self.task == "worker" and self.task_index == 0

    @property
    def live(self) -> bool:
        return self.state in ("requested", "allocated", "launched", "running")


@dataclass
class Reallocation:
    job_id: str
    from_node: str
    to_node: str
    lease_expiry: float
    stop_requested: float
    stopped: float
    started: float
    restored_step: int | None
    checkpoint_s: float | None
    checkpoint_step: int | None = None

    @property
    def latency_s(self) -> float:
        return self.started - self.lease_expiry


def parse_container_id(cid: str) -> tuple[str, int]:
    """``container_[e<epoch>_]<ts>_<app>_<attempt>_<n>`` -> (application id, attempt)."""
    m = re.match(r"^container_(?:e\d+_)?(\d+)_(\d+)_(\d+)_\d+$", cid)
    if not m:
        raise ValueError(f"not a YARN container id: {cid!r}")
    return f"application_{m.group(1)}_{m.group(2)}", int(m.group(3))


def node_of(gpu_id: str) -> str:
    return gpu_id.rsplit("/", 1)[0]


def finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None
