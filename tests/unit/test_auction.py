"""Partial-allocation auction: Pseudocode 1, the placement example of section 3.1.2, and
properties on random instances."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings

from themis.mechanism.auction import _gains, run_auction
from themis.mechanism.bids import Bid, BidTable, make_bid_table
from themis.mechanism.errors import InvalidBid, InvalidOffer
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.model import AppModel, Job
from themis.mechanism.placement import COMPUTE_INTENSIVE, NETWORK_INTENSIVE
from themis.mechanism.round import distribute_leftover
from themis.mechanism.solvers import make_solver
from themis.mechanism.solvers.base import PackingProblem, Solution
from themis.mechanism.solvers.bruteforce import BruteForceSolver
from themis.mechanism.solvers.components import components
from themis.mechanism.topology import Gpu

from ._instances import auctions, packing_problems

SOLVER = make_solver("highs")


def instance2() -> list[Gpu]:
    """Figure 5, Instance 2: one 4-GPU machine and two 2-GPU machines."""
    return [Gpu(f"big{i}", "big", "r0") for i in range(4)] + [
        Gpu(f"s{m}g{i}", f"small{m}", "r0") for m in range(2) for i in range(2)
    ]


def test_placement_sensitive_app_wins_the_machine_local_gpus() -> None:
    """Section 3.1.2 / Table 1: VGG16 (network-intensive) and Inception-v3 (compute-
    intensive), one 4-GPU job each. The auction must give VGG16 the 4-GPU machine."""
    offer = instance2()
    ctx = FairnessContext(now=3600.0, cluster_gpus=8, n_avg=2.0)
    vgg = AppModel("vgg16", 0.0, [Job("v", 1.0, 1e4, 4)], placement=NETWORK_INTENSIVE)
    inc = AppModel("inception", 0.0, [Job("i", 1.0, 1e4, 4)], placement=COMPUTE_INTENSIVE)
    tables = [make_bid_table(a, [], offer, ctx) for a in (inc, vgg)]
    result = run_auction(offer, tables, SOLVER, random.Random(0))
    assert set(result.proportional_fair["vgg16"]) == {f"big{i}" for i in range(4)}
    assert {g[:2] for g in result.proportional_fair["inception"]} == {"s0", "s1"}
    # Neither app's presence lowers the other's best value, so no hidden payment.
    assert result.kept_fraction == {"vgg16": 1.0, "inception": 1.0}


def test_hidden_payment_matches_pseudocode_line_8() -> None:
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(4)]
    tables = [
        BidTable("a", 4.0, (Bid(("g0",), 2.0), Bid(("g0", "g1"), 1.0))),
        BidTable("b", 3.0, (Bid(("g0", "g1"), 1.5), Bid(("g2", "g3"), 1.6))),
    ]
    r = run_auction(gpus, tables, SOLVER, random.Random(0))
    assert r.proportional_fair == {"a": ("g0", "g1"), "b": ("g2", "g3")}
    # Without a, b would take g0,g1 at 1.5: c_a = (1/1.6) / (1/1.5)
    assert r.kept_fraction["a"] == pytest.approx(1.5 / 1.6)
    assert r.kept_fraction["b"] == 1.0


def test_randomized_rounding_keeps_c_in_expectation() -> None:
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(4)]
    tables = [
        BidTable("a", 4.0, (Bid(("g0",), 2.0), Bid(("g0", "g1"), 1.0))),
        BidTable("b", 3.0, (Bid(("g0", "g1"), 1.5), Bid(("g2", "g3"), 1.6))),
    ]
    kept = [len(run_auction(gpus, tables, SOLVER, random.Random(s)).allocation["a"]) for s in range(400)]
    assert sum(kept) / (2 * len(kept)) == pytest.approx(1.5 / 1.6, abs=0.03)


def test_rounding_in_containers_keeps_c_in_expectation() -> None:
    """An app of 2-GPU containers keeps its 2-GPU bundle whole or not at all, with
    probability c (rounding GPUs and then cutting to containers would keep it with
    probability 2c - 1 = 0.875 here, and c = 0.94)."""
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(4)]
    tables = [
        BidTable("a", 4.0, (Bid(("g0", "g1"), 1.0),)),
        BidTable("b", 3.0, (Bid(("g0", "g1"), 1.5), Bid(("g2", "g3"), 1.6))),
    ]
    kept = [len(run_auction(gpus, tables, SOLVER, random.Random(s), unit={"a": 2})
                .allocation.get("a", ())) for s in range(400)]
    assert set(kept) == {0, 2}
    assert sum(kept) / (2 * len(kept)) == pytest.approx(1.5 / 1.6, abs=0.03)


def test_starving_app_is_served_first() -> None:
    gpus = [Gpu("g0", "m", "r")]
    tables = [
        BidTable("rich", 10.0, (Bid(("g0",), 0.1),)),  # huge finite gain
        BidTable("starving", math.inf, (Bid(("g0",), 50.0),)),
    ]
    r = run_auction(gpus, tables, SOLVER, random.Random(0))
    assert r.proportional_fair == {"starving": ("g0",)}


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ([BidTable("a", 2.0, (Bid(("zz",), 1.0),))], "app 'a', bid #0: GPU 'zz' is not in the offer"),
        ([BidTable("a", 2.0, (Bid(("g0", "g0"), 1.0),))], "appears twice"),
        ([BidTable("a", 2.0, (Bid(("g0",), float("nan")),))], "finite positive"),
        ([BidTable("a", 2.0, (Bid(("g0",), -1.0),))], "finite positive"),
        ([BidTable("a", 2.0, (Bid((), 1.0),))], "empty bundle"),
        ([BidTable("a", 2.0, ()), BidTable("a", 2.0, ())], "duplicate app"),
        ([BidTable("", 2.0, ())], "non-empty"),
        ([BidTable("a", float("nan"), ())], "current rho"),
    ],
)
def test_bad_bids_are_rejected(tables: list[BidTable], message: str) -> None:
    with pytest.raises(InvalidBid, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_auction([Gpu("g0", "m", "r"), Gpu("g1", "m", "r")], tables, SOLVER, random.Random(0))


def test_duplicate_offer_rejected() -> None:
    with pytest.raises(InvalidOffer, match="duplicate"):
        run_auction([Gpu("g0", "m", "r"), Gpu("g0", "m", "r")], [], SOLVER, random.Random(0))


def _values(tables: list[BidTable], alloc: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """Each app's rho for a given allocation (inf if the bundle is not in its menu)."""
    out = {}
    for t in tables:
        bundle = alloc.get(t.app_id)
        if not bundle:
            out[t.app_id] = t.rho_current
        else:
            rhos = [b.rho for b in t.bids if tuple(sorted(b.gpus)) == tuple(sorted(bundle))]
            out[t.app_id] = min(rhos) if rhos else math.inf
    return out


