"""Conformance suite every policy must pass: disjoint allocations from the free GPUs,
never more than an app's room, work-conserving when demand exists, deterministic."""

from __future__ import annotations

import random

import pytest

from themis.sim.cluster import default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.errors import UnknownPolicy
from themis.sim.metrics import summarize
from themis.sim.policies import POLICY_NAMES, RoundContext, make_policy
from themis.sim.policies.base import check_allocation
from themis.sim.state import AppState
from themis.sim.synthetic import synthetic


def _ctx(seed: int, n_apps: int = 8, scale: float = 0.125) -> RoundContext:
    topo = default_cluster(scale)
    w = synthetic(n_apps, seed=seed, max_jobs=5, successive_halving=True)
    apps = [AppState(a) for a in w.apps]
    rng = random.Random(seed)
    gpus = sorted(topo, key=topo.index)
    # some GPUs already held by some apps
    for a in apps[: n_apps // 2]:
        for _ in range(min(a.room(), 2)):
            if gpus:
                a.held[gpus.pop(rng.randrange(len(gpus)))] = 600.0
    now = max(a.spec.arrival for a in apps) + 100
    free = [topo[g] for g in gpus]
    return RoundContext(now, free, topo, apps, random.Random(seed), lambda _a: 2.0, 600.0)


@pytest.mark.parametrize("name", POLICY_NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_contract(name: str, seed: int) -> None:
    ctx = _ctx(seed)
    alloc = make_policy(name).allocate(ctx)
    check_allocation(ctx, alloc)  # disjoint, from free GPUs, within each app's room
    given = sum(len(v) for v in alloc.values())
    demand = sum(a.room() for a in ctx.apps)
    # work-conserving: all free GPUs go out, or every app's room is filled
    assert given == min(len(ctx.free), demand), (name, given, len(ctx.free), demand)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policy_deterministic_with_seed(name: str) -> None:
    a = make_policy(name).allocate(_ctx(5))
    b = make_policy(name).allocate(_ctx(5))
    assert a == b


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policy_full_small_simulation(name: str) -> None:
    w = synthetic(8, seed=7, max_jobs=4, median_job_h=0.2, successive_halving=True)
    cfg = SimConfig(seed=3, check_invariants=True)
    s1 = summarize(Simulator(default_cluster(0.0625), w, make_policy(name), cfg).run())
    s2 = summarize(Simulator(default_cluster(0.0625), w, make_policy(name), cfg).run())
    assert s1["apps"] == 8
    for k in ("max_rho", "median_rho", "gpu_time_hours", "avg_jct_hours"):
        assert s1[k] == s2[k]


def test_unknown_policy_lists_valid_ones() -> None:
    with pytest.raises(UnknownPolicy, match="valid policies: themis"):
        make_policy("lifo")


def test_check_allocation_rejects_double_grant() -> None:
    ctx = _ctx(0)
    g = ctx.free[0].id
    apps = [a for a in ctx.apps if a.room() > 0]
    with pytest.raises(ValueError, match="twice"):
        check_allocation(ctx, {apps[0].spec.id: (g,), apps[1].spec.id: (g,)})
