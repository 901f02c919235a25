"""The conformance suite of :class:`themis.am.core.Launcher` implementations, shipped with
the package (like Optuna's ``optuna.testing``) so that every launcher runs the same tests.

Use it by subclassing :class:`LauncherConformance` in a pytest module and providing a
``harness`` fixture (a :class:`Harness`; ``harness_factory`` too, for the AM crash test)::

    class TestMyLauncher(LauncherConformance):
        @pytest.fixture()
        def harness_factory(self, tmp_path): return lambda: MyHarness(tmp_path)

``tests/unit/test_am_conformance.py`` runs it for local processes
(:class:`LocalHarness`) and for YARN containers through a fake JVM shell
(:class:`YarnHarness`); real YARN containers are covered by the Docker end-to-end tests.
The cases: a job starts and runs to its target; a stop makes it checkpoint and exit; it
resumes from that checkpoint on other GPUs; a crashing job is retried ``max_restarts``
times and then ranked last; after an AM crash a new core restored from the saved state
relaunches the job, which resumes from its checkpoint.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from themis.am.core import AmCore, JobLaunch, LaunchCode, Launcher, LaunchEvent
from themis.am.spec import AppSpec, parse_spec

# A job as a user would write it: resumes from its newest checkpoint, counts steps,
# checkpoints and exits 0 on SIGTERM, exits 3 at start-up once if told to crash. A task of
# a distributed job writes the TF_CONFIG it got to tf_config-<type>-<index>.json; only the
# chief (worker 0) checkpoints; a parameter server serves until SIGTERM, and workers
# start only once every parameter server is up (wrote its file), as TensorFlow's do.
JOB = r"""
import json, os, signal, sys, time
ckpt, target = sys.argv[1], int(sys.argv[2])
os.makedirs(ckpt, exist_ok=True)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
config = json.loads(os.environ.get("TF_CONFIG", "{}"))
task = config.get("task", {"type": "worker", "index": 0})
if config:
    name = os.path.join(ckpt, f"tf_config-{task['type']}-{task['index']}.json")
    with open(name + ".tmp", "w") as f:
        json.dump(config, f)
    os.replace(name + ".tmp", name)
if task["type"] == "ps":
    while not stop:
        time.sleep(0.005)
    sys.exit(0)
# like TensorFlow's workers, wait until every parameter server of the job is up
ps_up = [os.path.join(ckpt, f"tf_config-ps-{i}.json")
         for i in range(len(config.get("cluster", {}).get("ps", [])))]
while not stop and not all(os.path.exists(p) for p in ps_up):
    time.sleep(0.005)
chief = task["index"] == 0
done = sorted(int(p[5:]) for p in os.listdir(ckpt) if p.startswith("ckpt-"))
step = done[-1] if done else 0
print(json.dumps({"event": "start", "step": step,
                  "restored_from": f"ckpt-{step}" if done else None}), flush=True)
if chief and os.path.exists(os.path.join(ckpt, "crash")):
    os.remove(os.path.join(ckpt, "crash"))
    sys.exit(3)
while step < target and not stop:
    time.sleep(0.005)
    step += 1
if chief:
    open(os.path.join(ckpt, f"ckpt-{step}"), "w").close()
print(json.dumps({"event": "exit", "step": step,
                  "reason": "max-steps" if step >= target else "signal"}), flush=True)
"""


class Harness(Protocol):
    """A launcher under test and the knobs the cases need."""

    launcher: Launcher

    def launch(self, job_id: str, target_steps: int, where: int, workers: int = 1,
               ps: int = 0) -> None:
        """Launch on GPU set ``where`` (0 or 1: two disjoint sets of two GPUs); with
        ``workers`` > 1 or ``ps`` > 0 as a distributed job, one GPU per worker."""

    def tf_configs(self, job_id: str) -> dict[tuple[str, int], dict[str, Any]]:
        """The TF_CONFIG each task of the job's latest run got, by (type, index)."""

    def live_tasks(self, job_id: str) -> int:
        """How many tasks (processes, containers) of the job's latest run still run."""

    def where(self, job_id: str) -> str:
        """Where the job's latest run ran (GPU ids or node)."""

    def checkpoint(self, job_id: str) -> int:
        """The job's newest checkpoint step (0: none)."""

    def crash_next(self, job_id: str) -> None:
        """Make the job's next run fail at start-up."""


