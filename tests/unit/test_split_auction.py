"""Split auction (themis/mechanism/split.py): each part is a partial-allocation auction.

The property checks of ``test_auction.py::test_properties`` (allocation within the
proportional-fair bundles, optimum equal to exhaustive search, Pareto efficiency, the
Nash-welfare form of envy-freeness) and of Pseudocode 1 line 8 (hidden payments) run
here on the exact auction and on the split auction, whose parts are checked one by one
over their bidders' bids inside them; a strategy-proofness check (misreported rho never
pays) runs on both too."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.auction import AuctionResult, _gains, run_auction
from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.instances import random_instance
from themis.mechanism.round import distribute_leftover
from themis.mechanism.solvers import SplitPolicy, SplitSolver, make_solver
from themis.mechanism.solvers.base import SolverError
from themis.mechanism.solvers.bruteforce import BruteForceSolver
from themis.mechanism.split import SplitPlan, plan_split, restrict_problem
from themis.mechanism.topology import Gpu

from ._instances import auctions
from .test_auction import _assert_pe_and_ef

# splits every auction of at least 2 GPUs into as many parts as it has machines (of 2
# GPUs in ``auctions()``) and bidders allow
EVERYWHERE = SplitPolicy(min_gpus=2, part_gpus=2, min_part_bidders=1, group="machine")
MODES = ["exact", "split"]


def _solver(mode: str) -> BruteForceSolver | SplitSolver:
    return BruteForceSolver() if mode == "exact" else SplitSolver(BruteForceSolver(), EVERYWHERE)


def _plan(mode: str, gpus: list[Gpu], tables: list[BidTable], seed: int) -> SplitPlan | None:
    """The partition run_auction draws with Random(seed): after its shuffle and its
    draws of u_i (docs/mechanism.md, "Split auction")."""
    if mode == "exact":
        return None
    rng = random.Random(seed)
    rng.shuffle(list(tables))
    for _ in tables:
        rng.random()
    return plan_split(gpus, tables, EVERYWHERE, rng)


def _parts(gpus: list[Gpu], tables: list[BidTable], plan: SplitPlan | None
           ) -> list[tuple[list[Gpu], list[BidTable]]]:
    """Each part's offer and bid tables (bids cut to the part); one part when unsplit."""
    if plan is None:
        return [(gpus, tables)]
    return [([g for g in gpus if plan.part_of_gpu[g.id] == p],
             [plan.restrict(t) for t in tables if plan.part_of_app[t.app_id] == p])
            for p in range(plan.n_parts)]


def _restricted_kept(gpus: list[Gpu], tables: list[BidTable], plan: SplitPlan | None,
                     seed: int) -> tuple[float, dict[str, float]]:
    """The optimum and c_i of Pseudocode 1 line 8 by N+1 exhaustive solves of the whole
    (restricted) problem, tables in run_auction's shuffled order."""
    tables = list(tables)
    random.Random(seed).shuffle(tables)
    index = {g.id: i for i, g in enumerate(gpus)}
    problem, origin = _gains(tables, index)
    if plan is not None:
        problem, origin = restrict_problem(problem, origin, tables, index, plan)
    ref = BruteForceSolver()
    pf = ref.solve(problem)
    kept = {}
    for i, t in enumerate(tables):
        c = 1.0
        if pf.choice[i] >= 0:
            own = problem.apps[i][pf.choice[i]].gain
            c = min(1.0, math.exp(min(0.0, (pf.objective - own) - ref.solve(problem, i).objective)))
        kept[t.app_id] = c
    return pf.objective, kept


def _check_part(offer: list[Gpu], tables: list[BidTable], r: AuctionResult) -> None:
    """test_auction.py's PE and EF checks on one part's bidders and bids."""
    ids = {t.app_id for t in tables}
    pf_all = {a: gs for a, gs in r.proportional_fair.items() if a in ids}
    part = {g.id for g in offer}
    for gs in pf_all.values():
        assert set(gs) <= part
    _assert_pe_and_ef(tables, pf_all)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=120, deadline=None)
