"""Host and network faults on the dockerised mini-cluster while Themis apps run (issue 35;
shared by ``test_fault_trials.py`` and ``bench/bench_faults.py``). The apps, their job (a
step counter that stores every fifth step in ``{checkpoint_dir}``) and the log readers are
:mod:`tests.integration.am_kill_trials`'.

Fault kinds, each injected with the real tool on the host that runs the job (or its AM):

* ``nm-lost``: ``docker kill -s KILL`` of the NodeManager container running the app's job
  (the host dies: every process of it at once, no NodeManager shutdown, nothing unregisters).
  YARN marks the node LOST after ``yarn.nm.liveness-monitor.expiry-interval-ms``
  (:data:`NM_EXPIRY_MS` here), the fault's end for the recovery time. The host is started
  again once the job ran elsewhere (its NodeManager registers afresh).
* ``nm-paused``: ``docker pause`` of that NodeManager container (the cgroup freezer: the host
  hangs, its connections stay open) until YARN marked it LOST, then ``docker unpause`` (the
  fault's end): the NodeManager's next heartbeat is told to resync, it kills its containers
  and registers again.
* ``am-partition``: iptables rules in the network namespace of the AM's host (entered with
  ``nsenter`` from this machine; the rules name only the RM's address on the mini-cluster
  network) drop the AM's traffic to and from the RM host: the AMRM scheduler port 8030 and
  the agents' endpoint :8642 (the NodeManager on that host keeps its heartbeats on 8031),
  for :data:`PARTITION_S` seconds, longer than a lease, then deleted (the fault's end).
* ``am-latency``: the same traffic of the AM's host goes through a relay on this machine
  that holds everything the host sends for :data:`LATENCY_MS` (:mod:`slowlink`: NAT rules in
  the host's namespace; this kernel has no ``netem``), for :data:`LATENCY_S` seconds.
* ``job-hdfs-partition``: iptables rules in the network namespace of the host running the
  app's job drop all its traffic to and from the NameNode and the DataNode, for
  :data:`HDFS_PARTITION_S` seconds (longer than a lease: the job's copies, its save at the
  lease end and a restore there meet HDFS cut off), then deleted (the fault's end).
* ``datanode-lost``: ``docker kill -s KILL`` of the DataNode host (HDFS's only one: every
  read and write of a block fails) for :data:`DATANODE_DOWN_S` seconds, longer than a
  lease, then started again; the fault ends when HDFS takes a write.
* ``namenode-restart``: ``docker restart`` of the NameNode host (its daemon stopped, then
  started on its stored namespace; safe mode until the DataNode reported its blocks); the
  fault ends when HDFS takes a write.
* ``nm-disk-full``: the local directories of the NodeManager host running the app's job (a
  tmpfs of :data:`NM_LOCAL_MB` MiB: the containers' working directories, the job's local
  checkpoint directory among them) filled with one file, kept full until the RM marks the
  node UNHEALTHY (its disk checker every :data:`DISK_CHECK_MS`) and for at least
  :data:`DISK_FULL_S` seconds, then the file deleted (the fault's end). The job's next store
  fails and it exits with status 1, as a training job's failed save does; YARN removes the
  UNHEALTHY node and its containers, as a lost one's.

Checks (per trial, and over the cluster at the end):

* **lost checkpoint**: the job's next run started below the last checkpoint it could
  resume from: for :data:`FROM_HDFS` kinds the step in HDFS when the fault began (the
  checkpoint of a run on the lost host is in its local directory until the run ends, and
  the host's disk is gone with it; with HDFS away no save can store a newer one; a job
  that failed on a full disk is not saved: docs/am.md "Faults"), else the last step the
  interrupted run stored;
* **double run** (any two containers of an app's job running at once) and **GPU use outside
  leases / over a node's GPUs** (:func:`stockapps.gpu_use_violations`), from the
  NodeManagers' logs and the RM's lease log, with the hosts' down times taken into account:
  a killed host's containers ended when it was killed (its log never says so), a paused
  host's processes did not run while it was frozen, and a job its runner killed at the
  thaw (its log says when) ended then. A thawed job that ran again for at most
  :data:`THAW_RUN_S` before that kill, beside the job's next run, is counted apart
  (``thaw_runs``): nothing can stop a frozen process from running when it thaws;
* **apps**: every app (trial apps and competitors) ends FINISHED/SUCCEEDED, its job at its
  last step;
* **recovery time**: the fault's end -> the job makes progress again in a run other than the
  one the fault hit (for :data:`RUN_MAY_GO_ON` kinds the same run counts when it went on).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.am_kill_trials import (
    GRACE_MS,
    LEASE_MS,
    _pct,
    am_host,
    app_report,
    attempts,
    current_attempt,
    job_logs,
    runs,
    submit,
)
from tests.integration.am_kill_trials import OVERRIDES as AM_KILL_OVERRIDES
from tests.integration.minicluster import (
    ADDR,
    NMS,
    RM,
    SUBNET,
    _get,
    docker_exec,
    exec_stdout,
    hosts,
    shell_read,
)
from tests.integration.slowlink import DelayRelay, slow_rules
from tests.integration.stockapps import (
    _TS,
    _ts,
    gpu_containers,
    gpu_use_violations,
    lease_events,
    nm_logs,
    wait_for,
)

KINDS = ("nm-lost", "nm-paused", "am-partition", "am-latency", "datanode-lost",
         "namenode-restart", "job-hdfs-partition", "nm-disk-full")
#: kinds whose hit run may go on through the fault (its progress then counts as recovery)
RUN_MAY_GO_ON = ("am-partition", "am-latency", "datanode-lost", "namenode-restart",
                 "job-hdfs-partition")
#: kinds after which a job resumes from what HDFS held when the fault began: the hit run's
#: host is gone, or HDFS could not take its saves
FROM_HDFS = ("nm-lost", "nm-paused", "datanode-lost", "namenode-restart",
             "job-hdfs-partition", "nm-disk-full")
NM_EXPIRY_MS = 15000
PARTITION_S = 40.0  # > LEASE_MS: a lease of the partitioned AM ends while it is cut off
#: how long after an AM is cut off the RM's rounds may still grant to its app: the agents'
#: endpoint's keepalive (ping every 5 s, 5 s to answer) closes the agent's stream, then a
#: round (themis.rpc.keepalive; docs/yarn.md, "Faults"), with room for a loaded machine
PARTITION_NOTICE_S = 20.0
LATENCY_MS = 2000  # added to what the AM's host sends the RM host (slowlink.DelayRelay)
LATENCY_S = 60.0  # > two leases
GATEWAY = f"{SUBNET}.1"  # this machine on the mini-cluster network
DATANODE_DOWN_S = 40.0  # > LEASE_MS: a lease ends (a save, a restore) while it is down
HDFS_PARTITION_S = 40.0  # > LEASE_MS: the job's save at its lease end meets HDFS cut off
NM_LOCAL_MB = 1024  # the NodeManagers' local directories: a tmpfs of this size (the disk
# checker of docker/conf/yarn-site.xml wants 512 MiB free: ...min-free-space-per-disk-mb)
DISK_FULL_S = 40.0  # > LEASE_MS: the app's lease on the full host ends while it is full
DISK_CHECK_MS = 5000  # yarn.nodemanager.disk-health-checker.interval-ms (default 2 min)
FILL = "/data/nm-local/themis-fault-fill"
#: the RM's ports the AM uses: AMRM scheduler (yarn.resourcemanager.scheduler.address) and
#: the agents' endpoint (yarn.resourcemanager.themis.agent-port)
AM_PORTS = (8030, 8642)
#: the longest a thawed host's job may run again before its runner kills it (thaw.py: one
#: look at the clock every 0.1 s, and the unpause command's own return)
THAW_RUN_S = 0.5
OVERRIDES = {
    **AM_KILL_OVERRIDES,
    "yarn.nm.liveness-monitor.expiry-interval-ms": str(NM_EXPIRY_MS),
}
#: the NodeManagers' hosts read the expiry too, as on a cluster with one yarn-site.xml:
#: the AMs there give their runners the thaw fence from it (thaw.py)
NM_OVERRIDES = {"yarn.nm.liveness-monitor.expiry-interval-ms": str(NM_EXPIRY_MS),
                "yarn.nodemanager.disk-health-checker.interval-ms": str(DISK_CHECK_MS)}


@dataclass
class FaultTrial:
    kind: str
    app: str
    host: str  # the host the fault hit
    am_host: str  # the app's AM's host when the fault began
    container: str  # the job's run the fault hit
    stored: int  # the last step that run stored (locally)
    reached: int
    durable: int  # the step of the job's checkpoint in HDFS when the fault began
    stored_at_fault: int = 0  # the last step that run had stored when the fault began
    fault_s: float = 0.0  # fault begin -> end (LOST declared, unpaused, healed)
    resumed: int | None = None  # the step the job's next run started at (or went on from)
    end_to_running_s: float | None = None
    run_went_on: bool = False  # RUN_MAY_GO_ON: the hit run went on through the fault
    am_attempts: int = 0  # the app's AM attempts after the trial

    @property
    def must_resume_from(self) -> int:
        return self.durable if self.kind in FROM_HDFS else self.stored

    @property
    def lost_checkpoint(self) -> bool:
        return self.resumed is None or self.resumed < self.must_resume_from

    @property
    def copy_lag(self) -> int:
        """Steps the hit run had stored locally but not yet copied to HDFS when the fault
        began (what a fault that loses the run's host takes with it)."""
        return max(0, self.stored_at_fault - self.durable)

    @property
    def lost_steps(self) -> int | None:
        if self.run_went_on:  # the hit run itself went on: nothing to redo
            return 0
        return None if self.resumed is None else max(0, self.reached - self.resumed)


@dataclass
class FaultResult:
    trials: list[FaultTrial] = field(default_factory=list)
    apps: dict[str, str] = field(default_factory=dict)
    double_runs: list[str] = field(default_factory=list)
    #: a thawed host's job that ran again after the thaw, until its runner killed it
    #: (thaw.py), while the job's next run ran: the seconds of each
    thaw_runs: list[float] = field(default_factory=list)
    thaw_kills: int = 0  # job containers whose runner killed the job at a thaw
    gpu_violations: list[str] = field(default_factory=list)
    #: (app, cut, healed): an app whose AM was cut off from the RM host (am-partition:
    #: the trial's app and any other app whose AM shared its host)
    partitions: list[tuple[str, float, float]] = field(default_factory=list)
    #: leases the RM granted to an app while its AM was cut off, after PARTITION_NOTICE_S
    cut_off_grants: list[str] = field(default_factory=list)
    #: the engine's rounds that left out an app whose agent's stream was down
    unreachable_rounds: int = 0
    job_containers: int = 0
    down: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, Any] = {}
        for kind in sorted({t.kind for t in self.trials}):
            ts = [t for t in self.trials if t.kind == kind]
            times = sorted(t.end_to_running_s for t in ts if t.end_to_running_s is not None)
            lost = [t.lost_steps for t in ts if t.lost_steps is not None]
            kinds[kind] = {
                "trials": len(ts), "lost_checkpoints": sum(t.lost_checkpoint for t in ts),
                "fault_end_to_running_s": {"median": _pct(times, 0.5),
                                           "max": times[-1] if times else None},
                "fault_s_max": max((t.fault_s for t in ts), default=None),
                "lost_steps_max": max(lost) if lost else None,
                "copy_lag_steps": {"median": _pct(sorted(float(t.copy_lag) for t in ts), 0.5),
                                   "max": max(t.copy_lag for t in ts)},
                "runs_went_on": sum(t.run_went_on for t in ts),
            }
        failed = {a: s for a, s in self.apps.items() if s != "FINISHED/SUCCEEDED"}
        return {
            "trials": len(self.trials),
            "lost_checkpoints": sum(t.lost_checkpoint for t in self.trials),
            "double_runs": len(self.double_runs),
            "thaw_kills": self.thaw_kills,
            "thaw_runs": {"count": len(self.thaw_runs),
                          "max_s": round(max(self.thaw_runs), 2) if self.thaw_runs else None},
            "gpu_use_violations": len(self.gpu_violations),
            "grants_to_cut_off_apps": len(self.cut_off_grants),
            "rounds_leaving_out_unreachable_apps": self.unreachable_rounds,
            "apps_failed": len(failed),
            "job_containers": self.job_containers,
            "apps": self.apps,
            "by_kind": kinds,
        }