def events_until(h: Harness, done: Callable[[list[LaunchEvent]], bool],
                 timeout: float = 30.0) -> list[LaunchEvent]:
    """Poll the launcher until ``done(events so far)``; AssertionError on timeout."""
    seen: list[LaunchEvent] = []
    end = time.monotonic() + timeout
    while not done(seen):
        if time.monotonic() > end:
            raise AssertionError(f"timed out; events so far: {seen}")
        seen += h.launcher.poll()
        time.sleep(0.01)
    return seen


def run_for(h: Harness, seconds: float) -> list[LaunchEvent]:
    """Poll the launcher for ``seconds`` (the jobs train meanwhile)."""
    end = time.monotonic() + seconds
    return events_until(h, lambda evs: time.monotonic() > end)


def _code(job_id: str, code: LaunchCode) -> Callable[[list[LaunchEvent]], bool]:
    return lambda evs: any(e.job_id == job_id and e.code is code for e in evs)


def _exited(job_id: str) -> Callable[[list[LaunchEvent]], bool]:
    return lambda evs: any(e.job_id == job_id and e.code is not LaunchCode.STARTED
                           for e in evs)


def _consistent(configs: dict[tuple[str, int], dict[str, Any]], workers: int, ps: int
                ) -> dict[str, list[str]]:
    """Check that every task got the same cluster (``workers`` workers, ``ps`` parameter
    servers, distinct addresses) and its own task; returns the cluster."""
    tasks = [("worker", i) for i in range(workers)] + [("ps", i) for i in range(ps)]
    assert sorted(configs) == sorted(tasks), configs
    cluster: dict[str, list[str]] = configs[("worker", 0)]["cluster"]
    assert sorted(cluster) == (["ps", "worker"] if ps else ["worker"]), cluster
    assert len(cluster["worker"]) == workers and len(cluster.get("ps", [])) == ps
    addresses = [a for v in cluster.values() for a in v]
    assert len(set(addresses)) == len(addresses), cluster
    for (kind, index), config in configs.items():
        assert config["cluster"] == cluster, configs
        assert config["task"] == {"type": kind, "index": index}
    return cluster


def one_job_spec(max_restarts: int = 1, max_steps: int = 40) -> AppSpec:
    return parse_spec({"name": "conf", "kind": "single-job", "max_steps": max_steps,
                       "job": {"command": "job {job_id} {max_steps} {checkpoint_uri}",
                               "max_restarts": max_restarts}})