def _feasible(tables: list[BidTable]) -> list[dict[str, tuple[str, ...]]]:
    menus = [[None, *range(len(t.bids))] for t in tables]
    out = []
    for pick in itertools.product(*menus):
        used: set[str] = set()
        alloc: dict[str, tuple[str, ...]] = {}
        ok = True
        for t, c in zip(tables, pick, strict=True):
            if c is None:
                continue
            gs = set(t.bids[c].gpus)
            if used & gs:
                ok = False
                break
            used |= gs
            alloc[t.app_id] = tuple(sorted(gs))
        if ok:
            out.append(alloc)
    return out


def _assert_pe_and_ef(tables: list[BidTable], pf_alloc: dict[str, tuple[str, ...]]) -> None:
    """The proportional-fair step's properties over the declared menus (section 4):

    * Pareto efficiency: no feasible allocation makes an app strictly better off and none
      worse off;
    * envy-freeness as the Nash-welfare optimum guarantees it for indivisible bundles: no two
      apps can swap (or hand over) bundles and raise their joint product 1/(rho_i rho_j) -
      see docs/mechanism.md for why plain EF cannot hold here.
    """
    pf = _values(tables, pf_alloc)
    for alloc in _feasible(tables):
        other = _values(tables, alloc)
        if all(other[a] <= pf[a] + 1e-12 for a in pf):
            assert not any(other[a] < pf[a] - 1e-9 for a in pf)
    for ti, tj in itertools.permutations(tables, 2):
        if math.isinf(pf[ti.app_id]) or math.isinf(pf[tj.app_id]):
            continue
        gi, gj = pf_alloc.get(ti.app_id), pf_alloc.get(tj.app_id)
        swapped = dict(pf_alloc)
        swapped.pop(ti.app_id, None)
        swapped.pop(tj.app_id, None)
        if gj:
            swapped[ti.app_id] = gj
        if gi:
            swapped[tj.app_id] = gi
        v = _values(tables, swapped)
        assert math.log(v[ti.app_id]) + math.log(v[tj.app_id]) >= (
            math.log(pf[ti.app_id]) + math.log(pf[tj.app_id]) - 1e-9
        )


