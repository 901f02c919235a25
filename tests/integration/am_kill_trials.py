"""SIGKILL trials of application masters and of jobs on the dockerised mini-cluster (shared
by ``test_job_run_submarine.py`` and ``bench/bench_am_kill.py``; issue 22's target "0 lost
checkpoints, 0 double grants over >= 20 kill/restart trials" on the multi-host cluster).

Apps: single jobs (``themis submit``, ``am.max_attempts`` > 1) whose command counts steps
(0.5 s each) from the one stored in ``{checkpoint_dir}`` and stores every fifth step there
(the runner keeps that directory in HDFS across containers, docs/jobs.md), logging
``amkill-job <job> starts at step S`` and ``... stored step N`` on stderr. A store that
fails (a full disk) ends it with exit status 1, as a training job's failed save does.

One trial: wait until the app's job runs and has stored a step in that run, then

* ``am``: SIGKILL every process of the AM's container (the JVM shell and the Python AM,
  found by ``CONTAINER_ID`` in their environment on the AM's NodeManager host: a crash, not
  a stop); YARN ends the attempt, stops its containers (SIGTERM, then SIGKILL after
  ``yarn.nodemanager.sleep-delay-before-sigkill.ms``) and starts the next attempt, which
  resumes from its HDFS state;
* ``job``: SIGKILL the job's processes in its container (not the runner around them: a
  crash of the training program, as the kernel's OOM killer would do it); the runner keeps
  the checkpoint directory in HDFS, the AM sees a failed run and launches the job again
  after its back-off (``job.max_restarts`` is 20 here);
* ``engine``: SIGKILL the Python engine (auction and agents' endpoint) in the RM's
  container; the plugin's supervisor starts it again, the agents register again, and the
  job, whose leases the RM keeps, runs on: a trial ends when the engine is back
  ("Themis engine registered" in the RM's log) and the job stored another step.

From the containers' logs:

* **lost checkpoint**: the job's next run started at a lower step than the last one the
  killed attempt's run had stored (its "stored step" lines);
* **double run**: two containers of the job ran at the same time (NodeManager logs: each
  app has one job, so any two of its GPU containers overlapping in time), which could tear
  its HDFS checkpoint directory;
* **GPU use outside leases / double grant**: :func:`stockapps.gpu_use_violations` on the
  NodeManagers' logs and the RM's lease log (no node over its GPUs, no GPU container outside
  its app's leases);
* **recovery time**: kill -> the job's next run started (its "starts at step" line), and
  the steps lost (last step reached before the kill - the step the next run started at).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.minicluster import NMS, RM, _get, docker_exec, shell_read, themis
from tests.integration.stockapps import gpu_containers, gpu_use_violations, nm_logs, wait_for

LEASE_MS = 30000
GRACE_MS = 10000
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": str(GRACE_MS),
    "yarn.resourcemanager.themis.agent-port": "8642",
    "yarn.resourcemanager.am.max-attempts": "10",  # the cluster's cap on am.max_attempts
}
JOB = ('d={checkpoint_dir}; mkdir -p "$d"; s=$(cat "$d/step" 2>/dev/null || echo 0); '
       'echo "amkill-job {job_id} starts at step $s" >&2; '
       'while [ "$s" -lt {max_steps} ]; do sleep 0.5; s=$((s + 1)); '
       'echo "amkill-job {job_id} at step $s" >&2; '
       'if [ $((s % 5)) -eq 0 ]; then '
       'if echo "$s" > "$d/step.new" && mv "$d/step.new" "$d/step"; then '
       'echo "amkill-job {job_id} stored step $s" >&2; '
       'else echo "amkill-job {job_id} cannot store step $s" >&2; exit 1; fi; fi; done')
SPEC = """\
name: {name}
kind: single-job
max_steps: {steps}
job:
  command: >-
    {job}
  max_restarts: 20
