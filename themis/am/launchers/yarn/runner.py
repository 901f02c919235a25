"""Wrapper the AM runs in every job container: ``python -m themis.am.launchers.yarn.runner``.

It starts the job command (in its own process group), follows the job's TensorFlow event
logs with the :class:`~themis.profiler.Profiler` and its JSON-lines stdout
(``start``/``checkpoint``/``exit`` of :mod:`themis.jobs.train`), and reports progress to the
AM over HTTP (``POST <am>/api/report`` on the AM's NodeManager host, which may be another
host than the job's, with the container's token from ``$THEMIS_REPORT_TOKEN``,
themis.hadoop.security) every ``--report-every`` seconds. When the AM's answer says
``stop`` (the app lost the GPUs: lease expiry, preemption) it sends the job SIGTERM, so the
job checkpoints to HDFS and exits; the container then ends and the GPUs are free. SIGTERM
to the runner itself (NM stopping the container) is forwarded the same way. A job still
running ``--stop-grace`` seconds after its SIGTERM (it ignores the signal, or hangs in its
handler) gets SIGKILL; the runner then saves what the job checkpointed before (below) and
reports the exit, before the AM's own stop timeout releases the container.

Start-up slots: a job's start (Python, TensorFlow import, restore) is CPU-bound and
single-threaded, and jobs moved at a lease end start together. Running more start-ups at
once than the node has cores only slows every one of them down, so the runner takes one of
``--start-slots`` node-wide slots (``flock`` on files in ``--slot-dir``; default: one per
CPU core of the node; 0 = no limit) before it starts the job and gives it back when the job
reports ``start`` (or exits). It keeps reporting to the AM while it waits, and waits at most
``--slot-wait`` seconds.

Jobs without JSON events (any program following docs/jobs.md): the job counts as started
when its first TensorFlow event file appears under ``--logdir`` (the runner then reports a
``start`` event itself, with the step of the newest checkpoint in ``--checkpoint-dir``), and
its progress comes from the event files alone.

Checkpoints: with ``--checkpoint-store`` the job's local ``--checkpoint-dir`` (its
``{checkpoint_dir}``, ``$THEMIS_CHECKPOINT_DIR``) is filled from that HDFS directory before
the job starts and saved back after it exited (:mod:`themis.hadoop.checkpoint_mirror`;
tried 3 times), so that a job checkpointing with plain TensorFlow/Keras to a local directory
resumes on any node. While the job runs, the directory is also copied every
``--checkpoint-every`` seconds, once nothing in it changed for ``CHECKPOINT_SETTLE_S``: a
run whose host dies (no exit, no save) resumes from the last copy (docs/am.md, "Faults").
A stop's SIGTERM waits until the directory was quiet for ``WRITE_QUIET_S`` - or, for a job
that writes more often (Keras' backup after every short epoch), goes to the job frozen
between two writes (``FROZEN_QUIET_S``, no file there open for writing) - and a job that
died of it right after a write is not saved (HDFS keeps the last copy whole); nor is a job
that failed with its directory's disk full (``DISK_FULL_BYTES``).
A restore that cannot reach HDFS is retried for ``--restore-wait`` seconds; the job never
starts from scratch instead (its save would put that over the stored state). Each run
claims the job's HDFS directory (a file beside
it names its container); a run that finds another claim there writes nothing more and
stops its job: a newer run of the job runs elsewhere (its host was frozen or cut off).
With ``--fence-after`` a runner that finds its host was frozen that long kills its job the
moment the host thaws (:mod:`~themis.am.launchers.yarn.thaw`): the job may run elsewhere.

Distributed jobs: with ``--task TYPE:INDEX`` (a task of a job's task group,
:mod:`themis.am.taskgroup`) the runner binds a free port on its host and sends it with its
reports (``"port"``); the AM answers with the task's ``tf_config`` once every task of the
launch has reported, and the runner then starts the job command with ``TF_CONFIG`` set
(the port is released just before, for the job's TensorFlow server to bind). It gives up
after ``--rendezvous-wait`` seconds (exit 3). Only the chief (``worker:0``) reports the
job's progress, copies event files and saves checkpoints; every task restores them. The
tasks take no start-up slot (they start together: each waits for the others).

TensorBoard logs: with ``--tensorboard-dir`` the job's event files are copied to that HDFS
directory as they grow (every ``--tensorboard-every`` seconds and once more after the job
exited; :mod:`themis.hadoop.tblogs`), through WebHDFS at ``$THEMIS_WEBHDFS_URL`` as the
app's user: its delegation token from the container's credentials on a secure cluster, else
``$HADOOP_USER_NAME``.

Exit status: the job's.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themis.am.launchers.yarn import openwrites
from themis.am.launchers.yarn.records import INFERRED_START
from themis.am.launchers.yarn.report import MAX_REPORT_BYTES
from themis.am.launchers.yarn.thaw import ThawWatch
from themis.am.margins import PAST_TARGET_GRACE_S, STOP_GRACE_S, PastTarget
from themis.hadoop.security import (
    REPORT_CONTAINER_HEADER,
    REPORT_TOKEN_ENV,
    REPORT_TOKEN_HEADER,
)

if TYPE_CHECKING:
    from themis.hadoop.checkpoint_mirror import CheckpointMirror
    from themis.hadoop.tblogs import EventLogUpload

log = logging.getLogger("themis.am.launchers.yarn.runner")

#: the job's local checkpoint directory in its container (``{checkpoint_dir}``)
CKPT_DIR = "checkpoints"
#: a copy while the job runs waits until nothing in its checkpoint directory changed for
#: this long (seconds): a job writing a checkpoint's files one after the other has
#: finished them by then (CheckpointMirror.save)
CHECKPOINT_SETTLE_S = 2.0
#: a stop's SIGTERM waits (at most STOP_HOLD_S) until nothing in the job's checkpoint
#: directory changed for this long (seconds), and a job that died of that SIGTERM is saved
#: after its exit only if nothing there changed this long before it: a program that dies of
#: SIGTERM at once (Keras' model.fit) and was cut while it rewrote its backup would
#: otherwise put a truncated file over the complete one in HDFS, and every later run would
#: fail to load it (docs/am.md, "Faults")
WRITE_QUIET_S = 0.5
STOP_HOLD_S = 5.0
#: a job that writes its checkpoint more often than WRITE_QUIET_S (Keras' backup at the end
#: of every short epoch) is never that quiet: after QUIET_HOLD_S of the hold the runner
#: instead freezes it (SIGSTOP) once its directory was quiet for FROZEN_QUIET_S and, when no
#: process of the job holds a file there open for writing (openwrites.py), sends the SIGTERM
#: to the frozen job: it dies at its SIGCONT without writing again, and is saved. The open
#: files tell a write in progress; the short quiet keeps a job that closes one file and
#: opens the next of the same save from being caught between them (0.1 s missed a job
#: writing a backup every 0.1-0.15 s most of the time)
QUIET_HOLD_S = 2.0
FROZEN_QUIET_S = 0.02
#: a copy that failed (HDFS away) is tried again after this many seconds, doubling up to
#: ``--checkpoint-every``: the copy catches up within seconds of HDFS's return
SYNC_RETRY_S = 1.0
#: a job that failed (not stopped) while the file system of its checkpoint directory had
#: less than this free (bytes) may have died of a write cut short by the full disk (a
#: program rewriting its backup in place leaves a truncated file): it is not saved, and
#: HDFS keeps the last copy whole (docs/am.md, "Faults")
DISK_FULL_BYTES = 1 << 20


def free_bytes(path: Path) -> int | None:
    """What this process could still write on the file system of ``path`` (or of its
    nearest existing parent): the blocks free to every user, or all free blocks for root,
    which may use the ones reserved for it. None when it cannot be read."""
    for p in (path, *path.parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    return None


def parse_event(line: str) -> dict[str, Any] | None:
    """The job event (a JSON object with an ``event`` key, themis.jobs.train) that a line
    of the job's output carries, else None."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        e = json.loads(text)
    except ValueError:
        return None
    return e if isinstance(e, dict) and "event" in e else None


