"""The Python side of the Themis application master: ``python -m themis.am.launchers.yarn.am``,
started by the JVM shell (``org.themis.am.AppMaster``) with the Py4J gateway's port and
token in ``THEMIS_GATEWAY_PORT`` / ``THEMIS_GATEWAY_TOKEN``.

It hosts the app's Hyperband scheduler, the agent (gRPC client of the arbiter, bids from
the app model) and the job profiler (via the job runners' reports), and drives YARN through
the shell:

* GPUs come from the arbiter as leased GPU ids ``<node_id>/<k>``; the AM asks for
  node-local containers (``relaxLocality=false``) only on nodes where it holds leases, as
  many GPUs as it holds there, one container per job;
* a job whose node lease expired (or whose container the RM marks for preemption) is
  asked to stop: its runner sends SIGTERM, the job checkpoints to HDFS and exits, the
  container ends; the job is placed again when the app has GPUs, and resumes from its
  checkpoint (same step count);
* the Hyperband state, the agent's secret and restart counts are saved in HDFS
  (``<app dir>/state.json``); a new AM attempt resumes from there;
* ``GET /`` (= ``/status``) at the AM's tracking URL returns a JSON status: rho, GPUs, jobs,
  reallocations. The HTTP server (also the job runners' ``POST /api/report``, from any
  NodeManager host) binds and advertises the hosts of :func:`http_hosts`.

The controller (:class:`AppMaster`) is independent of Py4J and gRPC transport details: it
takes a :class:`Shell` (the JVM, or a fake in tests) and an arbiter address. Hyperband, the
bidder, the job lifecycle policy (resume, failures and retries) and the control loop are
the shared :class:`themis.am.core.AmCore` and :class:`themis.am.master.AppMasterBase`;
containers are started and stopped by
:class:`~themis.am.launchers.yarn.launcher.YarnContainerLauncher`. What stays here is
YARN's: which node to ask on and for how many GPUs (:meth:`AppMaster.reconcile`), the lease
margins' values (a stop lead measured from the app's own stops, no grace: YARN preempts a
container when its lease ends), the durable state in HDFS and the status page.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any

from themis.am.command import contract_env, render_command
from themis.am.hyperband import RungOutcome
from themis.am.launchers.yarn import persist
from themis.am.launchers.yarn.commands import container_command
from themis.am.launchers.yarn.http import start_http
from themis.am.launchers.yarn.launcher import YarnContainerLauncher
from themis.am.launchers.yarn.placement import reconcile
from themis.am.launchers.yarn.records import (
    Reallocation,
    Run,
    finite_or_none,
    node_of,
    parse_container_id,
)
from themis.am.launchers.yarn.runner import CKPT_DIR
from themis.am.launchers.yarn.shell import JvmShell, Shell
from themis.am.launchers.yarn.status import snapshot
from themis.am.launchers.yarn.tbcontainer import TensorBoardContainer, tbserve_command
from themis.am.launchers.yarn.thaw import fence_after
from themis.am.margins import LeaseMargins
from themis.am.master import AppMasterBase
from themis.am.spec import AppSpec
from themis.hadoop.dockerrt import check_nodes, container_env
from themis.hadoop.security import (
    REPORT_TOKEN_ENV,
    ReportTokens,
)
from themis.hadoop.tblogs import tensorboard_dir
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError
from themis.mechanism.bidder import AllocationInfo
from themis.mechanism.topology import Locality

log = logging.getLogger("themis.am.launchers.yarn.am")

#: seconds no ask is parked on a node YARN took out of service (it may come back: a
#: NodeManager that restarts registers again under the same id)
NODE_OUT_S = 60.0
#: How often the AM tells the arbiter its current rho (the loop's report, themis.am.master):
#: YARN leases last minutes and a round uses the latest value, while every report is a call
#: into the ResourceManager's engine (1,000 apps: 100 calls a second).
RHO_REPORT_S = 10.0

# parse_container_id, node_of, JvmShell and Shell are re-exported for existing callers.
__all__ = ["AppMaster", "JvmShell", "Shell", "node_of", "parse_container_id"]


# ------------------------------------------------------------------------------ the AM
class AppMaster(AppMasterBase):
    launcher: YarnContainerLauncher
    #: a job runs in one container of ``spec.job_gpus()`` GPUs whatever its rung (the ask
    #: of placement.reconcile, hence the app's container shape in the RM's rounds): the app
    #: model and the bids say so, else the bids name bundles the round cuts as partial
    #: containers (round._whole_containers) and an app holding no GPU never wins any
    whole_jobs = True

    def __init__(
        self,
        spec: AppSpec,
        app_id: str,
        shell: Shell,
        *,
        arbiter: str,
        hdfs: WebHdfs | None,
        app_dir: str,
        webhdfs_url: str = "http://127.0.0.1:9870",
        attempt: int = 1,
        python: str = "python3",
        clock: Callable[[], float] = time.time,
        heartbeat_ms: int = 250,
        stop_timeout_s: float = 60.0,
        report_every_s: float = 0.5,
        idle_release_s: float = 3.0,
        stop_lead_s: float = 1.5,
        start_margin_s: float = 5.0,
        rho_report_s: float = RHO_REPORT_S,
    ) -> None:
        super().__init__(spec, app_id, clock, report_s=rho_report_s)
        self.shell = shell
        self.arbiter = arbiter
        self.hdfs = hdfs
        self.app_dir = app_dir.rstrip("/")
        self.webhdfs_url = webhdfs_url
        self.attempt = attempt
        self.python = python
        self.heartbeat_ms = heartbeat_ms
        self.stop_timeout_s = stop_timeout_s
        self.report_every_s = report_every_s
        # a job's host frozen this long may have been taken for lost: its runner kills the
        # job at the thaw (thaw.py); YARN's defaults until __main__ reads the cluster's
        self.fence_after_s = fence_after(lambda _key, default: default)
        self.idle_release_s = idle_release_s
        self._no_park: dict[str, float] = {}  # node -> until when no ask is parked there
        self._released: set[str] = set()
        self.cluster_nodes: list[dict[str, Any]] = []
        self._nodes_at = -1e9
        self._lock = threading.Lock()
        self.launcher = YarnContainerLauncher(
            shell, memory_mb=spec.resources.memory_mb, vcores=spec.resources.vcores,
            clock=clock, lock=self._lock, command_for=self._command_for, admit=self._admit,
            on_progress=self._on_progress, on_nodes_unusable=self._nodes_unusable,
            stop_timeout_s=stop_timeout_s,
            ps_memory_mb=spec.ps.memory_mb, ps_vcores=spec.ps.vcores)
        self.margins = LeaseMargins(stop_lead_s=stop_lead_s, start_margin_s=start_margin_s,
                                    stop_durations=self.launcher.stop_durations)
        self._reports = self.launcher.reports  # filled by the HTTP thread
        self._stop_set = self.launcher.stop_set  # read by the HTTP thread (under _lock)
        self.start_time = self.counted_at = clock()  # GPU-seconds are counted from here
        self.busy_gpu_seconds = 0.0  # GPU-seconds of running job containers
        self.history: list[tuple[float, int, float | None]] = []  # (t, GPUs held, rho)
        self.final_rho: float | None = None  # JCT / T_id once the search is done
        self.state = "STARTING"
        self.message = ""
        self.tracking_url = ""
        self.http_host = "127.0.0.1"  # set by start_http (http_hosts)
        self.report_tokens = ReportTokens()  # per-container tokens of /api/report
        self.agent_options: dict[str, Any] = {}  # AgentClient's token and TLS (security.py)
        self._status: dict[str, Any] = {}
        self._dirty = True
        self._last_save = 0.0
        self._idle_since: dict[str, float] = {}
        self._shutdown = threading.Event()
        self._saved_secret: str | None = None
        self._saved_cluster_gpus = 0
        self._http: ThreadingHTTPServer | None = None
        self.tensorboard: TensorBoardContainer | None = None
        # with Docker images: node -> "" (runs YARN's Docker runtime) or why not (dockerrt)
        self.docker_nodes: dict[str, str] = {}

    # ----------------------------------------------------------------- persistence, HTTP
    def load_state(self) -> bool:
        return persist.load_state(self)

    def save_state(self, force: bool = False) -> None:
        persist.save_state(self, force)

    def start_http(self) -> str:
        self._http, self.tracking_url = start_http(self)
        return self.tracking_url

    # ----------------------------------------------------------------- agent
    def on_allocation(self, alloc: AllocationInfo) -> None:
        log.info("round %d: granted %s (bidder=%s, c=%.2f)", alloc.round_id,
                 [g.id for g in alloc.gpus], alloc.was_bidder, alloc.kept_fraction)
        self._released.difference_update(g.id for g in alloc.gpus)
        self._dirty = True

    def on_lease_warning(self, gpu_ids: tuple[str, ...], expiry: float) -> None:
        log.info("lease warning: %s expire at %.1f (in %.1fs)", list(gpu_ids), expiry,
                 expiry - self.clock())

    def _agent_connected(self) -> bool:
        return self.agent is not None and self.agent.connected.is_set()

    def current_rho(self, held: int) -> float | None:
        """The app's rho now; once the search is done, its final rho, JCT / T_id (Eq. 1 of
        the finished plan: no work left), frozen at the first look after the end."""
        if self.bidder is None:
            return None
        if self.hb.done:
            if self.final_rho is None:
                self.final_rho = self._final_rho()
            return self.final_rho
        value = self.bidder.live_rho(held, Locality.MACHINE, self.spec.max_gpus())
        return None if value is None else finite_or_none(value)

    def _final_rho(self) -> float | None:
        """JCT / T_id of the finished app: the bidder's rho of the app's final model (the
        bidder's copy is refreshed only while the search runs) with no GPU and no work
        left."""
        assert self.bidder is not None
        self.bidder.app = self.model()
        value = self.bidder.live_rho(0, Locality.MACHINE, self.spec.max_gpus())
        return None if value is None else finite_or_none(value)

    @property
    def runs(self) -> list[Run]:
        return self.launcher.runs

    @property
    def by_request(self) -> dict[int, Run]:
        return self.launcher.by_request

    @property
    def reallocations(self) -> list[Reallocation]:
        return self.launcher.reallocations

    # ----------------------------------------------------------------- launcher hooks
    def _nodes_unusable(self, nodes: list[str]) -> None:
        """YARN took ``nodes`` out of service (LOST after the NodeManager liveness expiry,
        decommissioned, shut down, unhealthy). The RM ended the app's leases there when it
        removed the node (docs/yarn.md, "Faults"), so the agent's view drops them too:
        otherwise the AM would keep asking for containers where none can come until the
        leases' expiry, and not bid for GPUs elsewhere meanwhile. Its runs there end
        apart (the RM completes their containers as aborted: they resume from their
        checkpoints, :data:`~themis.am.launchers.yarn.launcher.NOT_FAILURES`); asks
        waiting there are withdrawn and placed again."""
        gone = set(nodes)
        dropped: list[str] = []
        if self.agent is not None:
            with self.agent._lock:
                dropped = [g for g in self.agent.leases if node_of(g) in gone]
                for g in dropped:
                    del self.agent.leases[g]
        for r in self.runs:  # asks waiting there: withdrawn, placed again next pass
            if r.state == "requested" and r.node in gone:
                self._stop(r, f"{r.node} out of service")
        until = self.clock() + NODE_OUT_S
        for n in gone:  # no ask parked there for a while (it may come back)
            self._no_park[n] = max(self._no_park.get(n, 0.0), until)
        log.warning("nodes out of service: %s; their leased GPUs dropped: %s", sorted(gone),
                    sorted(dropped))
        self._dirty = True

    def _admit(self, run: Run) -> bool:
        """Whether an allocated container may be launched: a lease on its node still has
        room for a new run. Otherwise (allocated on a lease that ends before the job could
        do useful work, or one the AM does not know) it is given back unlaunched, and no
        ask is parked on this node again until its leases end (the RM would allocate it
        again)."""
        now = self.clock()
        if not self._docker_ready(run.node):
            self._no_park[run.node] = float("inf")
            log.error("releasing %s on %s unlaunched: %s", run.container, run.node,
                      self.docker_nodes[run.node])
            return False
        room = sum(1 for g in self.placeable_leases(now) if node_of(g) == run.node)
        busy = sum(r.gpus for r in self.runs if r is not run and r.node == run.node
                   and r.state in ("allocated", "launched", "running"))
        if room - busy >= run.gpus:
            return True
        ends = [exp for g, exp in self.leases().items() if node_of(g) == run.node]
        self._no_park[run.node] = max(ends, default=now + 5.0)
        log.info("releasing %s on %s unlaunched: no lease there has room for a new run "
                 "(%d placeable GPU(s), %d in use)", run.container, run.node, room, busy)
        return False

    def _docker_ready(self, node: str) -> bool:
        """Whether a job may run on ``node``: always without Docker images; with them, only
        where the NodeManager runs YARN's Docker runtime (checked once per node: at start
        for every node with GPUs, later for a node that joined since), else the image would
        be ignored there."""
        if not self.spec.uses_docker:
            return True
        if node not in self.docker_nodes:
            self.refresh_nodes(force=True)
            entry = [n for n in self.cluster_nodes if str(n.get("node")) == node]
            self.docker_nodes[node] = (check_nodes(entry) if entry
                                       else f"{node} is not a running NodeManager")
        return not self.docker_nodes[node]

    def _command_for(self, run: Run) -> tuple[str, dict[str, str]]:
        """The container command (the runner around the job command) and environment."""
        values = {**self.core.placeholders(run.job_id, logdir="tflogs", checkpoint_dir=CKPT_DIR,
                                           checkpoint_uri=self.checkpoint_uri(run.job_id)),
                  "max_steps": self.hb.jobs[run.job_id].target_steps, "num_gpus": run.gpus}
        job_cmd = render_command(self.spec, values, run.task)
        cmd = container_command(
            self.python, self.tracking_url.rstrip("/"), run.job_id, run.run_id,
            tensorboard_dir(self.app_dir, run.job_id), self.report_every_s, job_cmd,
            self.spec.objective.metric, f"{self.app_dir}/ckpt-dir/{run.job_id}",
            task=(run.task, run.task_index) if run.group else None,
            fence_after_s=self.fence_after_s)
        env = {**self._base_env(self.spec.docker_image_of(run.task)),
               "TF_CPP_MIN_LOG_LEVEL": "2", **contract_env(values), **self.spec.env,
               REPORT_TOKEN_ENV: self.report_tokens.token_for(run.container)}
        log.info("job command of %s (run %d): %s", run.job_id, run.run_id, job_cmd)
        return cmd, env

    def _base_env(self, image: str) -> dict[str, str]:
        """Every container's environment: HDFS, PATH (the AM's python first), the image."""
        bindir = os.path.dirname(self.python) if os.path.isabs(self.python) else ""
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        # the app's user towards HDFS: its name on a pseudo-auth cluster (themis submit set
        # it); on a secure one the container's delegation tokens (AmShell.launch) say it
        user = {"HADOOP_USER_NAME": os.environ["HADOOP_USER_NAME"]} \
            if os.environ.get("HADOOP_USER_NAME") else {}
        return {"THEMIS_WEBHDFS_URL": self.webhdfs_url, **user,
                "PATH": f"{bindir}:{path}" if bindir else path, "PYTHONUNBUFFERED": "1",
                **container_env(image)}

    def start_tensorboard(self) -> None:
        """The app's TensorBoard container (spec ``tensorboard``; tbcontainer.py)."""
        tb = self.spec.tensorboard
        if tb is None:
            return
        publish = f"{self.app_dir}/tensorboard.json"
        self.tensorboard = TensorBoardContainer(
            tb, self.launcher, command=tbserve_command(
                self.python, tensorboard_dir(self.app_dir), publish),
            env=self._base_env(tb.docker_image), publish=publish, hdfs=self.hdfs,
            clock=self.clock)
        self.refresh_nodes(force=True)
        nodes = [n for n in self.cluster_nodes
                 if not tb.docker_image or int(n.get("gpus", 0) or 0) > 0]
        hosts = sorted({str(n["host"]) for n in nodes})
        here = os.environ.get("NM_HOST", "")
        if here in hosts:  # the AM's own host first
            hosts.remove(here)
            hosts.insert(0, here)
        self.tensorboard.start(hosts)

    def _on_progress(self, run: Run, r: dict[str, Any]) -> None:
        """A runner's report: steps, the objective's value, serial iteration time."""
        loss, it = r.get("loss"), r.get("serial_iter_time")
        if run.job_id not in self.hb.jobs:
            return
        self._dirty = True
        try:
            self.core.progress(run.job_id, run.steps,
                               float(loss) if isinstance(loss, int | float) else None,
                               float(it) if isinstance(it, int | float) and it > 0 else None,
                               source=r.get("objective_source"), tags=r.get("tags") or ())
        except ValueError as e:
            log.warning("report from %s: %s", run.job_id, e)

    def _on_outcome(self, outcome: RungOutcome) -> None:
        log.info("rung done: bracket %d rung %d; promoted %s, stopped %s, finished %s, "
                 "started %s", outcome.bracket, outcome.rung, list(outcome.promoted),
                 list(outcome.stopped), list(outcome.finished), list(outcome.started))

    def checkpoint_uri(self, job_id: str) -> str:
        base = self.webhdfs_url.replace("http://", "webhdfs://").rstrip("/")
        return f"{base}{self.app_dir}/ckpt/{job_id}"

    def _stop(self, run: Run, reason: str, lease_expiry: float | None = None) -> None:
        self.launcher.stop_run(run, reason, lease_expiry)
        self._dirty = True

    def _request(self, job_id: str, node: str, gpus: int) -> None:
        self.launcher.launch(self.core.launch_for(job_id, node=node, count=gpus))

    def stop_lead(self, gpu: str = "") -> float:
        """How long before a lease ends its runs are told to stop (:mod:`themis.am.margins`)."""
        return self.margins.stop_lead(gpu)

    def usable_leases(self, now: float) -> dict[str, float]:
        """Leased GPU id -> expiry, for leases that run past ``now + stop_lead`` (a run on
        a GPU whose lease ends sooner is stopped now, so that its checkpoint is written and
        the GPU is free when the lease ends)."""
        return self.margins.usable(self.leases(), now)

    def placeable_leases(self, now: float) -> dict[str, float]:
        """The usable leases a *new* run may start on (the margins' start margin more)."""
        return self.margins.placeable(self.leases(), now)

    def reconcile(self, usable: dict[str, float] | None = None,
                  placeable: dict[str, float] | None = None) -> None:
        """YARN's placement (the loop's :meth:`place`; :func:`.placement.reconcile`)."""
        now = self.clock()
        reconcile(self, now, self.usable_leases(now) if usable is None else usable,
                  self.placeable_leases(now) if placeable is None else placeable)

    def refresh_nodes(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._nodes_at < 10.0:
            return
        self._nodes_at = now
        try:
            self.cluster_nodes = json.loads(self.shell.nodes())
        except Exception as e:
            log.warning("cannot list the cluster's nodes: %s", e)

    def demand_node(self) -> str:
        """Where a waiting job's ask is parked while the app holds no free leased GPU: the
        node with the most GPUs (ties: name) that can hold one job (all of its workers),
        preferring nodes where the app holds no lease (there the RM cannot commit the ask: a
        parked ask next to the app's own runs would be allocated the moment one of them
        stops before its lease ends, and then be given back)."""
        g = self.spec.job_gpus()
        nodes = [n for n in self.cluster_nodes if int(n.get("gpus", 0)) >= g]
        if not nodes:
            return ""
        now = self.clock()
        nodes = [n for n in nodes if self._no_park.get(str(n["node"]), 0.0) <= now]
        if not nodes:
            return ""
        leased = {node_of(x) for x in self.leases()}
        best = max(nodes, key=lambda n: (str(n["node"]) not in leased, int(n["gpus"]),
                                         str(n["node"])))
        return str(best["node"])

    def _lease_end(self, node: str, now: float) -> float:
        """When the app's lease on ``node`` ends (the latest expiry of its GPUs there that
        are no longer usable), else now."""
        ends = [exp for gid, exp in self.leases().items()
                if node_of(gid) == node and exp <= now + self.stop_lead(gid)]
        return max(ends) if ends else now

    def snapshot(self) -> dict[str, Any]:
        return snapshot(self)

    def _publish(self) -> None:
        snap = self.snapshot()
        with self._lock:
            self._status = snap

    # ----------------------------------------------------------------- loop hooks
    def poll_launcher(self) -> None:
        super().poll_launcher()
        if self.launcher.shutdown and not self._shutdown.is_set():
            if self.launcher.shutdown != "shutdown":
                self.message = self.launcher.shutdown
            self._shutdown.set()

    def on_event(self, ev: Any) -> None:
        self._dirty = True

    def note(self, line: str) -> None:
        log.warning("%s", line)

    def account(self, now: float, held: list[str], dt: float) -> None:
        self.busy_gpu_seconds += dt * sum(r.gpus for r in self.runs if r.state == "running")
        if not self.history or now - self.history[-1][0] >= 1.0:
            self.history.append((round(now, 2), len(held), self.current_rho(len(held))))

    def placing(self) -> bool:
        return self.state in ("RUNNING", "STARTING") and not self._shutdown.is_set()

    def place(self, now: float, usable: dict[str, float], placeable: dict[str, float]) -> None:
        self.refresh_nodes()
        self.reconcile(usable, placeable)
        if self.tensorboard is not None:
            self.tensorboard.tick()

    def wind_down(self, now: float) -> None:
        """Asks withdrawn and runs of stopped trials stopped; finishing runs end alone."""
        if self.placing():
            self.place(now, self.usable_leases(now), self.placeable_leases(now))

    def release_runs(self, outcome: str) -> None:
        if self.tensorboard is not None:
            self.tensorboard.stop()
        self.launcher.release_all()

    def publish(self, now: float) -> None:
        self.shell.set_progress(self.core.progress_fraction())
        self.save_state()
        self._publish()

    def on_finished(self, now: float, outcome: str) -> None:
        """YARN's end of the app: the final state, saved, ``result.json`` in HDFS and, when
        the search ended, the unregistration with the RM (killed or crashed: YARN decides
        whether another attempt runs)."""
        self.state = {"done": "FINISHED", "failed": "FAILED", "killed": "KILLED",
                      "crashed": "CRASHED"}[outcome]
        if outcome == "failed" and not self.message and self.core.objective_never_seen:
            self.message = self.core.objective_failure()
        elif outcome == "failed" and not self.message and self.hb.jobs:
            failed = self.core.record(next(iter(self.hb.jobs)))
            self.message = (f"every job failed {failed.failures} times (last exit "
                            f"{failed.last_exit}); see their container logs")
        self._publish()
        self.save_state(force=True)
        result = {"state": self.state, "message": self.message, "best": self.core.best_json(),
                  "top": self.core.top(10), "status": self.snapshot()}
        if self.hdfs is not None:
            try:
                self.hdfs.write(f"{self.app_dir}/result.json", json.dumps(result).encode())
            except WebHdfsError as e:
                log.warning("cannot write result.json: %s", e)
        if outcome in ("done", "failed"):
            msg = self.message or self.core.best_line() or "done"
            self.shell.finish("SUCCEEDED" if outcome == "done" else "FAILED", msg,
                              self.tracking_url)

    # ----------------------------------------------------------------- main
    def run(self) -> int:
        self.load_state()
        url = self.start_http()
        self._publish()
        reg = json.loads(self.shell.start(self.http_host, 0, url, self.heartbeat_ms))
        for c in reg.get("previous_containers", []):  # not kept across attempts: give back
            self.shell.release(str(c["container"]))
        self._publish_am_info()
        try:
            if self.spec.uses_docker:  # every GPU NodeManager must honour the image (dockerrt)
                self.refresh_nodes(force=True)
                refused = check_nodes(self.cluster_nodes)
                self.docker_nodes = {str(n["node"]): "" for n in self.cluster_nodes
                                     if not refused and int(n.get("gpus", 0) or 0) > 0}
                if refused:
                    self.message = refused
                    log.error("%s", refused)
                    self.finish(self.clock(), "failed")
                    return 1
            self.start_agent(self.arbiter, max_gpus=self.spec.max_gpus(),
                             cluster_gpus=self._saved_cluster_gpus, secret=self._saved_secret,
                             **self.agent_options)
            self.start_tensorboard()
            self.state = "RUNNING"
            log.info("AM for %s (attempt %d) running; tracking URL %s; arbiter %s; max GPUs %d",
                     self.app_id, self.attempt, url, self.arbiter, self.spec.max_gpus())
            while not self._shutdown.is_set() and not self.ended:
                self.tick()
        finally:
            self.finish(self.clock(), "killed" if self._killed else "crashed")
        return 0 if self.state == "FINISHED" else 1

    _killed = False

    def kill(self) -> None:
        self._killed = True
        self._shutdown.set()

    def _publish_am_info(self) -> None:
        if self.hdfs is None:
            return
        info = {"tracking_url": self.tracking_url, "attempt": self.attempt,
                "pid": os.getpid(), "started": self.clock()}
        try:
            self.hdfs.write(f"{self.app_dir}/am.json", json.dumps(info).encode())
        except WebHdfsError as e:
            log.warning("cannot publish am.json: %s", e)


if __name__ == "__main__":
    # ``python -m themis.am.launchers.yarn.am``, as AM jars of earlier releases start it:
    # the package's entry point (run by name, so that this module does not import it)
    import runpy

    runpy.run_module("themis.am.launchers.yarn", run_name="__main__", alter_sys=True)
