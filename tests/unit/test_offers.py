"""Offers by node and slot (protocol version 2 and later, themis/rpc/offers.py): round trip, size at
4,096 GPUs over 1,000 nodes, the same bid tables and auctions as from the GPU lists of
version 1, and the refusal of an agent or arbiter of another version."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence

import grpc
import pytest

from themis.agent.client import AgentClient
from themis.arbiter.cluster_backend import StaticCluster, uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.arbiter.state import ArbiterCore
from themis.arbiter.testing import wait_for
from themis.mechanism.auction import run_auction
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.bids import Bid, BidTable, make_bid_table, make_bid_table_py
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.instances import heterogeneous_cluster, random_app
from themis.mechanism.model import AppKind, AppModel, Job
from themis.mechanism.round import run_round
from themis.mechanism.solvers.auto import make_solver
from themis.mechanism.topology import Gpu, Topology
from themis.rpc import offers
from themis.rpc.offers import (
    PROTOCOL_VERSION,
    OfferError,
    decode_offer,
    encode_gpus,
    encode_runs,
    fill_orders,
    fill_positions,
    node_index,
    table_from_pb,
    table_to_pb,
)
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc


def yarn_cluster(nodes: int = 1000, gpus: int = 4096, racks: int = 40) -> list[Gpu]:
    """GPUs spread evenly over ``nodes`` NodeManagers, YARN-style ids ``<node_id>/h<k>``."""
    out = []
    for k in range(gpus):
        n = k % nodes
        node = f"nm-{n:04d}.rack{n % racks:02d}.example.com:45454"
        out.append(Gpu(f"{node}/h{k // nodes}", node, f"/rack{n % racks:02d}"))
    return out


def mixed_cluster(seed: int) -> list[Gpu]:
    """Slotted 8-GPU machines (4 slots x 2), 4-GPU machines of single slots, 1-GPU machines,
    and machines whose GPU ids sort differently as text and as numbers (h10 < h2)."""
    rng = random.Random(seed)
    gpus = heterogeneous_cluster(96)
    for m in range(6):
        node = f"nm{m}:8041"
        gpus += [Gpu(f"{node}/h{k}", node, f"r{m % 2}") for k in range(rng.choice([3, 12]))]
    return gpus


def _common(gpus: Sequence[Gpu], topo: Topology) -> pb.Offer:
    return pb.Offer(round_id=7, deadline_unix=1.7e9, cluster_gpus=len(topo), active_apps=1000,
                    arbiter_epoch="e" * 32, node_table_version=node_index(topo).version,
                    free=encode_gpus(gpus, node_index(topo)))


def test_previous_gpus_come_back_as_the_stand_ins_at_their_fill_positions() -> None:
    cluster = mixed_cluster(3)
    topo = Topology(cluster)
    ni = node_index(topo)
    rng = random.Random(4)
    free = rng.sample(cluster, 70)
    lost = rng.sample(free, 11)
    not_offered = next(g for g in cluster if g not in free)  # left out
    fill = fill_orders(free, ni)
    runs_pb = encode_runs([g.id for g in lost] + [not_offered.id], fill_positions(fill))
    got = decode_offer(ni.table, encode_gpus(free, ni), encode_gpus([], ni), runs_pb)
    assert len(got.previous) == len(lost)
    # a bundle naming the stand-ins names exactly the previous GPUs at the arbiter
    table = BidTable("a", 2.0, (Bid(tuple(sorted(g.id for g in got.previous)), 1.0),))
    back = table_from_pb("a", table_to_pb(table, got.position), fill)
    assert set(back.bids[0].gpus) == {g.id for g in lost}
    # none: an empty message or no message
    assert decode_offer(ni.table, encode_gpus(free, ni), encode_gpus([], ni),
                        pb.GpuRuns()).previous == ()
    # runs outside the offer are refused naming the field
    node = next(iter(fill))
    for bad in (pb.GpuRuns(nodes=[node], starts=[len(fill[node])], counts=[1]),
                pb.GpuRuns(nodes=[node, node], starts=[0], counts=[1]),
                pb.GpuRuns(nodes=[len(ni.table.nodes) + 5], starts=[0], counts=[1])):
        with pytest.raises(OfferError, match="previous"):
            decode_offer(ni.table, encode_gpus(free, ni), encode_gpus([], ni), bad)


def test_round_trip_keeps_nodes_racks_slots_and_offer_order() -> None:
    cluster = mixed_cluster(1)
    topo = Topology(cluster)
    rng = random.Random(2)
    free = rng.sample(cluster, 60)  # offer order: the machines' first appearance
    held = [g for g in cluster if g not in free][:9]
    ni = node_index(topo)
    got = decode_offer(ni.table, encode_gpus(free, ni), encode_gpus(held, ni))
    machines = list(dict.fromkeys(g.machine for g in free))
    assert list(dict.fromkeys(g.machine for g in got.gpus)) == machines
    for gs, real in ((got.gpus, free), (got.held, held)):
        assert sorted((g.machine, g.rack) for g in gs) == sorted((g.machine, g.rack) for g in real)
        # the same slot layout: GPUs per (machine, slot), as a multiset per machine
        def layout(x: Sequence[Gpu]) -> list[tuple[str, list[int]]]:
            per: dict[str, dict[str, int]] = {}
            for g in x:
                per.setdefault(g.machine, {}).setdefault(g.slot, 0)
                per[g.machine][g.slot] += 1
            return sorted((m, sorted(c.values())) for m, c in per.items())
        assert layout(gs) == layout(real)
    # a held GPU and a free one in one real slot are in one stand-in slot too
    slot8 = [g for g in cluster if g.machine == "m0" and g.slot == "s1"]
    one = decode_offer(ni.table, encode_gpus(slot8[:1], ni), encode_gpus(slot8[1:], ni))
    assert one.gpus[0].slot_key == one.held[0].slot_key
    # every position maps back to a distinct offered GPU
    fill = fill_orders(free, ni)
    table = BidTable("a", 3.0, tuple(Bid(tuple(sorted(g.id for g in got.gpus if g.machine == m)),
                                         1.0) for m in machines))
    back = table_from_pb("a", table_to_pb(table, got.position), fill)
    assert [set(b.gpus) for b in back.bids] == [{g.id for g in free if g.machine == m}
                                                for m in machines]


def test_offer_at_4096_gpus_on_1000_nodes_is_a_few_kb() -> None:
    cluster = yarn_cluster()
    topo = Topology(cluster)
    free = cluster[:3800]
    common = _common(free, topo).SerializeToString()
    old = pb.Event(offer=pb.Offer(round_id=7)).SerializeToString()  # header only
    per_gpu = sum(len(pb.GpuInfo(id=g.id, machine=g.machine, rack=g.rack, slot=g.id)
                      .SerializeToString()) + 3 for g in free)
    assert len(common) < 16_000, len(common)
    assert per_gpu > 50 * len(common) > len(old)  # version 1: every GPU listed
    table = node_index(topo).table.SerializeToString()
    assert len(table) < 64_000  # sent once per stream and topology version


def _tables(apps: Sequence[tuple[AppModel, list[Gpu]]], offer: Sequence[Gpu], topo: Topology,
            ctx: FairnessContext, bid: Callable[..., BidTable]
            ) -> tuple[list[BidTable], list[BidTable], list[int]]:
    """Each app's table the version-1 way (real GPUs) and the version-2 way (stand-ins,
    runs on the wire, mapped back by the arbiter), and the wire sizes of the latter."""
    ni = node_index(topo)
    common = encode_gpus(offer, ni)
    fill = fill_orders(offer, ni)
    old, new, sizes = [], [], []
    for app, held in apps:
        old.append(bid(app, held, offer, ctx))
        got = decode_offer(ni.table, common, encode_gpus(held, ni))
        wire = table_to_pb(bid(app, got.held, got.gpus, ctx), got.position)
        sizes.append(len(wire.SerializeToString()))
        new.append(table_from_pb(app.id, pb.BidTable.FromString(wire.SerializeToString()),
                                 fill))
    return old, new, sizes


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("bid", [make_bid_table, make_bid_table_py])
def test_same_tables_and_auction_as_with_gpu_lists(seed: int, bid: Callable[..., BidTable]
                                                   ) -> None:
    rng = random.Random(seed)
    cluster = mixed_cluster(seed) if seed % 2 else yarn_cluster(60, 240, 6)
    topo = Topology(cluster)
    offer = rng.sample(cluster, len(cluster) // 2)
    busy = [g for g in cluster if g not in set(offer)]
    ctx = FairnessContext(now=1e5, cluster_gpus=len(cluster), n_avg=12.0)
    apps = []
    for a in range(12):
        held = rng.sample(busy, rng.choice([0, 0, 1, 2, 5]))
        apps.append((random_app(rng, f"app{a}", ctx.now), held))
    old, new, _ = _tables(apps, offer, topo, ctx, bid)
    assert any(t.bids for t in old)
    assert new == old  # same bundles (GPU ids), same rho, same order
    for exact in (False, True):
        ra = run_auction(offer, old, make_solver("bnb"), random.Random(seed), exact)
        rb = run_auction(offer, new, make_solver("bnb"), random.Random(seed), exact)
        assert (ra.allocation, ra.kept_fraction, ra.leftover, ra.proportional_fair) == \
            (rb.allocation, rb.kept_fraction, rb.leftover, rb.proportional_fair)
    rho = {t.app_id: t.rho_current for t in old}

    def collect(ts: list[BidTable]) -> Callable[[Sequence[str]], dict[str, BidTable]]:
        return lambda bidders: {t.app_id: t for t in ts if t.app_id in bidders}

    outcomes = [run_round(offer, rho, collect(ts), fairness_knob=0.5, lease_s=60, now=0.0,
                          solver=make_solver("bnb"), rng=random.Random(seed))
                for ts in (old, new)]
    assert outcomes[0].allocation == outcomes[1].allocation
    assert outcomes[0].grants == outcomes[1].grants


def test_bundles_are_small_on_the_wire() -> None:
    cluster = yarn_cluster()
    topo = Topology(cluster)
    ctx = FairnessContext(now=1e5, cluster_gpus=len(cluster), n_avg=1000.0)
    app = AppModel("big", 0.0, [Job(f"j{i}", 1.0, 1e6, 8) for i in range(64)],
                   kind=AppKind.CURVE_STOPPING)
    _, new, sizes = _tables([(app, [])], cluster[:3800], topo, ctx, make_bid_table)
    gpu_ids = sum(len(b.gpus) for b in new[0].bids)
    assert gpu_ids > 1000 and sizes[0] < 30 * gpu_ids  # version 1: ~25 bytes per GPU id


def test_wrong_runs_are_refused_naming_the_bundle() -> None:
    topo = Topology(heterogeneous_cluster(16))
    offer = list(topo.values())[:8]
    fill = fill_orders(offer, node_index(topo))
    node = next(iter(fill))
    bad = pb.BidTable(rho_current=2.0, bundles=[
        pb.Bundle(rho=1.0, nodes=[node], starts=[0], counts=[1]),
        pb.Bundle(rho=1.0, nodes=[node], starts=[len(fill[node])], counts=[1])])
    with pytest.raises(offers.BundleError) as got:
        table_from_pb("a", bad, fill)
    assert got.value.args[1] == 1 and "positions" in got.value.args[0]


# ------------------------------------------------------------------ protocol version
def _server(core: ArbiterCore | None = None) -> ArbiterServer:
    cfg = ArbiterConfig(lease_s=5, bid_timeout_s=0.5, round_delay_s=0.02, solver="bnb")
    backend = uniform_cluster(2, 2)
    srv = ArbiterServer(backend, cfg, max_workers=8, core=core)
    srv.start(0)
    return srv


@pytest.mark.parametrize("sent", [0, 1, PROTOCOL_VERSION + 1])
def test_arbiter_refuses_an_agent_of_another_version(sent: int) -> None:
    srv = _server()
    try:
        with grpc.insecure_channel(srv.address) as ch:
            stub = pb_grpc.ArbiterStub(ch)  # type: ignore[no-untyped-call]
            before = srv.core.snapshot()
            with pytest.raises(grpc.RpcError) as got:
                stub.RegisterApp(pb.RegisterAppRequest(app_id="a", rho=1.0, max_gpus=1,
                                                       protocol_version=sent), timeout=10)
            assert got.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            details = got.value.details()
            assert (f"agent speaks themis protocol version {sent or 1}, the arbiter version "
                    f"{PROTOCOL_VERSION}") in details
            assert ("upgrade the agent" if sent < PROTOCOL_VERSION
                    else "upgrade the arbiter") in details
            assert srv.core.snapshot() == before
            ok = stub.RegisterApp(pb.RegisterAppRequest(
                app_id="a", rho=1.0, max_gpus=1, protocol_version=PROTOCOL_VERSION), timeout=10)
            assert ok.protocol_version == PROTOCOL_VERSION
    finally:
        srv.stop(0)


def _agent(srv: ArbiterServer) -> AgentClient:
    model = AppModel("a", time.time(), [Job("j", 1.0, 1e4, 2)])
    return AgentClient(srv.address, "a", ModelBidder(model, time.time),
                       backoff=(0.02, 0.1)).start()


def test_agent_stops_with_one_error_when_refused(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr("themis.arbiter.registry.PROTOCOL_VERSION", PROTOCOL_VERSION + 1)
    srv = _server()
    c = _agent(srv)
    try:
        with caplog.at_level(logging.ERROR, logger="themis.agent.client"):
            assert wait_for(lambda: c.refused != "", 10)
            assert c._thread is not None
            c._thread.join(5)
            assert not c._thread.is_alive()  # stopped, not retrying
        assert c.stats.registrations == 0 and c.stats.reconnects == 0
        want = (f"the agent speaks themis protocol version {PROTOCOL_VERSION}, the arbiter "
                f"version {PROTOCOL_VERSION + 1}; upgrade the agent")
        assert want in c.stats.last_error and want in c.refused
        assert [r for r in caplog.records if want in r.getMessage()]
    finally:
        c.stop()
        srv.stop(0)


class _OldArbiter(ArbiterCore):
    """An arbiter of version 1 as seen by the agent: it accepts the registration and
    answers without a protocol_version."""

    def register(self, app_id: str, rho: float, max_gpus: int, token: str = "",
                 protocol_version: int = PROTOCOL_VERSION) -> pb.RegisterAppResponse:
        resp = super().register(app_id, rho, max_gpus, token)
        resp.ClearField("protocol_version")
        return resp


def test_agent_refuses_an_arbiter_of_version_1() -> None:
    cfg = ArbiterConfig(lease_s=5, bid_timeout_s=0.5, round_delay_s=0.02, solver="bnb")
    backend: StaticCluster = uniform_cluster(2, 2)
    srv = _server(_OldArbiter(backend, cfg))
    c = _agent(srv)
    try:
        assert wait_for(lambda: c.refused != "", 10)
        assert "the arbiter version 1; upgrade the arbiter" in c.refused
        assert wait_for(lambda: not srv.core.snapshot()["apps"], 5)  # it left again
        assert c.stats.offers == 0
    finally:
        c.stop()
        srv.stop(0)


def test_agent_bids_through_the_node_table_and_gets_bundle_rho() -> None:
    srv = _server()
    rounds: list[Mapping[str, tuple[str, ...]]] = []
    srv.core.on_round = lambda out: rounds.append(out.allocation)
    c = _agent(srv)
    try:
        assert wait_for(lambda: c.stats.bids_sent >= 1 and c.stats.allocations >= 1, 15)
        assert c.stats.offers_unreadable == 0 and c.refused == ""
        assert wait_for(lambda: bool(rounds) and "a" in rounds[0], 5)
        assert len(rounds[0]["a"]) == 2  # demand 2 on two 2-GPU machines: a whole machine
        assert math.isfinite(c.bidder.current_rho())
    finally:
        c.stop()
        srv.stop(0)


def test_an_offer_without_its_node_table_is_not_bid_on() -> None:
    model = AppModel("a", time.time(), [Job("j", 1.0, 1e4, 2)])
    c = AgentClient("127.0.0.1:1", "a", ModelBidder(model, time.time))
    try:
        topo = Topology(heterogeneous_cluster(16))
        offer = _common(list(topo.values()), topo)
        c._on_offer(offer)  # the table was never sent on this stream
        assert c.stats.offers_unreadable == 1 and c.stats.bids_sent == 0
        assert "was never sent" in c.stats.last_error
        bad = pb.Offer(node_table=node_index(topo).table,
                       node_table_version=node_index(topo).version,
                       free=pb.NodeGpus(nodes=[10_000], counts=[1]))
        c._on_offer(bad)
        assert c.stats.offers_unreadable == 2 and "node 10000 is not in" in c.stats.last_error
    finally:
        c.stop(unregister=False)


def test_bundle_rho_comes_from_the_last_table_the_app_bid() -> None:
    """The cached-table rule across rounds: GPUs granted later (leftover, a renewal) that
    equal a bundle of the app's last table get that bundle's rho, as the agent's cached
    table would give with GPU ids."""
    from themis.arbiter.base import OpenRound

    core = ArbiterCore(uniform_cluster(2, 2), ArbiterConfig(solver="bnb"))
    with core._cond:
        core._open = OpenRound(1, ("m0-g0", "m0-g1"), frozenset({"a"}), 0.0, tables={
            "a": BidTable("a", 3.0, (Bid(("m0-g0",), 2.5), Bid(("m0-g0", "m0-g1"), 1.5)))})
        core._close_round(1)
        core._open = OpenRound(2, ("m1-g0",), frozenset({"b"}), 0.0)  # a does not bid
        core._close_round(2)
        assert core._bundle_rho("a", ["m0-g1", "m0-g0"]) == 1.5
        assert core._bundle_rho("a", ["m0-g0"]) == 2.5
        assert core._bundle_rho("a", ["m1-g0"]) == 0.0 and core._bundle_rho("b", ["m1-g0"]) == 0