class Runner:
    def __init__(self, am_url: str, job_id: str, run_id: int, logdir: Path,
                 command: list[str], report_every: float = 1.0, start_slots: int = 0,
                 slot_dir: str = "", slot_wait: float = 60.0,
                 upload: EventLogUpload | None = None, upload_every: float = 10.0,
                 metric: str = "eval_loss", checkpoint_dir: Path | None = None,
                 store: CheckpointMirror | None = None, task: tuple[str, int] | None = None,
                 rendezvous_wait: float = 600.0, stop_grace: float = STOP_GRACE_S,
                 checkpoint_every: float = 0.0, restore_wait: float = 300.0,
                 fence_after: float = 0.0) -> None:
        self.am_url = am_url.rstrip("/")
        self.job_id = job_id
        self.run_id = run_id
        self.logdir = logdir
        self.command = command
        self.report_every = report_every
        self.container = os.environ.get("CONTAINER_ID", "")
        # this container's token for the AM's /api/report (docs/yarn.md, "Security")
        self.report_token = os.environ.get(REPORT_TOKEN_ENV, "")
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._signalled = False
        self._term_at: float | None = None  # monotonic time of the job's SIGTERM
        # when a stop's SIGTERM went out after _hold_while_checkpointing (files' mtimes)
        self._held_term_at: float | None = None
        # the quiet before that SIGTERM which the hold made sure of (seconds)
        self._held_quiet_s = WRITE_QUIET_S
        self._term_why = ""
        self._killed = False  # SIGKILL after stop_grace
        # a freeze this long (s) may have got the run replaced: the job is killed at the
        # thaw (thaw.py; 0: never)
        self.fence_after = fence_after
        self._thawed_at: float | None = None  # when the job was killed at a thaw
        self.stop_grace = stop_grace
        self._profiler: Any = None
        self._job_started = False  # the job's "start" event was seen
        self._restorable_step = 0  # newest checkpoint in checkpoint_dir at the job's start
        # a distributed job's tasks start together (each waits for the others): no slots
        self.start_slots = 0 if task is not None else start_slots
        self.slot_dir = slot_dir or tempfile.gettempdir()
        self.slot_wait = slot_wait
        self._slot: int | None = None  # fd of the start-up slot held
        self._stop_early = threading.Event()  # stop asked before the job was started
        self.upload = upload  # copies the event files to HDFS
        self.upload_every = upload_every
        self.metric = metric  # the objective's TensorFlow scalar tag
        self.checkpoint_dir = checkpoint_dir  # the job's local checkpoints
        self.store = store  # keeps checkpoint_dir in HDFS
        # copy checkpoint_dir to HDFS this often while the job runs (0: only after it
        # exited): what a run on a host that dies can resume from (docs/am.md, "Faults")
        self.checkpoint_every = checkpoint_every
        self._next_sync = 0.0  # monotonic time of the next copy
        self._sync_retry = SYNC_RETRY_S  # pause before the next try after a failed copy
        # how long a restore is retried while HDFS is unreachable before the run gives up
        self.restore_wait = restore_wait
        self.task = task  # a distributed job's task (None: a single-process job)
        self.chief = task is None or task == ("worker", 0)
        self.rendezvous_wait = rendezvous_wait
        self._env: dict[str, str] = {}  # the job's extra environment (TF_CONFIG)
        # the run's step target (the job contract's $THEMIS_MAX_STEPS; 0: unknown) and the
        # steps its event files show: a job past it that has not exited is stopped
        self.max_steps = _int_env("THEMIS_MAX_STEPS")
        self._steps = 0
        self._past_target = PastTarget(PAST_TARGET_GRACE_S)
        self._stopped_at_target = False

    # ---------------------------------------------------------------- job process
    def _signal_child(self, why: str, hold: bool = True) -> None:
        """SIGTERM to the job's process group, once (``hold``: after the job's checkpoint
        writes, :meth:`_hold_while_checkpointing`; not in the runner's own signal handler,
        whose SIGKILL may follow in 250 ms)."""
        child = self._child
        if child is None or child.poll() is not None or self._signalled:
            return
        self._signalled = True
        frozen = False
        if hold:
            frozen = self._hold_while_checkpointing(child)
            self._held_term_at = time.time()
        self._term_at, self._term_why = time.monotonic(), why
        log.info("stopping job %s (%s): SIGTERM to process group %d%s", self.job_id, why,
                 child.pid, " (frozen between two checkpoint writes)" if frozen else "")
        self._add_event({"event": "stop-requested", "reason": why})
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        if frozen:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGCONT)

    def _hold_while_checkpointing(self, child: subprocess.Popen[str]) -> bool:
        """Before a SIGTERM: wait until the job's checkpoint directory was quiet for
        WRITE_QUIET_S (at most STOP_HOLD_S), so that a job dying of the signal at once is
        not cut in the middle of writing a checkpoint; after QUIET_HOLD_S, catch a job that
        writes more often between two writes instead (:meth:`_freeze_between_writes`).
        True: the job is left frozen, to get its SIGTERM and then SIGCONT."""
        self._held_quiet_s = WRITE_QUIET_S
        if self.store is None or not self.chief:
            return False
        start = time.monotonic()
        end = start + STOP_HOLD_S
        while child.poll() is None and (now := time.monotonic()) < end:
            quiet = time.time() - self.store.last_change()
            if quiet >= WRITE_QUIET_S:
                return False
            if now - start < QUIET_HOLD_S:
                time.sleep(min(WRITE_QUIET_S - quiet, start + QUIET_HOLD_S - now, end - now))
            elif quiet >= FROZEN_QUIET_S and self._freeze_between_writes(child):
                self._held_quiet_s = FROZEN_QUIET_S
                return True
            else:
                time.sleep(min(0.02, end - now))
        return False

    def _freeze_between_writes(self, child: subprocess.Popen[str]) -> bool:
        """SIGSTOP to the job's process group; keep it frozen (True) only if its checkpoint
        directory is still quiet for FROZEN_QUIET_S and none of its processes holds a file
        there open for writing, else let it go on (SIGCONT). Where ``/proc`` cannot tell,
        never."""
        if self.store is None or self.checkpoint_dir is None:
            return False
        try:
            os.killpg(child.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        deadline = time.monotonic() + 0.2
        while not (frozen := openwrites.stopped(child.pid)) and time.monotonic() < deadline:
            time.sleep(0.002)
        # (/proc is read for the open files only once every thread stopped)
        if (frozen and openwrites.open_for_writing(child.pid, self.checkpoint_dir) == []
                and time.time() - self.store.last_change() >= FROZEN_QUIET_S):
            return True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGCONT)
        return False

    def _kill_unstopped(self) -> None:
        """Every stop's escalation (asked by the AM, the runner's own SIGTERM, the step
        target): a job still running ``stop_grace`` seconds after its SIGTERM gets SIGKILL
        (its process group). The checkpoints it wrote before are saved after it is gone."""
        child = self._child
        if child is None or self._term_at is None or self._killed or child.poll() is not None:
            return
        after = time.monotonic() - self._term_at
        if after < self.stop_grace:
            return
        self._killed = True
        self._held_term_at = None  # the job outlived its SIGTERM: saved as it left it
        what = ("at its step target" if self._stopped_at_target
                else f"({self._term_why})")
        log.warning("job %s still running %.0f s after its SIGTERM %s: SIGKILL to process "
                    "group %d", self.job_id, after, what, child.pid)
        self._add_event({"event": "stop-killed", "after_s": round(after, 1),
                         "reason": f"still running {after:.0f} s after its SIGTERM {what}: "
                                   "killed (SIGKILL)"})
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)

    def _kill_thawed(self, late_s: float) -> None:
        """The runner woke ``late_s`` seconds late (thaw.py): its host was frozen long
        enough for YARN to take it for lost and the AM to run the job elsewhere, so the job
        is killed at once, without a grace (its checkpoints are saved after, unless it
        wrote in the 0.5 s before, and only while no newer run claimed them)."""
        child = self._child
        if child is None or child.poll() is not None:
            return
        self._signalled = self._killed = True
        self._thawed_at = time.time()
        why = (f"this host was frozen for {late_s:.1f} s (the fence is {self.fence_after:g} "
               "s): YARN may have taken it for lost and the job may run elsewhere")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        log.error("job %s killed at the thaw: %s", self.job_id, why)
        self._add_event({"event": "stop-thawed", "frozen_s": round(late_s, 1), "reason": why})

    def _stop_past_target(self) -> None:
        """The step budget of a job that does not read ``$THEMIS_MAX_STEPS`` (Keras'
        ``model.fit``): past its target for PAST_TARGET_GRACE_S and still running, it is
        stopped as at a lease end (SIGTERM, then SIGKILL after ``stop_grace``)."""
        past = bool(self.max_steps) and self._steps >= self.max_steps
        if self._past_target.due(past, time.monotonic()) and not self._signalled:
            self._stopped_at_target = True
            self._signal_child(f"reached its step target {self.max_steps} (step "
                               f"{self._steps}) and still runs")

    def _add_event(self, e: dict[str, Any]) -> None:
        e.setdefault("time", time.time())
        with self._lock:
            self._events.append(e)

    def _pump_stdout(self, stream: Any) -> None:
        for line in stream:
            # the job's event is taken before the line is echoed to the container's log,
            # a write that can wait on a loaded disk while the job goes on to open its
            # event file (_check_started would then take the job as started itself)
            e = parse_event(line)
            if e is not None:
                if e["event"] == "start":
                    with self._lock:  # (with _check_started's test: one or the other first)
                        self._job_started = True
                    self._release_slot()
                self._add_event(e)
            sys.stdout.write(line)
            sys.stdout.flush()

    def _check_started(self) -> None:
        """A job that prints no ``start`` event has started when its first event file
        appears: report ``start`` for it, with the step of its newest local checkpoint.
        A job that prints one may have that file first (its event writer opened before its
        restore ended, or its ``start`` line not read yet): its own ``start``, reported
        after, restates the run's start at the AM (INFERRED_START)."""
        if self._job_started or not any(self.logdir.rglob("events.out.tfevents.*")):
            return
        step = self._restorable_step
        with self._lock:
            if self._job_started:  # the job's own start came meanwhile
                return
            self._job_started = True
            self._events.append({"event": "start", "step": step,
                                 "restored_from": str(self.checkpoint_dir) if step else None,
                                 "from": INFERRED_START, "time": time.time()})
        self._release_slot()

    # ---------------------------------------------------------------- reports
    def _progress(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not self._job_started or not self.chief:
            # no event files before the job has started; importing the profiler now would
            # take CPU from the job's own start (TensorFlow import, restore)
            return out
        if self._profiler is None:
            try:
                from themis.profiler import Profiler

                self._profiler = Profiler(metric=self.metric)
                self._profiler.add_job(self.job_id, self.logdir)
            except Exception as e:  # tensorboard missing: stdout events only
                log.warning("no profiler (%s): progress from stdout events only", e)
                self._profiler = False
        if self._profiler:
            try:
                self._profiler.poll()
                prof = self._profiler.job(self.job_id)
                out["steps"] = self._steps = prof.steps_done
                out["loss"] = prof.objective_value()  # the objective's value
                out["objective_source"] = prof.objective_source()
                if out["objective_source"] is None:  # what the job writes instead
                    out["tags"] = sorted(prof.tags_seen)[:256]
                out["serial_iter_time"] = prof.serial_iter_time()
            except Exception as e:
                log.warning("profiler: %s", e)
        return out

    def report(self, final: bool = False) -> bool:
        """Send progress and new events; returns True when the AM asks the job to stop."""
        return bool(self._report(final).get("stop"))

    def _report(self, final: bool = False, **extra: Any) -> dict[str, Any]:
        """Send progress, new events and ``extra``; the AM's answer ({} if unreachable)."""
        with self._lock:
            events = list(self._events)
        taken = len(events)
        progress = self._progress()
        while True:
            body = {"job_id": self.job_id, "run_id": self.run_id, "container": self.container,
                    "final": final, "events": events, **progress, **extra}
            data = json.dumps(body).encode()
            if len(data) <= MAX_REPORT_BYTES or not events:
                break
            # over the AM's limit (themis.am.launchers.yarn.report): the oldest events are dropped
            drop = max(1, len(events) // 2)
            log.warning("report of %d bytes: dropping the %d oldest events", len(data), drop)
            events = events[drop:]
        req = urllib.request.Request(f"{self.am_url}/api/report", method="POST", data=data,
                                     headers={"Content-Type": "application/json",
                                              REPORT_TOKEN_HEADER: self.report_token,
                                              REPORT_CONTAINER_HEADER: self.container})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                answer = json.load(r)
        except (OSError, ValueError) as e:
            log.debug("report failed: %s", e)
            return {}
        with self._lock:
            del self._events[:taken]
        return answer if isinstance(answer, dict) else {}

    # ---------------------------------------------------------------- rendezvous
    def _rendezvous(self) -> str | None:
        """A distributed job's TF_CONFIG from the AM (module docstring); None when the AM
        asked to stop first. RuntimeError after ``rendezvous_wait`` seconds."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("", 0))  # held until the job starts: no other process takes it
            port = int(sock.getsockname()[1])
            self._add_event({"event": "rendezvous", "task": list(self.task or ()),
                             "port": port})
            end = time.monotonic() + self.rendezvous_wait
            while not self._stop_early.is_set():
                answer = self._report(port=port)
                if answer.get("stop"):
                    return None
                config = answer.get("tf_config")
                if isinstance(config, str):
                    return config
                if time.monotonic() > end:
                    raise RuntimeError(f"no TF_CONFIG from the AM after "
                                       f"{self.rendezvous_wait:.0f}s (the job's other tasks "
                                       "did not all start)")
                time.sleep(min(self.report_every, 0.5))
            return None
        finally:
            sock.close()

    # ---------------------------------------------------------------- start-up slots
    def _try_slot(self) -> int | None:
        for i in range(self.start_slots):
            path = os.path.join(self.slot_dir, f"themis-job-start.{i}.lock")
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError:
                os.close(fd)
        return None

    def _wait_for_slot(self) -> bool:
        """Takes a start-up slot (or gives up waiting); False when the AM asked to stop."""
        if self.start_slots <= 0:
            return True
        t0 = time.monotonic()
        last = t0
        while True:
            try:
                self._slot = self._try_slot()
            except OSError as e:  # no slot directory: no limit
                log.warning("start-up slots unavailable (%s): starting at once", e)
                return True
            now = time.monotonic()
            if self._slot is not None:
                if now - t0 > 0.05:
                    log.info("waited %.2fs for a start-up slot", now - t0)
                return True
            if now - t0 > self.slot_wait:
                log.warning("no start-up slot after %.0fs: starting anyway", now - t0)
                return True
            if self._stop_early.is_set():
                return False
            if now - last >= self.report_every:
                last = now
                if self.report():
                    return False
            time.sleep(0.05)

    def _release_slot(self) -> None:
        with self._lock:  # the pump thread and the main thread both give it back
            fd, self._slot = self._slot, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    # ---------------------------------------------------------------- main
    def run(self) -> int:
        self.logdir.mkdir(parents=True, exist_ok=True)

        def on_signal(why: str) -> None:
            if self._child is None:
                self._stop_early.set()
            self._signal_child(why, hold=False)

        signal.signal(signal.SIGTERM, lambda s, f: on_signal("SIGTERM to the runner"))
        signal.signal(signal.SIGINT, lambda s, f: on_signal("SIGINT to the runner"))
        self._add_event({"event": "runner-start", "pid": os.getpid()})
        if not self._wait_for_slot() or self._stop_early.is_set():
            log.info("job %s stopped before it started", self.job_id)
            self._add_event({"event": "runner-exit", "status": 0})
            self.report(final=True)
            return 0
        if self.task is not None:
            try:
                config = self._rendezvous()
            except RuntimeError as e:
                log.error("job %s: %s", self.job_id, e)
                self._add_event({"event": "runner-exit", "status": 3, "error": str(e)})
                self.report(final=True)
                return 3
            if config is None:
                log.info("job %s stopped before its tasks met", self.job_id)
                self._add_event({"event": "runner-exit", "status": 0})
                self.report(final=True)
                return 0
            self._env["TF_CONFIG"] = config
        if self.store is not None and not self._restore_checkpoints():
            status = 0 if self._stop_early.is_set() or self.report() else 4
            self._add_event({"event": "runner-exit", "status": status})
            self.report(final=True)
            return status
        if self.upload is not None:
            self.upload.start(self.upload_every)
        try:
            return self._run_job()
        finally:
            self._release_slot()
            if self.upload is not None:
                self.upload.close()

    def _restore_checkpoints(self) -> bool:
        """The job's checkpoint directory from HDFS; False when HDFS stayed unreachable for
        ``restore_wait`` seconds or the run was asked to stop meanwhile. The job never
        starts from scratch because HDFS is away (a DataNode lost, the NameNode
        restarting): its save would then put that fresh state over the stored one."""
        assert self.store is not None
        t0 = time.time()
        pause = 1.0
        while True:
            try:
                files, nbytes = self.store.restore()
                break
            except Exception as e:  # WebHDFS, connection and HTTP errors
                waited = time.time() - t0
                if waited + pause > self.restore_wait or self._stop_early.is_set() \
                        or self.report():
                    log.error("checkpoint restore from %s failed for %.0f s, the job does "
                              "not start: %s", self.store.remote, waited, e)
                    self._add_event({"event": "checkpoint-restore-failed",
                                     "error": str(e)[:300], "seconds": round(waited, 1)})
                    return False
                log.warning("checkpoint restore from %s failed (tried again in %.0f s): %s",
                            self.store.remote, pause, e)
                self._stop_early.wait(pause)
                pause = min(pause * 2, 15.0)
        self._add_event({"event": "checkpoint-restored", "files": files, "bytes": nbytes,
                         "seconds": round(time.time() - t0, 3)})
        return True

    def _save_checkpoints(self, killed_at: float | None = None, attempts: int = 3,
                          pause: float = 1.0, failed: bool = False) -> None:
        """The job's checkpoint directory to HDFS after its exit, up to ``attempts`` times
        (HDFS may be briefly unwritable: a DataNode gone, the NameNode restarting). A save
        that fails leaves the previous checkpoint in HDFS usable (the index is written
        last); the next run resumes from it. ``killed_at``: the job died of the stop's
        SIGTERM sent then (seconds since the epoch); if it changed its directory less than
        WRITE_QUIET_S before, its files may be cut short and nothing is saved: the next
        run resumes from the last copy in HDFS. A job that died otherwise (a crash, the
        OOM killer, the SIGKILL after ``stop_grace``) is saved as it left it, unless it
        ``failed`` with its directory's file system full (DISK_FULL_BYTES): its last write
        may have been cut short there too."""
        from themis.hadoop.checkpoint_mirror import CheckpointFenced

        assert self.store is not None
        if (why := self._write_maybe_cut(killed_at, failed)) is not None:
            why += " (a write may have been cut short): HDFS keeps the last copy"
            log.warning("checkpoint not saved: %s", why)
            self._add_event({"event": "checkpoint-save-skipped", "reason": why})
            return
        for attempt in range(1, attempts + 1):
            try:
                written, deleted = self.store.save()
            except CheckpointFenced as e:
                log.warning("checkpoint not saved: %s", e)
                self._add_event({"event": "checkpoint-save-fenced", "error": str(e)[:300]})
                return
            except Exception as e:
                log.error("checkpoint save to %s failed (attempt %d of %d): %s",
                          self.store.remote, attempt, attempts, e)
                if attempt == attempts:
                    self._add_event({"event": "checkpoint-save-failed",
                                     "error": str(e)[:300]})
                    return
                time.sleep(pause)
                continue
            if deleted >= 0:
                self._add_event({"event": "checkpoint-saved", "written": written,
                                 "deleted": deleted})
                return
            time.sleep(min(pause, 0.2))  # changed while read (a process of the job left)
        log.error("checkpoint dir %s kept changing: not saved", self.checkpoint_dir)
        self._add_event({"event": "checkpoint-save-failed",
                         "error": "the directory kept changing while it was read"})

    def _write_maybe_cut(self, killed_at: float | None, failed: bool) -> str | None:
        """Why the job's last write may have been cut short (see :meth:`_save_checkpoints`),
        or None."""
        assert self.store is not None
        if failed and self.checkpoint_dir is not None and (
                free := free_bytes(self.checkpoint_dir)) is not None \
                and free < DISK_FULL_BYTES:
            return (f"the job failed with {free} bytes free on the disk of its checkpoint "
                    "directory")
        quiet_s = self._held_quiet_s if killed_at == self._held_term_at else WRITE_QUIET_S
        if killed_at is not None and (
                before := killed_at - self.store.last_change()) < quiet_s:
            return (f"the job died of its SIGTERM {before:.2f} s after it last changed its "
                    "checkpoint directory")
        return None

    def _syncing(self) -> bool:
        return (self.store is not None and self.chief and self.checkpoint_every > 0
                and not self._signalled)

    def _until_next_look(self, next_report: float) -> float:
        """Seconds until the loop of :meth:`_run_job` next reports or copies."""
        due = min(next_report, self._next_sync) if self._syncing() else next_report
        return max(0.01, due - time.monotonic())

    def _sync_checkpoints(self) -> None:
        """While the job runs: its checkpoint directory to HDFS every ``checkpoint_every``
        seconds. A copy that failed is tried again after SYNC_RETRY_S, doubling up to
        ``checkpoint_every``. A copy put off because the job was writing
        (CHECKPOINT_SETTLE_S) is tried again the moment the directory will have been quiet
        that long: a job that checkpoints every few seconds leaves quiet windows of a
        fraction of a second, which looks at a fixed period can miss for minutes."""
        if self.store is None or not self.chief or self.checkpoint_every <= 0:
            return
        now = time.monotonic()
        if now < self._next_sync:
            return
        self._next_sync = now + self.checkpoint_every
        from themis.hadoop.checkpoint_mirror import CheckpointFenced

        try:
            written, deleted = self.store.save(settle_s=CHECKPOINT_SETTLE_S)
        except CheckpointFenced as e:  # a newer run of the job runs elsewhere: stop it
            log.warning("checkpoint not copied: %s; stopping the job", e)
            self._signal_child("a newer run of the job owns its checkpoints")
            return
        except Exception as e:
            retry = min(self._sync_retry, self.checkpoint_every)
            self._next_sync = now + retry
            self._sync_retry = min(2 * self._sync_retry, self.checkpoint_every)
            log.warning("checkpoint copy to %s failed (tried again in %.0f s): %s",
                        self.store.remote, retry, e)
            return
        self._sync_retry = SYNC_RETRY_S
        if deleted < 0:
            # the job was writing: tried again when the directory will have been quiet
            # for CHECKPOINT_SETTLE_S, not checkpoint_every seconds later
            quiet_at = self.store.last_change() + CHECKPOINT_SETTLE_S
            self._next_sync = now + min(max(0.0, quiet_at - time.time()), CHECKPOINT_SETTLE_S)
            return
        if written or deleted > 0:
            self._add_event({"event": "checkpoint-synced", "written": written,
                             "deleted": deleted})

    def _run_job(self) -> int:
        from themis.hadoop.checkpoint_mirror import checkpoint_steps

        # the step a job without JSON events resumes from: its newest checkpoint now
        steps = checkpoint_steps(self.checkpoint_dir) if self.checkpoint_dir else []
        self._restorable_step = steps[-1] if steps else 0
        self._child = subprocess.Popen(self.command, stdout=subprocess.PIPE, text=True,
                                       start_new_session=True, bufsize=1,
                                       env={**os.environ, **self._env})
        pump = threading.Thread(target=self._pump_stdout, args=(self._child.stdout,),
                                daemon=True)
        pump.start()
        watch = ThawWatch(self.fence_after, self._kill_thawed)
        watch.start()
        next_report = time.monotonic() + self.report_every
        while True:
            try:
                rc = self._child.wait(timeout=self._until_next_look(next_report))
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + self.report_every
                self._check_started()
                if self.report():
                    self._signal_child("asked by the AM")
                self._stop_past_target()
                self._kill_unstopped()
            if not self._signalled:  # a stopping job's directory is saved after its exit
                self._sync_checkpoints()
        watch.stop()
        pump.join(timeout=5)
        # a job that died of a stop's SIGTERM, or was killed at a thaw, may have been cut
        # in a checkpoint's write
        killed_at = self._held_term_at if rc in (-signal.SIGTERM, 128 + signal.SIGTERM) \
            else None
        if self._thawed_at is not None:
            killed_at = self._thawed_at
        if self._stopped_at_target and rc in STOPPED_STATUSES:
            # stopped here at its step target: the run reached it (docs/jobs.md)
            self._add_event({"event": "exit", "step": self._steps, "reason": "max-steps"})
            rc = 0
        self._check_started()
        self._release_slot()
        if self.store is not None and self.chief:
            # before the AM hears of the exit
            self._save_checkpoints(killed_at, failed=rc not in STOPPED_STATUSES)
        if self.upload is not None:
            self.upload.close()  # the last events, before the AM hears of the exit
            self._add_event({"event": "tensorboard-copied", "bytes": self.upload.uploaded})
        self._add_event({"event": "runner-exit", "status": rc})
        for _ in range(3):  # the AM may be briefly unreachable
            with self._lock:
                pending = bool(self._events)
            if not pending:
                break
            self.report(final=True)
            with self._lock:
                if not self._events:
                    break
            time.sleep(0.5)
        return rc


#: a job's exit status when it ended at its SIGTERM or the SIGKILL after (``bash -c`` that
#: did not exec its command: 128 + the signal)
STOPPED_STATUSES = (0, -signal.SIGTERM, 128 + signal.SIGTERM, -signal.SIGKILL,
                    128 + signal.SIGKILL)


def _int_env(name: str) -> int:
    try:
        return max(0, int(os.environ.get(name, "0")))
    except ValueError:
        return 0


def encode_command(command: str) -> str:
    """A shell command as the value of ``--command-b64``: only ``[A-Za-z0-9_=-]``, so it
    passes through any quoting of YARN's container launch script unchanged."""
    return base64.urlsafe_b64encode(command.encode()).decode("ascii")


def decode_command(value: str, p: argparse.ArgumentParser) -> str:
    try:
        return base64.b64decode(value.encode("ascii"), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeError) as e:
        p.error(f"--command-b64 {value[:40]!r}: not URL-safe base64 of a UTF-8 string ({e})")
    raise AssertionError("unreachable")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m themis.am.launchers.yarn.runner",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--am", required=True,
                   help="AM base URL, its tracking URL (http://NM_HOST:PORT of the AM's host)")
    p.add_argument("--job-id", required=True)
    p.add_argument("--run-id", type=int, default=0)
    p.add_argument("--logdir", type=Path, default=Path("tflogs"))
    p.add_argument("--report-every", type=float, default=1.0)
    p.add_argument("--start-slots", type=int, default=-1,
                   help="job start-ups at once on this node (default: its CPU cores; 0: no "
                        "limit)")
    p.add_argument("--slot-dir", default="", help="where the slot lock files live "
                   "(default: the temporary directory, shared by the node's containers)")
    p.add_argument("--slot-wait", type=float, default=60.0,
                   help="start anyway after waiting this long for a slot")
    p.add_argument("--tensorboard-dir", default="",
                   help="HDFS directory to copy the job's event files to (default: none; "
                        "WebHDFS at $THEMIS_WEBHDFS_URL as the app's user)")
    p.add_argument("--tensorboard-every", type=float, default=10.0,
                   help="seconds between two copies of the event files (default 10)")
    p.add_argument("--metric", default="eval_loss",
                   help="the objective's TensorFlow scalar tag, reported to the AM as the "
                        "job's value (default eval_loss)")
    p.add_argument("--checkpoint-dir", type=Path, default=None,
                   help="the job's local checkpoint directory ({checkpoint_dir}; default: "
                        "none). Its newest ckpt-<step> gives the step a job without JSON "
                        "events resumed from")
    p.add_argument("--checkpoint-store", default="",
                   help="HDFS directory that keeps --checkpoint-dir across runs: restored "
                        "before the job starts, saved after it exits (default: none; "
                        "WebHDFS at $THEMIS_WEBHDFS_URL as the app's user)")
    p.add_argument("--checkpoint-every", type=float, default=10.0,
                   help="seconds between two copies of --checkpoint-dir to "
                        "--checkpoint-store while the job runs, so that a run on a host that "
                        "dies resumes from a recent checkpoint (default 10; 0: only after "
                        "the job exited)")
    p.add_argument("--restore-wait", type=float, default=300.0,
                   help="seconds to keep retrying the restore from --checkpoint-store while "
                        "HDFS is unreachable (a DataNode lost, the NameNode restarting) "
                        "before the run gives up with exit status 4; the job never starts "
                        "from scratch instead (default 300)")
    p.add_argument("--command-b64", default="",
                   help="the job command as a shell string, base64 (RFC 4648 URL-safe) "
                        "encoded, run by `bash -c` (default: none, the command follows --). "
                        "The AM passes commands this way: YARN puts a container's command "
                        "inside double quotes in its launch script, where quotes, $ and "
                        "backquotes of the user's command would be taken by that shell")
    p.add_argument("--task", default="", metavar="TYPE:INDEX",
                   help="a distributed job's task (worker:0 is the chief, ps:0 ...): wait "
                        "for TF_CONFIG at the AM's rendezvous before starting the job "
                        "(default: none, a single-process job)")
    p.add_argument("--rendezvous-wait", type=float, default=600.0,
                   help="seconds to wait for the job's other tasks (default 600)")
    p.add_argument("--stop-grace", type=float, default=STOP_GRACE_S,
                   help="seconds a job may take to exit after its SIGTERM before it gets "
                        f"SIGKILL (default {STOP_GRACE_S:.0f})")
    p.add_argument("--fence-after", type=float, default=0.0,
                   help="seconds this host may be frozen before the job is taken for run "
                        "elsewhere and killed when the host thaws (the AM passes the "
                        "NodeManager liveness expiry less two heartbeats; default 0: never)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the job command")
    args = p.parse_args(argv)
    task = parse_task(args.task, p) if args.task else None
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.command_b64:
        if cmd:
            p.error("give the job command either after -- or as --command-b64, not both")
        cmd = ["bash", "-c", decode_command(args.command_b64, p)]
    if not cmd:
        p.error("no job command after --")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    slots = (os.cpu_count() or 1) if args.start_slots < 0 else args.start_slots
    upload = store = None
    url = os.environ.get("THEMIS_WEBHDFS_URL", "")
    if (args.tensorboard_dir or args.checkpoint_store) and not url:
        log.warning("no $THEMIS_WEBHDFS_URL: event files and checkpoints not kept in HDFS")
    elif args.tensorboard_dir or args.checkpoint_store:
        if task is not None and task != ("worker", 0):
            args.tensorboard_dir = ""  # the chief's event files are the job's
        from themis.hadoop.webhdfs import WebHdfs

        fs = WebHdfs.in_container(url, timeout=10.0)
        if args.tensorboard_dir:
            from themis.hadoop.tblogs import EventLogUpload

            upload = EventLogUpload(fs, args.logdir, args.tensorboard_dir)
        if args.checkpoint_store:
            from themis.hadoop.checkpoint_mirror import CheckpointMirror

            # the chief's container claims the job's directory (the other tasks only read)
            owner = os.environ.get("CONTAINER_ID", "") if task in (None, ("worker", 0)) else ""
            store = CheckpointMirror(fs, args.checkpoint_dir or Path(CKPT_DIR),
                                    args.checkpoint_store, owner=owner)
    return Runner(args.am, args.job_id, args.run_id, args.logdir, cmd, args.report_every,
                  start_slots=slots, slot_dir=args.slot_dir, slot_wait=args.slot_wait,
                  upload=upload, upload_every=args.tensorboard_every,
                  metric=args.metric, checkpoint_dir=args.checkpoint_dir, store=store,
                  task=task, rendezvous_wait=args.rendezvous_wait,
                  stop_grace=args.stop_grace, checkpoint_every=args.checkpoint_every,
                  restore_wait=args.restore_wait, fence_after=args.fence_after).run()


def parse_task(value: str, p: argparse.ArgumentParser) -> tuple[str, int]:
    """``--task worker:1`` as ("worker", 1)."""
    kind, _, index = value.partition(":")
    if kind not in ("worker", "ps") or not index.isdigit() or len(index) > 4:
        p.error(f"--task {value[:40]!r}: must be worker:N or ps:N")
    return kind, int(index)


if __name__ == "__main__":
    sys.exit(main())