# ------------------------------------------------------------------------------ the hosts
def node_state(host: str) -> str | None:
    """The RM's state of the NodeManager on ``host`` (RUNNING, LOST, ...; the newest entry)."""
    doc = _get(f"{RM}/ws/v1/cluster/nodes?states=NEW,RUNNING,UNHEALTHY,LOST,SHUTDOWN,"
               "DECOMMISSIONED,REBOOTED", timeout=10)
    states = [n["state"] for n in (doc.get("nodes") or {}).get("node", [])
              if n.get("nodeHostName") == host]
    if "RUNNING" in states:
        return "RUNNING"
    return states[-1] if states else None


def host_of(cluster: Mapping[str, Any], app: str, container: str) -> str:
    """The NodeManager host whose log directory holds ``container``."""
    for name, w in hosts(cluster).items():
        if name in NMS and w.status == "running" and docker_exec(
                w, ["test", "-d", f"/data/nm-logs/{app}/{container}"]).returncode == 0:
            return name
    raise AssertionError(f"{container}: on no running NodeManager")


def apps_with_am_on(host: str) -> list[str]:
    """The running apps whose current AM attempt runs on ``host``."""
    doc = _get(f"{RM}/ws/v1/cluster/apps?states=RUNNING", timeout=10)
    out = []
    for a in (doc.get("apps") or {}).get("app", []):
        current = current_attempt(a["id"])
        if current is not None and am_host(current) == host:
            out.append(a["id"])
    return out


