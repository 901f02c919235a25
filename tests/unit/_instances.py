"""Hypothesis strategies for small auction instances (shared by several test modules)."""

from __future__ import annotations

from hypothesis import strategies as st

from themis.mechanism.auction import _gains
from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.instances import random_instance
from themis.mechanism.solvers.base import Bundle, PackingProblem
from themis.mechanism.topology import Gpu


@st.composite
def packing_problems(draw: st.DrawFn, max_gpus: int = 7, max_apps: int = 4) -> PackingProblem:
    n = draw(st.integers(1, max_gpus))
    apps = []
    for _ in range(draw(st.integers(1, max_apps))):
        bundles = []
        for _ in range(draw(st.integers(0, 4))):
            mask = draw(st.integers(1, (1 << n) - 1))
            gain = draw(st.floats(0.01, 5.0, allow_nan=False))
            bundles.append(Bundle(mask, gain))
        apps.append(tuple(bundles))
    return PackingProblem(n, tuple(apps))


@st.composite
def auctions(draw: st.DrawFn, max_gpus: int = 6, max_apps: int = 4) -> tuple[list[Gpu], list[BidTable]]:
    n = draw(st.integers(1, max_gpus))
    gpus = [Gpu(f"g{i}", f"m{i // 2}", f"r{i // 4}") for i in range(n)]
    tables = []
    for a in range(draw(st.integers(1, max_apps))):
        starving = draw(st.booleans()) and draw(st.booleans())
        r0 = float("inf") if starving else draw(st.floats(0.5, 20.0))
        bids = []
        for _ in range(draw(st.integers(0, 3))):
            ids = draw(st.sets(st.sampled_from([g.id for g in gpus]), min_size=1))
            top = 20.0 if starving else r0
            bids.append(Bid(tuple(sorted(ids)), draw(st.floats(0.05, top))))
        tables.append(BidTable(f"a{a}", r0, tuple(bids)))
    return gpus, tables


def auction_problem(n_gpus: int, n_apps: int, seed: int) -> PackingProblem:
    """The packing problem of a random auction instance (real agents' bid tables)."""
    inst = random_instance(n_gpus, n_apps, seed=seed)
    problem, _ = _gains(inst.tables, {g.id: i for i, g in enumerate(inst.offer)})
    return problem
