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
bidder and the job lifecycle policy (resume, failures and retries) are the shared
:class:`themis.am.core.AmCore` and :class:`~themis.am.core.AppMasterBase`; containers are
started and stopped by :class:`~themis.am.launchers.yarn.launcher.YarnContainerLauncher`. What
stays here is YARN's placement: which node to ask on, for how many GPUs, and when to stop a
run before its lease ends.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from themis.am.core import AppMasterBase
from themis.am.hyperband import JobStatus, RungOutcome
from themis.am.launchers.yarn.launcher import HOLDING, YarnContainerLauncher
from themis.am.launchers.yarn.records import (
    Reallocation,
    Run,
    finite_or_none,
    node_of,
    parse_container_id,
)
from themis.am.launchers.yarn.report import (
    REPORT_READ_TIMEOUT_S,
    ReportRefused,
    content_length,
    parse_report,
)
from themis.am.launchers.yarn.runner import CKPT_DIR, encode_command
from themis.am.launchers.yarn.shell import JvmShell, Shell
from themis.am.launchers.yarn.tbcontainer import TensorBoardContainer, tbserve_command
from themis.am.spec import AppSpec, contract_env, render_command
from themis.hadoop.dockerrt import check_nodes, container_env
from themis.hadoop.security import (
    REPORT_CONTAINER_HEADER,
    REPORT_TOKEN_ENV,
    REPORT_TOKEN_HEADER,
    ReportTokens,
    agent_options,
)
from themis.hadoop.tblogs import tensorboard_dir
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError
from themis.mechanism.bidder import AllocationInfo
from themis.mechanism.topology import Locality

log = logging.getLogger("themis.am.launchers.yarn.am")

# parse_container_id, node_of, JvmShell and Shell are re-exported for existing callers.
__all__ = ["AppMaster", "JvmShell", "Shell", "main", "node_of", "parse_container_id"]


