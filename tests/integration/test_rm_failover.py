"""RM failover on the dockerised mini-cluster's HA profile (``docker/minicluster.sh up --ha``):
ZooKeeper and two ResourceManagers (rm1, rm2), each with the Themis plugin, automatic
failover with the embedded elector, work-preserving recovery in ZKRMStateStore, the lease
store in ZooKeeper (docs/yarn.md, "Restart and HA").

Two competing Themis apps (``themis submit``; 2-GPU jobs that checkpoint their step into
``{checkpoint_dir}`` and resume from it) run; the active RM's container is killed with
``docker kill -s KILL`` while their jobs run (a kill -9: its ZooKeeper session is not
closed); then the killed RM is started again (it must come back as standby) and the new
active is killed too (failover back); last, with the other RM left down, the active RM's
container is stopped and started again (a work-preserving restart of the only RM, recovering
from ZKRMStateStore and the ZooKeeper lease store). Checks:

* the standby becomes active within the ZooKeeper session timeout plus the time YARN takes
  to become active (``ACTIVE_WITHIN_S``) after each kill, and the restarted RM becomes
  active again;
* both apps finish SUCCEEDED (AMs with one attempt: an AM that did not survive the failovers
  fails its app);
* no node ever ran more GPU containers than it has GPUs, and no GPU container ran outside
  its app's leases (``stockapps.gpu_use_violations``: the NodeManagers' logs and the lease
  log of both RMs);
* each AM's agent re-registered with the new active's agents' endpoint (its registration
  count, an established connection from its host to the new active's ``:8642``);
* a job stopped by a lease end resumed from its checkpoint (no step lost before it).

Prints (and ``bench/RESULTS.md`` records) kill -> new active, kill -> recovery settled and
kill -> the new active's first grant committed (its first "Themis lease N: ..." or "Themis
lease N of APP on NODE renewed in place: ..." log line).

Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    HA_ADDR,
    HA_IDS,
    NMS,
    NN,
    ROOT,
    _get,
    active_rm,
    am_jar_and_mounts,
    ha_state,
    rm_url,
    running_minicluster,
    shell_read,
    tcp_sockets,
)
from tests.integration.stockapps import gpu_use_violations, nm_logs

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

LEASE_MS = 30000
GRACE_MS = 10000
AGENT_PORT = 8642
ZK_TIMEOUT_MS = 4000
# kill -> the standby ACTIVE: the session timeout, then the elector's transition (the RM
# recovers its apps from ZKRMStateStore and starts its active services) on 2 busy cores
ACTIVE_WITHIN_S = ZK_TIMEOUT_MS / 1000 + 26
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": str(GRACE_MS),
    "yarn.resourcemanager.themis.fairness-knob": "0.0",
    "yarn.resourcemanager.themis.agent-port": str(AGENT_PORT),
}
# The job: counts steps (0.5 s each) from the one stored in {checkpoint_dir}, storing it every
# 5 steps (the runner keeps {checkpoint_dir} in HDFS across runs); its first stderr line
# names the step it starts from.
JOB = ('d={checkpoint_dir}; mkdir -p "$d"; s=$(cat "$d/step" 2>/dev/null || echo 0); '
       'echo "ha-job {job_id} starts at step $s" >&2; '
       'while [ "$s" -lt {max_steps} ]; do sleep 0.5; s=$((s + 1)); '
       'if [ $((s % 5)) -eq 0 ]; then echo "$s" > "$d/step.new"; mv "$d/step.new" "$d/step"; '
       'echo "ha-job {job_id} stored step $s" >&2; fi; done')
# Hyperband s=1 of max_resource 3, eta 3: three 2-GPU jobs of STEPS_PER_UNIT steps (50 s),
# then the best one to 3 x STEPS_PER_UNIT (100 s more): 12 GPUs wanted by the two apps, 8 in
# the cluster; long enough for both apps to run through two failovers.
STEPS_PER_UNIT = 100
SPEC = """\
name: {name}
search_space:
  learning_rate: {{type: double, min: 1.0e-3, max: 3.0e-1, scale: log}}
