"""Starvation-aware filtering (``ThemisPolicy(starvation="served-now")``, policy
``themis-starve``): the filter's secondary key for apps holding no GPU."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from themis.agent.fairness import best_locality, served_now_rho
from themis.arbiter import round as round_mod
from themis.sim.cluster import default_cluster
from themis.sim.policies import RoundContext, make_policy
from themis.sim.policies import themis as themis_mod
from themis.sim.policies.base import check_allocation
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.state import AppState
from themis.sim.synthetic import synthetic


def _ctx(seed: int) -> RoundContext:
    """8 apps, the first 3 holding 2 GPUs each, the others none; 3 GPUs free."""
    topo = default_cluster(0.125)
    apps = [AppState(a) for a in synthetic(8, seed=seed, max_jobs=3).apps]
    gpus = sorted(topo, key=topo.index)
    for a in apps[:3]:
        for _ in range(min(a.room(), 2)):
            a.held[gpus.pop(0)] = 600.0
    now = max(a.spec.arrival for a in apps) + 100
    return RoundContext(now, [topo[g] for g in gpus[:3]], topo, apps, random.Random(seed),
                        lambda _a: 2.0, 600.0)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    real = round_mod.run_round

    def spy(*args: Any, **kw: Any) -> round_mod.RoundOutcome:
        out = real(*args, **kw)
        calls.append({"rho": dict(args[1]), "priority": kw.get("priority"),
                      "bidders": out.bidders})
        return out

    monkeypatch.setattr(themis_mod, "run_round", spy)
    return calls


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_served_now_keys_starving_apps_and_they_bid_first(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    calls = _spy(monkeypatch)
    ctx = _ctx(seed)
    alloc = make_policy("themis-starve").allocate(ctx)
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


def test_inf_passes_no_key_and_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch)
    ThemisPolicy().allocate(_ctx(0))
    assert calls[0]["priority"] is None
    with pytest.raises(ValueError, match="starvation 'x'"):
        ThemisPolicy(starvation="x")
