"""End to end on the dockerised mini-cluster: two competing hyper-parameter-group apps with
real TensorFlow jobs, submitted with ``themis submit``, scheduled by the Themis RM plugin
(agents' gRPC endpoint in the RM engine) and run by our application master.

Checks: both apps finish (SUCCEEDED); GPUs change hands at lease expiry (40 s leases set in
the RM's yarn-site.xml); a job stopped at a lease end resumes from its HDFS checkpoint with
its step count; each app's rho is reported (``themis status``); the f and the lease of
yarn-site.xml are the ones in force; a malformed spec and a bid from a wrong app are refused
without harming the running apps; every job's TensorBoard event files are in HDFS.

Multi-host (``_assert_multi_host``, while the apps run): each AM runs on a NodeManager host
whose address is not the RM's; its agent is connected to the agents' endpoint at the RM
host's network address (not loopback); the AM's HTTP endpoint answers from another
NodeManager host; every service port that another host must reach listens on a
non-loopback address (only the Py4J channels between a JVM and its own Python child are on
loopback).

Environment: as tests/integration/minicluster.py, plus
  THEMIS_IT_MOUNT_SRC=1   bind-mount this checkout's ``themis/`` over the images' package
                          (iterate without rebuilding images)
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    ADDR,
    NMS,
    NN,
    RM,
    _get,
    address_of,
    am_jar_and_mounts,
    exec_stdout,
    hosts,
    running_minicluster,
    tcp_sockets,
    themis,
)
from themis.yarn.view import node_of

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1500)]
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

LEASE_MS = 40000
GRACE_MS = 10000
KNOB = 0.0  # every app with pending asks bids (the default 0.8 would offer one of two)
AGENT_PORT = 8642
WAIT_S = 1200  # at most, for both apps to end
STALL_S = 300  # at most without progress
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": str(GRACE_MS),
    "yarn.resourcemanager.themis.fairness-knob": str(KNOB),
    "yarn.resourcemanager.themis.agent-port": str(AGENT_PORT),
    # no renewal in place: a job that crosses a lease end must stop, checkpoint and resume
    # (the path checked here), not go on because its app won its GPUs back
    "yarn.resourcemanager.themis.renew-ahead-ms": "0",
}

# Bracket s=1 of max_resource 9, eta 3: 5 jobs of 3 units (120 steps), then the best one
# promoted to 9 units (resumed from its checkpoint: 240 more steps). At 250 ms a step the
# promoted job runs 60 s, longer than a 40-s lease, so each app's last job must cross a
# lease end (stop, checkpoint, resume): the moves checked below do not hinge on timing
# (with 100-150 ms steps they did, and a CI-like run saw none).
SPEC = """\
name: {name}
search_space:
  learning_rate: {{type: double, min: 1.0e-3, max: 3.0e-1, scale: log}}
  hidden_units: {{type: int, min: 16, max: 64, scale: log}}
  optimizer: {{type: categorical, values: [adam, sgd]}}
hyperband: {{max_resource: 9, eta: 3, steps_per_unit: 40, brackets: [1], seed: {seed}}}
job:
  command: >-
    python3 -m themis.jobs.train --job-id {{job_id}} --logdir {{logdir}}
    --max-steps {{max_steps}} --checkpoint-uri {{checkpoint_uri}} --checkpoint-every 40
    --learning-rate {{learning_rate}} --hidden-units {{hidden_units}}
    --optimizer {{optimizer}} --step-sleep-ms 250 --eval-every 40 --seed {{seed}}
resources: {{gpus: 1, memory_mb: 512, vcores: 1}}
am: {{memory_mb: 512, max_attempts: 2}}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    mounts = am_jar_and_mounts()
    with running_minicluster("e2e", conf_overrides=OVERRIDES, extra_ports=[AGENT_PORT],
                             mounts=mounts) as c:
        yield c


def _status(app: str) -> dict[str, Any]:
    r = themis("status", app, "--json", timeout=60)
    if r.returncode != 0:  # the RM's REST API can be slow on a loaded 2-core machine
        return {"app": {"state": "UNKNOWN"}, "status": None, "error": r.stderr}
    return dict(json.loads(r.stdout))


def _progress(st: dict[str, Any]) -> tuple[Any, ...]:
    """What changes while an app makes progress: its jobs' statuses and steps."""
    return tuple((j["id"], j["status"], j["steps"]) for j in st.get("jobs", []))