@given(inst=auctions())
def test_properties_hold_in_every_part(mode: str, inst: tuple[list[Gpu], list[BidTable]]) -> None:
    gpus, tables = inst
    offered = {g.id for g in gpus}
    r = run_auction(gpus, tables, _solver(mode), random.Random(7))
    plan = _plan(mode, gpus, tables, 7)
    # Disjoint, inside the offer, final within the proportional-fair bundle.
    seen: set[str] = set()
    for app, gs in r.allocation.items():
        assert set(gs) <= offered
        assert not seen & set(gs)
        seen |= set(gs)
        assert set(gs) <= set(r.proportional_fair[app])
    assert set(r.leftover) == offered - seen
    assert set(r.kept_fraction) == {t.app_id for t in tables}
    # Optimum and hidden payments: those of exhaustive search (on the bids inside parts).
    objective, kept = _restricted_kept(gpus, tables, plan, 7)
    assert r.objective == pytest.approx(objective, rel=1e-9, abs=1e-9)
    assert r.kept_fraction == pytest.approx(kept, abs=1e-9)
    for offer, part_tables in _parts(gpus, tables, plan):
        _check_part(offer, part_tables, r)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=80, deadline=None)
@given(inst=auctions(), data=st.data())
def test_misreporting_rho_does_not_pay(mode: str, inst: tuple[list[Gpu], list[BidTable]],
                                       data: st.DataObject) -> None:
    """Strategy-proofness of the partial-allocation auction (Cole et al.): app i's true
    value of its share, log c_i + g_i(true rho of its bundle), is largest when it bids
    its true rho. Same bundles, rho misreported. Every app holds GPUs here: the
    starvation constant M is built from every app's reported gains, so an app whose
    presence leaves a starving app unserved (c_i ~ exp(-M)) could raise its c_i by
    lowering its reported gains - a property of the exact auction, not of the split."""
    gpus, tables = inst
    tables = [BidTable(t.app_id, 10.0 if math.isinf(t.rho_current) else t.rho_current, t.bids)
              for t in tables]
    i = data.draw(st.integers(0, len(tables) - 1))
    liar = tables[i]
    lie = BidTable(liar.app_id, liar.rho_current, tuple(
        Bid(b.gpus, b.rho * data.draw(st.floats(0.2, 5.0))) for b in liar.bids))

    def utility(ts: list[BidTable]) -> float:
        r = run_auction(gpus, ts, _solver(mode), random.Random(11), exact_payments=True)
        bundle = r.proportional_fair.get(liar.app_id)
        if not bundle:
            return 0.0
        true_rho = min(b.rho for b in liar.bids if tuple(sorted(b.gpus)) == bundle)
        return math.log(max(r.kept_fraction[liar.app_id], 1e-300)) + math.log(
            liar.rho_current / true_rho)

    lying = [*tables[:i], lie, *tables[i + 1:]]
    assert _plan(mode, gpus, tables, 11) == _plan(mode, gpus, lying, 11)
    assert utility(lying) <= utility(tables) + 1e-9


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=60, deadline=None)
@given(inst=auctions())
def test_every_gpu_allocated_when_nonbidders_exist(
        mode: str, inst: tuple[list[Gpu], list[BidTable]]) -> None:
    gpus, tables = inst
    rng = random.Random(3)
    r = run_auction(gpus, tables, _solver(mode), rng)
    left = [g for g in gpus if g.id in set(r.leftover)]
    grants, unused = distribute_leftover(left, ["x", "y"], rng)
    assert unused == ()
    assert sorted(g for gs in grants.values() for g in gs) == sorted(r.leftover)


def _cross_machine_instance() -> tuple[list[Gpu], list[BidTable]]:
    gpus = [Gpu(f"m{m}g{k}", f"m{m}", "r0") for m in range(2) for k in range(2)]
    tables = [
        BidTable("a", 4.0, (Bid(("m0g0", "m1g0"), 1.0), Bid(("m0g0",), 2.0), Bid(("m1g1",), 3.0))),
        BidTable("b", 4.0, (Bid(("m0g1", "m1g1"), 1.0), Bid(("m1g0",), 2.5), Bid(("m0g1",), 2.5))),
    ]
    return gpus, tables


