"""Leftover and grants respect container shape: an app asking k-GPU containers is dealt
whole containers, all k GPUs on one machine (YARN places a container on one node), never
a partial one; apps without a shape (the simulator, standalone) are dealt as before."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.round import RoundError, distribute_leftover, run_round
from themis.mechanism.solvers import make_solver
from themis.mechanism.topology import Gpu
from themis.yarn.rounds import RoundEngine
from themis.yarn.view import ViewError, parse_view


def _gpus(free: Sequence[int]) -> list[Gpu]:
    return [Gpu(f"m{m}/{i}", f"m{m}", "r", f"s{i // 2}") for m, n in enumerate(free)
            for i in range(n)]


def _per_machine(ids: Sequence[str]) -> Counter[str]:
    return Counter(g.split("/")[0] for g in ids)


def _decomposes(counts: Sequence[int], ask: Mapping[int, int]) -> bool:
    """Can each machine's count be made of whole containers, all within ``ask``?"""
    sizes = sorted((k for k, n in ask.items() for _ in range(n)), reverse=True)

    def fill(i: int, need: list[int], used: list[bool]) -> bool:
        if i == len(need):
            return True
        if need[i] == 0:
            return fill(i + 1, need, used)
        tried = set()
        for j, k in enumerate(sizes):
            if used[j] or k > need[i] or k in tried:
                continue
            tried.add(k)
            used[j] = True
            need[i] -= k
            if fill(i, need, used):
                return True
            need[i] += k
            used[j] = False
        return False

    return fill(0, list(counts), [False] * len(sizes))


