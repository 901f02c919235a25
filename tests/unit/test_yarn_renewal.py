"""Renewal in place on YARN (docs/yarn.md, "Renewal in place"): the RM offers a lease that
ends soon in a round before it ends; its GPUs are in the offer, its app asks again for the
containers on them and does not hold them; a grant of them back to that app is announced as
a renewal, and the app's agent keeps the GPU ids its jobs run on."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from themis.agent.client import AgentClient
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.testing import settle
from themis.mechanism.bidder import AllocationInfo, ModelBidder
from themis.mechanism.model import AppModel, Job
from themis.mechanism.round import RENEWAL, LeaseGrant, RoundOutcome
from themis.yarn.agents import AgentEndpoint
from themis.yarn.rounds import RoundEngine, renewals_marked
from themis.yarn.view import (
    held_per_node,
    offer_of,
    parse_view,
    renewal_holders,
    waiting_asks,
)

A, B = "application_1_0001", "application_1_0002"


def _view(now_ms: int, b_asks: int = 0) -> dict[str, Any]:
    """One node of 4 GPUs: A runs one 2-GPU container under a lease of 2 that ends in 5 s
    and is up for renewal, and holds 1 more GPU under a lease that lasts; 1 GPU is free.
    B asks ``b_asks`` single GPUs."""
    return {
        "round": 9, "now_ms": now_ms, "fairness_knob": 0.8,
        "lease_duration_ms": 600_000, "solver": "bnb",
        "nodes": [{"node_id": "n1:1", "host": "n1", "rack": "/r1", "total_gpus": 4,
                   "free_gpus": 1}],
        "apps": [{"app_id": A, "pending_gpus": 0, "running_gpus": {"n1:1": 3},
                  "asks": [], "renewing": {"n1:1": {"gpus": 2, "containers": [2]}}},
                 {"app_id": B, "pending_gpus": b_asks}],
        "leases": [
            {"lease_id": 1, "app_id": A, "node_id": "n1:1", "gpus": 2,
             "expiry_ms": now_ms + 5_000, "state": "ACTIVE", "renewing": True},
            {"lease_id": 2, "app_id": A, "node_id": "n1:1", "gpus": 1,
             "expiry_ms": now_ms + 300_000, "state": "ACTIVE"},
        ],
    }


def test_renewing_gpus_are_offered_asked_again_and_not_held() -> None:
    view = parse_view(json.dumps(_view(1_000_000, b_asks=1)))
    offer = offer_of(view)
    assert len(offer) == 3  # the free GPU and the lease's 2
    holders = renewal_holders(view)
    assert sorted(holders.values()) == [A, A]
    assert all(g in {x.id for x in offer} for g in holders)
    # A holds only its other lease's GPU (its 3rd container GPU runs on the renewing lease)
    assert held_per_node(view) == {A: {"n1:1": 1}}
    # A asks for its 2-GPU container again; B for its one GPU
    assert waiting_asks(view) == {A: {2: 1}, B: {1: 1}}


def test_a_view_without_renewal_fields_is_as_before() -> None:
    raw = _view(1_000_000)
    del raw["apps"][0]["renewing"]
    del raw["leases"][0]["renewing"]
    view = parse_view(json.dumps(raw))
    assert len(offer_of(view)) == 1 and renewal_holders(view) == {}
    assert held_per_node(view) == {A: {"n1:1": 3}}


def test_a_malformed_renewal_entry_is_refused_naming_it() -> None:
    raw = _view(1_000_000)
    raw["apps"][0]["renewing"] = {"n1:1": {"gpus": 0, "containers": [2]}}
    try:
        parse_view(json.dumps(raw))
    except ValueError as exc:
        assert "renewing" in str(exc) and "n1:1" in str(exc)
    else:
        raise AssertionError("a renewal of 0 GPUs was accepted")


def test_renewals_marked_splits_the_holders_gpus_on_its_node_up_to_the_lease() -> None:
    g = LeaseGrant(A, ("n1:1/r9.0", "n1:1/r9.1", "n1:1/r9.2", "n2:1/r9.0"), 0.0, 60.0,
                   "leftover")
    other = LeaseGrant(B, ("n1:1/r9.3",), 0.0, 60.0, "auction")
    outcome = RoundOutcome((B,), (A,), None, {}, (), (g, other))
    got = renewals_marked(outcome, {A: {"n1:1": 2}})
    assert [(x.app_id, x.gpus, x.via) for x in got.grants] == [
        (A, ("n1:1/r9.0", "n1:1/r9.1"), RENEWAL),
        (A, ("n1:1/r9.2", "n2:1/r9.0"), "leftover"),
        (B, ("n1:1/r9.3",), "auction"),
    ]
    assert renewals_marked(outcome, {}) is outcome


def _two_nodes(now_ms: int, renewing: str) -> dict[str, Any]:
    """Two nodes of 2 GPUs: A runs one 2-GPU container on ``renewing`` under a lease that
    ends in 5 s and is up for renewal; the other node's 2 GPUs are free."""
    nodes = ("n1:1", "n2:1")
    return {
        "round": 9, "now_ms": now_ms, "fairness_knob": 0.8,
        "lease_duration_ms": 600_000, "solver": "bnb",
        "nodes": [{"node_id": n, "host": n[:2], "rack": "/r1", "total_gpus": 2,
                   "free_gpus": 0 if n == renewing else 2} for n in nodes],
        "apps": [{"app_id": A, "pending_gpus": 0, "running_gpus": {renewing: 2},
                  "asks": [], "renewing": {renewing: {"gpus": 2, "containers": [2]}}}],
        "leases": [{"lease_id": 1, "app_id": A, "node_id": renewing, "gpus": 2,
                    "expiry_ms": now_ms + 5_000, "state": "ACTIVE", "renewing": True}],
    }


