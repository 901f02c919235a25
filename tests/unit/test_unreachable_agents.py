"""Apps whose agent cannot hear grants sit the YARN engine's rounds out (docs/yarn.md,
"Faults"): an app that registered with the agents' endpoint and whose event stream is down
(its AM cut off from the RM host) gets no GPUs, as they would sit leased and idle until the
lease ends; apps without an agent (stock apps) are unaffected, and the app takes part
again as soon as its stream is back."""

from __future__ import annotations

import json

from themis.rpc import keepalive
from themis.yarn.agents import AgentEndpoint
from themis.yarn.bids import ReportedBids
from themis.yarn.rounds import RoundEngine

AGENT = "application_1_0001"
STOCK = "application_1_0002"


def _view(round_id: int) -> str:
    return json.dumps({
        "round": round_id, "now_ms": 1_000_000 + round_id, "fairness_knob": 0.5,
        "lease_duration_ms": 60_000, "solver": "auto",
        "nodes": [{"node_id": "h1:1", "host": "h1", "rack": "/r", "total_gpus": 4,
                   "free_gpus": 4}],
        "apps": [{"app_id": AGENT, "pending_gpus": 2}, {"app_id": STOCK, "pending_gpus": 2}],
        "leases": [],
    })


def _granted(reply: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in json.loads(reply)["grants"]:
        out[g["app_id"]] = out.get(g["app_id"], 0) + g["gpus"]  # per node
    return out


def test_an_app_whose_stream_is_down_gets_nothing_until_it_is_back() -> None:
    endpoint = AgentEndpoint()
    core = endpoint.core
    engine = RoundEngine(endpoint)
    secret = core.register(AGENT, 1.0, 2).secret
    # registered, no stream yet (or a stream that closed): unreachable; a stock app never is
    assert core.unreachable([AGENT, STOCK]) == {AGENT}
    reply = engine.run(_view(1))
    assert _granted(reply) == {STOCK: 2}
    assert json.loads(reply)["info"]["unreachable"] == [AGENT]

    generation, _ = core.open_stream(AGENT, secret)
    assert core.unreachable([AGENT, STOCK]) == frozenset()
    reply = engine.run(_view(2))
    assert _granted(reply).get(AGENT) == 2  # back in the round, and served
    assert json.loads(reply)["info"]["unreachable"] == []

    core.close_stream(AGENT, generation)  # the partition: the stream ends
    assert core.unreachable([AGENT]) == {AGENT}
    core.unregister(AGENT, secret)  # gone for good: no longer counted as an agent's app
    assert core.unreachable([AGENT]) == frozenset()


def test_reported_bids_have_no_streams_to_lose() -> None:
    assert ReportedBids().unreachable([AGENT, STOCK]) == ()


def test_the_endpoint_pings_its_agents() -> None:
    """The server's keepalive is what closes a cut-off agent's stream: without it a
    partitioned connection stays open until TCP gives up, minutes later."""
    options = dict(keepalive.SERVER_OPTIONS)
    assert 0 < options["grpc.keepalive_time_ms"] <= 10_000
    assert 0 < options["grpc.keepalive_timeout_ms"] <= 10_000