class LauncherConformance:
    """The cases; a subclass provides the ``harness_factory`` fixture."""

    def test_job_starts_and_runs_to_its_target(self, harness_factory: Callable[[], Any]
                                               ) -> None:
        h = harness_factory()
        h.launch("j", 20, 0)
        evs = events_until(h, _exited("j"))
        assert [e.code for e in evs] == [LaunchCode.STARTED, LaunchCode.REACHED]
        assert not evs[0].step  # a fresh start
        assert evs[1].step == 20 and evs[1].status == 0
        assert h.launcher.live() == set()

    def test_stop_checkpoints_then_the_job_resumes_on_other_gpus(
            self, harness_factory: Callable[[], Any]) -> None:
        h = harness_factory()
        h.launch("j", 100_000, 0)
        events_until(h, _code("j", LaunchCode.STARTED))
        assert run_for(h, 0.3) == []  # some steps
        first = h.where("j")
        h.launcher.stop("j", "lease")
        evs = events_until(h, _exited("j"))
        stopped = evs[-1]
        assert stopped.code is LaunchCode.STOPPED, evs
        assert h.launcher.live() == set()
        ckpt = h.checkpoint("j")
        assert ckpt > 0 and stopped.step == ckpt
        h.launch("j", ckpt + 20, 1)
        evs = events_until(h, _exited("j"))
        assert [e.code for e in evs] == [LaunchCode.STARTED, LaunchCode.REACHED]
        assert evs[0].step == ckpt  # resumed from the checkpoint ...
        assert h.where("j") != first  # ... on other GPUs
        assert evs[1].step == ckpt + 20

    def test_distributed_job_gets_tf_config_and_its_tasks_stop_and_resume_together(
            self, harness_factory: Callable[[], Any]) -> None:
        h = harness_factory()
        h.launch("d", 100_000, 0, workers=2)
        events_until(h, _code("d", LaunchCode.STARTED))
        events_until(h, lambda evs: len(h.tf_configs("d")) == 2)
        first = _consistent(h.tf_configs("d"), 2, 0)
        assert run_for(h, 0.3) == [] and h.live_tasks("d") == 2
        h.launcher.stop("d", "lease")  # the lease of the group ends
        evs = events_until(h, _exited("d"))
        assert [e.code for e in evs] == [LaunchCode.STOPPED], evs  # one event for the job
        assert h.live_tasks("d") == 0 and h.launcher.live() == set()
        ckpt = h.checkpoint("d")
        assert ckpt > 0 and evs[0].step == ckpt
        # the whole group resumes on other GPUs, now with a parameter server
        h.launch("d", ckpt + 20, 1, workers=2, ps=1)
        evs = events_until(h, _exited("d"))
        assert [e.code for e in evs] == [LaunchCode.STARTED, LaunchCode.REACHED], evs
        assert evs[0].step == ckpt and evs[1].step == ckpt + 20
        assert _consistent(h.tf_configs("d"), 2, 1)["worker"] != first["worker"]
        assert h.live_tasks("d") == 0 and h.launcher.live() == set()  # the ps stopped too

    def test_crashing_job_is_retried_then_ranked_last(
            self, harness_factory: Callable[[], Any]) -> None:
        h = harness_factory()
        t = [0.0]
        core = AmCore(one_job_spec(max_restarts=1), "conf", clock=lambda: t[0], backoff_s=5)
        (job,) = core.hb.jobs.values()
        for attempt in (1, 2):
            assert [j.id for j in core.runnable()] == [job.id]
            h.crash_next(job.id)
            h.launch(job.id, job.target_steps, attempt % 2)
            evs = events_until(h, _exited(job.id))
            assert evs[-1].code is LaunchCode.FAILED and evs[-1].status != 0, evs
            for e in evs:
                core.apply(e)
            assert core.record(job.id).failures == attempt
            if attempt == 1:  # retried after the back-off
                assert core.runnable() == [] and not core.record(job.id).gave_up
                t[0] += 5
        # past max_restarts: ranked last, nothing left to run; the app failed
        assert core.record(job.id).gave_up and core.runnable() == [] and core.failed
        assert core.hb.done and core.hb.jobs[job.id].loss == float("inf")

    def test_am_crash_new_core_restores_state_and_job_resumes(
            self, harness_factory: Callable[[], Any]) -> None:
        h = harness_factory()
        core = AmCore(one_job_spec(max_steps=100_000), "conf", clock=time.time)
        (job,) = core.hb.jobs.values()
        h.launch(job.id, job.target_steps, 0)
        for e in events_until(h, _code(job.id, LaunchCode.STARTED)):
            core.apply(e)
        run_for(h, 0.3)
        core.progress(job.id, 7, 0.5)
        state = json.loads(json.dumps(core.to_state()))  # what the AM saves
        # the AM dies: YARN (or the driver) stops its runs, which checkpoint
        h.launcher.stop(job.id, "AM attempt ended")
        events_until(h, _exited(job.id))
        ckpt = h.checkpoint(job.id)
        assert ckpt > 0
        h2 = harness_factory()  # a new attempt: new launcher, same checkpoints
        core2 = AmCore(one_job_spec(max_steps=100_000), "conf", clock=time.time)
        core2.restore(state)
        assert core2.to_state() == state
        assert core2.hb.jobs[job.id].steps_done == 7 and core2.record(job.id).runs == 1
        assert [j.id for j in core2.runnable()] == [job.id]
        h2.launch(job.id, ckpt + 10, 1)
        evs = events_until(h2, _exited(job.id))
        assert evs[0].code is LaunchCode.STARTED and evs[0].step == ckpt
        assert evs[-1].code is LaunchCode.REACHED


