"""The filter's order of apps holding no GPU in the simulator's Themis policy: the default
``ranked`` (policy ``themis``) and ``served-now`` (policy ``themis-served-now``) key them
by ``served_now_rho``; ``inf`` (policy ``themis-inf``, the paper's reading) passes no key
and draws among them."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from themis.mechanism import round as round_mod
from themis.mechanism.fairness import (
    DEFAULT_STARVATION,
    Starvation,
    best_locality,
    served_now_rho,
)
from themis.sim.cluster import default_cluster
from themis.sim.policies import POLICY_NAMES, RoundContext, make_policy
from themis.sim.policies import themis as themis_mod
from themis.sim.policies.base import check_allocation
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.state import AppState
from themis.sim.synthetic import synthetic


def _ctx(seed: int) -> RoundContext:
    """8 apps, the first 3 holding 2 GPUs each, the others none (apps 3 and 4 held GPUs
    before: returning; 5-7 never did: newcomers); 3 GPUs free."""
    topo = default_cluster(0.125)
    apps = [AppState(a) for a in synthetic(8, seed=seed, max_jobs=3).apps]
    gpus = sorted(topo, key=topo.index)
    for a in apps[:3]:
        for _ in range(min(a.room(), 2)):
            a.held[gpus.pop(0)] = 600.0
    for a in apps[3:5]:
        a.gpu_time = 1200.0
    now = max(a.spec.arrival for a in apps) + 100
    return RoundContext(now, [topo[g] for g in gpus[:3]], topo, apps, random.Random(seed),
                        lambda _a: 2.0, 600.0)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    real = round_mod.run_round

    def spy(*args: Any, **kw: Any) -> round_mod.RoundOutcome:
        out = real(*args, **kw)
        calls.append({"rho": dict(args[1]), "priority": kw.get("priority"),
                      "bidders": out.bidders, "merge": kw.get("merge"),
                      "free": len(args[0])})
        return out

    monkeypatch.setattr(themis_mod, "run_round", spy)
    return calls


@pytest.mark.parametrize("policy", ["themis-served-now", "served-now"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_served_now_keys_starving_apps_and_they_bid_first(
    monkeypatch: pytest.MonkeyPatch, seed: int, policy: str
) -> None:
    """The policy ``themis-served-now`` and ``ThemisPolicy(starvation="served-now")`` alike:
    starving apps rank above every app holding GPUs, by their keys."""
    calls = _spy(monkeypatch)
    ctx = _ctx(seed)
    pol = make_policy(policy) if policy.startswith("themis") else ThemisPolicy(
        starvation=policy)
    assert isinstance(pol, ThemisPolicy) and pol.starvation is Starvation.SERVED_NOW
    alloc = pol.allocate(ctx)
    check_allocation(ctx, alloc)
    (call,) = calls
    starving = {a for a, r in call["rho"].items() if math.isinf(r)}
    assert len(starving) > 1
    by_id = {a.spec.id: a for a in ctx.apps}
    place = lambda n: best_locality(list(ctx.topology.values()), n)  # noqa: E731
    want = {a: served_now_rho(by_id[a].model(), ctx.fairness(a), place) for a in starving}
    assert call["priority"] == pytest.approx(want)
    # the bidders are the starving apps with the largest keys, in that order
    ranked = sorted(starving, key=lambda a: -want[a])
    assert list(call["bidders"]) == ranked[: len(call["bidders"])]
    assert not call["merge"]


@pytest.mark.parametrize("policy", ["themis", "ranked"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranked_ranks_starving_apps_among_all_by_their_keys(
    monkeypatch: pytest.MonkeyPatch, seed: int, policy: str
) -> None:
    """The default policy ``themis`` and ``ThemisPolicy(starvation="ranked")`` alike: a
    starving app that held GPUs before has its key stand for its rho in one ranking with
    the apps holding GPUs; newcomers stay above them all, by their keys."""
    calls = _spy(monkeypatch)
    ctx = _ctx(seed)
    pol = make_policy(policy) if policy.startswith("themis") else ThemisPolicy(starvation=policy)
    assert isinstance(pol, ThemisPolicy) and pol.starvation is Starvation.RANKED
    check_allocation(ctx, pol.allocate(ctx))
    (call,) = calls
    starving = {a for a, r in call["rho"].items() if math.isinf(r)}
    by_id = {a.spec.id: a for a in ctx.apps}
    returning = {a for a in starving if by_id[a].gpu_time > 0}
    assert returning and starving - returning
    assert set(call["merge"]) == returning
    place = lambda n: best_locality(list(ctx.topology.values()), n)  # noqa: E731
    want = {a: served_now_rho(by_id[a].model(), ctx.fairness(a), place) for a in starving}
    assert call["priority"] == pytest.approx(want)
    # one ranking: a starving app's key in place of its +inf, the worst (1-f) kept, then
    # at most one starving bidder per free GPU
    value = {a: want[a] if a in returning else r for a, r in call["rho"].items()}
    ranked = sorted(value, key=lambda a: (-value[a], -want.get(a, -math.inf)))
    keep = ranked[: max(1, math.ceil(0.2 * len(ranked) - 1e-9))]
    over = [a for a in keep if a in starving][call["free"]:]
    assert list(call["bidders"]) == [a for a in keep if a not in over]


@pytest.mark.parametrize("policy", ["themis-inf", "inf"])
def test_inf_passes_no_key(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    """The paper's reading, as the registered policy ``themis-inf`` and as the option."""
    calls = _spy(monkeypatch)
    ctx = _ctx(0)
    pol = make_policy(policy) if policy == "themis-inf" else ThemisPolicy(starvation=policy)
    assert isinstance(pol, ThemisPolicy) and pol.starvation is Starvation.INF
    check_allocation(ctx, pol.allocate(ctx))
    assert calls[0]["priority"] is None
    # the bidders are drawn among the starving apps (all tied at +inf)
    starving = {a for a, r in calls[0]["rho"].items() if math.isinf(r)}
    assert calls[0]["bidders"] and set(calls[0]["bidders"]) <= starving