def _brief(st: dict[str, Any]) -> dict[str, Any]:
    """An AM status cut to what tells a stalled app from a slow one."""
    return {"jobs": [(j["id"], j["status"], j["steps"], j["target_steps"],
                      (j.get("run") or {}).get("state")) for j in st.get("jobs", [])],
            "state": st.get("state"), "message": st.get("message"),
            "gpus": (st.get("gpus") or {}).get("count"), "rounds": st.get("rounds", [])[-3:]}


def _retrying(fn: Any, tries: int = 8, pause_s: float = 10.0) -> Any:
    """The RM's REST API can time out for a while on a loaded 2-core machine."""
    for i in range(tries):
        try:
            return fn()
        except Exception as exc:  # themis.client.cluster.ClientError (imported lazily)
            if type(exc).__name__ != "ClientError":
                raise
            if i == tries - 1:
                raise
            time.sleep(pause_s)
    raise AssertionError("unreachable")


def _dump_logs(cluster: dict[str, Any]) -> str:
    out = []
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        out.append(f"==== {w.name}\n" + w.logs(tail=60).decode(errors="replace"))
    return "\n".join(out)


def test_two_apps_share_gpus_fairly(cluster: dict[str, Any], tmp_path: Path) -> None:
    # --- the f and lease of yarn-site.xml are in the RM's effective configuration
    from themis.client.cluster import Cluster

    conf = Cluster(RM, NN).rm_conf()
    for k, v in OVERRIDES.items():
        assert conf.get(k) == v, (k, conf.get(k))

    # --- a malformed spec is refused before anything is submitted
    before = len((_get(f"{RM}/ws/v1/cluster/apps").get("apps") or {}).get("app", []))
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.format(name="bad", seed=0).replace("eta: 3", "eta: 1"))
    r = themis("submit", str(bad))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "hyperband.eta" in r.stderr and "got 1" in r.stderr, r.stderr

    # --- two competing apps
    apps = []
    for i, name in enumerate(("hb-alpha", "hb-beta")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC.format(name=name, seed=i))
        r = themis("submit", str(spec))
        assert r.returncode == 0, (r.stdout, r.stderr)
        apps.append(r.stdout.strip().splitlines()[-1])
        time.sleep(3)
    after = len((_get(f"{RM}/ws/v1/cluster/apps").get("apps") or {}).get("app", []))
    assert after == before + 2, "the malformed spec must not have been submitted"

    # --- follow them; meanwhile, a wrong app's bid is refused
    rhos: dict[str, list[float]] = {a: [] for a in apps}
    statuses: dict[str, dict[str, Any]] = {}
    wrong_checked = False
    # Waits while the apps make progress (they take about 5 minutes; in one CI run, beside
    # the JUnit ITs on 2 cores, an app still ran after 10), and fails early on a stall:
    # nothing changed - no step, job status or app state - for STALL_S (several leases and
    # TensorFlow start-ups).
    start = last_change = time.monotonic()
    seen: dict[str, Any] = {}
    while time.monotonic() - start < WAIT_S and time.monotonic() - last_change < STALL_S:
        done = 0
        for a in apps:
            s = _status(a)
            st = s.get("status") or {}
            if s.get("error"):
                continue
            if st:
                statuses[a] = st
                if st.get("rho") is not None:
                    rhos[a].append(float(st["rho"]))
            mark = (s["app"]["state"], _progress(st))
            if seen.get(a) != mark:
                seen[a], last_change = mark, time.monotonic()
            if s["app"]["state"] in ("FINISHED", "FAILED", "KILLED"):
                done += 1
        if not wrong_checked and all(statuses.get(a, {}).get("agent", {}) and
                                     statuses[a]["agent"].get("registered") for a in apps):
            _assert_multi_host(cluster, apps)
            _wrong_bids(apps[0])
            wrong_checked = True
        if done == len(apps):
            break
        time.sleep(3)
    finals = {a: _retrying(lambda a=a: Cluster(RM, NN).app(a)) for a in apps}
    logs = "" if all(f["finalStatus"] == "SUCCEEDED" for f in finals.values()) \
        else _dump_logs(cluster)
    waited = (f"after {time.monotonic() - start:.0f} s, the last change "
              f"{time.monotonic() - last_change:.0f} s before")
    for a, f in finals.items():
        # (the first line says whether the app stalled or was slow: CI shows only the
        # start of a failure's message)
        assert f["state"] == "FINISHED" and f["finalStatus"] == "SUCCEEDED", \
            f"{f['name']} {f['state']}/{f['finalStatus']} {waited}: " \
            f"{_brief(statuses.get(a, {}))}\n{f}\n{logs}"
    assert wrong_checked, "the AMs never registered with the arbiter"
    finals_st = {a: (_retrying(lambda a=a: Cluster(RM, NN).am_status(a)) or statuses.get(a, {}))
                 for a in apps}

    # --- per-app rho was reported while they ran
    for a in apps:
        assert rhos[a], f"{a}: no rho in themis status"

    # --- leases last what yarn-site.xml says; every app bid (f = 0: every participant of
    #     a round is offered GPUs; whether both apps want GPUs in the *same* round is up to
    #     timing - an app whose jobs all run has no pending ask and sits a round out - and
    #     an agent that misses the bid deadline on a loaded machine counts as a non-bidder)
    owners: dict[str, list[tuple[float, str]]] = {}
    for a, st in finals_st.items():
        rounds = st.get("rounds", [])
        assert any(rnd["was_bidder"] for rnd in rounds), (f"{a} never bid", rounds)
        for rnd in rounds:
            if rnd["gpus"]:
                # lease-spread-ms: by default the round's leases last LEASE_MS +- 1/4 of it
                assert abs((rnd["expiry"] - rnd["time"]) - LEASE_MS / 1000) \
                    < LEASE_MS / 4000 + 3.0, rnd
            # YARN names a node's GPUs anew every round (themis.yarn.view.gpu_id): who got
            # GPUs of which node, round after round
            for g in rnd["gpus"]:
                owners.setdefault(node_of(g), []).append((rnd["time"], a))

    # --- both apps made progress at the same time: some interval in which each held GPUs
    #     (each app's history is [time, GPUs held, rho] samples)
    hists = [finals_st[a].get("history", []) for a in apps]

    def held_at(h: list[list[Any]], t: float) -> int:
        g = 0
        for x in h:
            if x[0] > t:
                break
            g = x[1]
        return int(g)

    times = sorted({x[0] for h in hists for x in h})
    both_s = sum(t1 - t0 for t0, t1 in itertools.pairwise(times)
                 if all(held_at(h, t0) > 0 for h in hists))
    assert both_s > 0, ("the apps never held GPUs at the same time", hists)

    # --- GPUs changed hands at lease expiry: a node's GPUs went to both apps over time
    changed = [n for n, seq in owners.items()
               if len({a for _, a in sorted(seq)}) > 1]
    assert changed, owners

    # --- jobs stopped at a lease end resumed from their HDFS checkpoints, steps preserved
    moves = [m for st in finals_st.values() for m in st.get("reallocations", [])]
    assert moves, "no job was moved at a lease end"
    # (a job stopped before its first checkpoint - e.g. while TensorFlow still imports -
    # legitimately starts again at step 0)
    assert any((m["restored_step"] or 0) > 0 for m in moves), moves
    for m in moves:
        if m["checkpoint_step"] is not None:
            assert m["restored_step"] == m["checkpoint_step"], m
    for a in apps:
        jobs = finals_st[a]["jobs"]
        assert any(j["status"] == "finished" for j in jobs), jobs

    # --- every job's TensorBoard event files are in HDFS (one file per run: a job resumed
    #     after a move has two or more), and `themis logs --tensorboard` fetches them
    for a in apps:
        dest = tmp_path / "tb" / a
        r = themis("logs", a, "--tensorboard", "--dest", str(dest))
        assert r.returncode == 0 and r.stdout.strip() == str(dest), r.stderr
        for j in finals_st[a]["jobs"]:
            if j["steps"] > 0:
                assert list((dest / j["id"]).glob("events.out.tfevents.*")), (a, j["id"])
        for m in finals_st[a].get("reallocations", []):
            if (m["restored_step"] or 0) > 0:
                assert len(list((dest / m["job_id"]).glob("events.out.tfevents.*"))) >= 2, m
    print(json.dumps({"both_held_s": both_s, "moves": moves, "rhos": {a: v[-5:] for a, v in rhos.items()}},
                     indent=1))


