"""Round-by-round logic (Pseudocode 1 lines 13-23): filtering by f, leftover, grants."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from themis.agent.bids import Bid, BidTable
from themis.arbiter.round import RoundError, distribute_leftover, run_round, select_bidders
from themis.arbiter.solvers import make_solver
from themis.cluster.topology import Gpu


def test_select_keeps_worst_fraction_at_least_one() -> None:
    rhos = {f"a{i}": float(i) for i in range(10)}
    bidders, rest = select_bidders(rhos, 0.8)
    assert bidders == ["a9", "a8"]
    assert len(rest) == 8
    assert select_bidders({"x": 1.0}, 0.8) == (["x"], [])
    assert select_bidders(rhos, 0.0)[0] == [f"a{i}" for i in range(9, -1, -1)]
    assert select_bidders({}, 0.5) == ([], [])


@pytest.mark.parametrize("f", [1.0, -0.1, 2])
def test_bad_knob(f: float) -> None:
    with pytest.raises(RoundError, match="fairness knob"):
        select_bidders({"a": 1.0}, f)


def test_leftover_is_seeded_machine_local_and_respects_room() -> None:
    gpus = [Gpu(f"m{m}g{i}", f"m{m}", "r") for m in range(3) for i in range(2)]
    a = distribute_leftover(gpus, ["x", "y", "z"], random.Random(1))
    b = distribute_leftover(gpus, ["x", "y", "z"], random.Random(1))
    assert a == b
    grants, unused = a
    assert unused == ()
    assert all(len({g[:2] for g in gs}) == 1 for gs in grants.values())
    grants, unused = distribute_leftover(gpus, ["x"], random.Random(1), room={"x": 3})
    assert len(grants["x"]) == 3
    assert len(unused) == 3


def test_round_grants_leases_and_treats_missing_bids_as_nonbidders() -> None:
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(4)]
    rhos = {"slow": 5.0, "late": 4.0, "fine": 0.5}

    def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
        assert bidders == ["slow", "late"]
        return {"slow": BidTable("slow", 5.0, (Bid(("g0", "g1"), 2.0),))}

    out = run_round(
        gpus, rhos, collect, fairness_knob=0.5, lease_s=600.0, now=100.0,
        solver=make_solver("highs"), rng=random.Random(0),
    )
    assert out.bidders == ("slow",)
    assert set(out.nonbidders) == {"fine", "late"}
    assert out.allocation["slow"] == ("g0", "g1")
    assert sorted(g for a in ("fine", "late") for g in out.allocation.get(a, ())) == ["g2", "g3"]
    assert all(g.expiry == 700.0 and g.start == 100.0 for g in out.grants)
    granted = [x for g in out.grants for x in g.gpus]
    assert len(granted) == len(set(granted)) == 4


def test_bad_lease() -> None:
    with pytest.raises(RoundError, match="lease"):
        run_round([], {}, lambda b: {}, fairness_knob=0.8, lease_s=0, now=0,
                  solver=make_solver("highs"), rng=random.Random(0))
