"""The application master's controller against a real in-process arbiter (gRPC) and a fake
YARN shell whose "jobs" advance a step counter, checkpoint on stop and resume from it."""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from themis.am.appstate import hyperband_to_dict, restore_hyperband
from themis.am.core import LaunchCode, LaunchEvent
from themis.am.launchers.yarn.am import AppMaster, parse_container_id
from themis.am.launchers.yarn.records import Run
from themis.am.spec import parse_spec
from themis.arbiter.cluster_backend import StaticCluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.hadoop.dockerrt import EXECUTOR_KEY, LCE, RUNTIMES_KEY
from themis.mechanism.topology import Gpu

NODES = {"nm1:8041": ("/rack1", 2), "nm2:8141": ("/rack2", 2)}
CMD = ("train --job-id {job_id} --max-steps {max_steps} --checkpoint-uri {checkpoint_uri} "
       "--lr {lr}")


class FakeShell:
    """YARN as the AM sees it: node-local asks are granted only where the app holds a lease;
    a launched job runs ``steps_per_poll`` steps per poll, checkpoints when its runner is
    told to stop (exit 0) and resumes from its last checkpoint in the next container."""

    def __init__(self, steps_per_poll: int = 4, poll_sleep: float = 0.02) -> None:
        self.am: AppMaster | None = None
        self.steps_per_poll = steps_per_poll
        self.poll_sleep = poll_sleep
        self.asks: dict[int, tuple[str, int]] = {}
        self.containers: dict[str, dict[str, Any]] = {}
        self.checkpoints: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []
        self.finished: tuple[str, str] | None = None
        self.next_id = 1
        self.launched: list[tuple[str, str]] = []  # (job, node)
        self.envs: list[dict[str, str]] = []  # launch environments
        self.http: dict[str, str] = {}  # node -> its NodeManager's web address
        self.launched_services: list[str] = []  # TensorBoard containers' commands

    def start(self, host: str, rpc_port: int, tracking_url: str, heartbeat_ms: int) -> str:
        return json.dumps({"previous_containers": []})

    def nodes(self) -> str:
        return json.dumps([{"node": n, "host": n.split(":")[0], "rack": r, "gpus": g,
                            "http": self.http.get(n, "")} for n, (r, g) in NODES.items()])

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int, priority: int) -> int:
        rid = self.next_id
        self.next_id += 1
        node = next(n for n in NODES if n.startswith(host + ":"))
        self.asks[rid] = (node, gpus)
        return rid

    def cancel_request(self, request_id: int) -> None:
        self.asks.pop(request_id, None)

    def launch(self, container: str, command: str, env_json: str) -> None:
        c = self.containers[container]
        if "themis.am.launchers.yarn.tbserve" in command:  # the app's TensorBoard: serves, no steps
            c.update(service=command)
            self.launched_services.append(command)
            env = json.loads(env_json)
            # the app's user, as the AM has it (never a default such as root)
            assert c["gpus"] == 0 and env["THEMIS_WEBHDFS_URL"]
            assert env.get("HADOOP_USER_NAME") == os.environ.get("HADOOP_USER_NAME")
            return
        self.envs.append(json.loads(env_json))
        b64 = re.search(r"--command-b64 (\S+)", command)
        assert b64, command
        job_cmd = base64.urlsafe_b64decode(b64.group(1)).decode()  # what the runner runs
        m = re.search(r"--max-steps (\d+)", job_cmd)
        job = re.search(r"--job-id (\S+)", job_cmd)
        assert m and job, job_cmd
        c.update(job=job.group(1), max_steps=int(m.group(1)), running=True)
        start = self.checkpoints.get(c["job"], 0)
        c["step"] = start
        self.launched.append((c["job"], c["node"]))
        self.events.append({"type": "started", "container": container})
        self._report(container, [{"event": "start", "step": start, "time": time.time(),
                                  "restored_from": f"ckpt-{start}" if start else None}])

    def _report(self, container: str, events: list[dict[str, Any]]) -> None:
        c = self.containers[container]
        assert self.am is not None
        self.am._reports.put({"container": container, "job_id": c["job"], "events": events,
                              "steps": c["step"], "loss": 1.0 / (1 + c["step"]),
                              "serial_iter_time": 0.01})

    def _complete(self, container: str, status: int = 0) -> None:
        c = self.containers.pop(container)
        if "job" in c:
            self.checkpoints[c["job"]] = c["step"]
        self.events.append({"type": "completed", "container": container, "exit_status": status})

    def stop_container(self, container: str) -> None:
        self.release(container)

    def release(self, container: str) -> None:
        if container in self.containers:
            self._complete(container, -105)

    def set_progress(self, p: float) -> None:
        pass

    def finish(self, status: str, message: str, tracking_url: str) -> None:
        self.finished = (status, message)

    def _allocate(self, rid: int, node: str, gpus: int) -> None:
        """The RM satisfies ask ``rid`` with a container of ``gpus`` GPUs on ``node``."""
        del self.asks[rid]
        cid = f"container_1700000000000_0001_01_{self.next_id:06d}"
        self.next_id += 1
        self.containers[cid] = {"node": node, "gpus": gpus, "running": False}
        self.events.append({"type": "allocated", "container": cid, "node": node,
                            "host": node.split(":")[0], "gpus": gpus, "request_id": rid})

    def _run_containers(self) -> None:
        """One poll of the running containers: a stopped one checkpoints and ends, the
        others advance ``steps_per_poll`` steps and end at their step target."""
        am = self.am
        assert am is not None
        for cid, c in list(self.containers.items()):
            if not c.get("running"):
                continue
            with am._lock:
                stop = cid in am._stop_set
            if stop:
                self._report(cid, [{"event": "checkpoint", "step": c["step"], "seconds": 0.01,
                                    "reason": "signal 15"}])
                self._complete(cid)
                continue
            c["step"] = min(c["max_steps"], c["step"] + self.steps_per_poll)
            self._report(cid, [])
            if c["step"] >= c["max_steps"]:
                self._complete(cid)

    def poll_events(self, timeout_ms: int) -> str:
        am = self.am
        assert am is not None
        time.sleep(self.poll_sleep)
        usable = am.usable_leases(time.time())
        for rid, (node, gpus) in list(self.asks.items()):
            held = sum(1 for g in usable if g.startswith(node + "/"))
            inuse = sum(c["gpus"] for c in self.containers.values() if c["node"] == node)
            if held - inuse >= gpus:
                self._allocate(rid, node, gpus)
        self._run_containers()
        out, self.events = self.events, []
        return json.dumps(out)