def _netns(w: Any, *args: str) -> None:
    """``iptables ARGS`` in container ``w``'s network namespace (this machine's iptables,
    entered with nsenter: the images have none, and need no NET_ADMIN for it)."""
    w.reload()
    pid = int(w.attrs["State"]["Pid"])
    r = subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-w", *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"iptables {' '.join(args)} in {w.name}: {r.stderr}"


def hdfs_writable() -> bool:
    """Does HDFS take a write (a small file, through the NameNode and the DataNode)?"""
    from hdfs import InsecureClient
    from hdfs.util import HdfsError
    from requests import RequestException

    from tests.integration.minicluster import NN
    try:
        InsecureClient(NN, user="root", timeout=10).write(
            "/tmp/themis-fault-probe", data=b"ok", overwrite=True)
        return True
    except (HdfsError, RequestException):
        return False


def partition_rules(op: str, rm_addr: str) -> list[list[str]]:
    """iptables argument lists (``op``: -I to add, -D to delete) dropping the AM ports'
    traffic between a host and the RM's address, which must be one of the mini-cluster's."""
    assert rm_addr in ADDR.values(), f"{rm_addr}: not a mini-cluster address"
    ports = ",".join(str(p) for p in AM_PORTS)
    return [["-" + op.lstrip("-"), "OUTPUT", "-d", rm_addr, "-p", "tcp", "-m", "multiport",
             "--dports", ports, "-j", "DROP"],
            ["-" + op.lstrip("-"), "INPUT", "-s", rm_addr, "-p", "tcp", "-m", "multiport",
             "--sports", ports, "-j", "DROP"]]


