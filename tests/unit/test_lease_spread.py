"""Lease lengths spread over a round's apps (issue 37: a round's leases must not all end
together, or the round at their end offers the whole cluster again): the shared rule
(:func:`themis.mechanism.round.lease_lengths`) and its three users - the round itself
(standalone), the YARN engine's grants (``lease_ms``) and the simulator."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.round import RoundError, RoundOutcome, lease_lengths, run_round
from themis.mechanism.solvers import make_solver
from themis.mechanism.topology import Gpu
from themis.yarn.bids import ReportedBids
from themis.yarn.rounds import RoundEngine
from themis.yarn.view import ViewError, grants_json, parse_view


@given(n=st.integers(1, 60), lease=st.floats(1.0, 1e5), frac=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**32))
def test_lengths_are_evenly_spaced_around_the_lease(n: int, lease: float, frac: float,
                                                    seed: int) -> None:
    spread = lease * frac
    apps = [f"a{i}" for i in range(n)]
    got = lease_lengths(apps, lease, spread, random.Random(seed))
    assert set(got) == set(apps)
    values = sorted(got.values())
    assert sum(values) / n == pytest.approx(lease)  # the mean lease is unchanged
    assert values[0] >= lease - spread / 2 - 1e-9 and values[-1] <= lease + spread / 2 + 1e-9
    gaps = [b - a for a, b in pairwise(values)]
    assert all(g == pytest.approx(spread / n, abs=1e-6 * lease) for g in gaps)


def test_no_spread_one_app_and_bad_spreads() -> None:
    rng = random.Random(0)
    assert lease_lengths(["a", "b"], 600.0, 0.0, rng) == {"a": 600.0, "b": 600.0}
    assert lease_lengths(["a"], 600.0, 300.0, rng) == {"a": 600.0}
    assert lease_lengths([], 600.0, 300.0, rng) == {}
    for bad in (-1.0, 600.1):
        with pytest.raises(RoundError, match="spread"):
            lease_lengths(["a", "b"], 600.0, bad, rng)


def test_who_gets_the_longer_lease_is_random_over_rounds() -> None:
    longest = [max(lease_lengths(["a", "b", "c"], 600.0, 300.0, random.Random(s)).items(),
                   key=lambda kv: kv[1])[0] for s in range(300)]
    assert {a: longest.count(a) for a in "abc"} == pytest.approx(
        {"a": 100, "b": 100, "c": 100}, abs=30)


def test_a_rounds_grants_of_one_app_end_together_and_apps_apart() -> None:
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(6)]
    rhos = {"slow": 5.0, "b": 1.0, "c": 0.5}

    def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
        return {"slow": BidTable("slow", 5.0, (Bid(("g0", "g1"), 2.0),))}

    out = run_round(gpus, rhos, collect, fairness_knob=0.5, lease_s=600.0, now=100.0,
                    solver=make_solver("highs"), rng=random.Random(1), spread_s=300.0)
    ends: dict[str, set[float]] = {}
    for g in out.grants:
        ends.setdefault(g.app_id, set()).add(g.expiry)
    assert all(len(e) == 1 for e in ends.values()), ends  # auction + leftover: one end
    assert sorted(e.pop() - 100.0 for e in ends.values()) == pytest.approx([500, 600, 700])


def _view(spread_ms: int | None) -> str:
    view = {"round": 1, "now_ms": 0, "fairness_knob": 0.8, "lease_duration_ms": 600000,
            "solver": "highs", "nodes": [], "apps": []}
    if spread_ms is not None:
        view["lease_spread_ms"] = spread_ms
    return json.dumps(view)


def test_the_view_carries_the_spread_and_the_reply_each_apps_length() -> None:
    assert parse_view(_view(None)).lease_spread_ms == 0  # a plugin without the key
    assert parse_view(_view(300000)).lease_spread_ms == 300000
    with pytest.raises(ViewError, match="lease_spread_ms 600001"):
        parse_view(_view(600001))
    reply = json.loads(grants_json([("a", ["n1:1/0", "n2:1/0"]), ("b", ["n1:1/1"])], {},
                                   {"a": 450.0, "b": 750.0}))
    assert reply["grants"] == [
        {"app_id": "a", "node_id": "n1:1", "gpus": 1, "lease_ms": 450000},
        {"app_id": "a", "node_id": "n2:1", "gpus": 1, "lease_ms": 450000},
        {"app_id": "b", "node_id": "n1:1", "gpus": 1, "lease_ms": 750000}]


@pytest.mark.parametrize(("spread", "first_ends"), [(0.0, [600.0]),
                                                    (300.0, [500.0, 600.0, 700.0])])
def test_the_simulator_spreads_a_rounds_leases(spread: float, first_ends: list[float],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from themis.sim import engine
    from themis.sim.cluster import build_cluster
    from themis.sim.policies import make_policy
    from themis.sim.workload import JobSpec, Workload, single_phase_app

    apps = [single_phase_app(a, 0.0, [(JobSpec(f"{a}-j", 1.0, 2), 7200.0)], "compute")
            for a in "abc"]
    ends: list[float] = []
    push = engine.Simulator._push

    def record(self: engine.Simulator, t: float, kind: int, payload: object) -> None:
        if kind == engine.EXPIRE:
            ends.append(t)
        push(self, t, kind, payload)

    monkeypatch.setattr(engine.Simulator, "_push", record)
    cfg = engine.SimConfig(lease_spread_s=spread, expiry_quantum_s=0.0)
    r = engine.Simulator(build_cluster([(3, [2])], racks=1), Workload(apps),
                         make_policy("themis"), cfg).run()
    assert len(r.apps) == 3
    # the first round (t = 0) grants all three apps: their leases end together, or apart
    assert ends[:len(first_ends)] == pytest.approx(first_ends)
    with pytest.raises(engine.SimError, match="lease_spread_s"):
        engine.Simulator(build_cluster([(1, [2])], racks=1), Workload(apps[:1]),
                         make_policy("themis"), engine.SimConfig(lease_spread_s=601.0))


def _engine_round(view: Mapping[str, Any]) -> tuple[list[RoundOutcome], dict[str, Any]]:
    """One round of the YARN engine on ``view``: what it announced to the agents (each
    sub-round's outcome) and its reply to the RM."""
    heard: list[RoundOutcome] = []

    class Heard(ReportedBids):
        def announce(self, offer: Sequence[Gpu], outcome: RoundOutcome) -> None:
            heard.append(outcome)

    return heard, json.loads(RoundEngine(Heard()).run(json.dumps(view)))


def test_the_yarn_engine_announces_the_lease_ends_the_rm_applies() -> None:
    """The agents hear each grant's end (an AM stops its jobs a stop lead before it, and
    gives back the GPUs of leases it thinks are ending); the RM applies the reply's
    lease_ms. Both must be the same length for every grant: the engine announced the
    unspread lease while the RM applied the spread one (an AM 15 s off on 120-s leases kept
    running into the RM's preemption, then gave back GPUs of leases already ended, which
    the RM cut from its next lease on the node)."""
    now_ms = 1_000_000
    view = {"round": 7, "now_ms": now_ms, "fairness_knob": 0.0, "lease_duration_ms": 120_000,
            "lease_spread_ms": 60_000, "solver": "highs",
            "nodes": [{"node_id": f"n{i}:1", "host": f"n{i}", "rack": "/r", "total_gpus": 2,
                       "free_gpus": 2} for i in range(3)],
            "apps": [{"app_id": a, "pending_gpus": 2} for a in ("a", "b", "c")]}
    heard, reply = _engine_round(view)
    announced = {(g.app_id, x.rsplit("/", 1)[0]): round((g.expiry - g.start) * 1000)
                 for o in heard for g in o.grants for x in g.gpus}
    applied = {(g["app_id"], g["node_id"]): g["lease_ms"] for g in reply["grants"]}
    assert applied and applied == announced
    # spread: the three apps' leases end apart, around the lease
    assert sorted(set(applied.values())) == [100_000, 120_000, 140_000]


def test_an_app_granted_in_two_queue_rounds_hears_one_lease_end() -> None:
    """With queues a round runs per queue twice (guarantees, then lending): an app granted
    in both has one lease length, announced and applied alike."""
    for seed in range(8):  # the round id seeds the spread's order
        view: dict[str, Any] = {"round": seed, "now_ms": 1_000_000, "fairness_knob": 0.0,
                "lease_duration_ms": 120_000, "lease_spread_ms": 60_000, "solver": "highs",
                "nodes": [{"node_id": "n0:1", "host": "n0", "rack": "/r", "total_gpus": 8,
                           "free_gpus": 8}],
                "apps": [{"app_id": "a", "queue": "root.qa", "pending_gpus": 5},
                         {"app_id": "d", "queue": "root.qa", "pending_gpus": 1},
                         {"app_id": "b", "queue": "root.qb", "pending_gpus": 1},
                         {"app_id": "c", "queue": "root.qb", "pending_gpus": 1}],
                "queues": [{"queue": "root.qa", "guaranteed_gpus": 2, "max_gpus": 8},
                           {"queue": "root.qb", "guaranteed_gpus": 6, "max_gpus": 8}]}
        heard, reply = _engine_round(view)
        ends: dict[str, set[float]] = {}
        for o in heard:
            for g in o.grants:
                ends.setdefault(g.app_id, set()).add(round((g.expiry - g.start) * 1000))
        assert len(heard) >= 3  # qa's and qb's guarantee rounds, and qa's lending one
        assert sum(len(g.gpus) for o in heard for g in o.grants if g.app_id == "a") == 5
        assert all(len(e) == 1 for e in ends.values()), ends
        assert {g["app_id"]: {g["lease_ms"]} for g in reply["grants"]} == ends