@pytest.fixture()
def arbiter() -> Iterator[ArbiterServer]:
    gpus = [Gpu(f"{n}/{k}", n, r, f"s{k}") for n, (r, g) in NODES.items() for k in range(g)]
    srv = ArbiterServer(StaticCluster(gpus), ArbiterConfig(
        lease_s=2.0, bid_timeout_s=1.0, warning_s=0.5, fairness_knob=0.0, round_delay_s=0.01,
        solver="highs"))  # as in CI (no gurobipy), so that ties resolve the same everywhere
    srv.start(0)
    yield srv
    srv.stop()


def _spec(**over: Any) -> Any:
    raw: dict[str, Any] = {
        "name": "t", "search_space": {"lr": {"type": "double", "min": 0.001, "max": 0.1,
                                             "scale": "log"}},
        "hyperband": {"max_resource": 4, "eta": 2, "steps_per_unit": 20, "brackets": [1]},
        "job": {"command": CMD}, "resources": {"gpus": 1},
    }
    raw.update(over)
    return parse_spec(raw)


def _run_am(am: AppMaster, timeout: float = 60.0) -> int:
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(am.run()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"AM did not finish: {json.dumps(am.snapshot())[:2000]}"
    return out[0]


def test_am_runs_hyperband_app_moves_jobs_at_lease_expiry_and_resumes(
        arbiter: ArbiterServer) -> None:
    # A rung (40 steps) takes longer than a lease (2 s), so every running job meets a lease
    # end: the AM stops it (checkpoint) just before, and starts it again from that
    # checkpoint on the GPUs of its next lease - the same ones or others.
    shell = FakeShell(steps_per_poll=1, poll_sleep=0.06)
    spec = _spec()
    am = AppMaster(spec, "application_1700000000000_0001", shell, arbiter=arbiter.address,
                   hdfs=None, app_dir="/tmp/x", idle_release_s=0.5, stop_lead_s=0.2,
                   report_every_s=0.1)
    shell.am = am
    assert _run_am(am) == 0
    assert am.state == "FINISHED"
    assert shell.finished is not None and shell.finished[0] == "SUCCEEDED"
    snap = am.snapshot()
    # bracket s=1 of R=4, eta=2: 3 jobs x 40 steps, then 1 job to 80 steps
    finished = [j for j in snap["jobs"] if j["status"] == "finished"]
    assert len(finished) == 1 and finished[0]["steps"] == 80
    # 2-second leases: jobs were stopped at lease ends and resumed from their checkpoints
    assert am.reallocations, "no job moved at a lease end"
    for r in am.reallocations:
        assert r.restored_step is not None and r.restored_step > 0
    # every job that was restored resumed at exactly its checkpointed step count
    assert any(s > 0 for j in snap["jobs"] for s in j["restored_steps"])
    assert snap["gpu_seconds"] > 0
    # containers were only ever launched on nodes where the app held leases (FakeShell
    # grants only there) and the app unregistered at the end
    assert shell.launched
    assert arbiter.core.snapshot()["apps"] == {} or "application_1700000000000_0001" \
        not in arbiter.core.snapshot().get("apps", {})


def test_single_job_spec_and_status_endpoint(arbiter: ArbiterServer) -> None:
    import urllib.request

    shell = FakeShell(steps_per_poll=2)
    spec = parse_spec({"name": "one", "kind": "single-job", "max_steps": 30,
                       "job": {"command": "train --job-id {job_id} --max-steps {max_steps} "
                                          "--checkpoint-uri {checkpoint_uri}"}})
    am = AppMaster(spec, "application_1700000000000_0002", shell, arbiter=arbiter.address,
                   hdfs=None, app_dir="/tmp/y", report_every_s=0.1)
    shell.am = am
    seen: list[dict[str, Any]] = []

    def poll() -> None:
        while am.state != "FINISHED":
            if am.tracking_url:
                try:
                    with urllib.request.urlopen(am.tracking_url + "status", timeout=2) as r:
                        seen.append(json.load(r))
                except OSError:
                    pass
            time.sleep(0.05)

    threading.Thread(target=poll, daemon=True).start()
    assert _run_am(am) == 0
    assert am.hb.jobs and all(j.steps_done == 30 for j in am.hb.jobs.values())
    assert any(s.get("app_id") == "application_1700000000000_0002" for s in seen)
    assert any(s.get("gpus", {}).get("count", 0) > 0 for s in seen)


def test_hyperband_state_round_trip() -> None:
    spec = _spec()
    hb = spec.make_hyperband("a")
    first = sorted(hb.jobs)
    hb.report(first[0], 40, 0.5, 0.01)
    d = json.loads(json.dumps(hyperband_to_dict(hb)))
    hb2 = spec.make_hyperband("a")
    restore_hyperband(hb2, d)
    assert hyperband_to_dict(hb2) == hyperband_to_dict(hb)
    for j in first[1:]:
        hb.report(j, 40, 1.0)
        hb2.report(j, 40, 1.0)
    assert hyperband_to_dict(hb2) == hyperband_to_dict(hb)


def test_parse_container_id() -> None:
    assert parse_container_id("container_1700000000000_0003_02_000001") == (
        "application_1700000000000_0003", 2)
    assert parse_container_id("container_e17_1700000000000_0003_01_000001") == (
        "application_1700000000000_0003", 1)
    with pytest.raises(ValueError):
        parse_container_id("nope")


class _FakeAgent:
    """The part of AgentClient the AM reads: leases (GPU id -> expiry), lock, connected."""

    def __init__(self, leases: dict[str, float], connected: bool = True) -> None:
        self.leases = dict(leases)
        self._lock = threading.Lock()
        self.connected = threading.Event()
        if connected:
            self.connected.set()
        self.released: list[list[str]] = []

    def held(self) -> list[str]:
        return sorted(self.leases)

    def release(self, ids: list[str]) -> None:
        self.released.append(list(ids))


class _Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _bare_am(leases: dict[str, float], connected: bool = True, spec: Any = None,
             **kw: Any) -> tuple[AppMaster, FakeShell, _Clock]:
    clock = _Clock()
    shell = FakeShell()
    am = AppMaster(spec or _spec(), "application_1700000000000_0009", shell, arbiter="-",
                   hdfs=None, app_dir="/tmp/z", clock=clock, **kw)
    shell.am = am
    am.agent = _FakeAgent(leases, connected)
    am.cluster_nodes = json.loads(shell.nodes())
    am.state = "RUNNING"
    return am, shell, clock


def test_stop_lead_grows_with_measured_stops_and_is_capped_by_the_lease() -> None:
    am, _, clock = _bare_am({})
    assert am.stop_lead() == 1.5
    am.launcher.stop_durations.append(2.0)
    assert am.stop_lead() == pytest.approx(2.5)  # 1.25x the slowest recent stop
    am.margins.lease_len["nm1:8041/0"] = 4.0
    assert am.stop_lead("nm1:8041/0") == pytest.approx(1.0)  # at most a quarter of the lease
    # a run is stopped once its lease is within the lead, and new runs need a margin more
    am.margins.lease_len.clear()
    am.agent.leases = {"nm1:8041/0": clock.t + 2.0, "nm1:8041/1": clock.t + 6.0,
                       "nm2:8141/0": clock.t + 60.0}
    assert set(am.usable_leases(clock.t)) == {"nm1:8041/1", "nm2:8141/0"}
    assert set(am.placeable_leases(clock.t)) == {"nm2:8141/0"}  # 6 s < 2.5 s + 5 s


def test_no_parked_asks_before_the_agent_is_connected() -> None:
    am, shell, _ = _bare_am({}, connected=False)
    am.reconcile()
    assert shell.asks == {}
    am.agent.connected.set()
    am.reconcile()
    assert len(shell.asks) == 3  # every job of the first rung: one parked ask each


def test_a_container_on_a_lease_about_to_end_is_given_back_unlaunched() -> None:
    am, shell, clock = _bare_am({})
    am.agent.leases = {"nm1:8041/0": clock.t + 4.0}  # usable, but too short for a new run
    am.reconcile()
    rid = next(iter(am.by_request))
    run = am.by_request[rid]
    assert run.node == "nm2:8141"  # parked where the app holds no lease
    # the RM allocates on nm1 anyway (it has lease room there)
    shell.containers["c1"] = {"node": "nm1:8041", "gpus": 1, "running": False,
                              "job": run.job_id, "step": 0}
    am.launcher.handle_event({"type": "allocated", "container": "c1", "node": "nm1:8041",
                      "request_id": rid})
    assert shell.launched == [] and "c1" not in shell.containers  # released, not launched
    assert am._no_park["nm1:8041"] == clock.t + 4.0
    # no ask is parked on nm1 again until that lease ends
    am.agent.leases = {}
    assert am.demand_node() == "nm2:8141"
    am._no_park["nm2:8141"] = clock.t + 10.0
    assert am.demand_node() == ""
    clock.t += 4.5
    assert am.demand_node() == "nm1:8041"


def test_an_idle_gpu_given_back_is_the_one_of_the_soonest_ending_lease_on_its_node() -> None:
    # The RM cuts a give-back from the app's soonest-ending leases on the node, whatever ids
    # the AM names (LeaseTable.shrink): the AM names those too, so that both keep the
    # lease that lasts. (Traced on the mini-cluster: the AM gave back "r16", the later
    # lease, kept "r7", and stopped its job when r7 ended; the RM had cut r7 and kept r16.
    # Ids sort as text, so "r13" comes before "r9" here, the later lease before the sooner.)
    am, _, _ = _bare_am({"nm1:8041/r9-1000.0": 1060.0, "nm1:8041/r13-1020.0": 1105.0},
                        spec=_spec(max_parallel_jobs=1), idle_release_s=0.0)
    am.reconcile()  # one job may run: one GPU of nm1 idles
    assert am.agent.released == [["nm1:8041/r9-1000.0"]]


def test_a_node_yarn_takes_out_of_service_loses_its_leases_in_the_ams_view() -> None:
    # issue 35: nm1 is LOST; the RM ended the app's leases there, and the AM's allocate
    # response names the node: the AM drops those leases, stops asking there, and its job
    # (its container completed as aborted) asks where it still holds a lease
    am, shell, clock = _bare_am({"nm1:8041/0": 1060.0, "nm1:8041/1": 1060.0,
                                 "nm2:8141/0": 1060.0})
    am.reconcile()
    assert {node for node, _ in shell.asks.values()} == {"nm1:8041", "nm2:8141"}
    am.launcher.handle_event({"type": "nodes_unusable", "nodes": ["nm1:8041"]})
    assert am.leases() == {"nm2:8141/0": 1060.0}
    assert am._no_park["nm1:8041"] == clock.t + 60.0
    am.reconcile()
    live = [r for r in am.runs if r.state == "requested"]
    assert live and all(r.node == "nm2:8141" for r in live), [(r.node, r.state) for r in live]
    assert am.demand_node() == "nm2:8141"


def _nm_conf_server(runtimes: str, executor: str) -> Any:
    """A NodeManager's ``/conf`` page (Hadoop's XML) on a local port."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = (f"<configuration><property><name>{RUNTIMES_KEY}</name><value>{runtimes}</value>"
            f"</property><property><name>{EXECUTOR_KEY}</name><value>{executor}</value>"
            "</property></configuration>").encode()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/conf" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_docker_image_runs_through_yarns_docker_runtime(arbiter: ArbiterServer) -> None:
    # every GPU NodeManager runs the Docker runtime: the jobs' containers get the image
    ok = [_nm_conf_server("default,docker", LCE) for _ in NODES]
    shell = FakeShell(steps_per_poll=5)
    shell.http = {n: f"127.0.0.1:{srv.server_address[1]}" for n, srv in zip(NODES, ok, strict=True)}
    spec = parse_spec({"name": "img", "kind": "single-job", "max_steps": 20,
                       "job": {"command": CMD.replace(" --lr {lr}", ""),
                               "docker_image": "reg.local:5000/ml/tf:2.16"}})
    am = AppMaster(spec, "application_1700000000000_0005", shell, arbiter=arbiter.address,
                   hdfs=None, app_dir="/tmp/img", report_every_s=0.1)
    shell.am = am
    try:
        assert _run_am(am) == 0, am.message
    finally:
        for srv in ok:
            srv.shutdown()
    assert shell.envs and all(
        e["YARN_CONTAINER_RUNTIME_TYPE"] == "docker"
        and e["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "reg.local:5000/ml/tf:2.16"
        for e in shell.envs), shell.envs


def test_docker_image_is_refused_where_a_nodemanager_lacks_the_runtime(
        arbiter: ArbiterServer) -> None:
    good, bad = _nm_conf_server("default,docker", LCE), _nm_conf_server(
        "default", "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor")
    shell = FakeShell()
    shell.http = {"nm1:8041": f"127.0.0.1:{good.server_address[1]}",
                  "nm2:8141": f"127.0.0.1:{bad.server_address[1]}"}
    spec = parse_spec({"name": "img", "kind": "single-job", "max_steps": 20,
                       "job": {"command": "train", "docker_image": "tf:2"}})
    am = AppMaster(spec, "application_1700000000000_0006", shell, arbiter=arbiter.address,
                   hdfs=None, app_dir="/tmp/img2")
    shell.am = am
    try:
        assert _run_am(am) == 1
    finally:
        good.shutdown()
        bad.shutdown()
    assert shell.finished is not None and shell.finished[0] == "FAILED"
    msg = shell.finished[1]
    assert "nm2:8141" in msg and "nm1:8041" not in msg, msg
    assert f"{RUNTIMES_KEY} is 'default' (needs docker)" in msg, msg
    assert "DefaultContainerExecutor" in msg and "LinuxContainerExecutor" in msg, msg
    assert not shell.launched and not shell.envs  # nothing ran outside the image


def test_tensorboard_container_runs_beside_the_jobs_and_is_asked_again_after_a_crash(
        arbiter: ArbiterServer) -> None:
    shell = FakeShell(steps_per_poll=1, poll_sleep=0.05)
    spec = parse_spec({"name": "tb", "kind": "single-job", "max_steps": 60,
                       "job": {"command": CMD.replace(" --lr {lr}", "")},
                       "tensorboard": {"memory_mb": 512}})
    am = AppMaster(spec, "application_1700000000000_0007", shell, arbiter=arbiter.address,
                   hdfs=None, app_dir="/tmp/tb", report_every_s=0.1)
    shell.am = am
    crashed: list[str] = []

    def crash_the_first_tensorboard() -> None:  # its process dies once while the job runs
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not crashed:
            for cid, c in list(shell.containers.items()):
                if c.get("service"):
                    crashed.append(cid)
                    shell._complete(cid, 1)
                    break
            time.sleep(0.05)

    threading.Thread(target=crash_the_first_tensorboard, daemon=True).start()
    assert _run_am(am) == 0
    tb = am.snapshot()["tensorboard"]
    assert crashed and tb["restarts"] == 1 and tb["state"] == "stopped", tb
    assert tb["container"] != crashed[0]  # a second container after the crash
    # both were asked without GPU, ran tbserve on the app's HDFS event files, and the last
    # one was released when the app finished
    services = shell.launched_services
    assert len(services) == 2, services
    assert all("--src /tmp/tb/tensorboard" in cmd and "--publish /tmp/tb/tensorboard.json"
               in cmd for cmd in services), services
    assert not any(c.get("service") for c in shell.containers.values())


def test_with_a_docker_image_no_job_launches_on_a_nodemanager_without_the_runtime() -> None:
    # nm2 joined after the AM's start-up check (or changed): checked when a container is
    # allocated there, and given back unlaunched, as the image would be ignored on it
    bad = _nm_conf_server("default", "")
    am, shell, clock = _bare_am({"nm2:8141/0": 1e12})
    try:
        am.spec = parse_spec({"name": "img", "kind": "single-job", "max_steps": 20,
                              "job": {"command": "train", "docker_image": "tf:2"}})
        shell.http = {"nm2:8141": f"127.0.0.1:{bad.server_address[1]}"}
        am.docker_nodes = {"nm1:8041": ""}  # passed the start-up check
        rid = shell.request("nm2", 512, 1, 1, 1)
        run = Run(1, "j", "nm2:8141", "nm2", 1, rid, t_requested=clock.t, target_steps=20)
        am.launcher.runs.append(run)
        am.launcher.by_request[rid] = run
        shell.containers["c1"] = {"node": "nm2:8141", "gpus": 1, "running": False}
        am.launcher.handle_event({"type": "allocated", "container": "c1", "node": "nm2:8141",
                                  "request_id": rid})
    finally:
        bad.shutdown()
    assert shell.launched == [] and "c1" not in shell.containers  # released, not launched
    assert f"{RUNTIMES_KEY} is 'default' (needs docker)" in am.docker_nodes["nm2:8141"]
    assert am._no_park["nm2:8141"] == float("inf")  # no ask parked there again
    assert am._docker_ready("nm1:8041") and not am._docker_ready("nm2:8141")


class _NoGrpcAgent(_FakeAgent):
    """AgentClient's stand-in for :meth:`AppMaster.start_agent` (no gRPC): the AM builds
    its bidder exactly as with an arbiter."""

    def __init__(self, address: str, app_id: str, bidder: Any, **options: Any) -> None:
        super().__init__({})
        self.bidder = bidder
        self.secret: str | None = None

    def start(self) -> None:
        pass


def test_a_restarted_am_holding_no_gpu_wins_whole_containers_in_the_auction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # bench/RESULTS.md, "a restarted AM can starve after a node loss": the app's AM and job
    # were on the lost node; the new attempt (resumed from HDFS) holds no GPU, so its rho is
    # +inf and it is the round's bidder every round. Its job runs in one container of
    # resources.gpus = 2 GPUs (the AM's ask, hence its shape in the round), so its bid table
    # must name 2-GPU bundles: a 1-GPU bundle (the model's rung-0 demand, eta^0, which the
    # YARN AM never runs) wins in the auction, is cut as a partial container, goes to the
    # leftover of the others, and the app won nothing round after round.
    import random

    from themis.hadoop.webhdfs import WebHdfs
    from themis.mechanism.bidder import OfferInfo
    from themis.mechanism.round import run_round
    from themis.mechanism.solvers import make_solver

    from ._fake_webhdfs import FakeWebHdfs

    monkeypatch.setattr("themis.agent.client.AgentClient", _NoGrpcAgent)
    spec = parse_spec({"name": "hit", "kind": "single-job", "max_steps": 500,
                       "job": {"command": "train --max-steps {max_steps} "
                                          "--checkpoint-uri {checkpoint_uri}"},
                       "resources": {"gpus": 2}})
    app = "application_1700000000000_0011"
    fake = FakeWebHdfs()
    try:
        clock = _Clock()
        first = AppMaster(spec, app, FakeShell(), arbiter="-", hdfs=WebHdfs(fake.url),
                          app_dir="/themis/hit", clock=clock, attempt=1)
        first.start_agent("-", max_gpus=spec.max_gpus(), cluster_gpus=8)  # as registered
        job = next(iter(first.hb.jobs))
        first.core.apply(LaunchEvent(job, LaunchCode.STARTED, 0))  # its container on nm1
        clock.t += 60.0
        first.core.progress(job, 100, None, 0.5)
        first.save_state(force=True)  # then nm1 is lost with the AM and the job
        clock.t += 30.0
        shell = FakeShell()
        am = AppMaster(spec, app, shell, arbiter="-", hdfs=WebHdfs(fake.url),
                       app_dir="/themis/hit", clock=clock, attempt=3)
        shell.am = am
        assert am.load_state() and am._saved_cluster_gpus == 8
        am.start_agent("-", max_gpus=spec.max_gpus(), cluster_gpus=am._saved_cluster_gpus)
    finally:
        fake.close()
    am.cluster_nodes = json.loads(shell.nodes())
    am.state = "RUNNING"
    am.reconcile()  # the job's ask, parked: what the RM's view shows of the app
    assert [gpus for _, gpus in shell.asks.values()] == [2]
    assert am.bidder is not None and am.live_rho() == float("inf")  # status: rho null
    # a competitor's lease on nm2's 2 GPUs ended; 4 competitors hold the other GPUs
    offer = [Gpu(f"nm2:8141/{k}", "nm2:8141", "/rack2", f"s{k}") for k in range(2)]
    rho = {app: am.live_rho(), **{f"other{i}": 1.2 + 0.1 * i for i in range(4)}}
    bidder = am.bidder

    def collect(bidders: Any) -> dict[str, Any]:
        table = bidder.bid(OfferInfo(round_id=1, gpus=tuple(offer), held=(),
                                     deadline=clock.t + 5, cluster_gpus=4, active_apps=5))
        return {app: table} if app in bidders else {}

    for seed in range(3):
        out = run_round(offer, rho, collect, fairness_knob=0.8, lease_s=60.0, now=clock.t,
                        solver=make_solver("highs"), rng=random.Random(seed),
                        room=dict.fromkeys(rho, 2), shape={a: {2: 1} for a in rho},
                        previous={g.id: "other0" for g in offer})
        assert out.bidders == (app,)
        assert out.allocation.get(app) == tuple(g.id for g in offer), (
            seed, out.auction.allocation if out.auction else None, out.allocation,
            bidder.bid(OfferInfo(1, tuple(offer), (), clock.t + 5, 4, 5)))
