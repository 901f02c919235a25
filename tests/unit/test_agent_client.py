"""Agent client against a real in-process arbiter on 127.0.0.1: rounds over short leases,
reconnect after an arbiter restart, vanished agents, the cached-table rule."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterator

import pytest

from themis.agent.client import AgentClient
from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.arbiter.testing import wait_for
from themis.mechanism.bidder import AllocationInfo, ModelBidder, OfferInfo, rho_from_table
from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.model import AppModel, Job
from themis.mechanism.topology import Gpu


def config(**kw: float) -> ArbiterConfig:
    base = dict(lease_s=0.5, bid_timeout_s=0.5, warning_s=0.15, fairness_knob=0.5,
                heartbeat_s=0.3, round_delay_s=0.02, seed=3)
    base.update(kw)
    return ArbiterConfig(solver="bnb", **base)  # type: ignore[arg-type]


def app(name: str, iters: float = 10_000.0, demand: int = 4) -> AppModel:
    return AppModel(name, time.time(), [Job("j", 1.0, iters, demand)])


@pytest.fixture
def server() -> Iterator[ArbiterServer]:
    srv = ArbiterServer(uniform_cluster(2, 2), config(), max_workers=16)
    srv.start(0)
    yield srv
    srv.stop(0)


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.allocs: list[AllocationInfo] = []
        self.warnings: list[tuple[tuple[str, ...], float]] = []

    def alloc(self, a: AllocationInfo) -> None:
        with self.lock:
            self.allocs.append(a)

    def warn(self, gpus: tuple[str, ...], expiry: float) -> None:
        with self.lock:
            self.warnings.append((gpus, expiry))


def client(srv: ArbiterServer, model: AppModel, rec: Recorder) -> AgentClient:
    return AgentClient(srv.address, model.id, ModelBidder(model, time.time),
                       on_allocation=rec.alloc, on_lease_warning=rec.warn,
                       backoff=(0.02, 0.3)).start()


def test_two_agents_share_four_gpus_across_leases(server: ArbiterServer) -> None:
    recs = {n: Recorder() for n in ("a", "b")}
    clients = [client(server, app(n), recs[n]) for n in recs]
    try:
        assert server.core.wait_rounds(6, timeout=15)
    finally:
        for c in clients:
            c.stop()
    # Each round's grants: disjoint and within the cluster; leases are back-to-back.
    outcomes = server.core.outcomes[:6]
    holders: list[dict[str, str]] = []
    for out in outcomes:
        owner: dict[str, str] = {}
        for g in out.grants:
            for gid in g.gpus:
                assert gid not in owner, f"GPU {gid} granted twice in one round"
                owner[gid] = g.app_id
        assert owner, "every round hands out GPUs"
        holders.append(owner)
    # GPUs moved between apps at lease expiry, and both apps held GPUs at some point.
    assert any(h1 != h2 for h1, h2 in itertools.pairwise(holders))
    assert {a for h in holders for a in h.values()} == {"a", "b"}
    for n, r in recs.items():
        got = [a for a in r.allocs if a.gpus]
        assert got, f"app {n} never received GPUs"
        assert r.warnings, f"app {n} never got a lease warning"
    starts = sorted({g.start for out in outcomes for g in out.grants})
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(g >= 0.45 for g in gaps), gaps  # a new round only when leases expire


def test_reconnect_and_reregister_after_arbiter_restart() -> None:
    srv = ArbiterServer(uniform_cluster(1, 2), config(lease_s=5.0), max_workers=8)
    port = srv.start(0)
    rec = Recorder()
    c = client(srv, app("a"), rec)
    try:
        assert wait_for(lambda: any(a.gpus for a in rec.allocs), timeout=5)
        old_secret, old_epoch = c.secret, c.epoch
        srv.stop(0)
        assert wait_for(lambda: c.stats.reconnects >= 2, timeout=5)  # backing off
        srv2 = ArbiterServer(uniform_cluster(1, 2), config(lease_s=5.0), max_workers=8)
        assert srv2.start(port) == port
        try:
            assert wait_for(lambda: c.stats.registrations == 2, timeout=10)
            assert c.secret != old_secret and c.epoch == srv2.core.epoch != old_epoch
            n = len(rec.allocs)
            assert wait_for(lambda: any(a.gpus for a in rec.allocs[n:]), timeout=5)
            assert set(srv2.core.backend.owners().values()) == {"a"}
        finally:
            c.stop()
            srv2.stop(0)
    finally:
        c.stop(unregister=False)
        srv.stop(0)


def test_vanished_agent_loses_leases_at_expiry(server: ArbiterServer) -> None:
    ra, rb = Recorder(), Recorder()
    a = client(server, app("a"), ra)
    assert wait_for(lambda: any(x.gpus for x in ra.allocs), timeout=5)
    a.stop(unregister=False)  # vanishes: stream closed, still registered
    b = client(server, app("b"), rb)
    try:
        assert wait_for(lambda: set(server.core.backend.owners().values()) == {"b"}
                        and len(server.core.backend.owners()) == 4, timeout=5)
        assert "a" in server.core.snapshot()["apps"]
        rounds = len(server.core.outcomes)
        assert wait_for(lambda: len(server.core.outcomes) >= rounds + 1, timeout=5)
        for out in server.core.outcomes[rounds:]:
            assert "a" not in (*out.bidders, *out.nonbidders)
    finally:
        b.stop()


def test_model_bidder_resends_cached_table_for_same_round() -> None:
    bidder = ModelBidder(app("a"), time.time)
    gpus = tuple(Gpu(f"g{i}", "m0", "r0") for i in range(4))
    offer = OfferInfo(7, gpus, (), time.time() + 1, 4, 2)
    t1 = bidder.bid(offer)
    assert t1.bids and math.isinf(t1.rho_current)
    assert bidder.bid(offer) is t1  # re-asked for round 7
    t2 = bidder.bid(OfferInfo(8, gpus[:2], (), time.time() + 1, 4, 2))
    assert t2 is not t1
    # Leftover of 2 GPUs not named in the cached table: rho of the best <=2-GPU bid.
    got = AllocationInfo(9, (Gpu("x", "m9", "r0"), Gpu("y", "m9", "r0")), ("leftover",),
                         0.0, False, 1.0)
    best2 = min(b.rho for b in t2.bids if len(b.gpus) <= 2)
    assert bidder.on_allocation(got) == pytest.approx(best2)
    assert bidder.current_rho() == pytest.approx(best2)


def test_cached_table_is_keyed_by_arbiter_epoch_and_round() -> None:
    """A restarted arbiter numbers rounds from 1 again: its round 1 is a new round for the
    agent (a fresh table for the new offer), not the previous arbiter's round 1."""
    bidder = ModelBidder(app("a"), time.time)
    gpus = tuple(Gpu(f"g{i}", "m0", "r0") for i in range(4))
    t1 = bidder.bid(OfferInfo(1, gpus, (), time.time() + 1, 4, 2, epoch="e1"))
    assert bidder.bid(OfferInfo(1, gpus, (), time.time() + 1, 4, 2, epoch="e1")) is t1
    t2 = bidder.bid(OfferInfo(1, gpus[:2], (), time.time() + 1, 4, 2, epoch="e2"))
    assert t2 is not t1
    assert {g for b in t2.bids for g in b.gpus} <= {"g0", "g1"}  # the new offer's GPUs