def hdfs_partition_rules(op: str) -> list[list[str]]:
    """iptables argument lists (``op``: -I to add, -D to delete) dropping all traffic
    between a host and HDFS's hosts (the NameNode and the DataNode of the mini-cluster)."""
    out = []
    for addr in (ADDR["nn"], ADDR["dn"]):
        out += [["-" + op.lstrip("-"), "OUTPUT", "-d", addr, "-j", "DROP"],
                ["-" + op.lstrip("-"), "INPUT", "-s", addr, "-j", "DROP"]]
    return out


def hdfs_step(app: str, job: str) -> int:
    """The step in the job's checkpoint directory in HDFS (0: none)."""
    from hdfs import InsecureClient
    from hdfs.util import HdfsError

    from tests.integration.minicluster import NN
    try:
        with InsecureClient(NN, user="root").read(
                f"/user/root/.themis/{app}/ckpt-dir/{job}/step") as f:
            return int(f.read().decode().strip() or 0)
    except HdfsError:
        return 0


def _job_id(cluster: Mapping[str, Any], app: str) -> str:
    for text in job_logs(cluster, app).values():
        m = re.search(r"amkill-job (\S+) starts at step", text)
        if m:
            return m[1]
    raise AssertionError(f"{app}: no job log")


# ------------------------------------------------------------------------------ one trial
def _running_run(cluster: Mapping[str, Any], app: str) -> dict[str, Any] | bool | None:
    if app_report(app)["state"] in ("FINISHED", "FAILED", "KILLED"):
        return True
    att = max(int(a["id"]) for a in attempts(app))
    now = [r for r in runs(cluster, app) if r["attempt"] == att]
    last = max(now, key=lambda r: r["container"], default=None)
    return last if last is not None and last["stored"] > last["start"] else None


