"""The baselines admins run (FIFO, fair share) and Gavel's finish-time fairness: hand-built
cases with known answers, the FTF program's optimality, and whole simulations."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.fairness import RemainingTime
from themis.mechanism.topology import Topology
from themis.sim.cluster import build_cluster
from themis.sim.engine import SimConfig, SimResult, Simulator
from themis.sim.policies import make_policy
from themis.sim.policies.base import RoundContext, check_allocation
from themis.sim.policies.gavel import FtfApp, GavelFtfPolicy, Parts, ftf_shares, plan_time
from themis.sim.state import AppState
from themis.sim.synthetic import synthetic
from themis.sim.workload import AppSpec, JobSpec, Workload, single_phase_app


def app(aid: str, arrival: float = 0.0, demand: int = 4, hours: float = 1.0) -> AppSpec:
    """One job of ``demand`` GPUs lasting ``hours`` on them (1 s serial iterations)."""
    return single_phase_app(
        aid, arrival, [(JobSpec(f"{aid}-j", 1.0, demand), hours * 3600 * demand)], "compute"
    )


def ctx_of(topo: Topology, apps: list[AppState], now: float = 0.0) -> RoundContext:
    held = {g for a in apps for g in a.held}
    free = [topo[g] for g in sorted(topo, key=topo.index) if g not in held]
    return RoundContext(now, free, topo, apps, random.Random(0), lambda _a: 1.0, 600.0)


def counts(alloc: dict[str, tuple[str, ...]]) -> dict[str, int]:
    return {a: len(gs) for a, gs in alloc.items()}


# --- FIFO and fair share --------------------------------------------------------------


def test_two_equal_apps_on_four_gpus() -> None:
    topo = build_cluster([(1, [2, 2])], racks=1)
    apps = [AppState(app("a")), AppState(app("b", arrival=1.0))]
    assert counts(make_policy("fairshare").allocate(ctx_of(topo, apps, 2.0))) == {"a": 2, "b": 2}
    assert counts(make_policy("fifo").allocate(ctx_of(topo, apps, 2.0))) == {"a": 4}


def test_fairshare_redistributes_what_a_small_app_cannot_use() -> None:
    topo = build_cluster([(1, [2, 2, 2, 2])], racks=1)  # 8 GPUs
    apps = [AppState(app("a", 0.0, 1)), AppState(app("b", 1.0)), AppState(app("c", 2.0))]
    # equal share 8/3: a can use 1, b and c split the other 7 (the tie goes by arrival)
    alloc = make_policy("fairshare").allocate(ctx_of(topo, apps, 3.0))
    assert counts(alloc) == {"a": 1, "b": 4, "c": 3}


def test_fairshare_counts_held_gpus() -> None:
    topo = build_cluster([(1, [2, 2])], racks=1)
    a, b = AppState(app("a")), AppState(app("b", 1.0))
    ids = sorted(topo, key=topo.index)
    for g in ids[:3]:
        a.held[g] = 600.0  # a still holds 3 leases: the free GPU goes to b
    ctx = ctx_of(topo, [a, b], 2.0)
    assert counts(make_policy("fairshare").allocate(ctx)) == {"b": 1}
    assert counts(make_policy("fifo").allocate(ctx)) == {"a": 1}


def test_fifo_serves_by_arrival_and_renews_expired_leases() -> None:
    topo = build_cluster([(2, [2, 2])], racks=1)  # 8 GPUs on two machines
    late, early = AppState(app("late", 5.0, 4)), AppState(app("early", 1.0, 6))
    ids = sorted(topo, key=topo.index)
    ctx = ctx_of(topo, [late, early], 10.0)
    ctx.previous = {g: "late" for g in ids[4:]}  # late's leases on machine 2 just expired
    alloc = make_policy("fifo").allocate(ctx)
    check_allocation(ctx, alloc)
    assert counts(alloc) == {"early": 6, "late": 2}
    assert set(alloc["late"]) <= set(ids[4:])  # late keeps two of its own GPUs: no restart


# --- Gavel's FTF program ----------------------------------------------------------------


def single(work: float, cap: int) -> Parts:
    return (work, ((cap, work),), ())


def rho_of(a: FtfApp, g: float) -> float:
    return (a.elapsed + plan_time(a.parts, g)) / a.isolated


def test_ftf_equalises_rho_of_a_small_and_a_large_isolated_time() -> None:
    # the same work; a's isolated time is 1000 s, b's 4000 s: rho_a = 4/g, rho_b = 1/g,
    # equal at g_a = 4 g_b on 4 GPUs: 3.2 and 0.8, rho 1.25 (a plain equal split: 2 and 0.5)
    a = FtfApp(single(4000.0, 8), 0.0, 1000.0, 8.0)
    b = FtfApp(single(4000.0, 8), 0.0, 4000.0, 8.0)
    shares, level = ftf_shares([a, b], 4.0)
    assert shares == pytest.approx([3.2, 0.8])
    assert level == pytest.approx(1.25)
    assert rho_of(a, shares[0]) == pytest.approx(rho_of(b, shares[1]))


def test_ftf_counts_the_time_an_app_already_waited() -> None:
    # a arrived 1000 s ago and ran nothing; b just arrived; same work (4000 GPU-s), cap 4,
    # isolated time 2000 s each: 1 + 4/x = 4/(4-x)  =>  x = 2 (sqrt 5 - 1)
    a = FtfApp(single(4000.0, 4), 1000.0, 2000.0, 4.0)
    b = FtfApp(single(4000.0, 4), 0.0, 2000.0, 4.0)
    shares, level = ftf_shares([a, b], 4.0)
    x = 2 * (math.sqrt(5) - 1)
    assert shares == pytest.approx([x, 4 - x])
    assert level == pytest.approx((1000 + 4000 / x) / 2000)


def test_ftf_gives_its_demand_to_an_app_that_cannot_reach_the_level() -> None:
    # c waited so long that even its whole demand leaves it above the others' level: it
    # gets all it can use (rho 3), a and b share the rest equally (lexicographic optimum)
    a = FtfApp(single(3600.0, 8), 0.0, 3600.0, 8.0)
    b = FtfApp(single(3600.0, 8), 0.0, 3600.0, 8.0)
    c = FtfApp(single(3600.0, 1), 7200.0, 3600.0, 1.0)
    shares, _ = ftf_shares([a, b, c], 5.0)
    assert shares == pytest.approx([2.0, 2.0, 1.0])
    assert rho_of(c, 1.0) == pytest.approx(3.0)


def test_ftf_without_contention_gives_every_demand() -> None:
    apps = [FtfApp(single(100.0, 2), 0.0, 50.0, 2.0), FtfApp(single(100.0, 1), 5.0, 100.0, 1.0)]
    assert ftf_shares(apps, 4.0) == ([2.0, 1.0], -math.inf)


def test_plan_time_is_remaining_time_at_integer_gpus() -> None:
    w = synthetic(12, seed=4, max_jobs=8, successive_halving=True)
    for spec in w.apps:
        rt = RemainingTime(AppState(spec).model())
        for g in (1, 2, 3, 5, 8, 17, 64):
            assert plan_time(rt.parts, float(g)) == rt(g)


@st.composite
def ftf_instance(draw: st.DrawFn) -> tuple[list[FtfApp], float]:
    apps = []
    for _ in range(draw(st.integers(1, 8))):
        caps = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4))
        works = [draw(st.floats(10.0, 1e4)) for _ in caps]
        longest: dict[int, float] = {}
        for c, wk in zip(caps, works, strict=True):
            longest[c] = max(longest.get(c, 0.0), wk)
        future = tuple(
            (draw(st.floats(1.0, 4.0)) * wk, wk, draw(st.sampled_from([1, 2])))
            for wk in draw(st.lists(st.floats(10.0, 1e4), max_size=2))
        )
        parts: Parts = (sum(works), tuple(longest.items()), future)
        apps.append(
            FtfApp(parts, draw(st.floats(0.0, 1e4)), draw(st.floats(100.0, 1e5)), float(sum(caps)))
        )
    return apps, float(draw(st.sampled_from([2, 4, 8, 16])))


@settings(max_examples=150, deadline=None)
@given(ftf_instance())
def test_ftf_shares_are_the_lexicographic_min_max(inst: tuple[list[FtfApp], float]) -> None:
    apps, capacity = inst
    shares, level = ftf_shares(apps, capacity)
    assert sum(shares) <= capacity * (1 + 1e-9)
    if level == -math.inf:
        assert shares == [a.demand for a in apps]
        return
    for a, g in zip(apps, shares, strict=True):
        assert 0 < g <= a.demand * (1 + 1e-12)
        r = rho_of(a, g)
        # at the level, or above it only because even its whole demand cannot do better
        assert r == pytest.approx(level, rel=1e-6) or (
            r > level and r == pytest.approx(rho_of(a, a.demand), rel=1e-9)
        )
    # the level is the lowest feasible one: slightly below it the least shares exceed R_C
    below = level * (1 - 1e-6)
    need = 0.0
    for a in apps:
        if rho_of(a, a.demand) > below:
            need += a.demand
            continue
        lo, hi = 0.0, a.demand
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if rho_of(a, mid) <= below else (mid, hi)
        need += hi
    assert need > capacity


# --- Gavel's round mechanism -------------------------------------------------------------


def test_gavel_serves_the_app_furthest_below_its_share() -> None:
    topo = build_cluster([(1, [2, 2])], racks=1)
    a, b = AppState(app("a", 0.0, 4, 10.0)), AppState(app("b", 0.0, 4, 10.0))
    pol = GavelFtfPolicy()
    first = pol.allocate(ctx_of(topo, [a, b], 0.0))
    assert [pol.books[x].share for x in "ab"] == pytest.approx([2.0, 2.0])
    assert counts(first) == {"a": 4}  # equal priorities: by arrival, then id; a takes its room
    a.progress(600.0)  # a ran 600 s on 4 GPUs; b nothing: b's priority is higher now
    b.progress(600.0)
    a.gpu_time = 2400.0
    second = pol.allocate(ctx_of(topo, [a, b], 600.0))
    assert counts(second) == {"b": 4}


def test_gavel_new_app_waits_for_the_next_reset_only_for_leftovers() -> None:
    topo = build_cluster([(1, [2, 2])], racks=1)
    a = AppState(app("a", 0.0, 2, 10.0))
    pol = GavelFtfPolicy()
    pol.allocate(ctx_of(topo, [a], 0.0))
    b = AppState(app("b", 100.0, 4, 10.0))
    alloc = pol.allocate(ctx_of(topo, [a, b], 100.0))  # no reset yet: b not in the shares
    assert "b" not in pol.books and counts(alloc) == {"a": 2, "b": 2}
    idle = GavelFtfPolicy(idle_until_reset=True)
    idle.allocate(ctx_of(topo, [a], 0.0))
    a.held = {g: 600.0 for g in sorted(topo, key=topo.index)[:2]}
    assert idle.allocate(ctx_of(topo, [a, b], 100.0)) == {}  # Gavel's own simulator idles
    later = idle.allocate(ctx_of(topo, [a, b], 100.0 + idle.reset_s))
    assert counts(later) == {"b": 2} and idle.books["b"].share > 0


# --- whole simulations --------------------------------------------------------------------


def run(policy: str, apps: list[AppSpec], topo: Topology) -> dict[str, float]:
    cfg = SimConfig(lease_s=600.0, restart_s=0.0, check_invariants=True)
    r: SimResult = Simulator(topo, Workload(apps), make_policy(policy), cfg).run()
    return {a.id: a.finish for a in r.apps}


def test_a_short_late_app_does_not_wait_behind_a_long_one() -> None:
    topo = build_cluster([(1, [2, 2])], racks=1)
    apps = [app("long", 0.0, 4, 100.0), app("short", 3600.0, 4, 1.0)]
    fifo = run("fifo", apps, topo)
    assert fifo["short"] >= fifo["long"] == pytest.approx(100 * 3600)  # first come first served
    for name in ("gavel", "fairshare"):
        done = run(name, apps, topo)
        assert done["short"] - 3600 < 4 * 3600, name  # starts within a reset + leases
        assert done["long"] == pytest.approx(101 * 3600), name  # work-conserving


def test_gavel_time_slices_two_equal_apps() -> None:
    topo = build_cluster([(1, [2, 2])], racks=1)
    apps = [app("a", 0.0, 4, 10.0), app("b", 0.0, 4, 10.0)]
    fifo = run("fifo", apps, topo)
    assert fifo["a"] == pytest.approx(36000.0) and fifo["b"] == pytest.approx(72000.0)
    gavel = run("gavel", apps, topo)
    # alternating leases: both finish near 20 h (rho ~1 each), not one at 10 h and one at 20
    assert abs(gavel["a"] - gavel["b"]) <= 1200.0 + 1e-6
    assert max(gavel.values()) == pytest.approx(72000.0)