machines = st.lists(st.integers(0, 8), min_size=1, max_size=6)
single = st.tuples(st.integers(1, 4), st.integers(0, 4)).map(lambda t: {t[0]: t[1]})
mixed = st.dictionaries(st.integers(1, 4), st.integers(0, 3), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(free=machines, shapes=st.lists(st.one_of(single, mixed), max_size=4),
       units=st.lists(st.integers(0, 6), max_size=3), seed=st.integers(0, 2**16),
       renew=st.booleans())
def test_shaped_apps_get_whole_containers_on_one_machine(
    free: list[int], shapes: list[dict[int, int]], units: list[int], seed: int, renew: bool
) -> None:
    gpus = _gpus(free)
    shape = {f"s{i}": s for i, s in enumerate(shapes)}
    room = {a: sum(k * n for k, n in s.items()) for a, s in shape.items()}
    room.update({f"u{i}": r for i, r in enumerate(units)})
    apps = sorted(room)
    rng = random.Random(seed)
    previous = {g.id: rng.choice(apps) for g in gpus if apps and rng.random() < 0.5} \
        if renew else None
    grants, unused = distribute_leftover(gpus, apps, random.Random(seed), room, previous,
                                         shape)
    dealt = [g for gs in grants.values() for g in gs]
    assert len(dealt) == len(set(dealt))
    assert sorted([*dealt, *unused]) == sorted(g.id for g in gpus)
    left: dict[str, dict[int, int]] = {}
    for a in apps:
        per = _per_machine(grants.get(a, ()))
        assert sum(per.values()) <= room[a]
        if a in shape:
            if len(shape[a]) == 1:  # the k-GPU rule: a multiple of k on every machine
                ((k, n),) = shape[a].items()
                assert all(c % k == 0 for c in per.values()), (a, k, per)
                left[a] = {k: n - sum(per.values()) // k}
            else:
                assert _decomposes(list(per.values()), shape[a]), (a, shape[a], per)
        else:
            left[a] = {1: room[a] - sum(per.values())}
    # Work conservation: a GPU stays unused only where no container still asked fits.
    for m, idle in _per_machine(unused).items():
        for a, ask in left.items():
            fits = [k for k, n in ask.items() if n > 0 and k <= idle]
            assert not fits, (m, idle, a, ask)


def test_a_two_gpu_container_never_gets_two_single_gpus() -> None:
    gpus = _gpus([1, 1])  # one free GPU on each of two machines
    grants, unused = distribute_leftover(gpus, ["stock"], random.Random(0), {"stock": 2},
                                         shape={"stock": {2: 1}})
    assert grants == {} and unused == ("m0/0", "m1/0")
    grants, unused = distribute_leftover(_gpus([1, 2]), ["stock"], random.Random(0),
                                         {"stock": 2}, shape={"stock": {2: 1}})
    assert grants == {"stock": ("m1/0", "m1/1")} and unused == ("m0/0",)


def test_multi_gpu_containers_are_placed_first_and_tightly() -> None:
    """Whatever the turn order, single GPUs do not break up the machines that 2-GPU
    containers need: the tightest machine first (m1: 2 free), then m0; the unit app gets
    the GPU left over."""
    gpus = _gpus([3, 2])
    for seed in range(20):
        grants, unused = distribute_leftover(
            gpus, ["pair", "one"], random.Random(seed), {"pair": 4, "one": 1},
            shape={"pair": {2: 2}})
        assert _per_machine(grants["pair"]) == {"m0": 2, "m1": 2}
        assert len(grants["one"]) == 1 and unused == ()
    # a single-GPU app first in turn no longer takes one GPU of the only 2-GPU machine
    for seed in range(20):
        grants, unused = distribute_leftover(
            _gpus([1, 2, 1]), ["one", "pair"], random.Random(seed), {"pair": 2, "one": 1},
            shape={"pair": {2: 1}})
        assert grants["pair"] == ("m1/0", "m1/1")


def test_unit_shapes_are_the_plain_rule() -> None:
    """``{1: n}`` is ``room`` n: the simulator and standalone (no shapes) are unchanged."""
    for seed in range(50):
        r = random.Random(seed)
        gpus = _gpus([r.randint(0, 8) for _ in range(r.randint(1, 6))])
        apps = [f"a{i}" for i in range(r.randint(1, 5))]
        room = {a: r.randint(0, 6) for a in apps}
        prev = {g.id: r.choice(apps) for g in gpus if r.random() < 0.3}
        plain = distribute_leftover(gpus, apps, random.Random(seed), room, prev)
        ones = distribute_leftover(gpus, apps, random.Random(seed), room, prev,
                                   shape={a: {1: n} for a, n in room.items()})
        assert plain == ones


def test_round_deals_bidders_bundles_and_shaped_leftover() -> None:
    gpus = _gpus([2, 1, 1])
    out = run_round(gpus, {"stock": 1.0, "other": 1.0}, lambda b: {}, fairness_knob=0.5,
                    lease_s=60.0, now=0.0, solver=make_solver("bnb"), rng=random.Random(3),
                    room={"stock": 2, "other": 4}, shape={"stock": {2: 1}})
    assert _per_machine(out.allocation["stock"]) == {"m0": 2}
    assert sorted(out.allocation["other"]) == ["m1/0", "m2/0"]
    with pytest.raises(RoundError, match="container ask"):
        run_round(gpus, {"x": 1.0}, lambda b: {}, fairness_knob=0.5, lease_s=60.0, now=0.0,
                  solver=make_solver("bnb"), rng=random.Random(0), shape={"x": {0: 1}})


def _view(nodes: Mapping[str, int], apps: Sequence[dict[str, object]]) -> str:
    return json.dumps({
        "round": 1, "now_ms": 0, "fairness_knob": 0.8, "lease_duration_ms": 60000,
        "solver": "bnb",
        "nodes": [{"node_id": n, "host": n.split(":")[0], "rack": "/r", "total_gpus": f,
                   "free_gpus": f} for n, f in nodes.items()],
        "apps": list(apps), "leases": []})


def test_engine_grants_a_two_gpu_ask_both_gpus_of_one_node() -> None:
    """The RM's view carries the asks' shape; every grant to the stock app is whole
    containers on one node (2-GPU nodes, one 2-GPU container asked)."""
    for seed in range(10):
        nodes = {"nm1:8041": 1, "nm2:8141": 2, "nm3:8241": 1}
        view = json.loads(_view(nodes, [
            {"app_id": "application_1_0001", "pending_gpus": 2,
             "asks": [{"gpus_per_container": 2, "containers": 1}]},
            {"app_id": "application_1_0002", "pending_gpus": 1}]))
        view["round"] = seed + 1
        reply = json.loads(RoundEngine().run(json.dumps(view)))
        stock = [g for g in reply["grants"] if g["app_id"] == "application_1_0001"]
        assert stock == [{"app_id": "application_1_0001", "node_id": "nm2:8141", "gpus": 2,
                          "lease_ms": 60000}]


def test_view_asks_are_parsed_and_checked() -> None:
    v = parse_view(_view({"h:1": 2}, [
        {"app_id": "a", "pending_gpus": 5, "asks": [
            {"gpus_per_container": 2, "containers": 2},
            {"gpus_per_container": 1, "containers": 1},
            {"gpus_per_container": 2, "containers": 0}]},
        {"app_id": "b", "pending_gpus": 3}]))
    assert v.apps[0].shape() == {2: 2, 1: 1}
    assert v.apps[1].shape() == {1: 3}
    for bad in ([{"gpus_per_container": 0, "containers": 1}],
                [{"gpus_per_container": 2}], "2x1", [3]):
        with pytest.raises(ViewError, match="asks"):
            parse_view(_view({"h:1": 2}, [{"app_id": "a", "pending_gpus": 1, "asks": bad}]))


def test_a_partial_allocation_keeps_whole_containers() -> None:
    """Partial allocation keeps a fraction c_i of the winning bundle (here about 2/3 of 4
    GPUs on m0); a bidder asking 2-GPU containers is rounded in containers, so it keeps 2
    or 4 GPUs there, never an odd one, both counts occur over the seeds, and no GPU is lost."""
    from themis.mechanism.bids import Bid, BidTable

    gpus = _gpus([4, 4])
    ids = [g.id for g in gpus]
    tables = {"pair": BidTable("pair", 4.0, (Bid(tuple(ids[:4]), 2.0), Bid(tuple(ids), 3.0))),
              "rival": BidTable("rival", 3.0, (Bid(tuple(ids[4:]), 1.5),
                                               Bid(tuple(ids[:2]), 1.0)))}
    counts = set()
    for seed in range(16):
        out = run_round(gpus, {"pair": 4.0, "rival": 3.0, "other": 0.5},
                        lambda bidders: {b: tables[b] for b in bidders}, fairness_knob=0.4,
                        lease_s=60.0, now=0.0, solver=make_solver("bnb"),
                        rng=random.Random(seed), room={"pair": 8, "rival": 4, "other": 8},
                        shape={"pair": {2: 4}})
        assert out.auction is not None and set(out.bidders) == {"pair", "rival"}
        raw = _per_machine(out.auction.allocation.get("pair", ()))
        assert all(c % 2 == 0 for c in raw.values()), (seed, raw)
        assert _per_machine(out.allocation.get("pair", ())) == raw
        counts.add(sum(raw.values()))
        dealt = [g for gs in out.allocation.values() for g in gs]
        assert len(dealt) == len(set(dealt))
        assert sorted([*dealt, *out.unallocated]) == sorted(ids)
    assert counts == {2, 4}, counts


def test_a_bundle_across_machines_is_cut_to_whole_containers() -> None:
    """A 4-GPU bundle of 3 GPUs on m0 and 1 on m1, won whole by an app of 2-GPU containers:
    it keeps 2 GPUs on m0; the odd GPU of each machine goes to the leftover (the
    non-bidder's) instead of idling under the app's lease."""
    from themis.mechanism.bids import Bid, BidTable

    gpus = _gpus([4, 4])
    ids = [g.id for g in gpus]
    bundle = (*ids[:3], ids[4])
    tables = {"pair": BidTable("pair", 4.0, (Bid(bundle, 2.0),))}
    out = run_round(gpus, {"pair": 4.0, "other": 0.5},
                    lambda bidders: {b: tables[b] for b in bidders}, fairness_knob=0.5,
                    lease_s=60.0, now=0.0, solver=make_solver("bnb"), rng=random.Random(0),
                    room={"pair": 8, "other": 8}, shape={"pair": {2: 4}})
    assert out.auction is not None and out.auction.allocation["pair"] == tuple(sorted(bundle))
    assert _per_machine(out.allocation["pair"]) == {"m0": 2}
    assert {ids[2], ids[4]} <= set(out.leftover["other"])