def one_trial(cluster: Mapping[str, Any], app: str, kind: str, rng: random.Random,
              result: FaultResult, max_delay_s: float = 4.0,
              partition_s: float = PARTITION_S) -> FaultTrial | None:
    """Inject fault ``kind`` once the app's job runs and stored a step in its newest run;
    wait until the job progresses again. None when the app ended first."""
    run = wait_for(f"{app}'s job to store a step", 300,
                   lambda: _running_run(cluster, app), 1.0)
    if run is True:
        return None
    time.sleep(rng.uniform(0.0, max_delay_s))
    run = wait_for(f"{app}'s job to store a step", 300, lambda: _running_run(cluster, app), 0.5)
    if run is True:
        return None
    assert isinstance(run, dict)
    job = _job_id(cluster, app)
    current = current_attempt(app)
    assert current is not None, f"{app}: no AM attempt"
    am_node = am_host(current)
    host = (am_node if kind.startswith("am-") else "dn" if kind == "datanode-lost"
            else "nn" if kind == "namenode-restart"
            else host_of(cluster, app, run["container"]))
    w = hosts(cluster)[host]
    durable = hdfs_step(app, job)
    t0 = time.time()
    if kind == "nm-lost":
        w.kill(signal="SIGKILL")
        wait_for(f"{host} LOST", NM_EXPIRY_MS / 1000 + 60, lambda: node_state(host) == "LOST",
                 0.5)
        t_end = time.time()
    elif kind == "nm-paused":
        w.pause()
        wait_for(f"{host} LOST", NM_EXPIRY_MS / 1000 + 60, lambda: node_state(host) == "LOST",
                 0.5)
        w.unpause()
        t_end = time.time()
        result.down.setdefault(host, []).append((t0, t_end, "paused"))
    elif kind == "am-partition":
        cut_off = apps_with_am_on(am_node)  # the trial's app and any other AM there
        rules = partition_rules("I", ADDR["rm"])
        for r in rules:
            _netns(w, *r)
        try:
            time.sleep(partition_s)
        finally:
            for r in partition_rules("D", ADDR["rm"]):
                _netns(w, *r)
        t_end = time.time()
        result.partitions += [(a, t0, t_end) for a in cut_off]
    elif kind == "am-latency":
        relay = DelayRelay(GATEWAY, ADDR["rm"], AM_PORTS, LATENCY_MS / 1000)
        ports = relay.start()
        try:
            for r in slow_rules("I", ADDR["rm"], GATEWAY, ports):
                _netns(w, *r)
            try:
                time.sleep(LATENCY_S)
            finally:
                for r in slow_rules("D", ADDR["rm"], GATEWAY, ports):
                    _netns(w, *r)
        finally:
            relay.stop()
        assert relay.connections > 0, "no connection of the AM went through the slow link"
        t_end = time.time()
    elif kind == "job-hdfs-partition":
        for r in hdfs_partition_rules("I"):
            _netns(w, *r)
        try:
            time.sleep(HDFS_PARTITION_S)
        finally:
            for r in hdfs_partition_rules("D"):
                _netns(w, *r)
        t_end = time.time()
    elif kind == "datanode-lost":
        dn = hosts(cluster)["dn"]
        dn.kill(signal="SIGKILL")
        try:
            time.sleep(DATANODE_DOWN_S)
        finally:
            dn.start()
        wait_for("HDFS writable again", 180, hdfs_writable, 2.0)
        t_end = time.time()
    elif kind == "namenode-restart":
        hosts(cluster)["nn"].restart(timeout=30)  # SIGTERM, then SIGKILL after 30 s; start
        wait_for("HDFS writable again", 300, hdfs_writable, 2.0)
        t_end = time.time()
    elif kind == "nm-disk-full":
        docker_exec(w, ["sh", "-c", f"dd if=/dev/zero of={FILL} bs=1M 2>/dev/null"])
        df = exec_stdout(w, ["sh", "-c", "df -m /data/nm-local | tail -n 1"],
                         lambda t: len(t.split()) >= 5, f"the disk use of {host}")
        assert df.split()[-2:-1] == ["100%"], f"{host}: not full: {df!r}"
        try:
            wait_for(f"{host} UNHEALTHY", DISK_CHECK_MS / 1000 + 60,
                     lambda: node_state(host) == "UNHEALTHY", 0.5)
            time.sleep(max(0.0, t0 + DISK_FULL_S - time.time()))
        finally:
            docker_exec(w, ["rm", "-f", FILL])
        t_end = time.time()
    else:
        raise ValueError(f"unknown fault kind {kind!r}")

    def progressed() -> dict[str, Any] | None:
        for r in runs(cluster, app):
            if r["container"] == run["container"]:
                if kind in RUN_MAY_GO_ON and r["reached"] > reached_at_end.get(
                        r["container"], r["reached"]):
                    return r
            elif r["container"] > run["container"] and r["reached"] > r["start"]:
                return r
        if app_report(app)["state"] in ("FINISHED", "FAILED", "KILLED"):
            return {"ended": True}
        return None

    reached_at_end = {r["container"]: r["reached"] for r in runs(cluster, app)}
    try:
        nxt = wait_for(f"{app}'s job to run again after {kind}", 400, progressed, 1.0)
    except AssertionError as e:  # what the AM and the RM did meanwhile, for the report
        raise AssertionError(f"{e}\n{_diagnose(cluster, app, t_end)}") from None
    t_running = time.time()
    if kind == "nm-lost":  # the host comes back (a new NodeManager, empty)
        w.start()
        wait_for(f"{host} RUNNING again", 180, lambda: node_state(host) == "RUNNING", 1.0)
        result.down.setdefault(host, []).append((t0, time.time(), "killed"))
    elif host in NMS:
        wait_for(f"{host} RUNNING", 180, lambda: node_state(host) == "RUNNING", 1.0)
    hit = next((r for r in runs(cluster, app) if r["container"] == run["container"]), run)
    went_on = nxt.get("container") == run["container"]
    resumed = (run["reached"] if went_on else nxt.get("start"))
    return FaultTrial(kind, app, host, am_node, run["container"], stored=hit["stored"],
                      reached=hit["reached"], durable=durable,
                      stored_at_fault=int(run["stored"]), fault_s=round(t_end - t0, 1),
                      resumed=resumed, end_to_running_s=round(t_running - t_end, 1),
                      run_went_on=went_on, am_attempts=len(attempts(app)))