def test_default_is_served_now_and_bad_names_are_refused() -> None:
    assert DEFAULT_STARVATION is Starvation.RANKED
    assert ThemisPolicy().starvation is Starvation.RANKED
    assert make_policy("themis").starvation is Starvation.RANKED  # type: ignore[attr-defined]
    assert make_policy("themis-served-now").starvation is Starvation.SERVED_NOW  # type: ignore[attr-defined]
    assert ThemisPolicy(starvation=" INF ").starvation is Starvation.INF
    assert "themis-starve" not in POLICY_NAMES and "themis-inf" in POLICY_NAMES
    with pytest.raises(ValueError, match="starvation 'x'"):
        ThemisPolicy(starvation="x")


def _free(*per_machine: int) -> list[Any]:
    from themis.mechanism.topology import Gpu
    return [Gpu(f"m{m}-g{k}", f"m{m}", "r0") for m, n in enumerate(per_machine)
            for k in range(n)]


def test_cap_keeps_as_many_starving_bidders_as_free_gpus_worst_first() -> None:
    rho = {"a": math.inf, "b": math.inf, "c": math.inf, "d": 2.0, "e": 1.0}
    bidders, non = round_mod.cap_starving_bidders(["c", "a", "b", "d"], ["e"], rho, _free(2))
    assert bidders == ["c", "a", "d"] and non == ["e", "b"]
    # enough GPUs for every starving bidder: nothing changes
    assert round_mod.cap_starving_bidders(["c", "a", "d"], ["e"], rho, _free(1, 2)) == (
        ["c", "a", "d"], ["e"])


