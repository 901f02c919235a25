"""YARN containers as job runs: :class:`YarnContainerLauncher`, the YARN AM's
:class:`themis.am.core.Launcher`, over the JVM shell (:class:`~.shell.Shell`).

A launch is a node-local container ask (``relaxLocality=false``) for the run's GPUs on its
node; when the RM allocates it, the AM's ``admit`` rule decides whether the lease there
still has room for a new run (else the container is given back unlaunched) and the
container is launched with the AM's job command (the runner, :mod:`.runner`). A stop is
the answer ``stop`` to the runner's next report: the runner sends SIGTERM, the job
checkpoints and exits, the container completes. Exits of containers the AM released, the
RM preempted or lost are stops too (the job resumes from its checkpoint); any other
non-zero exit is a failure.

A distributed job (:mod:`themis.am.taskgroup`) is one container per task on the run's node:
each worker's with its share of the GPUs, the parameter servers' without GPU. Their runners
meet at a rendezvous: each binds a free port on its container's host and sends it with its
reports; :meth:`YarnContainerLauncher.answer` hands every task its TF_CONFIG (the
containers' NodeManager hosts and the reported ports) once all tasks of the launch have
reported, and only then do the runners start the job command. Stopping one task stops the
group; when the chief's container completes, or another task's other than a worker's that
exited 0 on its own (at the step target), the others are stopped; the job's exit event
comes once every container of the group has completed: the chief's (worker 0's) outcome,
or a failure if another task failed.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from themis.am.core import JobLaunch, LaunchCode, LaunchEvent
from themis.am.launchers.yarn.records import INFERRED_START, Reallocation, Run
from themis.am.launchers.yarn.shell import Shell
from themis.am.taskgroup import PS, WORKER, TaskGroup, cluster_spec, tf_config

log = logging.getLogger("themis.am.launchers.yarn.am")

EXIT_PREEMPTED = -102  # ContainerExitStatus.PREEMPTED
EXIT_ABORTED = -100  # released by the AM / lost
EXIT_KILLED_BY_AM = -105  # KILLED_BY_APPMASTER
NOT_FAILURES = {EXIT_PREEMPTED, EXIT_ABORTED, EXIT_KILLED_BY_AM, -106, -107}
PRIORITY_GPU = 1
PRIORITY_PS = 2  # the GPU-less containers of parameter servers
PRIORITY_SERVICE = 3  # the app's own services (its TensorBoard container)
HOLDING = ("allocated", "launched", "running", "stopping")  # run states on a node's GPUs


class YarnContainerLauncher:
    def __init__(self, shell: Shell, *, memory_mb: int, vcores: int,
                 clock: Callable[[], float], lock: threading.Lock,
                 command_for: Callable[[Run], tuple[str, dict[str, str]]],
                 admit: Callable[[Run], bool] = lambda run: True,
                 on_progress: Callable[[Run, dict[str, Any]], None] = lambda run, r: None,
                 on_nodes_unusable: Callable[[list[str]], None] = lambda nodes: None,
                 stop_timeout_s: float = 60.0, ps_memory_mb: int = 1024,
                 ps_vcores: int = 1) -> None:
        self.shell = shell
        self.memory_mb = memory_mb
        self.vcores = vcores
        self.ps_memory_mb = ps_memory_mb
        self.ps_vcores = ps_vcores
        self.clock = clock
        self.lock = lock  # guards stop_set (read by the AM's HTTP thread)
        self.command_for = command_for
        self.admit = admit
        self.on_progress = on_progress
        self.on_nodes_unusable = on_nodes_unusable  # YARN took nodes out of service
        self.stop_timeout_s = stop_timeout_s
        self.runs: list[Run] = []
        self.by_container: dict[str, Run] = {}
        self.by_request: dict[int, Run] = {}
        self.reports: queue.Queue[dict[str, Any]] = queue.Queue()  # runners' reports
        self.stop_set: set[str] = set()  # containers whose runner must stop its job
        self.stop_durations: deque[float] = deque(maxlen=5)  # lease-end stop -> gone
        self.reallocations: list[Reallocation] = []
        self._moves: dict[int, Reallocation] = {}  # run id -> the reallocation it ended
        self.next_run = 1
        self.shutdown: str = ""  # why the RM ended the attempt ("" while it runs)
        self._events: list[LaunchEvent] = []
        # rendezvous of distributed jobs (read and written by the HTTP thread, under lock):
        # container -> (group, task, host); group -> its task group, its tasks' addresses
        self._members: dict[str, tuple[int, tuple[str, int], str]] = {}
        self._groups: dict[int, TaskGroup] = {}
        self._addresses: dict[int, dict[tuple[str, int], str]] = {}
        self._codes: dict[int, LaunchCode] = {}  # run id -> exit code of a group's task
        # containers that are not job runs (the app's TensorBoard: tbcontainer.py): request
        # id -> what to do with its allocation, container -> what to do when it completes
        self.service_asks: dict[int, Callable[[str, str], None]] = {}
        self.service_containers: dict[str, Callable[[int, str], None]] = {}

    # ---------------------------------------------------------------- Launcher
    def launch(self, run: JobLaunch) -> None:
        """Ask for a container with ``run.n_gpus`` GPUs on ``run.node`` (else the node of
        ``run.gpus``, ids ``<node>/<k>``)."""
        node = run.node or run.gpus[0].rsplit("/", 1)[0]
        group = run.group
        if not group.distributed:
            self._ask(run, node, run.n_gpus, (WORKER, 0), 0)
            return
        first = self.next_run
        with self.lock:
            self._groups[first] = group
            self._addresses[first] = {}
        per_worker = run.n_gpus // group.workers
        for task in group.tasks():
            self._ask(run, node, per_worker if task[0] == WORKER else 0, task, first)

    def _ask(self, run: JobLaunch, node: str, gpus: int, task: tuple[str, int],
             group: int) -> None:
        host = node.split(":")[0]
        ps = task[0] == PS
        rid = self.shell.request(host, self.ps_memory_mb if ps else self.memory_mb,
                                 self.ps_vcores if ps else self.vcores, gpus,
                                 PRIORITY_PS if ps else PRIORITY_GPU)
        r = Run(self.next_run, run.job_id, node, host, gpus, rid, t_requested=self.clock(),
                target_steps=run.target_steps, task=task[0], task_index=task[1], group=group)
        self.next_run += 1
        self.runs.append(r)
        self.by_request[rid] = r
        log.info("asking for %d GPU(s) on %s for %s %s %d (request %d)", r.gpus, node,
                 r.job_id, r.task, r.task_index, rid)

    def group_runs(self, run: Run) -> list[Run]:
        """The runs of ``run``'s launch (itself alone for a single-process job)."""
        if not run.group:
            return [run]
        return [r for r in self.runs if r.group == run.group]

    def answer(self, report: dict[str, Any]) -> dict[str, Any]:
        """The AM's answer to a runner's report (called by the AM's HTTP thread): ``stop``,
        and for a task of a distributed job that reported its ``port``, its ``tf_config``
        once every task of its launch has reported one."""
        cid = str(report.get("container", ""))
        with self.lock:
            out: dict[str, Any] = {"stop": cid in self.stop_set}
            member = self._members.get(cid)
            if member is None:
                return out
            group, task, host = member
            addresses = self._addresses.get(group)
            port = report.get("port")
            if addresses is None:
                return out
            if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
                addresses.setdefault(task, f"{host}:{port}")
            tasks = self._groups[group]
            if len(addresses) == len(tasks.tasks()):
                out["tf_config"] = tf_config(cluster_spec(tasks, addresses), task)
            return out

    def stop(self, job_id: str, reason: str, lease_expiry: float | None = None) -> None:
        for r in self.runs:
            if r.job_id == job_id and r.live:
                self.stop_run(r, reason, lease_expiry)

    def live(self) -> set[str]:
        return {r.job_id for r in self.runs if r.live or r.state == "stopping"}

    def poll(self, timeout_ms: int = 200) -> list[LaunchEvent]:
        for e in json.loads(self.shell.poll_events(timeout_ms)):
            self.handle_event(e)
        while True:
            try:
                self.handle_report(self.reports.get_nowait())
            except queue.Empty:
                break
        now = self.clock()
        for r in self.runs:  # stops that outlived their timeout: release (the NM kills it)
            if r.state == "stopping" and r.t_stop is not None and r.container \
                    and now - r.t_stop > self.stop_timeout_s:
                log.warning("%s did not stop within %.0fs: releasing %s", r.job_id,
                            self.stop_timeout_s, r.container)
                self.shell.release(r.container)
                r.t_stop = now
        out, self._events = self._events, []
        return out

    # ---------------------------------------------------------------- runs
    def stop_run(self, run: Run, reason: str, lease_expiry: float | None = None) -> None:
        """Withdraw an ask, or tell a live run's runner to stop its job (checkpoint); every
        task of a distributed job's launch."""
        for r in self.group_runs(run):
            self._stop_one(r, reason, lease_expiry)

    def _stop_one(self, run: Run, reason: str, lease_expiry: float | None = None) -> None:
        now = self.clock()
        if run.state == "requested":
            self.shell.cancel_request(run.request_id)
            self.by_request.pop(run.request_id, None)
            run.state, run.stop_reason, run.t_done = "done", reason, now
            return
        if not run.live:
            return
        log.info("stopping %s in %s on %s: %s", run.job_id, run.container, run.node, reason)
        run.state, run.stop_reason, run.t_stop = "stopping", reason, now
        run.lease_expiry = lease_expiry
        with self.lock:
            self.stop_set.add(run.container)

    def should_stop(self, container: str) -> bool:
        with self.lock:
            return container in self.stop_set

    def release_all(self) -> None:
        for r in self.runs:
            if r.container and (r.live or r.state == "stopping"):
                self.shell.release(r.container)
            elif r.state == "requested":
                self.shell.cancel_request(r.request_id)

    # ---------------------------------------------------------------- shell events
    def handle_event(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        now = self.clock()
        if kind == "allocated":
            service = self.service_asks.pop(int(e.get("request_id", -1)), None)
            if service is not None:
                service(str(e["container"]), str(e.get("node", "")))
                return
            run = self.by_request.pop(int(e.get("request_id", -1)), None)
            cid = str(e["container"])
            if run is None or run.state != "requested":
                log.info("releasing unexpected container %s on %s", cid, e.get("node"))
                self.shell.release(cid)
                return
            run.container, run.state, run.t_allocated = cid, "allocated", now
            run.node = str(e.get("node", run.node))
            self.by_container[cid] = run
            if not self.admit(run):
                run.state, run.stop_reason, run.t_done = "done", "lease ends too soon", now
                self.by_container.pop(cid, None)
                self.shell.release(cid)
                return
            if run.group:
                with self.lock:
                    self._members[cid] = (run.group, (run.task, run.task_index),
                                          run.node.split(":")[0])
            cmd, env = self.command_for(run)
            log.info("launching %s (run %d) in %s on %s", run.job_id, run.run_id, cid, run.node)
            self.shell.launch(cid, cmd, json.dumps(env))
        elif kind == "started":
            run = self.by_container.get(str(e["container"]))
            if run is not None and run.state == "allocated":
                run.state = "launched"
        elif kind == "start_failed":
            if str(e["container"]) in self.service_containers:
                log.warning("container %s failed to start: %s", e["container"],
                            e.get("message"))
                self.shell.release(str(e["container"]))
                return
            run = self.by_container.get(str(e["container"]))
            if run is not None:
                log.warning("container %s failed to start: %s", run.container, e.get("message"))
                self.shell.release(run.container)
        elif kind == "completed":
            done = self.service_containers.pop(str(e["container"]), None)
            if done is not None:
                done(int(e.get("exit_status", 0)), str(e.get("diagnostics", "")))
                return
            self._completed(str(e["container"]), int(e.get("exit_status", 0)),
                            str(e.get("diagnostics", "")))
        elif kind == "preemption":
            for cid in e.get("containers", []):
                run = self.by_container.get(str(cid))
                if run is not None and run.live:
                    self.stop_run(run, "preempted by the RM (lease expired)", lease_expiry=now)
        elif kind == "nodes_unusable":  # lost, decommissioned...: their containers
            self.on_nodes_unusable([str(n) for n in e.get("nodes", [])])  # complete apart
        elif kind == "shutdown":
            log.warning("the RM asked the AM to shut down")
            self.shutdown = "shutdown"
        elif kind == "error":
            log.error("AMRM client error: %s", e.get("message"))
            self.shutdown = str(e.get("message"))

    def _completed(self, cid: str, status: int, diagnostics: str) -> None:
        run = self.by_container.pop(cid, None)
        with self.lock:
            self.stop_set.discard(cid)
            self._members.pop(cid, None)
        if run is None:
            return
        event = self._run_ended(run, cid, status, diagnostics)
        if not run.group:
            self._events.append(event)
            return
        runs = self.group_runs(run)
        # the chief's end, or any other task's but a worker's own exit 0 (at the target,
        # like the chief), ends the group
        ends = run.chief or run.task == PS or self._codes[run.run_id] is not LaunchCode.REACHED
        if ends and any(r.live for r in runs):
            self.stop_run(run, f"{run.task} {run.task_index} of the job exited ({status})")
        if any(r.state != "done" for r in runs):
            return
        with self.lock:
            self._groups.pop(run.group, None)
            self._addresses.pop(run.group, None)
        chief = next(r for r in runs if r.chief)
        code = self._codes.pop(chief.run_id, LaunchCode.STOPPED)
        failed = [r for r in runs if self._codes.pop(r.run_id, None) is LaunchCode.FAILED]
        if code is not LaunchCode.REACHED and failed:
            f = failed[0]
            self._events.append(LaunchEvent(chief.job_id, LaunchCode.FAILED, chief.steps,
                                            f.exit_status, f"{f.task} {f.task_index} failed: "
                                            f"exit {f.exit_status} in {f.container}"))
            return
        self._events.append(LaunchEvent(chief.job_id, code, chief.steps, chief.exit_status,
                                        f"exit {chief.exit_status} in {chief.container}"))

    def _run_ended(self, run: Run, cid: str, status: int, diagnostics: str) -> LaunchEvent:
        """The exit event of one container (a task's, kept in ``_codes`` for its group's)."""
        now = self.clock()
        run.state, run.exit_status, run.t_done = "done", status, now
        if run.stop_reason:
            log.info("%s stopped in %s (%s), exit %d", run.job_id, cid, run.stop_reason, status)
            if run.lease_expiry is not None and run.t_stop is not None:
                self.stop_durations.append(now - run.t_stop)
            code = LaunchCode.STOPPED
        elif status == 0:  # without a stop request: the job reached its target (its
            code = LaunchCode.REACHED  # last report may still be on its way)
            run.steps = max(run.steps, run.target_steps)
        elif status in NOT_FAILURES:  # released, preempted, lost: resumes from checkpoint
            code = LaunchCode.STOPPED
        else:
            code = LaunchCode.FAILED
            log.warning("%s failed in %s with exit %d: %s", run.job_id, cid, status,
                        diagnostics[-500:])
        if run.group:
            self._codes[run.run_id] = code
        return LaunchEvent(run.job_id, code, run.steps, status,
                           f"exit {status} in {cid}; see its container logs")

    # ---------------------------------------------------------------- runner reports
    def handle_report(self, r: dict[str, Any]) -> None:
        run = self.by_container.get(str(r.get("container", "")))
        if run is None:  # a report after completion or from a stale run: events only
            run = next((x for x in self.runs if x.run_id == r.get("run_id")
                        and x.job_id == r.get("job_id")), None)
        if run is None:
            return
        now = self.clock()
        if run.state in ("allocated", "launched"):
            run.state = "running"
        if not run.stop_reason and any(e.get("event") == "stop-thawed"
                                       for e in r.get("events", [])):
            # its runner killed it when its frozen host thawed (thaw.py): a stop, as for
            # a lost node, not a failure
            run.stop_reason = "killed when its frozen host thawed"
        if not run.chief:  # a distributed job's other tasks: their container's state only
            return
        for e in r.get("events", []):
            ev = e.get("event")
            if ev == "start":
                self._started(run, e, now)
            elif ev == "checkpoint" and str(e.get("reason", "")).startswith("signal"):
                run.checkpoint_s = float(e.get("seconds", 0.0))
                run.checkpoint_step = int(e.get("step", 0))
            elif ev == "exit":
                run.steps = max(run.steps, int(e.get("step", 0)))
            elif ev == "stop-killed":  # the runner's SIGKILL after its stop grace
                log.warning("%s in %s on %s %s", run.job_id, run.container, run.node,
                            e.get("reason", "killed after its stop grace"))
        steps = r.get("steps")
        if isinstance(steps, int):
            run.steps = max(run.steps, steps)
        self.on_progress(run, r)

    def _started(self, run: Run, e: dict[str, Any], now: float) -> None:
        """A ``start`` event of ``run``. A run starts once: the runner's inference from the
        job's first event file (INFERRED_START) stands only until the job's own ``start``
        comes, which then restates the run's start - its time (when its restore ended) and
        the step it restored, in the run, its reallocation record and the core's job record
        (a job that opens its event writer before its restore ends, or whose ``start`` line
        the runner read after it saw the file). Any other later ``start`` is ignored."""
        inferred = e.get("from") == INFERRED_START
        restated = run.t_started is not None
        if restated and (inferred or not run.start_inferred):
            return
        run.t_started = float(e.get("time", now))
        run.start_inferred = inferred
        run.restored_step = int(e.get("step", 0)) if e.get("restored_from") else None
        run.restored_from = e.get("restored_from")
        run.steps = max(run.steps, int(e.get("step", 0)))
        if not (restated and run.state == "done"):  # (the core took the run as ended)
            self._events.append(LaunchEvent(run.job_id, LaunchCode.STARTED,
                                            run.restored_step, restated=restated))
        move = self._moves.get(run.run_id)
        if move is not None:
            move.started, move.restored_step = run.t_started, run.restored_step
            log.info("reallocation of %s restated by the job's own start: in %.2fs "
                     "(restored step %s)", run.job_id, move.latency_s, run.restored_step)
        elif not restated:
            self._note_reallocation(run)

    def _note_reallocation(self, run: Run) -> None:
        """A run restored from a checkpoint after a previous run of the job lost its lease."""
        # the job's previous run that actually ran (asks withdrawn or moved in between never
        # started and carry no lease end)
        prev = [x for x in self.runs if x.job_id == run.job_id and x.run_id < run.run_id
                and x.t_started is not None and x.chief]
        if not prev or run.t_started is None:
            return
        last = max(prev, key=lambda x: x.run_id)
        if last.lease_expiry is None or last.t_stop is None:
            return
        move = Reallocation(
            job_id=run.job_id, from_node=last.node, to_node=run.node,
            lease_expiry=last.lease_expiry, stop_requested=last.t_stop,
            stopped=last.t_done or last.t_stop, started=run.t_started,
            restored_step=run.restored_step, checkpoint_s=last.checkpoint_s,
            checkpoint_step=last.checkpoint_step)
        self.reallocations.append(move)
        self._moves[run.run_id] = move
        log.info("reallocation of %s: %s -> %s in %.2fs (restored step %s)", run.job_id,
                 last.node, run.node, run.t_started - last.lease_expiry, run.restored_step)