def _diagnose(cluster: Mapping[str, Any], app: str, since: float) -> str:
    """The tails of the app's AM logs (every attempt, every running host) and the RM's
    Themis lines about the app since ``since``."""
    out = []
    for name, w in hosts(cluster).items():
        if name in NMS and w.status == "running":
            text = shell_read(w, f"for f in /data/nm-logs/{app}/*/AppMaster.stderr; do "
                                 "echo \"== $f\"; grep themis $f | tail -n 40; done",
                              f"the AM logs of {app}")
            out.append(f"==== {name}\n" + text[-6000:])
    rm = hosts(cluster)["rm"]
    lines = [ln for ln in rm.logs(since=int(since) - 30).decode(errors="replace").splitlines()
             if app in ln and "Themis" in ln]
    out.append("==== rm\n" + "\n".join(lines[-40:]))
    return "\n".join(out)


# ------------------------------------------------------------------------------ the checks
def _intervals(c: Mapping[str, Any], down: Sequence[tuple[float, float, str]]
               ) -> list[tuple[float, float]]:
    """When container ``c``'s processes ran: start..end, less its host's frozen times; a
    killed host's containers ended when it was killed."""
    spans = [(float(c["start"]), float(c["end"]))]
    for a, b, how in down:
        out = []
        for s, e in spans:
            if how == "killed" and s < a < e:
                out.append((s, a))
            elif how == "paused" and s < b and a < e:
                out += [x for x in ((s, min(e, a)), (max(s, b), e)) if x[0] < x[1]]
            else:
                out.append((s, e))
        spans = out
    return spans