def test_offers_carry_the_arbiters_epoch(server: ArbiterServer) -> None:
    rec = Recorder()
    offers: list[OfferInfo] = []
    a = AgentClient(server.address, "a", ModelBidder(app("a"), time.time),
                    on_allocation=rec.alloc, on_offer=offers.append).start()
    try:
        assert wait_for(lambda: bool(offers), timeout=5)
        assert offers[0].epoch == server.core.epoch == a.epoch
    finally:
        a.stop()


def test_rho_from_table() -> None:
    t = BidTable("a", 4.0, (Bid(("g0",), 3.0), Bid(("g1",), 2.5), Bid(("g0", "g1"), 2.0)))
    assert rho_from_table(t, ()) == 4.0
    assert rho_from_table(t, ("g0",)) == 3.0  # exact bundle
    assert rho_from_table(t, ("g9",)) == 2.5  # best 1-GPU bid
    assert rho_from_table(t, ("g1", "g0")) == 2.0
    assert rho_from_table(t, ("a", "b", "c")) == 2.0


@pytest.mark.parametrize("address", ["10.0.0.1:1", "rm:8642", "rm.example.com:65535",
                                     "[fd00::5]:8642", "127.0.0.1:8642"])
def test_client_takes_any_host(address: str) -> None:
    """An AM on a NodeManager host reaches the agents' endpoint on the RM host."""
    assert AgentClient(address, "a", ModelBidder(app("a"), time.time)).address == address


@pytest.mark.parametrize("address", ["", "rm", "rm:", ":8642", "rm:0", "rm:65536", "rm:86a",
                                     "http://rm:8642", "rm:8642/x", "fd00::5:8642", "a b:1",
                                     "rm:8642\n", "-rm:1"])
def test_client_refuses_what_is_not_host_port(address: str) -> None:
    with pytest.raises(ValueError, match="must be host:port"):
        AgentClient(address, "a", ModelBidder(app("a"), time.time))


@pytest.mark.parametrize("form", ["paper", "exact"])
def test_agent_takes_the_arbiters_form_of_the_ideal_time(form: str) -> None:
    """The cluster's T_id form (yarn.resourcemanager.themis.ideal-time, standalone's
    --ideal-time) reaches the agents at registration; a bad value fails the config."""
    from themis.mechanism.fairness import IdealTime

    cfg = ArbiterConfig(lease_s=0.5, bid_timeout_s=0.5, solver="bnb", ideal_time=form)
    srv = ArbiterServer(uniform_cluster(2, 2), cfg, max_workers=8)
    srv.start(0)
    bidder = ModelBidder(app("a"), time.time)
    bidder.ideal = IdealTime.PAPER if form == "exact" else IdealTime.EXACT  # the other one
    c = AgentClient(srv.address, "a", bidder, backoff=(0.02, 0.3)).start()
    try:
        assert wait_for(lambda: c.secret is not None, 10)
        assert bidder.ideal is IdealTime(form)
    finally:
        c.stop()
        srv.stop(0)
    with pytest.raises(ValueError, match="ideal time 'gavel'"):
        ArbiterConfig(ideal_time="gavel")
