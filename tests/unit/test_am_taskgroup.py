"""Distributed jobs (themis.am.taskgroup): gang GPU counts and bids of the AM core, the
YARN AM's gang placement and its TF_CONFIG rendezvous (containers' NodeManager hosts and
the ports their runners reported)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_submarine_am import NODES, FakeShell, _Clock, _FakeAgent, _run_am
from themis.am.core import AmCore, JobLaunch, LaunchCode, LaunchEvent, gang_bids
from themis.am.launchers.local.jobs import GpusBusy
from themis.am.launchers.yarn.am import AppMaster
from themis.am.packing import JobNeed
from themis.am.spec import parse_spec
from themis.am.taskgroup import TaskGroup, cluster_spec, tf_config
from themis.arbiter.cluster_backend import StaticCluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.topology import Gpu
from themis.testing.am_conformance import LocalHarness, YarnHarness, events_until

CMD = "train --job-id {job_id} --max-steps {max_steps} --checkpoint-uri {checkpoint_uri} --lr {lr}"


def _spec(workers: int = 2, ps: int = 0) -> Any:
    raw: dict[str, Any] = {
        "name": "mw", "search_space": {"lr": {"type": "double", "min": 0.001, "max": 0.1}},
        "hyperband": {"max_resource": 4, "eta": 2, "steps_per_unit": 20, "brackets": [1]},
        "job": {"command": CMD}, "resources": {"gpus": 1}, "tasks": {"workers": workers},
    }
    if ps:
        raw["tasks"]["ps"] = {"count": ps}
    return parse_spec(raw)


def test_tf_config_names_the_cluster_and_the_task() -> None:
    group = TaskGroup(2, 1)
    cluster = cluster_spec(group, {("worker", 0): "a:1", ("worker", 1): "b:2",
                                   ("ps", 0): "c:3"})
    assert json.loads(tf_config(cluster, ("worker", 1))) == {
        "cluster": {"worker": ["a:1", "b:2"], "ps": ["c:3"]},
        "task": {"type": "worker", "index": 1}}
    assert group.tasks() == [("worker", 0), ("worker", 1), ("ps", 0)]
    assert not TaskGroup().distributed and group.gpus(2) == 4


def test_two_worker_job_is_not_started_on_half_its_gpus() -> None:
    core = AmCore(_spec(), "mw", clock=lambda: 0.0)
    assert core.gang == 2
    a, b = sorted(core.hb.jobs)[:2]
    needs = [JobNeed(a, 10.0, 2), JobNeed(b, 5.0, 2)]
    assert core.gpu_counts(needs, 1) == {}  # one GPU: no job (it would idle half its group)
    assert core.gpu_counts(needs, 3) == {a: 2}  # the job with most work left; b waits
    assert core.gpu_counts(needs, 4) == {a: 2, b: 2}
    with pytest.raises(ValueError, match="runs on 2 GPUs, not 1"):
        core.launch_for(a, ("m0-g0",))
    run = core.launch_for(a, ("m0-g0", "m0-g1"))
    assert (run.workers, run.worker_gpus(1)) == (2, ("m0-g1",))
    # the app model: every job demands its whole group, in every rung
    assert {j.max_demand for j in core.model(0.0).jobs} == {2}


def test_gang_bids_leave_the_app_whole_task_groups() -> None:
    table = BidTable("mw", 9.0, (Bid(("g1",), 5.0), Bid(("g1", "g2"), 4.0),
                                 Bid(("g1", "g2", "g3"), 3.5)))
    assert [b.gpus for b in gang_bids(table, 0, 2).bids] == [("g1", "g2")]
    assert [len(b.gpus) for b in gang_bids(table, 1, 2).bids] == [1, 3]  # 1 held + 1, + 3
    assert gang_bids(table, 0, 0) == table


def _am(spec: Any, leases: dict[str, float]) -> tuple[AppMaster, FakeShell]:
    shell = FakeShell()
    am = AppMaster(spec, "application_1700000000000_0031", shell, arbiter="-", hdfs=None,
                   app_dir="/tmp/mw", clock=_Clock())
    shell.am = am
    am.agent = _FakeAgent(leases)
    am.cluster_nodes = json.loads(shell.nodes())
    am.state = "RUNNING"
    return am, shell


def test_yarn_am_asks_for_a_whole_task_group_on_one_node_only() -> None:
    far = 10_000.0
    am, shell = _am(_spec(), {"nm1:8041/0": far})  # one leased GPU: half a group
    am.reconcile()
    assert all(node != "nm1:8041" for node, _ in shell.asks.values())  # only parked asks
    am, shell = _am(_spec(), {"nm1:8041/0": far, "nm1:8041/1": far})
    am.reconcile()
    on_nm1 = [r for r in am.runs if r.node == "nm1:8041"]
    assert sorted((r.task, r.task_index, r.gpus) for r in on_nm1) == [
        ("worker", 0, 1), ("worker", 1, 1)]
    assert len({r.group for r in on_nm1}) == 1


def test_yarn_rendezvous_hands_out_tf_config_once_every_task_reported() -> None:
    am, shell = _am(_spec(workers=2, ps=1), {"nm1:8041/0": 1e4, "nm1:8041/1": 1e4})
    am.reconcile()
    group = [r for r in am.runs if r.node == "nm1:8041"]
    assert sorted(r.task for r in group) == ["ps", "worker", "worker"]
    commands = []
    shell.launch = lambda cid, cmd, env: commands.append(cmd)  # type: ignore[method-assign]
    for i, r in enumerate(group):  # the RM allocates them, the AM launches them
        shell.containers[f"c{i}"] = {"node": r.node, "gpus": r.gpus}
        am.launcher.handle_event({"type": "allocated", "container": f"c{i}",
                                  "node": "nm1:8041", "request_id": r.request_id})
    assert [re.search(r"--task (\S+)", c).group(1) for c in commands] == [  # type: ignore
        "worker:0", "worker:1", "ps:0"]
    assert "tf_config" not in am.launcher.answer({"container": "c0", "port": 2222})
    assert "tf_config" not in am.launcher.answer({"container": "c1", "port": 2223})
    configs = {}
    answer = am.launcher.answer({"container": "c2", "port": 2224})
    configs["c2"] = json.loads(answer["tf_config"])
    for c in ("c0", "c1"):  # the others get theirs at their next report
        configs[c] = json.loads(am.launcher.answer({"container": c})["tf_config"])
    assert configs["c0"]["cluster"] == {"worker": ["nm1:2222", "nm1:2223"],
                                        "ps": ["nm1:2224"]}  # NodeManager hosts
    assert all(c["cluster"] == configs["c0"]["cluster"] for c in configs.values())
    assert sorted((c["task"]["type"], c["task"]["index"]) for c in configs.values()) == [
        ("ps", 0), ("worker", 0), ("worker", 1)]
    assert am.launcher.answer({"container": "other", "port": 1}) == {"stop": False}


def test_runners_meet_at_the_rendezvous_and_start_the_job_with_tf_config(
        tmp_path: Path) -> None:
    """Two real runner processes (worker 0 and 1 of a job) report their ports to an AM
    endpoint answering with :meth:`YarnContainerLauncher.answer`; each starts the job
    command only with the TF_CONFIG of the whole group."""
    h = YarnHarness({})
    h.launch("j", 10, 0, workers=2)
    h.launcher.poll()  # the containers are allocated and launched (their runners start)
    containers = {r.task_index: r.container for r in h.launcher.runs}
    assert sorted(containers) == [0, 1] and all(containers.values())

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            report = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps(h.launcher.answer(report)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    job = "import os; print(os.environ['TF_CONFIG'], flush=True)"
    try:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "themis.am.launchers.yarn.runner", "--am",
             f"http://127.0.0.1:{server.server_address[1]}", "--job-id", "j",
             "--logdir", str(tmp_path / f"logs{i}"), "--report-every", "0.1",
             "--task", f"worker:{i}", "--", sys.executable, "-c", job],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "CONTAINER_ID": containers[i]}) for i in (0, 1)]
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        server.shutdown()
        server.server_close()
    assert [p.returncode for p in procs] == [0, 0]
    configs = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0},
                                            {"type": "worker", "index": 1}]
    workers = configs[0]["cluster"]["worker"]
    assert configs[1]["cluster"] == {"worker": workers} and len(set(workers)) == 2
    assert all(w.startswith("nm1:") for w in workers)  # the containers' NodeManager host


def test_local_group_is_not_launched_again_before_all_of_its_tasks_ended(
        tmp_path: Path) -> None:
    """The chief's exit ends the job only once its other tasks are gone too: until then a
    new launch of the job is refused (its GPUs are still the old group's)."""
    h = LocalHarness(tmp_path)
    h.launch("g", 100_000, 0, workers=2, ps=1)
    chief, *others = h._tasks["g"]
    events_until(h, lambda evs: len(h.tf_configs("g")) == 3)
    chief.stop("test")  # only the chief: the others run on until the launcher sees it
    chief.proc.wait(timeout=30)  # type: ignore[union-attr]
    assert all(t.live for t in others) and h.launcher.live() == {"g"}
    with pytest.raises(GpusBusy):
        h.launch("g", 100_000, 1, workers=2)
    evs = events_until(h, lambda evs: bool(evs))  # the launcher stops the group
    assert [e.code for e in evs] == [LaunchCode.STOPPED] and h.live_tasks("g") == 0
    assert all(t.segments[-1].stopped_by == "gang" for t in others)


class GroupShell(FakeShell):
    """:class:`FakeShell` whose containers run a distributed job's tasks like the runner
    does: a task waits at the AM's rendezvous (reporting its port) until it gets its
    TF_CONFIG; only the chief reports the job's events and saves its checkpoint; the other
    tasks run until they are told to stop."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.configs: list[dict[tuple[str, int], dict[str, Any]]] = []  # per group
        self.partial: list[str] = []  # jobs seen training without all of their tasks

    def launch(self, container: str, command: str, env_json: str) -> None:
        task = re.search(r"--task (\w+):(\d+)", command)
        super().launch(container, command, env_json)
        c = self.containers[container]
        assert task is not None, command
        c.update(task=(task.group(1), int(task.group(2))), port=30000 + self.next_id,
                 running=False, waiting=True)
        self.next_id += 1

    def _report(self, container: str, events: list[dict[str, Any]]) -> None:
        c = self.containers[container]
        if c.get("task", ("worker", 0)) == ("worker", 0) and not c.get("waiting", True):
            super()._report(container, events)

    def _complete(self, container: str, status: int = 0) -> None:
        c = self.containers[container]
        if c.get("task") != ("worker", 0):  # only the chief's checkpoint is kept
            self.containers.pop(container)
            self.events.append({"type": "completed", "container": container,
                                "exit_status": status})
            return
        super()._complete(container, status)

    def poll_events(self, timeout_ms: int) -> str:
        assert self.am is not None
        for cid, c in list(self.containers.items()):
            if not c.get("waiting"):
                continue
            answer = self.am.launcher.answer({"container": cid, "port": c["port"]})
            if answer.get("stop"):
                self._complete(cid)
            elif "tf_config" in answer:
                c.update(waiting=False, running=True, config=json.loads(answer["tf_config"]))
                if c["task"] == ("worker", 0):
                    self._report(cid, [{"event": "start", "step": c["step"],
                                        "restored_from": "x" if c["step"] else None}])
                    group = {x["task"]: x["config"] for x in self.containers.values()
                             if x.get("job") == c["job"] and "config" in x}
                    self.configs.append(group)
        for c in self.containers.values():
            if c.get("running") and c.get("task") == ("worker", 0):
                mates = [x for x in self.containers.values()
                         if x.get("job") == c["job"] and x.get("running")]
                if len(mates) != 2:
                    self.partial.append(c["job"])
        for c in self.containers.values():  # only the chief reaches the target
            if c.get("task") not in (None, ("worker", 0)):
                c["max_steps"] = 10**9
        return super().poll_events(timeout_ms)


def test_yarn_am_runs_a_two_worker_hyperband_app_across_lease_ends(tmp_path: Path) -> None:
    """The AM with a real arbiter (2-second leases) and 2-worker jobs: every job runs on
    both GPUs of a node or not at all, every launch's tasks got one consistent
    TF_CONFIG, jobs move at lease ends as whole groups and resume from the chief's
    checkpoint, and the app finishes."""
    gpus = [Gpu(f"{n}/{k}", n, r, f"s{k}") for n, (r, g) in NODES.items() for k in range(g)]
    srv = ArbiterServer(StaticCluster(gpus), ArbiterConfig(
        lease_s=2.0, bid_timeout_s=1.0, warning_s=0.5, fairness_knob=0.0, round_delay_s=0.01,
        solver="highs"))
    srv.start(0)
    try:
        shell = GroupShell(steps_per_poll=1, poll_sleep=0.06)
        am = AppMaster(_spec(), "application_1700000000000_0032", shell,
                       arbiter=srv.address, hdfs=None, app_dir="/tmp/mw2", idle_release_s=0.5,
                       stop_lead_s=0.2, report_every_s=0.1)
        shell.am = am
        assert _run_am(am, timeout=120) == 0
    finally:
        srv.stop()
    assert am.state == "FINISHED" and shell.finished is not None
    assert shell.finished[0] == "SUCCEEDED"
    finished = [j for j in am.snapshot()["jobs"] if j["status"] == "finished"]
    assert len(finished) == 1 and finished[0]["steps"] == 80
    assert shell.partial == []  # never a job training on one worker
    assert shell.configs
    for group in shell.configs:
        cluster = group[("worker", 0)]["cluster"]
        assert len(cluster["worker"]) == 2 and len(set(cluster["worker"])) == 2
        assert all(cfg["cluster"] == cluster for cfg in group.values())
    assert am.reallocations, "no job moved at a lease end"
    assert all(r.restored_step for r in am.reallocations)
    assert {r.gpus for r in am.runs} == {1}  # one GPU per worker container


def test_a_worker_finishing_before_the_chief_does_not_stop_the_job(tmp_path: Path) -> None:
    """Workers reach the step target together, one a little earlier: its exit 0 does not
    stop the chief (the job reaches its target); any other task's exit does stop it."""
    from themis.am.launchers.local.jobs import GpuRegistry, JobRunner, LocalProcessLauncher
    from themis.arbiter.cluster_backend import uniform_cluster

    script = tmp_path / "task.py"
    script.write_text(
        "import json, os, sys, time\n"
        "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
        "if task['type'] == 'worker' and task['index'] == 0:\n"
        "    time.sleep(1.5)  # the chief finishes last\n"
        "sys.exit(int(sys.argv[1]) if task['index'] == 1 else 0)\n")

    def run(worker_1_status: int) -> LaunchCode:
        root = tmp_path / f"j{worker_1_status}"
        launcher = LocalProcessLauncher(
            "a", uniform_cluster(1, 2).topology(), GpuRegistry(),
            lambda job: JobRunner(job, {}, {}, root, 0.0, render=lambda steps, gpus: (
                f"{sys.executable} {script} {worker_1_status}")))
        launcher.launch(JobLaunch("j", 10, ("m0-g0", "m0-g1"), workers=2))
        seen: list[LaunchEvent] = []
        deadline = time.monotonic() + 30
        while not any(e.code is not LaunchCode.STARTED for e in seen):
            assert time.monotonic() < deadline, seen
            seen += launcher.poll()
            time.sleep(0.02)
        return seen[-1].code

    assert run(0) is LaunchCode.REACHED
    assert run(3) is LaunchCode.FAILED  # worker 1 failed: the chief is stopped, job failed