@settings(max_examples=120, deadline=None)
@given(inst=auctions())
def test_properties(inst: tuple[list[Gpu], list[BidTable]]) -> None:
    gpus, tables = inst
    offered = {g.id for g in gpus}
    r = run_auction(gpus, tables, SOLVER, random.Random(7))
    # Disjoint, inside the offer, final within proportional-fair bundle.
    seen: set[str] = set()
    for app, gs in r.allocation.items():
        assert set(gs) <= offered
        assert not seen & set(gs)
        seen |= set(gs)
        assert set(gs) <= set(r.proportional_fair[app])
    for c in r.kept_fraction.values():
        assert 0.0 <= c <= 1.0
    assert set(r.leftover) == offered - seen
    # Objective equals brute force.
    ref = run_auction(gpus, tables, BruteForceSolver(), random.Random(7))
    assert r.objective == pytest.approx(ref.objective, rel=1e-9, abs=1e-9)
    _assert_pe_and_ef(tables, r.proportional_fair)


@settings(max_examples=60, deadline=None)
@given(inst=auctions())
def test_every_gpu_allocated_when_nonbidders_exist(inst: tuple[list[Gpu], list[BidTable]]) -> None:
    gpus, tables = inst
    rng = random.Random(3)
    r = run_auction(gpus, tables, SOLVER, rng)
    left = [g for g in gpus if g.id in set(r.leftover)]
    grants, unused = distribute_leftover(left, ["x", "y"], rng)
    assert unused == ()
    granted = [g for gs in grants.values() for g in gs]
    assert sorted(granted) == sorted(r.leftover)