resources: {{gpus: {gpus}, memory_mb: 256, vcores: 1}}
am: {{memory_mb: 512, max_attempts: {attempts}}}
"""


@dataclass
class Trial:
    kind: str  # am | job
    app: str
    attempt: int  # the attempt killed (am), or whose job was killed (job)
    stored: int  # the last step the killed attempt's run had stored
    reached: int  # the last step it had reached
    resumed: int | None = None  # the step the next run started at
    kill_to_resume_s: float | None = None
    run_went_on: bool = False  # engine: the job's run went on through the kill

    @property
    def lost_checkpoint(self) -> bool:
        return self.resumed is None or self.resumed < self.stored

    @property
    def lost_steps(self) -> int | None:
        return None if self.resumed is None else max(0, self.reached - self.resumed)


@dataclass
class Result:
    trials: list[Trial] = field(default_factory=list)
    apps: dict[str, str] = field(default_factory=dict)  # app -> final state
    double_runs: list[str] = field(default_factory=list)
    gpu_violations: list[str] = field(default_factory=list)
    job_containers: int = 0  # the apps' GPU containers the NodeManagers' logs show

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, Any] = {}
        for kind in sorted({t.kind for t in self.trials}):
            ts = [t for t in self.trials if t.kind == kind]
            times = sorted(t.kill_to_resume_s for t in ts if t.kill_to_resume_s is not None)
            lost = [t.lost_steps for t in ts if t.lost_steps is not None]
            kinds[kind] = {
                "trials": len(ts), "lost_checkpoints": sum(t.lost_checkpoint for t in ts),
                "kill_to_resume_s": {"median": _pct(times, 0.5), "p95": _pct(times, 0.95),
                                     "max": times[-1] if times else None},
                "lost_steps_max": max(lost) if lost else None,
                **({"runs_went_on": sum(t.run_went_on for t in ts)} if kind == "engine"
                   else {}),
            }
        return {
            "trials": len(self.trials),
            "lost_checkpoints": sum(t.lost_checkpoint for t in self.trials),
            "double_runs": len(self.double_runs),
            "gpu_use_violations": len(self.gpu_violations),
            "job_containers": self.job_containers,
            "apps": self.apps,
            "by_kind": kinds,
        }


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def submit(tmp: Path, name: str, steps: int, attempts: int, gpus: int = 1) -> str:
    spec = tmp / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, steps=steps, job=JOB, gpus=gpus,
                                attempts=attempts))
    r = themis("submit", str(spec))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def app_report(app: str) -> dict[str, Any]:
    return dict(_get(f"{RM}/ws/v1/cluster/apps/{app}", timeout=10)["app"])


def attempts(app: str) -> list[dict[str, Any]]:
    doc = _get(f"{RM}/ws/v1/cluster/apps/{app}/appattempts", timeout=10)
    return list((doc.get("appAttempts") or {}).get("appAttempt", []))


def current_attempt(app: str) -> dict[str, Any] | None:
    """The app's newest AM attempt (None before its first)."""
    tries = attempts(app)
    return max(tries, key=lambda a: int(a["id"])) if tries else None


def am_host(attempt: Mapping[str, Any]) -> str:
    """The host an AM attempt runs on."""
    return str(attempt["nodeId"]).split(":")[0]


def job_logs(cluster: Mapping[str, Any], app: str, files: str = "stderr") -> dict[str, str]:
    """container id -> the app's container log files named ``files`` (a glob: ``stderr``, the
    runner's and the job's; ``std*`` with stdout too), from every NodeManager."""
    out: dict[str, str] = {}
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        if not any(f"-{n}-" in w.name for n in NMS):
            continue
        w.reload()
        if w.status != "running":  # a host down (fault_trials.py): its logs are read later
            continue
        text = shell_read(w, f"for f in /data/nm-logs/{app}/*/{files}; do "
                             "echo \"=== $f\"; cat \"$f\"; done", f"the logs of {app}")
        cid = ""
        for line in text.splitlines():
            m = re.match(rf"=== /data/nm-logs/{app}/(\S+)/std(?:out|err)$", line)
            if m:
                cid = m[1]
                out.setdefault(cid, "")
            elif cid:
                out[cid] += line + "\n"
    return out


def _attempt_of(container: str) -> int:
    return int(container.split("_")[-2])


def runs(cluster: Mapping[str, Any], app: str) -> list[dict[str, Any]]:
    """The job's runs: container, attempt, the step it started at, the last stored and the
    last reached steps (from its stderr), in container order."""
    out = []
    for cid, text in sorted(job_logs(cluster, app).items()):
        start = re.search(r"amkill-job \S+ starts at step (\d+)", text)
        if start is None:
            continue
        stored = [int(x) for x in re.findall(r"amkill-job \S+ stored step (\d+)", text)]
        reached = [int(x) for x in re.findall(r"amkill-job \S+ at step (\d+)", text)]
        out.append({"container": cid, "attempt": _attempt_of(cid), "start": int(start[1]),
                    "stored": max(stored, default=int(start[1])),
                    "reached": max(reached, default=int(start[1]))})
    return out


