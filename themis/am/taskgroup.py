"""The task group of a distributed TensorFlow job: its workers and parameter servers, and
the ``TF_CONFIG`` every task gets (docs/jobs.md, "Distributed jobs").

A job of ``workers`` workers (each with the spec's per-worker ``resources``, GPUs
included) and ``ps`` parameter servers (no GPU) is gang-scheduled: it runs only when every
worker has its GPUs, and all of its tasks start, stop and resume together. Worker 0 is the
chief: it writes the checkpoints and the event files Themis follows. Every task gets the
same cluster and its own task::

    {"cluster": {"worker": ["h1:p1", "h2:p2"], "ps": ["h3:p3"]},
     "task": {"type": "worker", "index": 0}}

(``"ps"`` only when the job has parameter servers). Addresses are localhost with free
ports in standalone mode; on YARN each task's runner binds a free port on its container's
host and reports it to the AM, which hands every task the cluster once all of them have
reported (:mod:`themis.am.launchers.yarn.runner`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WORKER = "worker"
PS = "ps"
CHIEF = (WORKER, 0)


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """``workers`` workers and ``ps`` parameter servers (1 and 0: a single-process job)."""

    workers: int = 1
    ps: int = 0

    def __post_init__(self) -> None:
        if self.workers < 1 or self.ps < 0:
            raise ValueError(f"task group: workers={self.workers} must be >= 1 and "
                             f"ps={self.ps} >= 0")

    @property
    def distributed(self) -> bool:
        """Whether the tasks need TF_CONFIG (more than one process)."""
        return self.workers > 1 or self.ps > 0

    def tasks(self) -> list[tuple[str, int]]:
        """Every task as (type, index), the chief first."""
        return [(WORKER, i) for i in range(self.workers)] + [(PS, i) for i in range(self.ps)]

    def gpus(self, per_worker: int) -> int:
        """GPUs of the whole job (parameter servers use none)."""
        return self.workers * per_worker


def cluster_spec(group: TaskGroup, addresses: Mapping[tuple[str, int], str]
                 ) -> dict[str, list[str]]:
    """The ``cluster`` of TF_CONFIG from every task's ``host:port`` (KeyError if one is
    missing)."""
    out = {WORKER: [addresses[(WORKER, i)] for i in range(group.workers)]}
    if group.ps:
        out[PS] = [addresses[(PS, i)] for i in range(group.ps)]
    return out


def tf_config(cluster: Mapping[str, Sequence[str]], task: tuple[str, int]) -> str:
    """TF_CONFIG of ``task`` in ``cluster`` (a JSON string)."""
    return json.dumps({"cluster": {k: list(v) for k, v in cluster.items()},
                       "task": {"type": task[0], "index": task[1]}}, sort_keys=True)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the task binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