def _run_round_with_agent(b_asks: int, renewing: str = "") -> tuple[
        dict[str, Any], dict[str, float], list[AllocationInfo]]:
    """A real endpoint, engine and agent for A: A's agent holds the ids its jobs run on (2
    on n1 ending in 5 s, 1 lasting); one round with A's lease up for renewal. With
    ``renewing``: the view of :func:`_two_nodes`, A's 2 ids on that node."""
    endpoint = AgentEndpoint(ArbiterConfig(bid_timeout_s=5.0, heartbeat_s=0.5, solver="bnb"))
    engine = RoundEngine(endpoint)
    endpoint.start(0)
    now = time.time()
    got: list[AllocationInfo] = []
    seen = threading.Event()

    def on_allocation(a: AllocationInfo) -> None:
        got.append(a)
        seen.set()

    bidder = ModelBidder(AppModel(A, now - 100.0, [Job("j", 1.0, 3_600.0, 2)]), time.time)
    client = AgentClient(endpoint.server.address, A, bidder, backoff=(0.02, 0.3),
                         on_allocation=on_allocation).start()
    try:
        assert client.connected.wait(10)
        settle(endpoint.core)
        ending, lasting = now + 5.0, now + 300.0
        with client._lock:  # what earlier rounds announced to A
            client.leases = ({f"{renewing}/r3-1.0": ending, f"{renewing}/r3-1.1": ending}
                             if renewing else
                             {"n1:1/r3-1.0": ending, "n1:1/r3-1.1": ending,
                              "n1:1/r7-2.0": lasting})
        view = (_two_nodes(int(now * 1000), renewing) if renewing
                else _view(int(now * 1000), b_asks))
        reply = json.loads(engine.run(json.dumps(view)))
        assert seen.wait(10), "A heard of no allocation"
        with client._lock:
            leases = dict(client.leases)
    finally:
        client.stop()
        endpoint.stop()
    return reply, leases, got


def test_a_holder_alone_gets_its_gpus_back_and_its_agent_keeps_their_ids() -> None:
    reply, leases, got = _run_round_with_agent(b_asks=0)
    # the RM is told A's 2 GPUs on n1 (it renews the lease in place with them)
    assert [(g["app_id"], g["node_id"], g["gpus"]) for g in reply["grants"]] == \
        [(A, "n1:1", 2)]
    # the agent moved the expiry of the ids it held there; no new id appeared
    assert set(leases) == {"n1:1/r3-1.0", "n1:1/r3-1.1", "n1:1/r7-2.0"}
    assert leases["n1:1/r3-1.0"] == leases["n1:1/r3-1.1"] > time.time() + 60
    assert got[0].vias == (RENEWAL,)
    assert {g.id for g in got[0].gpus} == {"n1:1/r3-1.0", "n1:1/r3-1.1"}


def test_a_holder_wins_back_its_own_node_rather_than_an_equally_good_free_one() -> None:
    # Either node would do for A's 2-GPU job; its offer names the GPUs up for renewal, so
    # its bids put that node first and the job runs on (without it, the menu's fixed
    # tie-break picks the same node in both cases, and one of them moves the job).
    for node in ("n1:1", "n2:1"):
        reply, leases, got = _run_round_with_agent(b_asks=0, renewing=node)
        assert [(g["app_id"], g["node_id"], g["gpus"]) for g in reply["grants"]] == \
            [(A, node, 2)], node
        assert got[0].vias == (RENEWAL,), node
        assert set(leases) == {f"{node}/r3-1.0", f"{node}/r3-1.1"}, node
