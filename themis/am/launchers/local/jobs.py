"""Training job processes bound to leased GPUs (``python -m themis.jobs.train``).

A :class:`JobRunner` owns one Hyperband job's files (event logs, checkpoints, one
stdout/stderr pair per run *segment*) and at most one live process. Each segment runs
on a fixed set of leased GPUs, exported to the process as ``THEMIS_GPU_IDS`` and
``CUDA_VISIBLE_DEVICES`` (comma-separated ids); the job is stopped with SIGTERM (it
checkpoints and exits) when its GPUs are taken away, and a later segment resumes from
the newest checkpoint.

There is no GPU on the machines this runs on: GPU "speed" is emulated by a sleep of
``step_time_ms * S(locality) / k`` per step on ``k`` GPUs (``--step-sleep-ms``), so that
the profiler sees iteration times that depend on the allocation the way Eq. 1 models.
Processes run in their own session so that a terminal's Ctrl-C reaches only the
standalone driver, which then stops them in order. A driver that dies without stopping
them (SIGKILL, a crash) must not leave them training, and writing checkpoints that a new
run of the driver would start the same jobs on: each process gets SIGTERM when the thread
that started it (an app master's control loop) ends, through Linux's parent-death signal
(util-linux ``setpriv --pdeathsig TERM``, which survives the exec of the job; without
``setpriv`` the job starts without it). A job that runs its work in a child of its own
(``bash -c 'a; b'``) passes the SIGTERM on only if it forwards signals.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import themis
from themis.am.command import BUNDLED_FLAGS, contract_env
from themis.am.core import JobLaunch, LaunchCode, LaunchEvent
from themis.am.searchspace import Value
from themis.am.taskgroup import CHIEF, PS, WORKER, cluster_spec, free_port, tf_config
from themis.hadoop.checkpoint_mirror import checkpoint_steps
from themis.mechanism.placement import DEFAULT, PlacementProfile
from themis.mechanism.topology import Gpu, Locality, locality_of

log = logging.getLogger(__name__)


def segment_events(path: Path) -> list[dict[str, Any]]:
    """The JSON event lines of a job segment's stdout (``segment-<i>.out``), in order; lines
    that are not events are skipped; [] if the file cannot be read."""
    out: list[dict[str, Any]] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


@dataclass
class Segment:
    """One run of a job process on one set of GPUs."""

    index: int
    gpus: tuple[str, ...]
    t_start: float  # unix
    target_steps: int
    t_end: float | None = None
    start_step: int | None = None  # step the process started at (restored checkpoint)
    restored_from: str | None = None
    end_step: int | None = None
    reason: str = ""  # train.py's exit reason, or why it was stopped
    exit_status: int | None = None
    stopped_by: str = ""  # "" (ran to its target), "lease", "reassign", "shutdown"
    t_stop: float | None = None  # unix time SIGTERM was sent

    def to_json(self, t0: float) -> dict[str, Any]:
        d = asdict(self)
        d["t_start"] = round(self.t_start - t0, 3)
        d["t_end"] = None if self.t_end is None else round(self.t_end - t0, 3)
        d["t_stop"] = None if self.t_stop is None else round(self.t_stop - t0, 3)
        d["gpus"] = list(self.gpus)
        return d


@dataclass
class JobRunner:
    job_id: str
    config: dict[str, Value]
    fixed: dict[str, Value]
    root: Path  # <out>/apps/<app>/jobs/<job>
    step_time_ms: float
    python: str = sys.executable
    #: a user's ``job.command`` (run with ``bash -c``) from (step target, GPU count);
    #: None: the bundled job, with the emulated GPU speed
    render: Callable[[int, int], str] | None = None
    #: the parameter servers' command of a distributed job (None: ``render``'s)
    ps_render: Callable[[int, int], str] | None = None
    env: dict[str, str] = field(default_factory=dict)  # job.env
    job_dir: Path | None = None  # a task runner's job (None: ``root``)
    segments: list[Segment] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    stop_sent: float | None = None  # time SIGTERM was sent to the live process
    _files: list[IO[bytes]] = field(default_factory=list, repr=False)

    @property
    def job_root(self) -> Path:
        """The job's directory (a task runner's root is below it)."""
        return self.job_dir or self.root

    @property
    def checkpoint_dir(self) -> Path:
        return self.job_root / "checkpoints"

    @property
    def live(self) -> bool:
        return self.proc is not None

    @property
    def gpus(self) -> tuple[str, ...]:
        """GPUs of the live process (empty when none runs)."""
        return self.segments[-1].gpus if self.proc is not None and self.segments else ()

    def command(self, target_steps: int, gpus: list[Gpu], profile: PlacementProfile
                ) -> list[str]:
        if self.render is not None:
            return ["bash", "-c", self.render(target_steps, len(gpus))]
        loc = locality_of(gpus)
        sleep_ms = self.step_time_ms * profile.slowdown(loc) / max(1, len(gpus))
        cmd = [self.python, "-m", "themis.jobs.train", "--job-id", self.job_id,
               "--logdir", str(self.logdir), "--checkpoint-uri", str(self.checkpoint_dir),
               "--max-steps", str(target_steps), "--num-gpus", str(len(gpus)),
               "--locality", Locality(loc).name.lower(), "--step-sleep-ms", f"{sleep_ms:.3f}",
               "--summary-flush-secs", "0.5", "--log-level", "WARNING"]
        for key, value in sorted({**self.fixed, **self.config}.items()):
            if key in BUNDLED_FLAGS:
                cmd += [BUNDLED_FLAGS[key], str(value)]
        return cmd

    def task_runner(self, task: tuple[str, int]) -> JobRunner:
        """The runner of another task of this job's task group (worker ``i`` > 0 or a
        parameter server): the same job and files, its own segment logs under
        ``tasks/<type>-<index>``."""
        render = self.ps_render or self.render if task[0] == PS else self.render
        return replace(self, root=self.root / "tasks" / f"{task[0]}-{task[1]}", render=render,
                       job_dir=self.root, segments=[], proc=None, stop_sent=None, _files=[])

    @property
    def logdir(self) -> Path:
        return self.job_root / "logs"

    def start(self, target_steps: int, gpus: list[Gpu], profile: PlacementProfile,
              env_extra: dict[str, str] | None = None, hold: tuple[str, ...] = ()) -> None:
        """Start a segment on ``gpus``; ``env_extra``: a task's TF_CONFIG; ``hold``: the
        GPUs the segment stands for (the chief's: its whole task group's)."""
        if self.proc is not None:
            raise RuntimeError(f"job {self.job_id}: already running")
        self.root.mkdir(parents=True, exist_ok=True)
        index = len(self.segments)
        ids = tuple(g.id for g in gpus)
        env = {**os.environ, **self.env, **(env_extra or {})}
        pkg_parent = str(Path(themis.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
        env.update(contract_env({  # the job contract's variables (docs/jobs.md)
            "job_id": self.job_id, "logdir": self.logdir, "max_steps": target_steps,
            "checkpoint_uri": self.checkpoint_dir, "checkpoint_dir": self.checkpoint_dir,
            "num_gpus": len(gpus)}))
        env["THEMIS_GPU_IDS"] = ",".join(ids)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONUNBUFFERED"] = "1"
        out = open(self.root / f"segment-{index}.out", "wb")  # noqa: SIM115 (kept open)
        err = open(self.root / f"segment-{index}.err", "wb")  # noqa: SIM115
        self._files = [out, err]
        cmd = self.command(target_steps, gpus, profile)
        (self.root / f"segment-{index}.cmd").write_text(" ".join(cmd) + "\n")
        self.proc = subprocess.Popen([*PDEATHSIG, *cmd], stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.stop_sent = None
        self.segments.append(Segment(index, hold or ids, time.time(), target_steps))
        log.info("job %s: segment %d started on %s (target step %d, pid %d)",
                 self.job_id, index, ",".join(ids), target_steps, self.proc.pid)

    def stop(self, why: str) -> None:
        """Ask the live process to checkpoint and exit (SIGTERM), once."""
        if self.proc is None or self.stop_sent is not None:
            return
        self.stop_sent = time.time()
        self.segments[-1].stopped_by = why
        self.segments[-1].t_stop = self.stop_sent
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        log.info("job %s: SIGTERM (%s)", self.job_id, why)

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def poll(self) -> Segment | None:
        """If the live process has exited: close its segment and return it."""
        if self.proc is None:
            return None
        status = self.proc.poll()
        if status is None:
            return None
        self.proc = None
        for f in self._files:
            f.close()
        self._files = []
        seg = self.segments[-1]
        seg.t_end = time.time()
        seg.exit_status = status
        for ev in self.events(seg.index):
            if ev.get("event") == "start":
                seg.start_step = int(ev.get("step", 0))
                seg.restored_from = ev.get("restored_from")
            elif ev.get("event") == "exit":
                seg.end_step = int(ev.get("step", 0))
                seg.reason = str(ev.get("reason", ""))
            elif ev.get("event") == "checkpoint":
                seg.end_step = max(seg.end_step or 0, int(ev.get("step", 0)))
        if not seg.reason:
            seg.reason = (f"signal {-status}" if status < 0 else f"exit status {status}")
        if status != 0 and not (seg.stopped_by and status in (-signal.SIGTERM, -signal.SIGKILL)):
            log.warning("job %s: segment %d failed (status %s); stderr: %s", self.job_id,
                        seg.index, status, self.stderr_tail(seg.index))
        return seg

    def events(self, index: int) -> list[dict[str, Any]]:
        return segment_events(self.root / f"segment-{index}.out")

    def stderr_tail(self, index: int, chars: int = 600) -> str:
        try:
            return (self.root / f"segment-{index}.err").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def checkpoint_steps(self) -> list[int]:
        """Steps of the checkpoints in :attr:`checkpoint_dir`, by name (the bundled job's
        ``ckpt-<step>``, TensorFlow's ``ckpt-<n>.index``:
        :data:`themis.hadoop.checkpoint_mirror.CKPT_NAME`)."""
        return checkpoint_steps(self.checkpoint_dir)


#: the prefix that gives a job SIGTERM when the thread that started it ends (module docstring)
PDEATHSIG: tuple[str, ...] = (("setpriv", "--pdeathsig", "TERM", "--")
                              if sys.platform == "linux" and shutil.which("setpriv") else ())


class GpuRegistry:
    """Which job process uses which GPU, shared by every app master of the machine: a GPU
    is busy from its process's start until that process has exited, so a GPU that changes
    hands at lease expiry is only used by its new app once the old job has checkpointed
    and gone (as a NodeManager frees a container's GPU only when the container ends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, str] = {}

    def acquire(self, gpus: tuple[str, ...], who: str) -> bool:
        with self._lock:
            if any(self._users.get(g, who) != who for g in gpus):
                return False
            for g in gpus:
                self._users[g] = who
            return True

    def release(self, gpus: tuple[str, ...], who: str) -> None:
        with self._lock:
            for g in gpus:
                if self._users.get(g) == who:
                    del self._users[g]

    def users(self) -> dict[str, str]:
        with self._lock:
            return dict(self._users)


class GpusBusy(RuntimeError):
    """A launch on GPUs another job process still uses (it is checkpointing)."""


class LocalProcessLauncher:
    """:class:`themis.am.core.Launcher` over local job processes: one :class:`JobRunner`
    per job, GPUs taken from the machine's :class:`GpuRegistry` for the run's lifetime.

    A distributed job (:mod:`themis.am.taskgroup`) runs one process per task, each with its
    TF_CONFIG (``127.0.0.1`` and a free port per task) and its worker's GPUs (none for a
    parameter server); the job's runner is the chief's and holds the whole group's GPUs.
    When the chief exits, or another task exits other than a worker exiting 0 on its own
    (at the step target, like the chief), the others are stopped (SIGTERM); the job's exit
    event comes once every task has exited: the chief's outcome, or a failure if another
    task failed."""

    def __init__(self, app: str, topology: Any, registry: GpuRegistry,
                 make_runner: Callable[[str], JobRunner],
                 profile: PlacementProfile = DEFAULT) -> None:
        self.app = app
        self.topology = topology
        self.registry = registry
        self.make_runner = make_runner
        self.profile = profile  # the emulated GPUs' slowdown per locality
        self.runners: dict[str, JobRunner] = {}
        self.tasks: dict[str, dict[tuple[str, int], JobRunner]] = {}  # the other tasks
        self._task_runners: dict[tuple[str, str, int], JobRunner] = {}  # kept across runs
        self._ended: dict[str, Segment] = {}  # chief's segment while other tasks run
        self.closed: list[tuple[str, Segment]] = []  # segments ended at the last poll
        self._started: list[str] = []  # launched since the last poll

    def runner(self, job_id: str) -> JobRunner:
        if job_id not in self.runners:
            self.runners[job_id] = self.make_runner(job_id)
        return self.runners[job_id]

    def launch(self, run: JobLaunch) -> None:
        who = f"{self.app}/{run.job_id}"
        if run.job_id in self.live():
            raise GpusBusy(f"{run.job_id}: its previous run has not ended yet")
        if not self.registry.acquire(run.gpus, who):
            raise GpusBusy(f"{run.gpus} still in use")
        chief = self.runner(run.job_id)
        try:
            if not run.group.distributed:
                chief.start(run.target_steps, [self.topology[g] for g in run.gpus],
                            self.profile)
            else:
                self._launch_group(chief, run)
        except OSError:
            self.kill_tasks(run.job_id)
            self.registry.release(run.gpus, who)
            raise
        self._started.append(run.job_id)

    def _launch_group(self, chief: JobRunner, run: JobLaunch) -> None:
        group = run.group
        cluster = cluster_spec(group, {t: f"127.0.0.1:{free_port()}" for t in group.tasks()})
        runners = {t: chief if t == CHIEF else self._task_runner(chief, t)
                   for t in group.tasks()}
        self.tasks[run.job_id] = {t: r for t, r in runners.items() if t != CHIEF}
        for task, r in runners.items():
            gpus = run.worker_gpus(task[1]) if task[0] != PS else ()
            r.start(run.target_steps, [self.topology[g] for g in gpus], self.profile,
                    {"TF_CONFIG": tf_config(cluster, task)},
                    hold=run.gpus if task == CHIEF else ())

    def _task_runner(self, chief: JobRunner, task: tuple[str, int]) -> JobRunner:
        """The runner of a task other than the chief (the same one for every run)."""
        key = (chief.job_id, *task)
        if key not in self._task_runners:
            self._task_runners[key] = chief.task_runner(task)
        return self._task_runners[key]

    def kill_tasks(self, job_id: str) -> None:
        """SIGKILL every task of the job (a failed launch, a job ignoring SIGTERM)."""
        for r in [self.runners[job_id], *self.tasks.get(job_id, {}).values()]:
            r.kill()

    def stop(self, job_id: str, reason: str) -> None:
        r = self.runners.get(job_id)
        if r is not None:
            r.stop(reason)
        for t in self.tasks.get(job_id, {}).values():
            t.stop(reason)

    def live(self) -> set[str]:
        return {k for k, r in self.runners.items()
                if r.live or any(t.live for t in self.tasks.get(k, {}).values())}

    def poll(self) -> list[LaunchEvent]:
        out = [LaunchEvent(j, LaunchCode.STARTED, step=max(self.runners[j].checkpoint_steps(),
                                                           default=0))
               for j in self._started]
        self._started = []
        self.closed = []
        for job_id, r in self.runners.items():
            seg = r.poll()
            tasks = self.tasks.get(job_id)
            if not tasks:
                if seg is not None:
                    out.append(self.close(job_id, seg))
                continue
            if seg is not None:
                self._ended[job_id] = seg
            ended = {t: x.poll() for t, x in tasks.items()}
            if seg is not None or any(x is not None and _ends_group(t, x)
                                      for t, x in ended.items()):
                self.stop(job_id, "gang")  # the chief or a failed task: the group stops
            if job_id in self._ended and not any(x.live for x in tasks.values()):
                out.append(self.close(job_id, self._ended.pop(job_id), tasks))
                del self.tasks[job_id]
        return out

    def close(self, job_id: str, seg: Segment,
              tasks: dict[tuple[str, int], JobRunner] | None = None) -> LaunchEvent:
        """The exit event of an ended segment (its GPUs are free again); ``tasks``: the
        job's other tasks (a failure of one of them is the job's)."""
        self.registry.release(seg.gpus, f"{self.app}/{job_id}")
        self.closed.append((job_id, seg))
        status = seg.exit_status
        if status == 0 and (seg.reason == "max-steps" or not seg.stopped_by):
            code = LaunchCode.REACHED  # (a user's command exits 0 at its target)
        elif seg.stopped_by == "max-steps" and status in (0, -signal.SIGTERM, -signal.SIGKILL):
            code = LaunchCode.REACHED  # stopped after it ran past its target, as in YARN
        elif seg.stopped_by and status in (0, -signal.SIGTERM, -signal.SIGKILL):
            code = LaunchCode.STOPPED
        else:
            code = LaunchCode.FAILED
        step = seg.end_step
        if code is LaunchCode.REACHED and step is None:
            step = seg.target_steps  # a user's command without JSON events
        for (kind, index), t in sorted((tasks or {}).items()):
            tseg = t.segments[-1]
            if code is not LaunchCode.REACHED and _task_failed(tseg):
                return LaunchEvent(job_id, LaunchCode.FAILED, step, tseg.exit_status,
                                   f"{kind} {index}: {tseg.reason}")
        return LaunchEvent(job_id, code, step, status, seg.reason)


def _ends_group(task: tuple[str, int], seg: Segment) -> bool:
    """Whether a (non-chief) task's exit ends its group: any exit but a worker's own exit 0
    (workers reach the step target together; the chief's exit ends the group then)."""
    return not (task[0] == WORKER and seg.exit_status == 0 and not seg.stopped_by)


def _task_failed(seg: Segment) -> bool:
    """A task's segment ended in a failure (not at its target, not by a stop)."""
    if seg.exit_status == 0:
        return False
    return not (seg.stopped_by and seg.exit_status in (-signal.SIGTERM, -signal.SIGKILL))