hyperband: {{max_resource: 3, eta: 3, steps_per_unit: {steps}, brackets: [1], seed: {seed}}}
objective: {{optional: true}}  # the jobs write no event files: nothing to rank
job:
  command: >-
    {job}
resources: {{gpus: 2, memory_mb: 256, vcores: 1}}
am: {{memory_mb: 512, max_attempts: 1}}
"""
_TS = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
#: the RM's log line of a grant: a new lease, or a lease renewed in place (docs/yarn.md)
GRANT_LINE = r"Themis lease \d+(?:: \d+ GPU\(s\) on | of \S+ on \S+ renewed in place: )"


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("ha", conf_overrides=OVERRIDES, mounts=am_jar_and_mounts(),
                             ha=True, zk_timeout_ms=ZK_TIMEOUT_MS) as c:
        yield c


def _themis(rm: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THEMIS_RM_URL": rm_url(rm), "THEMIS_WEBHDFS_URL": NN}
    return subprocess.run([sys.executable, "-m", "themis.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


def _container(cluster: dict[str, Any], host: str) -> Any:
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        if f"-{host}-" in w.name:
            return w
    raise AssertionError(f"no container for {host}")


def _app(app_id: str) -> dict[str, Any] | None:
    rm = active_rm()
    if rm is None:
        return None
    try:
        return dict(_get(f"{rm_url(rm)}/ws/v1/cluster/apps/{app_id}", timeout=10)["app"])
    except (OSError, ValueError, KeyError):
        return None


def _am_status(app_id: str) -> dict[str, Any]:
    from themis.client.cluster import ClientError, Cluster

    rm = active_rm()
    if rm is None:
        return {}
    try:
        return Cluster(rm_url(rm), NN).am_status(app_id) or {}
    except ClientError:
        return {}


def _wait(what: str, timeout: float, cond: Any, pause: float = 1.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(pause)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _log_time(line_ts: str) -> float:
    return datetime.strptime(line_ts, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _first_after(log: str, pattern: str, t: float) -> float | None:
    """Time of the first line of ``log`` matching ``pattern`` logged at or after ``t``."""
    for m in re.finditer(_TS + r".*" + pattern, log, re.M):
        ts = _log_time(m[1])
        if ts >= t - 0.5:  # log time stamps have ms, the kill time is taken after the call
            return ts
    return None


def _am_host(app_id: str) -> str:
    app = _app(app_id) or {}
    return str(app.get("amHostHttpAddress", "")).split(":")[0]


def _failover(cluster: dict[str, Any], apps: list[str], restart: bool = False
              ) -> dict[str, Any]:
    """Kill the active RM's container (SIGKILL); wait for the other RM to become active,
    settle and grant; check every AM's agent re-registered there. ``restart``: the other
    RM is down; the active one's container is stopped (SIGTERM) and started again (a
    work-preserving restart of the only RM), and the same is checked of it."""
    old = active_rm()
    assert old is not None, {i: ha_state(i) for i in HA_IDS}
    before = {a: (_am_status(a).get("agent") or {}).get("stats", {}).get("registrations", 0)
              for a in apps}
    if restart:
        new = old
        assert all(ha_state(i) == "DOWN" for i in HA_IDS if i != old)
        t_kill = time.time()
        _container(cluster, old).restart(timeout=5)
    else:
        new = next(i for i in HA_IDS if i != old)
        assert ha_state(new) == "STANDBY", (new, ha_state(new))
        # the kill: no clean stop, no closed ZooKeeper session
        _container(cluster, old).kill(signal="SIGKILL")
        t_kill = time.time()
    _wait(f"{new} ACTIVE after {old} was {'restarted' if restart else 'killed'}", 180,
          lambda: ha_state(new) == "ACTIVE", pause=0.2)
    t_active = time.time()

    def logged_after(pattern: str, t: float) -> float | None:
        """When the new active's log first matched ``pattern`` at or after ``t``."""
        return _first_after(_container(cluster, new).logs().decode(errors="replace"),
                            pattern, t)

    since = t_kill  # log lines of the new active from here on
    if not restart:  # the session timeout, then the elector's transition
        assert t_active - t_kill <= ACTIVE_WITHIN_S, (new, round(t_active - t_kill, 1))
    else:  # the restarted container's log goes on from the old process's: skip those lines
        since = _wait("the restarted RM's start in its log", 60,
                      lambda: logged_after(r"registered UNIX signal handlers", t_kill))
    settled = _wait("the new active's lease recovery to settle", 120,
                    lambda: logged_after(r"Themis recovery settled after", since))
    # every running app's agent registers again, at the new active's endpoint
    new_ip = HA_ADDR[new]

    def reregistered() -> bool:
        for a in apps:
            app = _app(a) or {}
            if app.get("state") != "RUNNING":
                continue
            agent = _am_status(a).get("agent") or {}
            if not agent.get("registered") or agent["stats"]["registrations"] <= before[a]:
                return False
            host = _am_host(a)
            if host in NMS and not any(
                    st == "ESTABLISHED" and r == new_ip and rp == AGENT_PORT
                    for st, _, _, r, rp in tcp_sockets(_container(cluster, host))):
                return False
        return True

    _wait("every running AM's agent registered with the new active", 90, reregistered)
    t_reregistered = time.time()
    # the next grant (a lease expiry's round: every GPU is leased), unless the apps ended;
    # a lease renewed in place is one too (late in the apps, when each runs its one last job
    # on GPUs it wins back at every lease end, every grant is a renewal)
    grant: list[float] = []

    def granted_or_done() -> bool:
        t = logged_after(GRANT_LINE, since)
        if t is not None:
            grant.append(t)
            return True
        return all((_app(a) or {}).get("state") != "RUNNING" for a in apps)

    _wait("the new active's first grant", 150, granted_or_done)
    return {"killed" if not restart else "restarted": old, "new_active": new, "t_kill": t_kill,
            "kill_to_active_s": round(t_active - t_kill, 2),
            "kill_to_settled_s": round(settled - t_kill, 2),
            "kill_to_agents_registered_s": round(t_reregistered - t_kill, 2),
            "kill_to_first_grant_s": round(grant[0] - t_kill, 2) if grant else None}


