"""A GPU leased in one round but not yet in a container (its container comes at the node's
next heartbeat) already serves one of the app's pending asks: the next round must not lease
the app another GPU for the same container. The RM's lease gate places the app's GPU
containers only on nodes where its leases have room, so the pending ask will land there."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from themis.yarn.rounds import RoundEngine
from themis.yarn.view import leased_unused, parse_view, waiting_asks

A, B = "application_1_0001", "application_1_0002"


def _view(free: Mapping[str, int], apps: Sequence[dict[str, Any]],
          leases: Sequence[tuple[str, str, int, int]] = (), now_ms: int = 10_000) -> str:
    """``leases``: (app, node, GPUs, expiry ms)."""
    return json.dumps({
        "round": 2, "now_ms": now_ms, "fairness_knob": 0.8, "lease_duration_ms": 60_000,
        "solver": "bnb",
        "nodes": [{"node_id": n, "host": n.split(":")[0], "rack": "/r", "total_gpus": 4,
                   "free_gpus": f} for n, f in free.items()],
        "apps": list(apps),
        "leases": [{"lease_id": i, "app_id": a, "node_id": n, "gpus": g, "expiry_ms": e,
                    "state": "ACTIVE"} for i, (a, n, g, e) in enumerate(leases)]})


def test_a_granted_gpu_without_its_container_yet_is_not_granted_again() -> None:
    """The secure IT's case: one 1-GPU ask, leased a GPU last round, its container not yet
    placed. This round has 3 GPUs free and the app still shows its ask: it gets nothing."""
    view = _view({"nm:1": 3}, [{"app_id": A, "pending_gpus": 1}], [(A, "nm:1", 1, 70_000)])
    assert leased_unused(parse_view(view)) == {A: {"nm:1": 1}}
    assert waiting_asks(parse_view(view)) == {}
    reply = json.loads(RoundEngine().run(view))
    assert reply["grants"] == [] and reply["info"]["skipped"], reply


def test_a_lease_whose_gpus_run_containers_leaves_the_ask_waiting() -> None:
    """The lease's GPU runs a container already: the pending ask is for a further GPU, and
    the round grants it."""
    view = _view({"nm:1": 3}, [{"app_id": A, "pending_gpus": 1, "running_gpus": {"nm:1": 1}}],
                 [(A, "nm:1", 1, 70_000)])
    assert leased_unused(parse_view(view)) == {}
    assert waiting_asks(parse_view(view)) == {A: {1: 1}}
    reply = json.loads(RoundEngine().run(view))
    assert sum(g["gpus"] for g in reply["grants"] if g["app_id"] == A) == 1, reply


def test_an_expired_lease_serves_no_ask() -> None:
    view = _view({"nm:1": 3}, [{"app_id": A, "pending_gpus": 1}], [(A, "nm:1", 1, 10_000)])
    assert waiting_asks(parse_view(view)) == {A: {1: 1}}


def test_unused_gpus_take_the_largest_containers_that_fit_on_their_node() -> None:
    """Asks: one 2-GPU and two 1-GPU containers. Three unused leased GPUs on n1 take the
    2-GPU container and a 1-GPU one; one on n2 would take the other, but its lease is B's."""
    view = _view({"n1:1": 0, "n2:1": 2}, [
        {"app_id": A, "pending_gpus": 4, "asks": [{"gpus_per_container": 2, "containers": 1},
                                                  {"gpus_per_container": 1, "containers": 2}]},
        {"app_id": B, "pending_gpus": 0}],
        [(A, "n1:1", 3, 70_000), (B, "n2:1", 1, 70_000)])
    assert waiting_asks(parse_view(view)) == {A: {1: 1}}


def test_a_lease_too_small_for_a_container_serves_none() -> None:
    """One unused GPU cannot hold a 2-GPU container: the ask still waits."""
    view = _view({"n1:1": 2}, [{"app_id": A, "pending_gpus": 2,
                                "asks": [{"gpus_per_container": 2, "containers": 1}]}],
                 [(A, "n1:1", 1, 70_000)])
    assert waiting_asks(parse_view(view)) == {A: {2: 1}}


asks = st.dictionaries(st.integers(1, 4), st.integers(0, 4), max_size=3)
unused = st.dictionaries(st.sampled_from(["n1:1", "n2:1", "n3:1"]), st.integers(0, 6),
                         max_size=3)


@settings(max_examples=200, deadline=None)
@given(ask=asks, free=unused)
def test_waiting_asks_are_the_asks_less_whole_containers_that_fit_the_unused_gpus(
    ask: dict[int, int], free: dict[str, int]
) -> None:
    """What still waits is a sub-multiset of the asks; the containers taken off fit, per
    node, in that node's unused GPUs; and no further waiting container fits in what any node
    has left (the greedy stops only when nothing fits)."""
    shaped = [{"gpus_per_container": k, "containers": n} for k, n in ask.items()]
    view = parse_view(_view({"n1:1": 0, "n2:1": 0, "n3:1": 0},
                            [{"app_id": A, "pending_gpus": 0, "asks": shaped}],
                            [(A, n, g, 70_000) for n, g in free.items()]))
    left = waiting_asks(view).get(A, {})
    asked = {k: n for k, n in ask.items() if n}
    assert all(0 < n <= asked.get(k, 0) for k, n in left.items()), (asked, left)
    taken = sum(k * (n - left.get(k, 0)) for k, n in asked.items())
    assert taken <= sum(free.values())
    if left:
        smallest = min(left)
        # every node's unused GPUs minus what it took is below the smallest waiting size,
        # so at least total unused minus taken is below (#nodes x smallest)
        assert sum(free.values()) - taken < max(1, len(free)) * smallest


def test_an_unused_gpu_does_not_take_a_container_up_for_renewal() -> None:
    """A's 1-GPU container runs on n1 under a lease up for renewal; A also holds an unused
    GPU on n1 under a later lease (granted for an ask since withdrawn) and asks nothing
    else. The container stays asked, so the round offers its GPU back (renewed in place, it
    runs on): taken by the unused GPU, the round had nothing to decide, the one renewal
    offer at this expiry passed, and the container stopped at the lease end."""
    now = 10_000
    raw = json.loads(_view({"n1:1": 0}, [
        {"app_id": A, "pending_gpus": 0, "running_gpus": {"n1:1": 1},
         "renewing": {"n1:1": {"gpus": 1, "containers": [1]}}}],
        [(A, "n1:1", 1, now + 5_000), (A, "n1:1", 1, now + 50_000)], now_ms=now))
    raw["leases"][0]["renewing"] = True
    view = parse_view(json.dumps(raw))
    assert leased_unused(view) == {A: {"n1:1": 1}}
    assert waiting_asks(view) == {A: {1: 1}}
    reply = json.loads(RoundEngine().run(json.dumps(raw)))
    assert [(g["app_id"], g["node_id"], g["gpus"]) for g in reply["grants"]] == \
        [(A, "n1:1", 1)], reply
    # a pending ask is still taken by the unused GPU, the renewal stays asked
    raw["apps"][0]["pending_gpus"] = 1
    assert waiting_asks(parse_view(json.dumps(raw))) == {A: {1: 1}}