# ------------------------------------------------------------------------- harnesses
class LocalHarness:
    """:class:`~themis.am.launchers.local.jobs.LocalProcessLauncher` running :data:`JOB` as a
    user's ``job.command`` on two one-GPU sets of a 2 x 2 emulated cluster; jobs live
    under ``root`` (shared by harnesses made on the same root, as by AM attempts)."""

    GPUS = (("m0-g0",), ("m1-g0",))
    PAIRS = (("m0-g0", "m0-g1"), ("m1-g0", "m1-g1"))  # a 2-worker job's GPUs

    def __init__(self, root: Path) -> None:
        from themis.am.launchers.local.jobs import GpuRegistry, JobRunner, LocalProcessLauncher
        from themis.arbiter.cluster_backend import uniform_cluster

        self.root = root
        script = root / "job.py"
        script.write_text(JOB)

        def make_runner(job_id: str) -> JobRunner:
            jobs = root / "jobs" / job_id
            return JobRunner(job_id, {}, {}, jobs, 0.0, render=lambda steps, gpus: (
                f"{sys.executable} {script} {jobs / 'checkpoints'} {steps}"))

        self.launcher = LocalProcessLauncher("conf", uniform_cluster(2, 2).topology(),
                                             GpuRegistry(), make_runner)
        self._where: dict[str, str] = {}
        self._tasks: dict[str, list[Any]] = {}

    def launch(self, job_id: str, target_steps: int, where: int, workers: int = 1,
               ps: int = 0) -> None:
        gpus = self.GPUS[where] if workers == 1 else self.PAIRS[where][:workers]
        self._where[job_id] = ",".join(gpus)
        for old in self._ckpt(job_id).glob("tf_config-*.json"):
            old.unlink()
        self.launcher.launch(JobLaunch(job_id, target_steps, gpus, workers=workers, ps=ps))
        self._tasks[job_id] = [self.launcher.runners[job_id],
                               *self.launcher.tasks.get(job_id, {}).values()]

    def _ckpt(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id / "checkpoints"

    def tf_configs(self, job_id: str) -> dict[tuple[str, int], dict[str, Any]]:
        out = {}
        for path in self._ckpt(job_id).glob("tf_config-*.json"):
            config = json.loads(path.read_text())
            out[(config["task"]["type"], config["task"]["index"])] = config
        return out

    def live_tasks(self, job_id: str) -> int:
        return sum(1 for r in self._tasks.get(job_id, []) if r.live)

    def where(self, job_id: str) -> str:
        return self._where[job_id]

    def checkpoint(self, job_id: str) -> int:
        return max(self.launcher.runner(job_id).checkpoint_steps(), default=0)

    def crash_next(self, job_id: str) -> None:
        ckpt = self.root / "jobs" / job_id / "checkpoints"
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "crash").touch()