def test_failover_and_back_keeps_apps_and_leases(cluster: dict[str, Any],
                                                 tmp_path: Path) -> None:
    first = active_rm()
    assert first in HA_IDS, {i: ha_state(i) for i in HA_IDS}
    standby = next(i for i in HA_IDS if i != first)
    assert ha_state(standby) == "STANDBY"
    # the standby serves no agents' endpoint (its scheduler is not started)
    assert not any(st == "LISTEN" and p == AGENT_PORT
                   for st, _, p, _, _ in tcp_sockets(_container(cluster, standby)))

    apps = []
    for i, name in enumerate(("ha-alpha", "ha-beta")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC.format(name=name, seed=i, job=JOB, steps=STEPS_PER_UNIT))
        r = _themis(first, "submit", str(spec))
        assert r.returncode == 0, (r.stdout, r.stderr)
        apps.append(r.stdout.strip().splitlines()[-1])
    def both_running_jobs() -> bool:
        for a in apps:
            app = _app(a) or {}
            agent = _am_status(a).get("agent") or {}
            if app.get("runningContainers", 0) < 2 or not agent.get("registered"):
                return False
        return True

    _wait("both apps running a job with their agents registered", 240, both_running_jobs)
    # the agents know both RMs' endpoints (the client read them from the active's /conf)
    for a in apps:
        arbiter = (_am_status(a).get("agent") or {}).get("arbiter", "")
        assert arbiter == ",".join(f"{i}:{AGENT_PORT}" for i in HA_IDS), arbiter

    trials = [_failover(cluster, apps)]
    # the killed RM comes back as standby and holds nothing (no agents' endpoint)
    killed = trials[0]["killed"]
    _container(cluster, killed).start()
    _wait(f"{killed} back as STANDBY", 180, lambda: ha_state(killed) == "STANDBY")
    assert not any(st == "LISTEN" and p == AGENT_PORT
                   for st, _, p, _, _ in tcp_sockets(_container(cluster, killed)))
    # and back: the apps' jobs are long enough that both still run here
    assert all((_app(a) or {}).get("state") == "RUNNING" for a in apps), \
        {a: (_app(a) or {}).get("state") for a in apps}
    trials.append(_failover(cluster, apps))
    # and a work-preserving restart of the only RM left (the other stays down)
    assert all((_app(a) or {}).get("state") == "RUNNING" for a in apps), \
        {a: (_app(a) or {}).get("state") for a in apps}
    trials.append(_failover(cluster, apps, restart=True))

    finals = {a: _wait(f"{a} to finish", 420,
                       lambda a=a: (lambda x: x if x and x.get("state") in
                                    ("FINISHED", "FAILED", "KILLED") else None)(_app(a)),
                       pause=3) for a in apps}
    for a, f in finals.items():
        assert f["finalStatus"] == "SUCCEEDED", (a, f.get("diagnostics"))

    # no GPU used twice: NodeManager logs against the lease log of both RMs; a lease that
    # expired while no RM was active is enforced from the new active's settling on, so
    # containers may outlive the old windows by that gap
    rm_text = "\n".join(_container(cluster, i).logs().decode(errors="replace")
                        for i in HA_IDS)
    gap = max(t["kill_to_settled_s"] for t in trials)
    bad = gpu_use_violations(nm_logs(cluster), {n: g for n, (g, _) in NMS.items()}, rm_text,
                             lease_s=LEASE_MS / 1000, grace_s=GRACE_MS / 1000,
                             slack_s=gap + 5.0)
    assert not bad, bad

    # no work lost: every run of a job after the first starts from the newest step its
    # previous run stored (its last checkpoint, kept in HDFS by the runner), and each app's
    # promoted job resumed from its first rung (STEPS_PER_UNIT steps)
    runs = _job_runs(cluster)
    lost = [f"{a} {job}: run {k + 1} started at {r[k + 1][0]}, previous run's last "
            f"checkpoint {max(r[k])}" for (a, job), r in runs.items()
            for k in range(len(r) - 1) if r[k + 1][0] != max(r[k])]
    assert not lost, (lost, runs)
    for a in apps:
        assert any(start >= STEPS_PER_UNIT for (app, _), r in runs.items() if app == a
                   for start, _ in r), (a, runs)
    print(json.dumps({"trials": trials, "apps": apps,
                      "job_runs": {f"{a} {j}": r for (a, j), r in runs.items()}},
                     indent=1))