def thaw_kills(cluster: Mapping[str, Any], apps: Sequence[str]) -> dict[str, float]:
    """container -> when its runner killed its job at its host's thaw (the runner's log
    line: thaw.py)."""
    out = {}
    for app in apps:
        for cid, text in job_logs(cluster, app).items():
            m = re.search(_TS + r".*killed at the thaw", text, re.M)
            if m:
                out[cid] = _ts(m[1])
    return out


def check_cluster(cluster: Mapping[str, Any], result: FaultResult, apps: Sequence[str]) -> None:
    logs = nm_logs(dict(cluster))
    killed = thaw_kills(cluster, apps)
    result.thaw_kills = len(killed)
    thaws = {b for down in result.down.values() for _a, b, how in down if how == "paused"}
    fixed = []
    for c in gpu_containers(logs):
        if c["container"] in killed:  # its job died then; the runner's exit came later
            c = {**c, "end": min(c["end"], killed[c["container"]])}
        spans = _intervals(c, result.down.get(c["host"], []))
        if not spans:
            continue
        fixed += [{**c, "start": s, "end": e} for s, e in spans]
    by_app: dict[str, list[dict[str, Any]]] = {}
    for c in fixed:
        if c["app"] in apps:
            by_app.setdefault(c["app"], []).append(c)
    result.job_containers = len({c["container"] for cs in by_app.values() for c in cs})
    for app, cs in by_app.items():
        cs.sort(key=lambda c: c["start"])
        for i, b in enumerate(cs):
            for a in cs[:i]:
                if a["container"] == b["container"] or b["start"] >= a["end"]:
                    continue
                both = min(a["end"], b["end"]) - b["start"]
                # the thawed job's processes between the thaw and its runner's kill
                thawed = next((x for x in (a, b) if x["start"] in thaws
                               and x["container"] in killed), None)
                if thawed is not None and thawed["end"] - thawed["start"] <= THAW_RUN_S:
                    result.thaw_runs.append(both)
                    continue
                result.double_runs.append(
                    f"{app}: {b['container']} on {b['host']} ran {both:.1f} s while "
                    f"{a['container']} on {a['host']} ran")
    rm = hosts(cluster)["rm"]
    rm_text = rm.logs().decode(errors="replace")
    result.gpu_violations = gpu_use_violations(
        logs, {n: g for n, (g, _r) in NMS.items()}, rm_text,
        lease_s=LEASE_MS / 1000, grace_s=GRACE_MS / 1000, containers=fixed)
    result.cut_off_grants = cut_off_grants(rm_text, result.partitions)
    result.unreachable_rounds = len(re.findall(r"'unreachable': \['", rm_text))