def _assert_multi_host(cluster: dict[str, Any], apps: list[str]) -> None:
    """The AMs run on NodeManager hosts and bid over the network to the RM host."""
    from themis.client.cluster import Cluster

    box = hosts(cluster)
    rm_ip = address_of(box["rm"])
    assert rm_ip == ADDR["rm"] and not rm_ip.startswith("127."), rm_ip
    assert len({address_of(c) for c in box.values()}) == len(box), "hosts share an address"
    # the agents' endpoint listens on the RM host's network address, not on loopback
    agent_listen = {a for st, a, p, _, _ in tcp_sockets(box["rm"])
                    if st == "LISTEN" and p == AGENT_PORT}
    assert agent_listen and not any(a.startswith("127.") for a in agent_listen), agent_listen
    assert agent_listen <= {rm_ip, "0.0.0.0", "::"}, agent_listen
    for a in apps:
        app = Cluster(RM, NN).app(a)
        am_host = str(app.get("amHostHttpAddress", "")).split(":")[0]
        assert am_host in NMS, app
        am_ip = address_of(box[am_host])
        assert am_ip != rm_ip, (am_host, am_ip)
        socks = tcp_sockets(box[am_host])
        # the AM's agent is connected to the RM host's address (over the bridge network)
        assert any(st == "ESTABLISHED" and r == rm_ip and rp == AGENT_PORT and la == am_ip
                   for st, la, _, r, rp in socks), (am_host, socks)
        # the AM's HTTP endpoint (runners' reports) is advertised by host name and answers
        # from another NodeManager host
        raw = Cluster(RM, NN).hdfs().read_or_none(f"{Cluster(RM, NN).app_dir(a)}/am.json")
        url = json.loads(raw or b"{}").get("tracking_url", "")
        assert url.startswith(f"http://{am_host}:"), url
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        assert any(st == "LISTEN" and p == port and not la.startswith("127.")
                   for st, la, p, _, _ in socks), (url, socks)
        other = next(n for n in NMS if n != am_host)
        page = exec_stdout(box[other], ["python3", "-c", "import sys, urllib.request; "
                           f"sys.stdout.write(urllib.request.urlopen({url!r} + 'status', "
                           "timeout=10).read().decode())"], lambda t: t.startswith("{"),
                           f"the status page of {a} from {other}")
        assert json.loads(page)["app_id"] == a, page[-500:]
    # every port another host must reach listens on a network address; loopback listeners
    # are only the Py4J channels between a JVM and its own Python child and Docker's DNS
    # (ephemeral ports)
    must = {"rm": {8030, 8031, 8032, 8033, 8088, AGENT_PORT}, "nn": {9000, 9870},
            "dn": {9864, 9866, 9867},
            **{n: {8040 + 100 * i, 8041 + 100 * i, 8042 + 100 * i} for i, n in enumerate(NMS)}}
    for name, ports in must.items():
        listen = [(a, p) for st, a, p, _, _ in tcp_sockets(box[name]) if st == "LISTEN"]
        for p in ports:
            bound = {a for a, q in listen if q == p}
            assert bound and not any(a.startswith("127.") or a == "::1" for a in bound), \
                (name, p, listen)
        loop = {p for a, p in listen if a.startswith("127.") or a == "::1"}
        assert all(p >= 32768 for p in loop), (name, loop)  # ephemeral (port 0) only