def test_cap_counts_whole_containers_on_one_machine() -> None:
    """Two starving apps asking 2-GPU containers and 2 free GPUs on one machine: only the
    worse off one bids (both bidding, the winner's payment took all it won and neither got
    a container); on two machines of one free GPU each, neither container fits, so neither
    bids; an app of 1-GPU containers after them still fits on what is left."""
    rho = {"a": math.inf, "b": math.inf, "c": math.inf, "d": 2.0}
    shape = {"a": {2: 1}, "b": {2: 3, 4: 1}, "c": {1: 2}, "d": {2: 1}}
    assert round_mod.cap_starving_bidders(["b", "a", "c", "d"], [], rho, _free(3), shape) == (
        ["b", "c", "d"], ["a"])
    assert round_mod.cap_starving_bidders(["b", "a", "c", "d"], [], rho, _free(1, 1),
                                          shape) == (["c", "d"], ["b", "a"])
    # best fit: b's container goes to the machine of 2, leaving a's room on the one of 4
    assert round_mod.cap_starving_bidders(["b", "a", "c"], [], rho, _free(4, 2),
                                          {"a": {4: 1}, "b": {2: 1}, "c": {1: 1}}) == (
        ["b", "a"], ["c"])


def test_run_round_with_priority_serves_the_worst_starving_app_on_one_gpu() -> None:
    """One free GPU, two starving apps: with the filter key the worse-off one is the only
    starving bidder and wins the GPU whole (sole bidder: c = 1); without it the auction
    would prefer the app with the lower rho once served."""
    from themis.mechanism.bids import Bid, BidTable
    from themis.mechanism.solvers import make_solver
    from themis.mechanism.topology import Gpu

    gpu = Gpu("m0/0", "m0", "r0", "s0")
    # "short" would finish at rho 1.5 with the GPU, "long" at rho 1.1: the auction alone
    # prefers "long" (gain log(rho_ref / 1.1) > log(rho_ref / 1.5))
    tables = {"short": BidTable("short", math.inf, (Bid(("m0/0",), 1.5),)),
              "long": BidTable("long", math.inf, (Bid(("m0/0",), 1.1),))}
    rho = {"short": math.inf, "long": math.inf}

    def run(priority: dict[str, float] | None) -> dict[str, tuple[str, ...]]:
        out = round_mod.run_round([gpu], rho, lambda bs: {b: tables[b] for b in bs},
                                  fairness_knob=0.0, lease_s=60, now=0.0,
                                  solver=make_solver("highs"), rng=random.Random(0),
                                  priority=priority)
        return dict(out.allocation)
    assert run(None) == {"long": ("m0/0",)}
    assert run({"short": 30.0, "long": 2.0}) == {"short": ("m0/0",)}


def test_two_starving_apps_after_one_container_the_worse_off_gets_it() -> None:
    """YARN's shape: two starving apps each asking one 2-GPU container, 2 free GPUs on one
    machine, and an app holding GPUs that asks one too (a non-bidder at f = 0.5). Both
    starving apps bidding, the winner's payment took all it won and the GPUs went to the
    app that held GPUs; capped by containers, the worse-off starving app bids alone and
    gets the container."""
    from themis.mechanism.bids import Bid, BidTable
    from themis.mechanism.solvers import make_solver
    from themis.mechanism.topology import Gpu

    gpus = [Gpu("m0/0", "m0", "r0"), Gpu("m0/1", "m0", "r0")]
    both = ("m0/0", "m0/1")
    tables = {"a": BidTable("a", math.inf, (Bid(both, 1.5),)),
              "b": BidTable("b", math.inf, (Bid(both, 1.2),)),
              "h": BidTable("h", 1.1, (Bid(both, 1.05),))}
    rho = {"a": math.inf, "b": math.inf, "h": 1.1}
    shape = {a: {2: 1} for a in rho}
    out = round_mod.run_round(gpus, rho, lambda bs: {x: tables[x] for x in bs},
                              fairness_knob=0.5, lease_s=60, now=0.0,
                              solver=make_solver("highs"), rng=random.Random(0),
                              priority={"a": 9.0, "b": 3.0}, shape=shape)
    assert out.bidders == ("a",)
    assert dict(out.allocation) == {"a": both}