def cut_off_grants(rm_text: str, partitions: Sequence[tuple[str, float, float]]) -> list[str]:
    """The RM's lease grants (its log's "Themis lease N: k GPU(s) on host to app until")
    to an app while its AM was cut off from the RM host, from PARTITION_NOTICE_S after the
    cut until it healed: GPUs its AM could not hear of (docs/yarn.md, "Faults")."""
    out = []
    for e in lease_events(rm_text):
        for app, cut, healed in partitions:
            if e.gpus is not None and e.app == app and cut + PARTITION_NOTICE_S <= e.t <= healed:
                out.append(f"{app}: {e.gpus} GPU(s) on {e.host} granted {e.t - cut:.1f} s "
                           "into the cut")
    return out


def run_trials(cluster: Mapping[str, Any], tmp: Path, *, kinds: Sequence[str], trials: int,
               apps: int = 1, competitors: int = 2, steps: int = 120, seed: int = 0,
               partition_s: float = PARTITION_S,
               down: dict[str, list[tuple[float, float, str]]] | None = None,
               emit: Callable[[str], None] = print) -> FaultResult:
    """``apps`` trial apps and ``competitors`` competing apps (2 GPUs each, single jobs of
    ``steps`` steps; more GPUs asked than the cluster's 8 makes their jobs move at lease
    ends); ``trials`` faults of each kind, the kinds in turn, each on a trial app in turn;
    then every app's end and the cluster-wide checks. ``down``: the hosts' down times of
    earlier rounds on this cluster (their logs are read again), extended with this round's."""
    rng = random.Random(seed)
    result = FaultResult(down={} if down is None else down)
    names = [submit(tmp, f"fault-{seed}-{i}", steps, 3, gpus=2) for i in range(apps)]
    others = [submit(tmp, f"fault-bg-{seed}-{i}", steps, 3, gpus=2)
              for i in range(competitors)]
    for app in names + others:
        result.apps[app] = "RUNNING"
    order = [k for _ in range(trials) for k in kinds]
    for n, kind in enumerate(order):
        app = names[n % len(names)]
        t = one_trial(cluster, app, kind, rng, result, partition_s=partition_s)
        if t is None:
            emit(json.dumps({"skipped": app, "kind": kind}))
            continue
        result.trials.append(t)
        emit(json.dumps({"trial": len(result.trials), **t.__dict__,
                         "lost_checkpoint": t.lost_checkpoint, "lost_steps": t.lost_steps,
                         "copy_lag": t.copy_lag}))
    # a job's steps are 0.5 s, but its moves at lease ends and their restarts slow it: the
    # 2,000-step apps of eight 3-minute partitions had not ended 900 s after the last trial
    end_wait = max(900.0, 1.5 * steps)
    for app in names + others:
        rep = wait_for(f"{app} to end", end_wait, lambda a=app: (
            r if (r := app_report(a))["state"] in ("FINISHED", "FAILED", "KILLED") else None),
            2.0)
        result.apps[app] = f"{rep['state']}/{rep.get('finalStatus')}"
        final = runs(cluster, app)
        if final and max(r["reached"] for r in final) < steps:
            result.apps[app] += f" (reached {max(r['reached'] for r in final)} of {steps})"
    check_cluster(cluster, result, names + others)
    return result