def test_bundles_across_parts_are_dropped() -> None:
    gpus, tables = _cross_machine_instance()
    policy = SplitPolicy(min_gpus=4, part_gpus=2, min_part_bidders=1, group="machine")
    exact = run_auction(gpus, tables, BruteForceSolver(), random.Random(0))
    assert exact.proportional_fair == {"a": ("m0g0", "m1g0"), "b": ("m0g1", "m1g1")}
    r = run_auction(gpus, tables, SplitSolver(BruteForceSolver(), policy), random.Random(0))
    assert r.solver.endswith("(split: 2 parts)")
    # each app's 2-GPU bundle spans both machines: each keeps one GPU of its own part
    assert sorted(map(len, r.proportional_fair.values())) == [1, 1]
    assert r.objective < exact.objective
    rng = random.Random(0)
    rng.shuffle(list(tables))
    for _ in tables:
        rng.random()
    plan = plan_split(gpus, tables, policy, rng)
    assert plan is not None
    for app, gs in r.proportional_fair.items():
        assert {plan.part_of_gpu[g] for g in gs} == {plan.part_of_app[app]}


def test_below_the_threshold_the_auction_is_the_exact_one() -> None:
    inst = random_instance(64, 10, seed=3)
    solver = SplitSolver(make_solver("open-fast"))  # default policy: splits from 512 GPUs
    rng_split, rng_exact = random.Random(5), random.Random(5)
    a = run_auction(inst.offer, inst.tables, solver, rng_split)
    b = run_auction(inst.offer, inst.tables, make_solver("open-fast"), rng_exact)
    assert (a.allocation, a.proportional_fair, a.kept_fraction, a.leftover, a.objective) == (
        b.allocation, b.proportional_fair, b.kept_fraction, b.leftover, b.objective)
    assert "split" not in a.solver
    assert rng_split.random() == rng_exact.random()  # the round's RNG is left alike


def test_the_split_is_deterministic_given_the_seed() -> None:
    inst = random_instance(128, 40, seed=1)
    policy = SplitPolicy(min_gpus=64, part_gpus=32, min_part_bidders=5)
    solver = SplitSolver(make_solver("open-fast"), policy)
    a = run_auction(inst.offer, inst.tables, solver, random.Random(2))
    b = run_auction(inst.offer, inst.tables, solver, random.Random(2))
    assert "split: 4 parts" in a.solver
    assert (a.allocation, a.kept_fraction, a.leftover) == (b.allocation, b.kept_fraction, b.leftover)
    # the partition depends on the bidders, not on the order of their tables
    assert plan_split(inst.offer, inst.tables, policy, random.Random(3)) == plan_split(
        inst.offer, list(reversed(inst.tables)), policy, random.Random(3))


def test_parts_are_balanced_and_whole_racks() -> None:
    inst = random_instance(1024, 200, seed=0)
    policy = SplitPolicy()
    plan = plan_split(inst.offer, inst.tables, policy, random.Random(0))
    assert plan is not None and plan.n_parts == 4
    sizes = [len(plan.gpus(p)) for p in range(4)]
    biggest_rack = max(sum(g.rack == r for g in inst.offer) for r in {g.rack for g in inst.offer})
    assert max(sizes) - min(sizes) <= biggest_rack
    racks: dict[str, set[int]] = {}
    for g in inst.offer:
        racks.setdefault(g.rack, set()).add(plan.part_of_gpu[g.id])
    assert all(len(ps) == 1 for ps in racks.values())
    count = [sum(p == q for p in plan.part_of_app.values()) for q in range(4)]
    starving = [sum(plan.part_of_app[t.app_id] == q for t in inst.tables
                    if math.isinf(t.rho_current)) for q in range(4)]
    n_starving = sum(math.isinf(t.rho_current) for t in inst.tables)
    assert max(count) <= -(-200 // 4) and max(starving) <= -(-n_starving // 4)


@pytest.mark.parametrize(("gpus", "bidders", "parts"), [
    (256, 100, 1), (511, 200, 1), (512, 100, 2), (1024, 200, 4), (1024, 60, 2),
    (4096, 1000, 16), (4096, 20, 1),
])
def test_policy_parts(gpus: int, bidders: int, parts: int) -> None:
    assert SplitPolicy().parts(gpus, bidders) == parts


def test_split_solver_names() -> None:
    s = make_solver("split:open-fast")
    assert isinstance(s, SplitSolver) and s.policy == SplitPolicy()
    with pytest.raises(SolverError, match="split of a split"):
        make_solver("split:split:open-fast")
    with pytest.raises(SolverError, match="unknown solver"):
        make_solver("split:nope")
    with pytest.raises(SolverError, match="group"):
        SplitPolicy(group="row")  # type: ignore[arg-type]