# ------------------------------------------------------------------------------ the AM
class AppMaster(AppMasterBase):
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
    ) -> None:
        super().__init__(spec, app_id, clock)
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
        self.idle_release_s = idle_release_s
        self.stop_lead_s = stop_lead_s
        self.start_margin_s = start_margin_s
        self._lease_len: dict[str, float] = {}  # GPU id -> length of its current lease
        self._no_park: dict[str, float] = {}  # node -> until when no ask is parked there
        self._released: set[str] = set()
        self.cluster_nodes: list[dict[str, Any]] = []
        self._nodes_at = -1e9
        self.rounds: list[dict[str, Any]] = []  # allocation events received
        self._lock = threading.Lock()
        self.launcher = YarnContainerLauncher(
            shell, memory_mb=spec.resources.memory_mb, vcores=spec.resources.vcores,
            clock=clock, lock=self._lock, command_for=self._command_for, admit=self._admit,
            on_progress=self._on_progress, stop_timeout_s=stop_timeout_s,
            ps_memory_mb=spec.ps.memory_mb, ps_vcores=spec.ps.vcores)
        self._reports = self.launcher.reports  # filled by the HTTP thread
        self._stop_set = self.launcher.stop_set  # read by the HTTP thread (under _lock)
        self.start_time = self.counted_at = clock()  # GPU-seconds are counted from here
        self.busy_gpu_seconds = 0.0  # GPU-seconds of running job containers
        self.history: list[tuple[float, int, float | None]] = []  # (t, GPUs held, rho)
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

    # ----------------------------------------------------------------- persistence
    def _state_path(self) -> str:
        return f"{self.app_dir}/state.json"

    def load_state(self) -> bool:
        if self.hdfs is None:
            return False
        try:
            raw = self.hdfs.read_latest(self._state_path())
        except WebHdfsError as e:
            log.warning("cannot read saved state: %s", e)
            return False
        if raw is None:
            return False
        try:
            d = json.loads(raw)
            self.core.restore(d)
        except (ValueError, AttributeError) as e:
            log.warning("saved state unusable (%s): starting the app from scratch", e)
            return False
        self.start_time = float(d.get("start_time", self.start_time))
        self._saved_secret = d.get("agent_secret") or None
        self._saved_cluster_gpus = int(d.get("cluster_gpus", 0))
        self.gpu_seconds = float(d.get("gpu_seconds", 0.0))
        self.busy_gpu_seconds = float(d.get("busy_gpu_seconds", 0.0))
        self.launcher.next_run = int(d.get("next_run", 1))
        self.launcher.reallocations = [Reallocation(**r) for r in d.get("reallocations", [])]
        log.info("resumed from HDFS state of attempt %s: bracket %d rung %d, %d jobs",
                 d.get("attempt"), self.hb.bracket_index, self.hb.rung_index, len(self.hb.jobs))
        return True

    def save_state(self, force: bool = False) -> None:
        if self.hdfs is None or not (self._dirty or force):
            return
        now = self.clock()
        if not force and now - self._last_save < 2.0:
            return
        doc = {
            **self.core.to_state(), "app_id": self.app_id, "attempt": self.attempt,
            "start_time": self.start_time, "saved": now,
            "agent_secret": getattr(self.agent, "secret", None) or self._saved_secret,
            "cluster_gpus": self.bidder.cluster_gpus if self.bidder else 0,
            "gpu_seconds": self.gpu_seconds, "busy_gpu_seconds": self.busy_gpu_seconds,
            "next_run": self.launcher.next_run,
            "reallocations": [asdict(r) for r in self.reallocations],
        }
        try:
            self.hdfs.write_atomic(self._state_path(), json.dumps(doc).encode())
            self._dirty = False
            self._last_save = now
        except WebHdfsError as e:
            log.warning("cannot save state: %s", e)

    # ----------------------------------------------------------------- HTTP
    def start_http(self) -> str:
        am = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REPORT_READ_TIMEOUT_S

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("http: " + fmt, *args)

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.split("?")[0].rstrip("/") in ("", "/status", "/ws/v1/status"):
                    with am._lock:
                        self._send(200, am._status)
                else:
                    self._send(404, {"error": f"no such path {self.path}"})

            def do_POST(self) -> None:
                """A runner's report (themis.am.launchers.yarn.report): its container's token
                before its body, a bounded body, a checked shape; a refused report changes
                nothing."""
                if self.path != "/api/report":
                    self.close_connection = True  # the body is not read
                    self._send(404, {"error": f"no such path {self.path}"})
                    return
                container = self.headers.get(REPORT_CONTAINER_HEADER)
                try:
                    refused = am.report_tokens.check(container,
                                                     self.headers.get(REPORT_TOKEN_HEADER))
                    if refused is not None:
                        raise ReportRefused(*refused)
                    n = content_length(self.headers.get("Content-Length"))
                    data = self.rfile.read(n)
                    if len(data) != n:
                        raise ReportRefused(400, f"body of {len(data)} bytes, Content-Length "
                                                 f"says {n}")
                    body = parse_report(data, str(container))  # a str: checked above
                except ReportRefused as e:
                    self.close_connection = True  # the body may be unread
                    self._send(e.status, {"error": e.message})
                    return
                except OSError as e:  # the client went away or stalled (timeout)
                    log.debug("report from %s: %s", container, e)
                    self.close_connection = True
                    return
                am._reports.put(body)
                self._send(200, am.launcher.answer(body))

        bind, self.http_host = http_hosts(os.environ)
        self._http = ThreadingHTTPServer((bind, 0), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="am-http", daemon=True).start()
        port = self._http.server_address[1]
        self.tracking_url = f"http://{url_host(self.http_host)}:{port}/"
        return self.tracking_url

    # ----------------------------------------------------------------- agent
    def _on_allocation(self, alloc: AllocationInfo) -> None:
        log.info("round %d: granted %s (bidder=%s, c=%.2f)", alloc.round_id,
                 [g.id for g in alloc.gpus], alloc.was_bidder, alloc.kept_fraction)
        self._released.difference_update(g.id for g in alloc.gpus)
        now = self.clock()
        for g in alloc.gpus:
            self._lease_len[g.id] = max(0.0, alloc.expiry - now)
        self.rounds.append({"round": alloc.round_id, "time": self.clock(),
                            "gpus": [g.id for g in alloc.gpus], "vias": list(alloc.vias),
                            "expiry": alloc.expiry, "was_bidder": alloc.was_bidder,
                            "kept_fraction": alloc.kept_fraction})
        self._dirty = True

    def _on_lease_warning(self, gpu_ids: tuple[str, ...], expiry: float) -> None:
        log.info("lease warning: %s expire at %.1f (in %.1fs)", list(gpu_ids), expiry,
                 expiry - self.clock())

    def _agent_connected(self) -> bool:
        return self.agent is not None and self.agent.connected.is_set()

    def current_rho(self, held: int) -> float | None:
        if self.bidder is None or self.hb.done:
            return None
        value = self.bidder.live_rho(held, Locality.MACHINE, self.spec.max_gpus())
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
            task=(run.task, run.task_index) if run.group else None)
        env = {**self._base_env(self.spec.docker_image_of(run.task)),
               "TF_CPP_MIN_LOG_LEVEL": "2", **contract_env(values), **self.spec.env,
               REPORT_TOKEN_ENV: self.report_tokens.token_for(run.container)}
        log.info("job command of %s (run %d): %s", run.job_id, run.run_id, job_cmd)
        return cmd, env

    def _base_env(self, image: str) -> dict[str, str]:
        """Every container's environment: HDFS, PATH (the AM's python first), the image."""
        bindir = os.path.dirname(self.python) if os.path.isabs(self.python) else ""
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        return {"THEMIS_WEBHDFS_URL": self.webhdfs_url, "HADOOP_USER_NAME": "root",
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
                               float(it) if isinstance(it, int | float) and it > 0 else None)
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
        """How long before a lease ends its runs are told to stop: ``stop_lead_s``, or 1.25x
        the longest of the app's last five lease-end stops (request -> container gone:
        checkpoint, exit) if longer, so that the GPUs are free when the lease ends; at most a
        quarter of the lease."""
        lead = max([self.stop_lead_s, *(1.25 * d for d in self.launcher.stop_durations)])
        length = self._lease_len.get(gpu)
        return min(lead, 0.25 * length) if length else lead

    def _start_margin(self, gpu: str) -> float:
        length = self._lease_len.get(gpu)
        return min(self.start_margin_s, 0.125 * length) if length else self.start_margin_s

    def usable_leases(self, now: float) -> dict[str, float]:
        """Leased GPU id -> expiry, for leases that run past ``now + stop_lead`` (a run on
        a GPU whose lease ends sooner is stopped now, so that its checkpoint is written and
        the GPU is free when the lease ends)."""
        return {g: exp for g, exp in self.leases().items() if exp > now + self.stop_lead(g)}

    def placeable_leases(self, now: float) -> dict[str, float]:
        """The usable leases a *new* run may start on: those lasting ``start_margin_s``
        (at most an eighth of the lease) past the stop lead. A job needs seconds to start;
        one started on a lease about to end would be stopped before it trained."""
        return {g: exp for g, exp in self.leases().items()
                if exp > now + self.stop_lead(g) + self._start_margin(g)}

    def reconcile(self) -> None:
        now = self.clock()
        usable = self.usable_leases(now)
        held = Counter(node_of(g) for g in usable)
        room = Counter(node_of(g) for g in self.placeable_leases(now))
        g = self.spec.job_gpus()  # a job's GPUs (all of a distributed job's workers')
        holding = [r for r in self.runs if r.state in HOLDING]
        # 1. containers on nodes where the app no longer holds enough GPUs: stop (checkpoint)
        for node in sorted({r.node for r in holding}):
            on_node = [r for r in holding if r.node == node]
            # runs already stopping are on their way out: only the others must fit
            excess = sum(r.gpus for r in on_node if r.state != "stopping") - held.get(node, 0)
            for r in sorted((r for r in on_node if r.live), key=lambda r: -r.run_id):
                if excess <= 0:
                    break
                if not r.live:  # stopped with its task group meanwhile
                    continue
                self._stop(r, f"lease on {node} ends", lease_expiry=self._lease_end(node, now))
                excess -= sum(x.gpus for x in self.launcher.group_runs(r) if x.node == node)
        # 2. runs of jobs Hyperband no longer runs: stop early-stopped ones, withdraw asks
        for r in self.runs:
            job = self.hb.jobs.get(r.job_id)
            if job is None or job.status is JobStatus.RUNNING:
                continue
            if r.state == "requested" or (r.live and job.status is JobStatus.STOPPED):
                self._stop(r, f"job is {job.status.value}")
        # 3. every waiting job has one node-local ask: on a node with free leased GPUs when
        #    there is one, else parked on the demand node (the RM commits nothing there
        #    without a lease; the pending ask is what makes the app take part in rounds)
        used: Counter[str] = Counter()
        for r in self.runs:
            if r.state in HOLDING:
                used[r.node] += r.gpus
        # free for new runs: GPUs no run uses, on leases that last long enough to start one
        free = {n: min(held[n] - used.get(n, 0), room.get(n, 0)) for n in held}
        asks = [r for r in self.runs if r.state == "requested"]
        parked: list[Run] = []  # one run per parked launch (a task group moves whole)
        for r in sorted(asks, key=lambda r: r.run_id):
            if free.get(r.node, 0) >= r.gpus:
                free[r.node] -= r.gpus
            elif all(p.job_id != r.job_id for p in parked):
                parked.append(r)
        busy_jobs = {r.job_id for r in self.runs if r.live or r.state == "stopping"}
        waiting = sorted((j for j in self.core.runnable() if j.id not in busy_jobs),
                         key=lambda j: (-j.iters_left, j.id))
        cap = self.spec.max_parallel_jobs or 10**9
        active = len({r.job_id for r in self.runs if r.live})  # jobs, not task runs
        for r in parked:  # move parked asks to won nodes
            nodes = [n for n, f in free.items() if f >= g]
            if not nodes:
                break
            node = max(nodes, key=lambda n: (free[n], n))
            self._stop(r, f"ask moved to {node}")
            self._request(r.job_id, node, g)
            free[node] -= g
        unplaced = 0
        for job in waiting:
            if active >= cap:
                unplaced += 1
                continue
            nodes = [n for n, f in free.items() if f >= g]
            if nodes:
                node = max(nodes, key=lambda n: (free[n], n))
                free[node] -= g
            else:
                unplaced += 1
                # no parked asks before the agent is connected: the RM would count them as
                # demand and grant the app leases whose allocation events it never receives
                node = self.demand_node() if self._agent_connected() else ""
                if not node:
                    continue
            self._request(job.id, node, g)
            active += 1
        # 4. give back GPUs the app cannot use: leases about to end at once, others after
        #    idle_release_s without a job to place on them
        give: list[str] = []
        all_leases = {k: v for k, v in self.leases().items() if v > now}
        ending = Counter(node_of(k) for k in all_leases if k not in usable)
        for node, count in ending.items():
            # GPUs of the node's ending leases not needed by runs still occupying it
            busy = max(0, used.get(node, 0) - held.get(node, 0))
            ids = sorted(k for k in all_leases if k not in usable and node_of(k) == node)
            give += ids[: max(0, count - busy)]
        spare_nodes = {n: f for n, f in free.items()
                       if f > 0 and (unplaced == 0 or active >= cap or f < g)}
        for gid in sorted(usable):
            gnode = node_of(gid)
            if spare_nodes.get(gnode, 0) > 0:
                since = self._idle_since.setdefault(gid, now)
                if now - since >= self.idle_release_s:
                    give.append(gid)
                    spare_nodes[gnode] -= 1
            else:
                self._idle_since.pop(gid, None)
        give = [x for x in give if x not in self._released]
        if give and self.agent is not None:
            self._released.update(give)
            try:
                self.agent.release(give)
                log.info("gave back GPUs %s", give)
            except Exception as e:
                log.info("release of %s refused: %s", give, e)
            for gid in give:
                self._idle_since.pop(gid, None)

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

    # ----------------------------------------------------------------- status
    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        held_ids = self.held()
        rho_now = self.current_rho(len(held_ids))
        latest: dict[str, Run] = {}  # a distributed job's: its chief's
        for x in self.runs:
            if x.chief:
                latest[x.job_id] = x
        jobs = []
        for j in sorted(self.hb.jobs.values(), key=lambda j: j.id):
            r = latest.get(j.id)
            info = self.core.record(j.id)
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
            })
        agent = self.agent
        return {
            "app_id": self.app_id, "name": self.spec.name, "kind": self.spec.kind,
            "state": self.state, "message": self.message, "attempt": self.attempt,
            "start_time": self.start_time, "now": now,
            "rho": rho_now,  # null: infinite (no GPU) or finished
            "rho_reported": finite_or_none(self.bidder.current_rho()) if self.bidder else None,
            "gpus": {"held": held_ids, "count": len(held_ids),
                     "by_node": dict(Counter(node_of(g) for g in held_ids)),
                     "in_use": sum(r.gpus for r in self.runs if r.state in
                                   ("launched", "running", "stopping")),
                     "max": self.spec.max_gpus()},
            "gpu_seconds": round(self.gpu_seconds, 2),
            "busy_gpu_seconds": round(self.busy_gpu_seconds, 2),
            "agent": None if agent is None else {
                "arbiter": self.arbiter, "epoch": agent.epoch,
                "registered": agent.secret is not None,
                "connected": agent.connected.is_set(),
                "cluster_gpus": self.bidder.cluster_gpus if self.bidder else 0,
                "stats": asdict(agent.stats)},
            "hyperband": {"bracket": self.hb.bracket_index, "rung": self.hb.rung_index,
                          "brackets": len(self.hb.plan), "done": self.hb.done,
                          "progress": round(self.core.progress_fraction(), 4)},
            "objective": self.spec.objective.to_dict(),
            "tensorboard": None if self.tensorboard is None else self.tensorboard.status(),
            "target_reached": self.hb.target_reached,
            "best": self.core.best_json(),
            "top": self.core.top(5),
            "jobs": jobs,
            "reallocations": [{**asdict(x), "latency_s": round(x.latency_s, 3)}
                              for x in self.reallocations],
            "history": self.history[-600:],
            "rounds": self.rounds[-200:],
        }

    def _publish(self) -> None:
        snap = self.snapshot()
        with self._lock:
            self._status = snap

    # ----------------------------------------------------------------- main loop
    def tick(self, poll_ms: int = 200) -> None:
        for ev in self.launcher.poll(poll_ms):
            line = self.core.apply(ev)
            self._dirty = True
            if line:
                log.warning("%s", line)
        if self.launcher.shutdown and not self._shutdown.is_set():
            if self.launcher.shutdown != "shutdown":
                self.message = self.launcher.shutdown
            self._shutdown.set()
        if self.bidder is not None and not self.hb.done:
            self.bidder.app = self.model()
        if self.state in ("RUNNING", "STARTING") and not self._shutdown.is_set():
            self.refresh_nodes()
            self.reconcile()
            if self.tensorboard is not None:
                self.tensorboard.tick()
        now = self.clock()
        held_n = len(self.held())
        dt = self.count_gpu_seconds(now, held_n)
        self.busy_gpu_seconds += dt * sum(r.gpus for r in self.runs if r.state == "running")
        if not self.history or now - self.history[-1][0] >= 1.0:
            self.history.append((round(now, 2), held_n, self.current_rho(held_n)))
        self.shell.set_progress(self.core.progress_fraction())
        self.save_state()
        self._publish()

    def run(self) -> int:
        self.load_state()
        url = self.start_http()
        self._publish()
        reg = json.loads(self.shell.start(self.http_host, 0, url, self.heartbeat_ms))
        for c in reg.get("previous_containers", []):  # not kept across attempts: give back
            self.shell.release(str(c["container"]))
        self._publish_am_info()
        if self.spec.uses_docker:  # every GPU NodeManager must honour the image (dockerrt)
            self.refresh_nodes(force=True)
            refused = check_nodes(self.cluster_nodes)
            self.docker_nodes = {str(n["node"]): "" for n in self.cluster_nodes
                                 if not refused and int(n.get("gpus", 0) or 0) > 0}
            if refused:
                self.state, self.message = "FAILED", refused
                log.error("%s", refused)
                self._finish()
                return 1
        self.start_agent(self.arbiter, max_gpus=self.spec.max_gpus(),
                         cluster_gpus=self._saved_cluster_gpus, secret=self._saved_secret,
                         on_allocation=self._on_allocation, on_lease_warning=self._on_lease_warning,
                         **self.agent_options)
        self.start_tensorboard()
        self.state = "RUNNING"
        log.info("AM for %s (attempt %d) running; tracking URL %s; arbiter %s; max GPUs %d",
                 self.app_id, self.attempt, url, self.arbiter, self.spec.max_gpus())
        try:
            while not self._shutdown.is_set():
                self.tick()
                if self.core.failed:
                    failed = self.core.record(next(iter(self.hb.jobs)))
                    self.state = "FAILED"
                    self.message = (f"every job failed {failed.failures} times (last exit "
                                    f"{failed.last_exit}); see their container logs")
                    break
                if self.hb.done and not self.launcher.live():
                    self.state = "FINISHED"
                    break
        finally:
            self._finish()
        return 0 if self.state == "FINISHED" else 1

    def _finish(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.stop()
        self.launcher.release_all()
        if self.state not in ("FINISHED", "FAILED"):
            self.state = "KILLED" if self._killed else "CRASHED"
        if self.agent is not None:
            # a crashed attempt keeps its registration (the next attempt reuses the secret)
            self.agent.stop(unregister=self.state != "CRASHED")
        self._publish()
        self.save_state(force=True)
        result = {"state": self.state, "message": self.message, "best": self.core.best_json(),
                  "top": self.core.top(10), "status": self.snapshot()}
        if self.hdfs is not None:
            try:
                self.hdfs.write(f"{self.app_dir}/result.json", json.dumps(result).encode())
            except WebHdfsError as e:
                log.warning("cannot write result.json: %s", e)
        if self.state in ("FINISHED", "FAILED"):
            msg = self.message or self.core.best_line() or "done"
            self.shell.finish("SUCCEEDED" if self.state == "FINISHED" else "FAILED", msg,
                              self.tracking_url)
        # else (killed / shut down / crashed): no unregister; YARN decides (retry or not)

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


# ------------------------------------------------------------------------- addresses
def http_hosts(env: Mapping[str, str]) -> tuple[str, str]:
    """(bind host, advertised host) of the AM's HTTP server. Advertised (tracking URL, host
    registered with the RM, the runners' ``--am``): ``THEMIS_AM_HOST``, else ``NM_HOST`` (the
    NodeManager's host name, which YARN puts in every container's environment), else
    127.0.0.1 (outside YARN). Bind: ``THEMIS_AM_BIND_HOST`` (e.g. 0.0.0.0), else the
    advertised host: job runners on other NodeManagers reach it there."""
    advertised = env.get("THEMIS_AM_HOST") or env.get("NM_HOST") or "127.0.0.1"
    return env.get("THEMIS_AM_BIND_HOST") or advertised, advertised


def url_host(host: str) -> str:
    """``host`` for a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def default_arbiter(conf: Callable[[str, str], str]) -> str:
    """The agents' endpoint from the cluster's configuration, when the client did not set
    ``THEMIS_ARBITER``: ``agent-address``, else the RM host name and ``agent-port``; with RM
    HA one candidate per RM id, comma-separated as AgentClient takes them
    (:mod:`themis.agent.endpoints`)."""
    from themis.agent import endpoints as ep

    def get(key: str) -> str:
        return str(conf(key, "") or "")

    ha = get(ep.HA_ENABLED_KEY).strip().lower() == "true"
    if (not ha and not get(ep.AGENT_ADDRESS_KEY).strip()
            and get(ep.RM_HOSTNAME_KEY).strip() in ("", "0.0.0.0")):
        raise SystemExit("themis.am.launchers.yarn.am: no THEMIS_ARBITER, no "
                         "yarn.resourcemanager.themis.agent-address and no "
                         "yarn.resourcemanager.hostname: cannot tell where the agents' "
                         "endpoint is")
    return ",".join(ep.agent_addresses(get))


# ------------------------------------------------------------------------------ main


def container_command(python: str, am_url: str, job_id: str, run_id: int, tb_dir: str,
                      report_every_s: float, job_cmd: str, metric: str = "eval_loss",
                      ckpt_store: str = "", task: tuple[str, int] | None = None) -> str:
    """A job container's command: the runner, told the job command in base64 (YARN puts the
    command inside double quotes in the container's launch script, so the user's quotes, $
    and backquotes must not reach that shell; the runner runs it with ``bash -c``).
    ``ckpt_store``: the HDFS directory the runner keeps the job's local ``{checkpoint_dir}``
    in (restored before the job starts, saved after it exits). ``task``: a distributed
    job's task (the runner waits for its TF_CONFIG at the AM's rendezvous)."""
    store = (f"--checkpoint-dir {CKPT_DIR} --checkpoint-store {shlex.quote(ckpt_store)} "
             if ckpt_store else "")
    if task is not None:
        store += f"--task {task[0]}:{task[1]} "
    return (f"{python} -m themis.am.launchers.yarn.runner --am {shlex.quote(am_url)} "
            f"--job-id {shlex.quote(job_id)} --run-id {run_id} --logdir tflogs "
            f"--tensorboard-dir {shlex.quote(tb_dir)} --report-every {report_every_s} "
            f"--metric {shlex.quote(metric)} {store}"
            f"--command-b64 {encode_command(job_cmd)} 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr")


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    port = int(os.environ.get("THEMIS_GATEWAY_PORT", "0"))
    token = os.environ.get("THEMIS_GATEWAY_TOKEN", "")
    if port <= 0 or not token:
        print("themis.am.launchers.yarn.am: started by org.themis.am.AppMaster (needs "
              "THEMIS_GATEWAY_PORT and THEMIS_GATEWAY_TOKEN)", file=sys.stderr)
        return 2
    from py4j.java_gateway import GatewayParameters, JavaGateway

    gateway = JavaGateway(gateway_parameters=GatewayParameters(
        address="127.0.0.1", port=port, auth_token=token, auto_convert=True))
    shell = JvmShell(gateway.entry_point)
    env = os.environ
    app_id, attempt = parse_container_id(env["CONTAINER_ID"])
    webhdfs_url = env.get("THEMIS_WEBHDFS_URL", "http://127.0.0.1:9870")
    user = env.get("HADOOP_USER_NAME") or env.get("USER") or "root"
    hdfs = WebHdfs(webhdfs_url, user=user)
    app_dir = env.get("THEMIS_APP_DIR") or f"/user/{user}/.themis/{app_id}"
    raw = hdfs.read(env.get("THEMIS_SPEC_PATH") or f"{app_dir}/spec.json")
    spec = AppSpec.from_json(raw.decode())
    arbiter = env.get("THEMIS_ARBITER", "") or default_arbiter(
        lambda k, d: str(gateway.entry_point.conf(k, d) or ""))
    try:  # the AMRMToken registers, TLS as the cluster says (docs/yarn.md, "Security")
        options = agent_options(env, gateway.entry_point)
    except ValueError as e:
        print(f"themis.am.launchers.yarn.am: {e}", file=sys.stderr)
        gateway.close()
        return 2
    am = AppMaster(spec, app_id, shell, arbiter=arbiter, hdfs=hdfs, app_dir=app_dir,
                   webhdfs_url=webhdfs_url, attempt=attempt,
                   python=env.get("THEMIS_JOB_PYTHON") or sys.executable)
    am.agent_options = options
    signal.signal(signal.SIGTERM, lambda s, f: am.kill())
    try:
        rc = am.run()
    finally:
        gateway.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())