class _Recording(BruteForceSolver):
    """The exhaustive back-end, recording the problems it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[PackingProblem] = []

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        self.problems.append(problem)
        return super().solve(problem, excluded)


def _whole_problem_kept(gpus: list[Gpu], tables: list[BidTable], seed: int) -> dict[str, float]:
    """c_i of Pseudocode 1 line 8 from N+1 solves of the whole problem (no parts),
    tables in the order run_auction shuffles them to."""
    tables = list(tables)
    random.Random(seed).shuffle(tables)
    problem, _ = _gains(tables, {g.id: i for i, g in enumerate(gpus)})
    ref = BruteForceSolver()
    pf = ref.solve(problem)
    kept = {}
    for i, t in enumerate(tables):
        c = 1.0
        if pf.choice[i] >= 0:
            own = problem.apps[i][pf.choice[i]].gain
            log_c = (pf.objective - own) - ref.solve(problem, i).objective
            c = min(1.0, math.exp(min(0.0, log_c)))
        kept[t.app_id] = c
    return kept


def test_independent_parts_are_solved_alone() -> None:
    # two machines; apps a, b bid on machine 0 only and c, d on machine 1 only: two
    # independent parts, each solved (and re-solved without its winners) on its own
    gpus = [Gpu(f"m{m}g{i}", f"m{m}", "r") for m in range(2) for i in range(2)]
    tables = [
        BidTable("a", 4.0, (Bid(("m0g0",), 2.0), Bid(("m0g0", "m0g1"), 1.0))),
        BidTable("b", 3.0, (Bid(("m0g0", "m0g1"), 1.5), Bid(("m0g1",), 2.5))),
        BidTable("c", 5.0, (Bid(("m1g0",), 2.0),)),
        BidTable("d", 5.0, (Bid(("m1g0", "m1g1"), 1.0),)),
    ]
    solver = _Recording()
    r = run_auction(gpus, tables, solver, random.Random(3))
    assert all(len(components(p)) == 1 and len(p.apps) == 2 for p in solver.problems)
    # a (both GPUs of m0) and d (both of m1) win: per part one solve with everyone and
    # one without its winner
    assert len(solver.problems) == 4
    assert r.proportional_fair == {"a": ("m0g0", "m0g1"), "d": ("m1g0", "m1g1")}
    assert r.kept_fraction == pytest.approx(_whole_problem_kept(gpus, tables, 3))
    assert r.kept_fraction == pytest.approx({"a": 0.5, "b": 1.0, "c": 1.0, "d": 0.4})


def test_an_app_alone_in_its_part_takes_its_first_best_bundle_without_a_solve() -> None:
    # a bids alone on machine 0 with two equally good bundles: it gets the one it lists
    # first (not the first by GPU id), whole (c = 1), and the solver never sees it; b and
    # c share machine 1 and are solved as usual
    gpus = [Gpu(f"m{m}g{i}", f"m{m}", "r") for m in range(2) for i in range(2)]
    tables = [
        BidTable("a", 4.0, (Bid(("m0g1", "m0g0"), 3.0), Bid(("m0g1",), 2.0),
                            Bid(("m0g0",), 2.0))),
        BidTable("b", 3.0, (Bid(("m1g0",), 2.0),)),
        BidTable("c", 5.0, (Bid(("m1g0", "m1g1"), 1.0),)),
    ]
    solver = _Recording()
    r = run_auction(gpus, tables, solver, random.Random(1))
    assert r.proportional_fair["a"] == ("m0g1",)
    assert r.allocation["a"] == ("m0g1",)
    assert r.kept_fraction["a"] == 1.0
    assert solver.problems and all(len(p.apps) == 2 for p in solver.problems)
    assert r.kept_fraction == pytest.approx(_whole_problem_kept(gpus, tables, 1))
    one = run_auction(gpus, tables[:1], solver, random.Random(1))
    assert one.allocation == {"a": ("m0g1",)} and one.kept_fraction == {"a": 1.0}
    assert one.objective == pytest.approx(math.log(4.0 / 2.0))


@settings(max_examples=60, deadline=None)
@given(inst=auctions())
def test_kept_fractions_equal_those_of_the_whole_problem(
    inst: tuple[list[Gpu], list[BidTable]],
) -> None:
    gpus, tables = inst
    r = run_auction(gpus, tables, BruteForceSolver(), random.Random(5))
    assert r.kept_fraction == pytest.approx(_whole_problem_kept(gpus, tables, 5), abs=1e-9)


def _components_by_search(problem: PackingProblem) -> list[list[int]]:
    """Connected components of "two apps name a common GPU", by graph search."""
    named = [0] * len(problem.apps)
    for i, bundles in enumerate(problem.apps):
        for b in bundles:
            named[i] |= b.mask
    left = [i for i, bundles in enumerate(problem.apps) if bundles]
    out = []
    while left:
        part, todo = {left[0]}, [left[0]]
        while todo:
            i = todo.pop()
            for j in left:
                if j not in part and named[i] & named[j]:
                    part.add(j)
                    todo.append(j)
        out.append(sorted(part))
        left = [i for i in left if i not in part]
    return out


@settings(max_examples=200, deadline=None)
@given(problem=packing_problems(max_gpus=10, max_apps=8))
def test_components_are_the_connected_parts_in_order_of_their_first_app(
        problem: PackingProblem) -> None:
    assert components(problem) == _components_by_search(problem)