class FakeYarnShell:
    """The JVM shell as the YARN launcher sees it: asks are allocated on their node at
    the next poll; a launched job advances ``steps_per_poll`` steps per poll and reports
    like the runner; told to stop it checkpoints and its container completes with exit 0;
    a released container completes with KILLED_BY_APPMASTER. Checkpoints outlive the
    launcher (they are in HDFS)."""

    def __init__(self, checkpoints: dict[str, int], steps_per_poll: int = 5) -> None:
        self.launcher: Any = None
        self.checkpoints = checkpoints  # job -> step
        self.crash: set[str] = set()
        self.steps_per_poll = steps_per_poll
        self.asks: dict[int, tuple[str, int]] = {}
        self.tf_configs: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
        self.containers: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.next_id = 1
        self.lock = threading.Lock()

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int, priority: int) -> int:
        rid = self.next_id
        self.next_id += 1
        self.asks[rid] = (f"{host}:8041", gpus)
        return rid

    def cancel_request(self, request_id: int) -> None:
        self.asks.pop(request_id, None)

    def launch(self, container: str, command: str, env_json: str) -> None:
        _, job, target, *task = command.split()
        start = self.checkpoints.get(job, 0)
        self.containers[container].update(job=job, target=int(target), step=start,
                                          chief=task in ([], ["worker:0"]), task=task)
        self.events.append({"type": "started", "container": container})
        if task:  # a task of a distributed job: the runner's rendezvous first
            self.containers[container].update(port=40000 + self.next_id, waiting=True)
            self.next_id += 1
            return
        self._started(container)

    def _started(self, container: str) -> None:
        c = self.containers[container]
        if c["chief"]:
            self._report(container, [{"event": "start", "step": c["step"], "restored_from":
                                      f"ckpt-{c['step']}" if c["step"] else None}])
        if c["job"] in self.crash and c["chief"]:
            self.crash.discard(c["job"])
            self._complete(container, 3)

    def _rendezvous(self, container: str) -> None:
        """The runner's report of its port; the job starts with the TF_CONFIG answered."""
        c = self.containers[container]
        answer = self.launcher.answer({"container": container, "port": c["port"]})
        if answer.get("stop"):
            self._complete(container, 0)
        elif "tf_config" in answer:
            config = json.loads(answer["tf_config"])
            kind, index = config["task"]["type"], config["task"]["index"]
            self.tf_configs.setdefault(c["job"], {})[(kind, index)] = config
            c["waiting"] = False
            self._started(container)

    def _report(self, container: str, events: list[dict[str, Any]]) -> None:
        c = self.containers[container]
        self.launcher.reports.put({"container": container, "job_id": c["job"],
                                   "events": events, "steps": c["step"]})

    def _complete(self, container: str, status: int) -> None:
        c = self.containers.pop(container)
        if "job" in c and status != 3 and c["chief"]:
            self.checkpoints[c["job"]] = c["step"]
        self.events.append({"type": "completed", "container": container,
                            "exit_status": status})

    def release(self, container: str) -> None:
        if container in self.containers:
            self._complete(container, -105)

    def stop_container(self, container: str) -> None:
        self.release(container)

    def poll_events(self, timeout_ms: int) -> str:
        for rid, (node, gpus) in list(self.asks.items()):
            del self.asks[rid]
            cid = f"container_1700000000000_0001_01_{self.next_id:06d}"
            self.next_id += 1
            self.containers[cid] = {"node": node, "gpus": gpus}
            self.events.append({"type": "allocated", "container": cid, "node": node,
                                "request_id": rid})
        for cid, c in list(self.containers.items()):
            if c.get("waiting"):
                self._rendezvous(cid)
                continue
            if "job" not in c:
                continue
            if self.launcher.should_stop(cid):
                self._report(cid, [{"event": "exit", "step": c["step"], "reason": "signal"}])
                self._complete(cid, 0)
                continue
            c["step"] = min(c["target"], c["step"] + self.steps_per_poll)
            self._report(cid, [])
            if c["step"] >= c["target"] and c["chief"]:  # other tasks: until stopped
                self._complete(cid, 0)
        out, self.events = self.events, []
        return json.dumps(out)

    # the rest of the Shell protocol (unused by the launcher)
    def start(self, host: str, rpc_port: int, tracking_url: str, heartbeat_ms: int) -> str:
        return json.dumps({"previous_containers": []})

    def nodes(self) -> str:
        return "[]"

    def set_progress(self, p: float) -> None:
        pass

    def finish(self, status: str, message: str, tracking_url: str) -> None:
        pass


class YarnHarness:
    """:class:`~themis.am.launchers.yarn.launcher.YarnContainerLauncher` over
    :class:`FakeYarnShell`: set 0 is node ``nm1``, set 1 node ``nm2``."""

    NODES = ("nm1:8041", "nm2:8041")

    def __init__(self, checkpoints: dict[str, int]) -> None:
        from themis.am.launchers.yarn.launcher import YarnContainerLauncher

        self.shell = FakeYarnShell(checkpoints)
        self._target: dict[str, int] = {}
        self.launcher = YarnContainerLauncher(
            self.shell, memory_mb=512, vcores=1, clock=time.time, lock=threading.Lock(),
            command_for=lambda run: (f"job {run.job_id} {self._target[run.job_id]}"
                                     + (f" {run.task}:{run.task_index}" if run.group else ""),
                                     {}))
        self.shell.launcher = self.launcher

    def launch(self, job_id: str, target_steps: int, where: int, workers: int = 1,
               ps: int = 0) -> None:
        self._target[job_id] = target_steps
        self.shell.tf_configs.pop(job_id, None)
        self.launcher.launch(JobLaunch(job_id, target_steps, node=self.NODES[where],
                                       count=workers, workers=workers, ps=ps))

    def tf_configs(self, job_id: str) -> dict[tuple[str, int], dict[str, Any]]:
        return dict(self.shell.tf_configs.get(job_id, {}))

    def live_tasks(self, job_id: str) -> int:
        return sum(1 for c in self.shell.containers.values() if c.get("job") == job_id)

    def where(self, job_id: str) -> str:
        return [r.node for r in self.launcher.runs if r.job_id == job_id][-1]

    def checkpoint(self, job_id: str) -> int:
        return self.shell.checkpoints.get(job_id, 0)

    def crash_next(self, job_id: str) -> None:
        self.shell.crash.add(job_id)