def _kill(cluster: Mapping[str, Any], host: str, cid: str, skip: str = "") -> bool:
    """SIGKILL the processes of container ``cid`` on NodeManager ``host`` (those whose
    command line contains ``skip`` spared); False when there was none."""
    nm = next(c.get_wrapped_container() for c in cluster["containers"]
              if f"-{host}-" in c.get_wrapped_container().name)
    spare = (f"tr '\\0' ' ' < /proc/$p/cmdline | grep -q -- '{skip}' && continue; "
             if skip else "")
    # the answer is the exit status, not the output: a kill is never run twice
    script = (f"n=0; for p in $(grep -l 'CONTAINER_ID={cid}' /proc/[0-9]*/environ "
              f"2>/dev/null | cut -d/ -f3); do {spare}kill -9 $p && n=$((n + 1)); done; "
              "[ $n -gt 0 ]")
    return docker_exec(nm, ["sh", "-c", script]).returncode == 0


def kill_am(cluster: Mapping[str, Any], app: str) -> int:
    """SIGKILL every process of the app's current AM container; returns the attempt."""
    current = current_attempt(app)
    assert current is not None, f"{app}: no AM attempt"
    cid = str(current["containerId"])
    assert _kill(cluster, am_host(current), cid), f"{cid}: no process"
    return int(current["id"])


def kill_job(cluster: Mapping[str, Any], app: str, container: str) -> bool:
    """SIGKILL the job's processes in ``container`` (its runner spared); False when they
    had ended (the run stopped at a lease end meanwhile)."""
    for n in NMS:
        nm = next(c.get_wrapped_container() for c in cluster["containers"]
                  if f"-{n}-" in c.get_wrapped_container().name)
        if docker_exec(nm, ["test", "-d", f"/data/nm-logs/{app}/{container}"]).returncode == 0:
            return _kill(cluster, n, container, skip="themis.am.launchers.yarn.runner")
    raise AssertionError(f"{container}: on no NodeManager")


def one_trial(cluster: Mapping[str, Any], app: str, rng: random.Random, kind: str = "am",
              max_delay_s: float = 6.0) -> Trial | None:
    """Kill the app's AM (``am``), its job's processes (``job``) or the engine once the job
    runs and has stored a step in its newest run; wait for the job's next run. None when the
    app ended before that (its job reached its last step)."""
    def running_run() -> dict[str, Any] | bool | None:
        if app_report(app)["state"] in ("FINISHED", "FAILED", "KILLED"):
            return True  # nothing left to kill
        att = max(int(a["id"]) for a in attempts(app))
        now = [r for r in runs(cluster, app) if r["attempt"] == att]
        last = max(now, key=lambda r: r["container"], default=None)
        return last if last is not None and last["stored"] > last["start"] else None

    # a run may end at a lease end (30 s leases) between the checks and the kill: then the
    # next run is waited for
    while True:
        if wait_for(f"{app}'s job to store a step in its newest run", 240, running_run,
                    1.0) is True:
            return None
        time.sleep(rng.uniform(0.0, max_delay_s))
        run = wait_for(f"{app}'s job to store a step in its newest run", 240, running_run,
                       0.5)
        if run is True:
            return None
        assert isinstance(run, dict)
        if kind == "am":
            attempt = kill_am(cluster, app)
            break
        if kind == "engine":
            return _engine_trial(cluster, app, run)
        attempt = run["attempt"]
        if kill_job(cluster, app, run["container"]):
            break
    t_kill = time.time()
    time.sleep(1.0)  # the killed run's container ends (the runner saves the directory)

    def resumed() -> dict[str, Any] | None:
        return next((r for r in runs(cluster, app) if r["container"] > run["container"]),
                    None)

    nxt = wait_for(f"{app}'s job to run again after the {kind} kill", 300, resumed, 1.0)
    t_resume = time.time()
    last = next(r for r in runs(cluster, app) if r["container"] == run["container"])
    return Trial(kind, app, attempt, stored=last["stored"], reached=last["reached"],
                 resumed=nxt["start"], kill_to_resume_s=round(t_resume - t_kill, 1))


