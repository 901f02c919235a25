"""The filter's order of starving apps through the arbiter service, as standalone mode and
the YARN engine run it. Under ``starvation = served-now`` (the default) agents report their
served-now key with rho = +inf (``ReportRhoRequest.starving``), the arbiter ages it and
passes it to ``run_round`` as the filter's ``priority``; under ``inf`` (the paper's
reading) agents send no key and a draw decides (docs/mechanism.md, "Starvation")."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import grpc
import pytest

from themis.agent.client import AgentClient
from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.errors import CallError
from themis.arbiter.service import ArbiterServer
from themis.arbiter.state import ArbiterCore
from themis.arbiter.testing import GatedCluster, creds, register_request, settle, stub, wait_for
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.fairness import (
    DEFAULT_STARVATION,
    ClusterShape,
    FairnessContext,
    Starvation,
    best_locality,
    ideal_time,
    served_now_rho,
)
from themis.mechanism.model import AppModel, Job
from themis.mechanism.topology import Gpu
from themis.rpc.convert import shape_from_pb, shape_to_pb
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.yarn.agents import AgentEndpoint, OfferView
from themis.yarn.bids import ReportedBids
from themis.yarn.rounds import RoundEngine

SC = grpc.StatusCode


# ------------------------------------------------------------------ a round, real gRPC
def _short_waited(name: str, now: float) -> AppModel:
    """Arrived 1,000 s ago, ~100 s of work: a large served-now key."""
    return AppModel(name, now - 1000.0, [Job("j", 1.0, 100.0, 1)])


def _long_fresh(name: str, now: float) -> AppModel:
    """Arrived just now, ~10,000 s of work: a small served-now key."""
    return AppModel(name, now, [Job("j", 1.0, 10_000.0, 1)])


def _first_round(starvation: str | None, worse: str) -> tuple[Any, dict[str, Any]]:
    """Apps "a" and "b", both holding no GPU, one free GPU, f = 0.5 (one bidder); ``worse``
    is the app with the larger served-now key; ``starvation`` None = the config's default.
    Returns (first round's outcome, the apps' snapshot before it, with each agent's
    starvation option under "options" and, under "merged", the apps whose keys the
    filter ranks among all apps after the round)."""
    cluster = GatedCluster([Gpu("m0-g0", "m0", "r0")])
    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=3.0, fairness_knob=0.5, heartbeat_s=0.5,
                        round_delay_s=0.01, solver="bnb", seed=7)
    if starvation is not None:
        cfg = replace(cfg, starvation=starvation)
    srv = ArbiterServer(cluster, cfg, max_workers=16)
    srv.start(0)
    now = time.time()
    models = {n: (_short_waited(n, now) if n == worse else _long_fresh(n, now))
              for n in ("a", "b")}
    bidders = {n: ModelBidder(m, time.time) for n, m in models.items()}
    clients = [AgentClient(srv.address, n, b, backoff=(0.02, 0.3)).start()
               for n, b in bidders.items()]
    channel, s = stub(srv.address)
    try:
        assert all(c.connected.wait(10) for c in clients)
        snap = settle(srv.core)["apps"]
        snap["options"] = {n: b.starvation for n, b in bidders.items()}
        cluster.gate.set()
        s.RegisterApp(register_request(app_id="kick", rho=1.0, max_gpus=1))  # a round
        assert srv.core.wait_rounds(1, timeout=15)
        snap["merged"] = srv.core.merged_keys(["a", "b", "kick"])
        return srv.core.outcomes[0], snap
    finally:
        channel.close()
        for c in clients:
            c.stop()
        srv.stop(0)


@pytest.mark.parametrize("starvation", [None, "served-now", "ranked"])
@pytest.mark.parametrize("worse", ["a", "b"])
def test_served_now_gives_the_free_gpu_to_the_larger_key(worse: str,
                                                         starvation: str | None) -> None:
    """served-now (set explicitly or by default), and ranked: with only starving apps both
    put the worse-off app first, the one bidder."""
    outcome, snap = _first_round(starvation, worse)
    option = Starvation(starvation or "ranked")
    assert snap["options"] == {"a": option, "b": option}
    keys = {a: snap[a][4] for a in ("a", "b")}
    assert all(k is not None for k in keys.values()), keys  # both agents reported a key
    assert max(keys, key=lambda a: keys[a][0]) == worse
    assert outcome.bidders == (worse,)
    assert [(g.app_id, g.gpus) for g in outcome.grants] == [(worse, ("m0-g0",))]
    # ranked: once served, the winner's key would rank it among all apps; the other app
    # and "kick" never held GPUs (newcomers, above the apps holding GPUs)
    assert snap["merged"] == (frozenset({worse}) if option is Starvation.RANKED
                              else frozenset())


def test_inf_ignores_the_keys() -> None:
    """Under ``inf`` agents send no key and the seeded draw decides: the winner does not
    depend on which app is worse off."""
    winners = set()
    for worse in ("a", "b"):
        outcome, snap = _first_round("inf", worse)
        assert snap["options"] == {"a": Starvation.INF, "b": Starvation.INF}
        assert snap["a"][4] is None and snap["b"][4] is None
        assert len(outcome.bidders) == 1
        winners.add(tuple(g.app_id for g in outcome.grants))
    assert len(winners) == 1, winners


# ------------------------------------------------------------------ validation, raw stubs
@pytest.fixture
def server() -> Iterator[ArbiterServer]:
    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=3.0, fairness_knob=0.0, heartbeat_s=0.5,
                        round_delay_s=0.01, solver="bnb", seed=1, starvation="served-now")
    srv = ArbiterServer(uniform_cluster(2, 2, racks=2), cfg, max_workers=16)
    srv.start(0)
    yield srv
    srv.stop(0)


def test_registration_announces_starvation_and_shape(server: ArbiterServer) -> None:
    channel, s = stub(server.address)
    try:
        resp = s.RegisterApp(register_request(app_id="a", rho=math.inf, max_gpus=2))
    finally:
        channel.close()
    assert resp.starvation == "served-now"
    assert shape_from_pb(resp, "cluster_shape") == ClusterShape(1, 2, 2)


def test_bad_keys_are_refused_and_change_nothing(server: ArbiterServer) -> None:
    channel, s = stub(server.address)
    try:
        sa = s.RegisterApp(register_request(app_id="a", rho=math.inf, max_gpus=2)).secret
        sb = s.RegisterApp(register_request(app_id="b", rho=math.inf, max_gpus=2)).secret
        good = pb.StarvingKey(served_now_rho=3.0, ideal_seconds=600.0)
        s.ReportRho(pb.ReportRhoRequest(credentials=creds("b", sb), rho=math.inf,
                                        starving=good))
        bad = [(math.inf, dict(served_now_rho=v, ideal_seconds=600.0), "served_now_rho")
               for v in (math.nan, math.inf, -math.inf, 0.0, -1.0, 2e18)]
        bad += [(math.inf, dict(served_now_rho=3.0, ideal_seconds=v), "ideal_seconds")
                for v in (math.nan, math.inf, 0.0, -5.0, 1e19)]
        bad += [(2.0, dict(served_now_rho=3.0, ideal_seconds=600.0), "only sent with rho")]
        for rho, key, match in bad:
            before = settle(server.core)
            with pytest.raises(grpc.RpcError) as info:
                s.ReportRho(pb.ReportRhoRequest(credentials=creds("a", sa), rho=rho,
                                                starving=pb.StarvingKey(**key)))
            assert info.value.code() == SC.INVALID_ARGUMENT, info.value.details()
            assert match in info.value.details() and "'a'" in info.value.details()
            assert server.core.snapshot() == before  # b's key untouched, a's unchanged
        apps = server.core.snapshot()["apps"]
        assert apps["a"][4] is None and apps["b"][4][:2] == (3.0, 600.0)
        # absent = no key: a report without one clears b's
        s.ReportRho(pb.ReportRhoRequest(credentials=creds("b", sb), rho=math.inf))
        assert server.core.snapshot()["apps"]["b"][4] is None
    finally:
        channel.close()


# ------------------------------------------------------------------ the core's key
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _core(starvation: str) -> tuple[ArbiterCore, Clock, dict[str, str]]:
    clock = Clock()
    core = ArbiterCore(uniform_cluster(1, 2), ArbiterConfig(starvation=starvation), clock)
    secrets = {a: core.register(a, math.inf, 2).secret for a in ("a", "b", "c")}
    return core, clock, secrets


def test_priority_ages_reported_keys() -> None:
    core, clock, sec = _core("served-now")
    core.report_rho("a", sec["a"], math.inf,
                    pb.StarvingKey(served_now_rho=2.0, ideal_seconds=100.0))
    core.report_rho("b", sec["b"], math.inf,
                    pb.StarvingKey(served_now_rho=2.2, ideal_seconds=1000.0))
    core.report_rho("c", sec["c"], 1.5)  # holds GPUs: no key
    assert core.priority_of(["a", "b", "c"]) == {"a": 2.0, "b": 2.2}
    clock.t += 50.0  # served-now rho grows by 1/T_id per second of waiting (Eq. 1)
    assert core.priority_of(["a", "b", "c"]) == pytest.approx({"a": 2.5, "b": 2.25})


def test_priority_is_none_under_inf() -> None:
    core, _clock, sec = _core("inf")
    core.report_rho("a", sec["a"], math.inf,
                    pb.StarvingKey(served_now_rho=2.0, ideal_seconds=100.0))
    assert core.priority_of(["a", "b"]) is None


def test_config_refuses_unknown_starvation() -> None:
    with pytest.raises(ValueError, match="starvation 'served'"):
        ArbiterConfig(starvation="served")
    assert ArbiterConfig(starvation=" Served-Now ").starvation == "served-now"
    assert ArbiterConfig(starvation=" INF ").starvation == "inf"


def test_config_default_is_ranked() -> None:
    assert DEFAULT_STARVATION is Starvation.RANKED
    assert ArbiterConfig().starvation == "ranked"
    assert ArbiterConfig(starvation=" Ranked ").starvation == "ranked"


@pytest.mark.parametrize(("starvation", "announced", "option"), [
    (None, "ranked", Starvation.RANKED),  # the default
    ("ranked", "ranked", Starvation.RANKED),
    ("inf", "inf", Starvation.INF),  # the paper's reading
    ("", "", Starvation.INF),  # an older arbiter announces nothing: the agent uses inf
])
def test_agent_learns_the_option_at_registration(starvation: str | None, announced: str,
                                                 option: Starvation) -> None:
    """A starving app's agent takes the announced option: it reports its key right after
    registering under served-now, and none under inf or from an arbiter that announces
    no option (where the arbiter keeps no key either)."""
    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=3.0, heartbeat_s=0.5, solver="bnb")
    if starvation:
        cfg = replace(cfg, starvation=starvation)
    elif starvation == "":
        object.__setattr__(cfg, "starvation", "")  # as an arbiter without the field
    # no free GPU: the app stays starving (rho = +inf)
    srv = ArbiterServer(GatedCluster([Gpu("m0-g0", "m0", "r0")]), cfg, max_workers=8)
    srv.start(0)
    channel, s = stub(srv.address)
    bidder = ModelBidder(_short_waited("a", time.time()), time.time)
    before = bidder.starvation
    assert before is Starvation.INF  # until an arbiter says otherwise
    c = AgentClient(srv.address, "a", bidder, backoff=(0.02, 0.3)).start()
    try:
        assert s.RegisterApp(register_request(app_id="x", rho=1.0, max_gpus=1)
                             ).starvation == announced
        assert c.connected.wait(10)
        assert bidder.starvation is option
        if option.keyed:
            assert wait_for(lambda: srv.core.snapshot()["apps"]["a"][4] is not None, 10)
            assert bidder.starving_key() is not None
        else:
            assert bidder.starving_key() is None
            assert settle(srv.core)["apps"]["a"][4] is None
    finally:
        channel.close()
        c.stop()
        srv.stop(0)


def test_core_refuses_key_with_finite_rho() -> None:
    core, _clock, sec = _core("served-now")
    with pytest.raises(CallError, match="only sent with rho = \\+inf"):
        core.report_rho("a", sec["a"], 3.0,
                        pb.StarvingKey(served_now_rho=2.0, ideal_seconds=100.0))


# ------------------------------------------------------------------ proto
def test_proto_round_trip_and_absence() -> None:
    m = pb.ReportRhoRequest(credentials=creds("a", "s"), rho=math.inf,
                            starving=pb.StarvingKey(served_now_rho=1.25, ideal_seconds=60.0))
    back = pb.ReportRhoRequest.FromString(m.SerializeToString())
    assert back.HasField("starving")
    assert (back.starving.served_now_rho, back.starving.ideal_seconds) == (1.25, 60.0)
    # an older agent's message (no field 3) parses with the key absent
    old = pb.ReportRhoRequest(credentials=creds("a", "s"), rho=math.inf).SerializeToString()
    assert not pb.ReportRhoRequest.FromString(old).HasField("starving")
    shape = ClusterShape(2, 8, 32)
    resp = pb.RegisterAppResponse(starvation="served-now", cluster_shape=shape_to_pb(shape))
    back_resp = pb.RegisterAppResponse.FromString(resp.SerializeToString())
    assert shape_from_pb(back_resp, "cluster_shape") == shape
    assert shape_from_pb(pb.RegisterAppResponse(), "cluster_shape") is None
    bad = pb.RegisterAppResponse(cluster_shape=pb.ClusterShape(slot_gpus=-1))
    assert shape_from_pb(bad, "cluster_shape") is None


# ------------------------------------------------------------------ the agent's key
def test_agent_key_is_the_simulators() -> None:
    """The agent's key equals ``served_now_rho`` with the simulator's ``best_locality`` on
    the same cluster (same context), and T_id is the ideal time."""
    gpus = list(uniform_cluster(4, 4, racks=2).topology().values())
    now = 5000.0
    app = AppModel("a", 1000.0, [Job("j", 2.0, 500.0, 8)])
    bidder = ModelBidder(app, lambda: now)
    bidder.set_cluster_gpus(len(gpus))
    assert bidder.starving_key() is None  # the cluster uses inf
    bidder.set_starvation(str(Starvation.SERVED_NOW), None)
    assert bidder.starving_key() is None  # no shape announced
    bidder.set_starvation(str(Starvation.SERVED_NOW), ClusterShape.of(gpus))
    ctx = FairnessContext(now, len(gpus), 1.0)
    want = served_now_rho(app, ctx, lambda n: best_locality(gpus, n))
    assert bidder.starving_key() == (want, ideal_time(app, ctx))


def test_cluster_shape_locality_matches_best_locality() -> None:
    for machines, per, racks in ((1, 1, 1), (4, 4, 2), (3, 8, 3), (6, 2, 1)):
        gpus = list(uniform_cluster(machines, per, racks).topology().values())
        shape = ClusterShape.of(gpus)
        for n in range(0, machines * per + 2):
            assert shape.best_locality(n) == best_locality(gpus, n)


# ------------------------------------------------------------------ YARN
def test_yarn_view_announces_the_whole_cluster() -> None:
    view = OfferView()
    offer = [Gpu("n1/0", "n1", "/r0")]
    view.set_offer(offer)
    assert view.cluster_gpus() == 1 and view.shape() == ClusterShape(1, 1, 1)
    view.set_cluster([Gpu(f"{n}/{k}", n, "/r0") for n in ("n1", "n2") for k in range(4)])
    assert view.cluster_gpus() == 8 and view.shape() == ClusterShape(1, 4, 8)
    assert ReportedBids().priority(["a"], offer) is None



def _yarn_view(apps: list[str], free: int) -> str:
    return json.dumps({
        "round": 3, "now_ms": int(time.time() * 1000), "fairness_knob": 0.5,
        "lease_duration_ms": 600_000, "solver": "bnb",
        "nodes": [{"node_id": "h1:1", "host": "h1", "rack": "/r1", "total_gpus": 2,
                   "free_gpus": free}],
        "apps": [{"app_id": a, "pending_gpus": 1} for a in apps], "leases": []})


@pytest.mark.parametrize("starvation", ["served-now", "ranked"])
@pytest.mark.parametrize("worse", ["application_1_0001", "application_1_0002"])
def test_yarn_engine_serves_the_larger_key(worse: str, starvation: str) -> None:
    """The YARN engine's round (RoundEngine over the agents' endpoint) passes the reported
    keys to run_round (and, under ranked, ranks them with the other apps' rho): the one
    free GPU goes to the app with the larger served-now key."""
    cfg = ArbiterConfig(bid_timeout_s=3.0, heartbeat_s=0.5, solver="bnb",
                        starvation=starvation)
    endpoint = AgentEndpoint(cfg)
    assert ReportedBids().merged_keys(["a"]) == ()
    engine = RoundEngine(endpoint)
    endpoint.start(0)
    now = time.time()
    names = ("application_1_0001", "application_1_0002")
    try:
        # a round with nothing to do: the engine learns the cluster (R_C = 2, one machine)
        assert json.loads(engine.run(_yarn_view([], 0)))["info"]["skipped"]
        clients = [AgentClient(endpoint.server.address, n,
                               ModelBidder(_short_waited(n, now) if n == worse
                                           else _long_fresh(n, now), time.time),
                               backoff=(0.02, 0.3)).start() for n in names]
        try:
            assert all(c.connected.wait(10) for c in clients)
            apps = settle(endpoint.core)["apps"]
            assert all(apps[n][4] is not None for n in names)
            reply = json.loads(engine.run(_yarn_view(list(names), 1)))
        finally:
            for c in clients:
                c.stop()
    finally:
        endpoint.stop()
    assert reply["info"]["bidders"] == [worse]
    # one app granted: its lease is exactly the lease length, whatever the spread
    assert reply["grants"] == [{"app_id": worse, "node_id": "h1:1", "gpus": 1,
                                "lease_ms": 600000}]