def _job_runs(cluster: dict[str, Any]) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """(app, job id) -> (step it started at, newest step it stored) of each of its runs, in
    container order, from the job's stderr in the NodeManagers' container logs."""
    runs: dict[str, tuple[str, str, int, int]] = {}  # container -> (app, job, start, stored)
    for host in NMS:
        text = shell_read(_container(cluster, host), "grep -H 'ha-job ' /data/nm-logs/*/*/stderr",
                          f"the job logs on {host}")
        for line in text.splitlines():
            m = re.match(r"/data/nm-logs/(application_\S+?)/(container_\S+?)/stderr:"
                         r".*ha-job (\S+) (starts at|stored) step (\d+)", line)
            if not m:
                continue
            app, cid, job, what, step = m[1], m[2], m[3], m[4], int(m[5])
            _, _, start, stored = runs.get(cid, (app, job, -1, -1))
            if what == "starts at":
                start = step
            runs[cid] = (app, job, start, max(stored, step))
    out: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for cid in sorted(runs, key=_container_order):
        app, job, start, stored = runs[cid]
        out.setdefault((app, job), []).append((start, max(start, stored)))
    return out


def _container_order(container_id: str) -> tuple[int, int]:
    """container_e<epoch>_<ts>_<app>_<attempt>_<n>: containers allocated after a failover
    carry the new RM epoch (e..)."""
    m = re.match(r"container_(?:e(\d+)_)?\d+_\d+_\d+_(\d+)", container_id)
    return (int(m[1] or 0), int(m[2])) if m else (0, 0)
