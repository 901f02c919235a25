"""CapacityScheduler queues in the engine's rounds (themis.yarn.queues, docs/yarn.md
"Queues"): guarantees first, idle GPUs lent up to each queue's maximum, lent GPUs back at
lease expiry; with one queue a round is exactly the paper's round over every free GPU."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.round import run_round
from themis.mechanism.solvers import make_solver
from themis.mechanism.topology import Gpu
from themis.yarn.bids import ReportedBids
from themis.yarn.queues import pick, shares
from themis.yarn.rounds import RoundEngine
from themis.yarn.view import ViewError, grants_json, offer_of, parse_view, waiting_asks

Json = dict[str, Any]


def _view(nodes: Sequence[tuple[int, int]], apps: Sequence[Json],
          queues: Sequence[tuple[str, int, int]] | None = None,
          leases: Sequence[Json] = (), round_id: int = 1, knob: float = 0.5) -> Json:
    """``nodes``: (total, free) GPUs per node ``n<i>:1``; ``queues``: (name, guaranteed, max)."""
    out: Json = {
        "round": round_id, "now_ms": 1_000_000, "fairness_knob": knob,
        "lease_duration_ms": 60_000, "solver": "auto",
        "nodes": [{"node_id": f"n{i}:1", "host": f"n{i}", "rack": "/r", "total_gpus": t,
                   "free_gpus": f} for i, (t, f) in enumerate(nodes)],
        "apps": list(apps), "leases": list(leases),
    }
    if queues is not None:
        out["queues"] = [{"queue": q, "guaranteed_gpus": g, "max_gpus": m}
                         for q, g, m in queues]
    return out


def _app(app_id: str, queue: str, ones: int = 0, running: Mapping[str, int] | None = None,
         asks: Mapping[int, int] | None = None) -> Json:
    shape = dict(asks) if asks is not None else ({1: ones} if ones else {})
    return {"app_id": app_id, "queue": queue,
            "pending_gpus": sum(k * n for k, n in shape.items()),
            "running_gpus": dict(running or {}),
            "asks": [{"gpus_per_container": k, "containers": n} for k, n in shape.items()]}


def _lease(lease_id: int, app_id: str, node_id: str, gpus: int,
           expiry_ms: int = 2_000_000) -> Json:
    return {"lease_id": lease_id, "app_id": app_id, "node_id": node_id, "gpus": gpus,
            "expiry_ms": expiry_ms, "state": "ACTIVE"}


def _grants(reply: str) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for g in json.loads(reply)["grants"]:
        out[(g["app_id"], g["node_id"])] += g["gpus"]
    return out


def _per_app(reply: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for (app, _), n in _grants(reply).items():
        out[app] += n
    return out


def _reference(source: ReportedBids, view_json: Json) -> str:
    """The engine's round without queues: one paper round over every free GPU (what
    RoundEngine.run did before queues existed), for the one-queue identity."""
    view = parse_view(json.dumps(view_json))
    shape = waiting_asks(view)
    wanting = {a: sum(k * n for k, n in s.items()) for a, s in shape.items()}
    offer = offer_of(view)
    if not wanting or not offer:
        return grants_json([], {})
    rho = source.rho(sorted(wanting))
    outcome = run_round(offer, rho, lambda b: source.collect(b, offer),
                        fairness_knob=view.fairness_knob,
                        lease_s=view.lease_duration_ms / 1000.0, now=view.now_ms / 1000.0,
                        solver=make_solver(view.solver), rng=random.Random(view.round_id),
                        room=wanting, shape=shape, priority=None)
    return grants_json(((g.app_id, g.gpus) for g in outcome.grants), {})


# ------------------------------------------------------------------ one queue: identity

cluster = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=4
                   ).map(lambda ns: [(t, min(t, f)) for t, f in ns])
asks = st.dictionaries(st.integers(1, 3), st.integers(0, 3), max_size=2)


@settings(max_examples=60, deadline=None)
@given(nodes=cluster, wants=st.lists(asks, min_size=1, max_size=5),
       rhos=st.lists(st.floats(0.5, 10.0), min_size=5, max_size=5),
       bid_for=st.lists(st.integers(1, 4), min_size=5, max_size=5),
       knob=st.sampled_from([0.0, 0.5, 0.8]), rid=st.integers(1, 1000),
       listed=st.booleans())
def test_one_queue_grants_exactly_what_the_plain_round_grants(
        nodes: list[tuple[int, int]], wants: list[dict[int, int]], rhos: list[float],
        bid_for: list[int], knob: float, rid: int, listed: bool) -> None:
    total = sum(t for t, _ in nodes)
    apps = [_app(f"app_{i}", "root.default", asks=w) for i, w in enumerate(wants)]
    view = _view(nodes, apps, [("root.default", total, total)] if listed else None,
                 round_id=rid, knob=knob)
    gpu_ids = [g.id for g in offer_of(parse_view(json.dumps(view)))]

    def source() -> ReportedBids:
        s = ReportedBids()
        for i in range(len(wants)):  # every other app reports a table over free GPUs
            s.report_rho(f"app_{i}", rhos[i])
            if i % 2 == 0 and gpu_ids:
                bundle = tuple(sorted(gpu_ids[: bid_for[i]]))
                s.report_table(BidTable(f"app_{i}", rhos[i], (Bid(bundle, rhos[i] / 2),)))
        return s

    assert _grants(RoundEngine(source()).run(json.dumps(view))) == \
        _grants(_reference(source(), view))


# ------------------------------------------------------------------ two queues, by hand

A, B = ("root.a", 6, 8), ("root.b", 2, 8)


def test_both_queues_busy_split_by_capacity() -> None:
    view = _view([(4, 4), (4, 4)], [_app("a1", "root.a", 8), _app("b1", "root.b", 8)],
                 [A, B])
    reply = RoundEngine().run(json.dumps(view))
    assert _per_app(reply) == {"a1": 6, "b1": 2}
    info = json.loads(reply)["info"]["queues"]
    assert info["root.a"]["granted_guarantee_gpus"] == 6
    assert info["root.b"]["granted_guarantee_gpus"] == 2
    # b's 2 GPUs on one node (compact), a's 6 on the other 4 + 2
    assert sorted(_grants(reply).values()) == [2, 2, 4]


def test_idle_queue_lends_its_guarantee_up_to_the_maximum() -> None:
    view = _view([(4, 4), (4, 4)], [_app("a1", "root.a", 8), _app("b1", "root.b")],
                 [A, B])
    reply = RoundEngine().run(json.dumps(view))
    assert _per_app(reply) == {"a1": 8}
    info = json.loads(reply)["info"]["queues"]["root.a"]
    assert (info["granted_guarantee_gpus"], info["lent_gpus"]) == (6, 2)
    capped = _view([(4, 4), (4, 4)], [_app("a1", "root.a", 8), _app("b1", "root.b")],
                   [("root.a", 6, 7), B])
    assert _per_app(RoundEngine().run(json.dumps(capped))) == {"a1": 7}


def test_lent_gpus_come_back_to_their_queue_at_lease_expiry() -> None:
    # a holds 8: 6 under a lease that expired (its containers were killed), 2 lent under a
    # live lease; b now asks 2: the 6 freed GPUs give b its guarantee first
    leases = [{"lease_id": 1, "app_id": "a1", "node_id": "n1:1", "gpus": 2,
               "expiry_ms": 2_000_000, "state": "ACTIVE"},
              {"lease_id": 2, "app_id": "a1", "node_id": "n0:1", "gpus": 4,
               "expiry_ms": 999_000, "state": "EXPIRING"}]
    view = _view([(4, 4), (4, 2)], [_app("a1", "root.a", 6, running={"n1:1": 2}),
                                    _app("b1", "root.b", 2)], [A, B], leases=leases)
    reply = RoundEngine().run(json.dumps(view))
    assert _per_app(reply) == {"a1": 4, "b1": 2}
    info = json.loads(reply)["info"]["queues"]
    assert info["root.a"]["held_gpus"] == 2 and info["root.b"]["held_gpus"] == 0


def test_a_queue_at_its_maximum_gets_nothing() -> None:
    view = _view([(4, 4), (4, 0)], [_app("a1", "root.a", 4, running={"n1:1": 4}),
                                    _app("b1", "root.b", 1)],
                 [("root.a", 4, 4), ("root.b", 2, 8)])
    assert _per_app(RoundEngine().run(json.dumps(view))) == {"b1": 1}


def test_a_handover_does_not_count_its_gpus_twice_against_the_queue_maximum() -> None:
    # n0 (4 GPUs): a1's container of 2 still runs (its lease ended: grace) on GPUs leased
    # to c1, b1 runs 2 under its lease; n1 (2): b1 runs 1, 1 free. Counted per app, the
    # queue holds 2 + 2 + 2 + 1 = 7 of its maximum 6 and c1, the one app asking, would get
    # nothing while a GPU is free; n0 has 4 GPUs, so the queue holds 4 + 1 = 5
    leases = [_lease(1, "c1", "n0:1", 2), _lease(2, "b1", "n0:1", 2), _lease(3, "b1", "n1:1", 1)]
    apps = [_app("a1", "root.q", running={"n0:1": 2}), _app("b1", "root.q",
                                                            running={"n0:1": 2, "n1:1": 1}),
            _app("c1", "root.q", 3)]
    view = _view([(4, 0), (2, 1)], apps, [("root.q", 6, 6)], leases=leases)
    reply = RoundEngine().run(json.dumps(view))
    assert _per_app(reply) == {"c1": 1}
    assert json.loads(reply)["info"]["queues"]["root.q"]["held_gpus"] == 5


def test_the_outgoing_container_is_what_a_handover_stops_counting() -> None:
    # the same handover, a1 and c1 in two queues (c1 asks 3: 2 for its leased GPUs, 1
    # more): a1's queue holds nothing it has a lease for, c1's queue holds its lease
    leases = [_lease(1, "c1", "n0:1", 2)]
    apps = [_app("a1", "root.a", 1, running={"n0:1": 2}), _app("c1", "root.b", 3)]
    view = _view([(2, 0), (2, 2)], apps, [("root.a", 2, 4), ("root.b", 2, 4)],
                 leases=leases)
    info = json.loads(RoundEngine().run(json.dumps(view)))["info"]["queues"]
    assert info["root.a"]["held_gpus"] == 0 and info["root.b"]["held_gpus"] == 2


def test_gpus_leased_ahead_of_their_holders_lease_end_count_once() -> None:
    # renewal in place: a round leased a1's 2 GPUs on n0 to c1 before a1's lease ends;
    # until then both leases are live and a1's container runs. n1 has 1 free GPU, c1 asks
    # 1 more: the one queue (maximum 4) holds 2 on n0 + 1 on n1, not 5
    leases = [_lease(1, "a1", "n0:1", 2, 1_005_000), _lease(2, "c1", "n0:1", 2, 1_120_000),
              _lease(3, "b1", "n1:1", 1, 1_120_000)]
    apps = [_app("a1", "root.q", running={"n0:1": 2}), _app("b1", "root.q",
                                                            running={"n1:1": 1}),
            _app("c1", "root.q", 3)]
    view = _view([(2, 0), (2, 1)], apps, [("root.q", 4, 4)], leases=leases)
    reply = RoundEngine().run(json.dumps(view))
    assert _per_app(reply) == {"c1": 1}
    assert json.loads(reply)["info"]["queues"]["root.q"]["held_gpus"] == 3


def test_multi_gpu_containers_stay_whole_in_a_queue_share() -> None:
    view = _view([(4, 4), (4, 4)], [_app("a1", "root.a", asks={2: 4}),
                                    _app("b1", "root.b", asks={2: 4})], [A, B])
    grants = _grants(RoundEngine().run(json.dumps(view)))
    assert all(n % 2 == 0 for n in grants.values())
    assert _per_app(RoundEngine().run(json.dumps(view))) == {"a1": 6, "b1": 2}


def test_pick_keeps_a_share_on_few_nodes() -> None:
    gpus = [Gpu(f"m{m}/{i}", f"m{m}", "r") for m, n in enumerate([2, 4, 3]) for i in range(n)]
    picks, rest = pick(gpus, {"q": 3, "p": 4})
    assert {g.machine for g in picks["p"]} == {"m1"}
    assert {g.machine for g in picks["q"]} == {"m2"}
    assert [g.machine for g in rest] == ["m0", "m0"]


def test_shares_go_to_the_queue_furthest_below_its_guarantee() -> None:
    assert shares(4, {"a": 6, "b": 2}, {"a": 0, "b": 0}, {"a": 6, "b": 2}) == {"a": 3, "b": 1}
    assert shares(4, {"a": 6, "b": 2}, {"a": 4, "b": 0}, {"a": 6, "b": 2}) == {"a": 2, "b": 2}
    assert shares(3, {"a": 1, "z": 5}, {}, {"a": 1, "z": 0}) == {"a": 1, "z": 2}


def test_view_errors_name_the_queue() -> None:
    bad = _view([(4, 4)], [_app("a1", "root.x", 1)], [A])
    with pytest.raises(ViewError, match="root.x"):
        parse_view(json.dumps(bad))
    bad = _view([(4, 4)], [_app("a1", "root.a", 1)], [("root.a", 5, 4)])
    with pytest.raises(ViewError, match="guaranteed_gpus <= max_gpus"):
        parse_view(json.dumps(bad))


# ------------------------------------------------------------------ properties

@st.composite
def queued_cluster(draw: st.DrawFn) -> tuple[Json, dict[str, tuple[int, int]]]:
    nodes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    total = sum(nodes)
    nq = draw(st.integers(2, 4))
    weights = draw(st.lists(st.integers(0, 4), min_size=nq, max_size=nq))
    guaranteed = [total * w // max(1, sum(weights)) for w in weights]
    table = {f"root.q{i}": (g, draw(st.integers(g, total))) for i, g in enumerate(guaranteed)}
    apps, used = [], [0] * len(nodes)
    for i in range(draw(st.integers(1, 6))):
        running: dict[str, int] = {}
        for n, size in enumerate(nodes):
            k = draw(st.integers(0, size - used[n]))
            if k:
                running[f"n{n}:1"] = k
                used[n] += k
        apps.append(_app(f"app_{i}", draw(st.sampled_from(sorted(table))),
                         asks=draw(asks), running=running))
    free = [draw(st.integers(0, size - u)) for size, u in zip(nodes, used, strict=True)]
    view = _view(list(zip(nodes, free, strict=True)), apps,
                 [(q, g, m) for q, (g, m) in table.items()],
                 round_id=draw(st.integers(1, 100)))
    return view, table


@settings(max_examples=80, deadline=None)
@given(case=queued_cluster())
def test_no_gpu_twice_no_queue_above_its_maximum_no_app_above_its_ask(
        case: tuple[Json, dict[str, tuple[int, int]]]) -> None:
    view, table = case
    grants = _grants(RoundEngine().run(json.dumps(view)))
    free = {n["node_id"]: n["free_gpus"] for n in view["nodes"]}
    per_node: Counter[str] = Counter()
    for (_, node), n in grants.items():
        per_node[node] += n
    assert all(per_node[n] <= free[n] for n in per_node)
    apps = {a["app_id"]: a for a in view["apps"]}
    got: Counter[str] = Counter()
    for (app, _), n in grants.items():
        got[app] += n
        assert n > 0
    for app, n in got.items():
        assert n <= apps[app]["pending_gpus"]
    for q, (_, limit) in table.items():
        held = sum(sum(a["running_gpus"].values()) for a in apps.values() if a["queue"] == q)
        granted = sum(n for a, n in got.items() if apps[a]["queue"] == q)
        assert granted == 0 or held + granted <= limit


@settings(max_examples=40, deadline=None)
@given(nodes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       weights=st.lists(st.integers(1, 4), min_size=2, max_size=3),
       demand=st.lists(st.integers(0, 12), min_size=3, max_size=3),
       first=st.integers(0, 2), life=st.integers(1, 3), seed=st.integers(0, 99))
def test_a_queue_with_demand_reaches_its_guarantee_once_leases_expire(
        nodes: list[int], weights: list[int], demand: list[int], first: int, life: int,
        seed: int) -> None:
    """Rounds with leases of ``life`` rounds: initially queue ``first`` holds every GPU
    (lent under leases); after ``life`` + 1 rounds every queue holds at least
    min(guarantee, demand) - one app per queue, single-GPU asks."""
    total = sum(nodes)
    names = [f"root.q{i}" for i in range(len(weights))]
    guaranteed = {q: total * w // sum(weights) for q, w in zip(names, weights, strict=True)}
    want = {q: demand[i] for i, q in enumerate(names)}
    owner = names[first % len(names)]
    rng = random.Random(seed)
    # (app/queue, node, gpus, expiry round)
    leases = [(owner, f"n{i}:1", size, rng.randint(1, life)) for i, size in enumerate(nodes)]
    engine = RoundEngine()
    for rnd in range(1, life + 2):
        leases = [x for x in leases if x[3] >= rnd]
        held: Counter[str] = Counter()
        busy: Counter[str] = Counter()
        for q, node, n, _ in leases:
            held[q] += n
            busy[node] += n
        running: dict[str, Counter[str]] = {q: Counter() for q in names}
        for q, node, n, _ in leases:
            running[q][node] += n  # the queue's one app runs a container per leased GPU
        apps = [_app(q, q, max(0, want[q] - held[q]), running=running[q]) for q in names]
        view = _view([(size, size - busy[f"n{i}:1"]) for i, size in enumerate(nodes)], apps,
                     [(q, guaranteed[q], total) for q in names], round_id=rnd)
        for (q, node), n in _grants(engine.run(json.dumps(view))).items():
            leases.append((q, node, n, rnd + rng.randint(1, life)))
    held = Counter()
    for q, _, n, _ in leases:
        held[q] += n
    for q in names:
        assert held[q] >= min(guaranteed[q], want[q]), (q, held, guaranteed, want)


def test_offer_ids_never_repeat_across_rounds() -> None:
    """An AM keys its leases by GPU id: a GPU granted in a later round on the same node must
    not take the id of one the app still holds (it would hide that lease, and its GPU would
    idle). Ids are unique within an offer, differ between rounds (and between two engines
    numbering rounds from 1 again, by the round's time), and keep their node."""
    from themis.yarn.view import node_of

    one = [g.id for g in offer_of(parse_view(json.dumps(_view([(4, 2)], [], round_id=1))))]
    two = [g.id for g in offer_of(parse_view(json.dumps(_view([(4, 2)], [], round_id=2))))]
    assert len(set(one)) == 2 and not set(one) & set(two)
    again = _view([(4, 2)], [], round_id=1)
    again["now_ms"] += 1
    assert not set(one) & {g.id for g in offer_of(parse_view(json.dumps(again)))}
    assert {node_of(g) for g in one + two} == {"n0:1"}
    # the RM still gets per-node counts
    reply = json.loads(grants_json([("a", one), ("a", two[:1])], {}))
    assert reply["grants"] == [{"app_id": "a", "node_id": "n0:1", "gpus": 3}]