def _rm(cluster: Mapping[str, Any]) -> Any:
    return next(c.get_wrapped_container() for c in cluster["containers"]
                if "-rm-" in c.get_wrapped_container().name)


def _engine_trial(cluster: Mapping[str, Any], app: str, run: dict[str, Any]) -> Trial:
    """SIGKILL the engine; wait until it registered again and the job stored a step more."""
    rm = _rm(cluster)
    r = docker_exec(rm, ["pkill", "-9", "-f", "-e", "themis[.]yarn[.]engine"])
    assert r.returncode == 0, f"no engine process in the RM's container: {r.stdout!r}"
    t_kill = time.time()
    since = int(t_kill) - 1
    wait_for("the engine to register again", 120, lambda: b"Themis engine registered" in
             rm.logs(since=since), 0.5)
    t_back = time.time()

    def progressed() -> dict[str, Any] | None:
        newest = max(runs(cluster, app), key=lambda r: r["container"])
        return newest if newest["stored"] > run["stored"] else None

    after = wait_for(f"{app}'s job to store a step after the engine came back", 240,
                     progressed, 1.0)
    # the same run went on (nothing lost, nothing to resume), or a later one (a lease end
    # meanwhile) started at >= the step stored
    same = after["container"] == run["container"]
    resumed = run["reached"] if same else after["start"]
    return Trial("engine", app, run["attempt"], stored=run["stored"], reached=run["reached"],
                 resumed=resumed, kill_to_resume_s=round(t_back - t_kill, 1),
                 run_went_on=same)


def check_cluster(cluster: Mapping[str, Any], result: Result) -> None:
    """Double runs and GPU use outside leases, from the NodeManagers' and the RM's logs."""
    logs = nm_logs(dict(cluster))
    by_app: dict[str, list[dict[str, Any]]] = {}
    for c in gpu_containers(logs):
        if c["app"] in result.apps:
            by_app.setdefault(c["app"], []).append(c)
    result.job_containers = sum(len(cs) for cs in by_app.values())
    for app, cs in by_app.items():
        cs.sort(key=lambda c: c["start"])
        for i, b in enumerate(cs):
            for a in cs[:i]:
                if b["start"] < a["end"]:
                    result.double_runs.append(
                        f"{app}: {b['container']} started {a['end'] - b['start']:.1f} s "
                        f"before {a['container']} ended")
    rm = _rm(cluster)
    result.gpu_violations = gpu_use_violations(
        logs, {n: g for n, (g, _r) in NMS.items()}, rm.logs().decode(errors="replace"),
        lease_s=LEASE_MS / 1000, grace_s=GRACE_MS / 1000)


def run_trials(cluster: Mapping[str, Any], tmp: Path, *, apps: int, kills_per_app: int,
               steps: int, seed: int = 0, kinds: Sequence[str] = ("am",),
               emit: Callable[[str], None] = print) -> Result:
    """``apps`` apps at once, each killed ``kills_per_app`` times in turn (the kinds of kill
    in turn, ``kinds``); then every app's end and the cluster-wide checks."""
    rng = random.Random(seed)
    result = Result()
    am_kills = sum(1 for k in range(kills_per_app) if kinds[k % len(kinds)] == "am")
    names = [submit(tmp, f"amkill-{seed}-{i}", steps, am_kills + 1) for i in range(apps)]
    for app in names:
        result.apps[app] = "RUNNING"
    for k in range(kills_per_app):
        for app in names:
            t = one_trial(cluster, app, rng, kinds[k % len(kinds)])
            if t is None:  # the app ended first (sized too short for its kills)
                emit(json.dumps({"skipped": app, "kind": kinds[k % len(kinds)]}))
                continue
            result.trials.append(t)
            emit(json.dumps({"trial": len(result.trials), **t.__dict__,
                             "lost_steps": t.lost_steps}))
    for app in names:
        rep = wait_for(f"{app} to end", 600, lambda a=app: (
            r if (r := app_report(a))["state"] in ("FINISHED", "FAILED", "KILLED") else None),
            2.0)
        result.apps[app] = f"{rep['state']}/{rep.get('finalStatus')}"
        final = runs(cluster, app)
        if final and max(r["reached"] for r in final) < steps:
            result.apps[app] += f" (reached {max(r['reached'] for r in final)} of {steps})"
    check_cluster(cluster, result)
    return result