def _wrong_bids(victim: str) -> None:
    """A bid naming another app (wrong secret) is refused, and so is a registration that is
    not the app's AM (no AMRMToken, a made-up one; docs/yarn.md, "Security"); neither changes
    the victim's state."""
    import grpc

    from themis.arbiter.testing import creds, stub
    from themis.rpc.offers import PROTOCOL_VERSION
    from themis.rpc.v1 import arbiter_pb2 as pb

    channel, s = stub(f"{ADDR['rm']}:{AGENT_PORT}")
    try:
        table = pb.BidTable(rho_current=1.0, bundles=[pb.Bundle(nodes=[0], starts=[0],
                                                                counts=[1], rho=0.5)])
        with pytest.raises(grpc.RpcError) as e:
            s.SubmitBid(pb.SubmitBidRequest(credentials=creds(victim, "not-the-secret"),
                                            round_id=1, table=table), timeout=5)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, e.value
        for app, token in (("application_1_9999", ""), (victim, ""), (victim, "AAAA")):
            with pytest.raises(grpc.RpcError) as e:
                s.RegisterApp(pb.RegisterAppRequest(
                    protocol_version=PROTOCOL_VERSION, app_id=app, rho=1.0, max_gpus=1,
                    registration_token=token), timeout=5)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, e.value
    finally:
        channel.close()
