"""What an app holds, in the YARN engine's rounds: read from the RM's view (containers and
live leases, per node) and sent with each bidder's offer, so that its bid table's
rho_current is its rho with those GPUs (section 4.2), not +inf as for an app holding none."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from themis.agent.client import AgentClient
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.testing import settle
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.bids import BidTable
from themis.mechanism.model import AppModel, Job
from themis.yarn.agents import AgentEndpoint
from themis.yarn.queues import held_gpus
from themis.yarn.rounds import RoundEngine
from themis.yarn.view import held_of, held_per_node, parse_view

A, B = "application_1_0001", "application_1_0002"


def _view(now_ms: int, free: int = 2, lost_lease: bool = False) -> dict[str, Any]:
    """Two nodes of 4 GPUs on two racks. A runs 2 GPUs on n1 and holds a live lease of 3
    there (one container not started yet) and an expired one of 2 on n2; A asks 2 more GPUs
    (one of them the leased one's container); B holds none."""
    leases = [
        {"lease_id": 1, "app_id": A, "node_id": "n1:1", "gpus": 3,
         "expiry_ms": now_ms + 60_000, "state": "ACTIVE"},
        {"lease_id": 2, "app_id": A, "node_id": "n2:1", "gpus": 2,
         "expiry_ms": now_ms - 1, "state": "ACTIVE"},
    ]
    if lost_lease:  # a live lease on a node the view no longer lists
        leases.append({"lease_id": 3, "app_id": A, "node_id": "gone:1", "gpus": 1,
                       "expiry_ms": now_ms + 60_000, "state": "ACTIVE"})
    return {
        "round": 5, "now_ms": now_ms, "fairness_knob": 0.0,
        "lease_duration_ms": 600_000, "solver": "bnb",
        "nodes": [{"node_id": "n1:1", "host": "n1", "rack": "/r1", "total_gpus": 4,
                   "free_gpus": 1},
                  {"node_id": "n2:1", "host": "n2", "rack": "/r2", "total_gpus": 4,
                   "free_gpus": free - 1}],
        "apps": [{"app_id": A, "pending_gpus": 2, "running_gpus": {"n1:1": 2}},
                 {"app_id": B, "pending_gpus": 1}],
        "leases": leases,
    }


def test_held_is_per_node_the_larger_of_containers_and_live_leases() -> None:
    view = parse_view(json.dumps(_view(1_000_000, lost_lease=True)))
    assert held_per_node(view) == {A: {"gone:1": 1, "n1:1": 3}}
    assert held_gpus(view) == {A: 4, B: 0}
    got = held_of(view)
    assert set(got) == {A}
    # the lost node's GPU is gone; the others stand in on their node and rack
    assert [(g.machine, g.rack) for g in got[A]] == [("n1:1", "/r1")] * 3
    assert len({g.id for g in got[A]}) == 3


class Recording(ModelBidder):
    """A real model bidder that keeps the offers it saw and the tables it sent."""

    def __init__(self, app: AppModel) -> None:
        super().__init__(app, time.time)
        self.offers: list[Any] = []
        self.tables: list[BidTable] = []

    def bid(self, offer: Any) -> BidTable:
        table = super().bid(offer)
        self.offers.append(offer)
        self.tables.append(table)
        return table


def test_a_bidders_offer_carries_what_it_holds_and_its_rho_current_counts_it() -> None:
    """f = 0: both apps bid. A's offer lists the 3 GPUs it holds on n1 and its table's
    rho_current is finite (without them it was +inf, as if it starved); B holds nothing."""
    endpoint = AgentEndpoint(ArbiterConfig(bid_timeout_s=5.0, heartbeat_s=0.5, solver="bnb"))
    engine = RoundEngine(endpoint)
    endpoint.start(0)
    now = time.time()
    bidders = {n: Recording(AppModel(n, now - 100.0, [Job("j", 1.0, 3_600.0, 8)]))
               for n in (A, B)}
    clients = [AgentClient(endpoint.server.address, n, b, backoff=(0.02, 0.3)).start()
               for n, b in bidders.items()]
    try:
        assert all(c.connected.wait(10) for c in clients)
        settle(endpoint.core)
        reply = json.loads(engine.run(json.dumps(_view(int(time.time() * 1000)))))
    finally:
        for c in clients:
            c.stop()
        endpoint.stop()
    assert sorted(reply["info"]["bidders"]) == [A, B]
    a, b = bidders[A], bidders[B]
    assert len(a.offers) == 1 and len(b.offers) == 1
    assert [g.machine for g in a.offers[0].held] == ["n1:1"] * 3
    assert b.offers[0].held == ()
    assert math.isfinite(a.tables[0].rho_current)
    assert math.isinf(b.tables[0].rho_current)
    # the free GPUs are offered as before, beside the held ones
    assert sorted(g.machine for g in a.offers[0].gpus) == ["n1:1", "n2:1"]
