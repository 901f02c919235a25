"""Pseudo-cost branching of lpbb (themis.mechanism.solvers.branching)."""

from __future__ import annotations

import numpy as np
import pytest

from themis.mechanism.solvers.branching import PseudoCosts, first_choice
from themis.mechanism.solvers.lp_engines import NATIVE_AVAILABLE


def test_before_any_observation_the_first_rule_chooses() -> None:
    x = np.array([0.5, 0.9, 0.3, 1.0])
    gain = np.array([1.0, 10.0, 4.0, 100.0])
    frac = np.array([0, 1, 2])
    # min(x, 1 - x) * gain: 0.5, 1.0, 1.2
    assert first_choice(frac, x, gain) == 2
    assert PseudoCosts(4).choose(frac, x, gain) == 2


def test_the_column_whose_branches_dropped_the_bound_most_is_chosen() -> None:
    pc = PseudoCosts(3)
    pc.observe(0, up=False, change=0.5, drop=0.05)  # 0.1 per unit down
    pc.observe(0, up=True, change=0.5, drop=0.05)
    pc.observe(1, up=False, change=0.5, drop=1.0)  # 2 per unit down
    pc.observe(1, up=True, change=0.5, drop=1.0)
    x = np.array([0.5, 0.5, 0.5])
    gain = np.array([100.0, 1.0, 1.0])  # the first rule would take column 0
    assert pc.choose(np.array([0, 1]), x, gain) == 1
    assert pc.choose(np.array([0]), x, gain) == 0


def test_an_unobserved_column_is_estimated_from_the_observations() -> None:
    pc = PseudoCosts(3)
    pc.observe(0, up=False, change=1.0, drop=1.0)
    pc.observe(0, up=True, change=1.0, drop=3.0)  # means: down 1, up 3
    pc.observe(1, up=False, change=1.0, drop=0.1)
    pc.observe(1, up=True, change=1.0, drop=0.1)  # means now: down 0.55, up 1.55
    x = np.array([0.5, 0.5, 0.5])
    gain = np.ones(3)
    # column 2 (never observed, the means) scores above column 1 and below column 0
    assert pc.choose(np.array([1, 2]), x, gain) == 2
    assert pc.choose(np.array([0, 2]), x, gain) == 0


def test_an_unobserved_column_is_credited_in_proportion_to_its_gain() -> None:
    pc = PseudoCosts(3)
    pc.observe(0, up=False, change=1.0, drop=1.0, gain=2.0)  # 0.5 per unit of gain
    pc.observe(0, up=True, change=1.0, drop=1.0, gain=2.0)
    x = np.array([0.5, 0.5, 0.5])
    gain = np.array([2.0, 1.0, 3.0])
    # column 0 observed: 1 per unit each way; 1 and 2 estimated at 0.5 and 1.5
    assert pc.choose(np.array([0, 1]), x, gain) == 0
    assert pc.choose(np.array([0, 1, 2]), x, gain) == 2


def test_the_score_is_a_product_so_a_one_sided_column_loses() -> None:
    pc = PseudoCosts(2)
    pc.observe(0, up=False, change=1.0, drop=0.0)
    pc.observe(0, up=True, change=1.0, drop=10.0)  # only the up branch moves the bound
    pc.observe(1, up=False, change=1.0, drop=1.0)
    pc.observe(1, up=True, change=1.0, drop=1.0)
    x = np.array([0.5, 0.5])
    assert pc.choose(np.array([0, 1]), x, np.ones(2)) == 1


def test_no_change_no_observation_and_negative_drops_count_as_zero() -> None:
    pc = PseudoCosts(2)
    pc.observe(0, up=True, change=0.0, drop=5.0)
    assert pc.observations == 0
    pc.observe(0, up=True, change=0.5, drop=-1.0)  # a child bound above its parent's
    assert pc.observations == 1 and pc.total[1, 0] == 0.0


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="node counts of the native LP engine")
def test_lpbb_learns_the_costs_and_finds_an_optimum_the_first_rule_cannot() -> None:
    """The 256 x 50 benchmark's seed 5 (in app order): with the first rule alone, lpbb
    gave up on its optimum after 200 nodes (HiGHS' MILP took it over); with the costs
    learnt during the search it proves the optimum within that budget."""
    from themis.mechanism.auction import _gains
    from themis.mechanism.instances import random_instance
    from themis.mechanism.solvers.components import split
    from themis.mechanism.solvers.highs import HighsSolver
    from themis.mechanism.solvers.lpbb import OPTIMUM_BUDGET_FACTOR, LpBranchAndBound

    inst = random_instance(256, 50, seed=5)
    problem, _ = _gains(inst.tables, {g.id: i for i, g in enumerate(inst.offer)})
    part = max(split(problem), key=lambda q: q.problem.n_bundles).problem
    per_solve = 200 // OPTIMUM_BUDGET_FACTOR  # 200 nodes for the optimum's solve
    lp = LpBranchAndBound(per_solve, per_solve)
    got = lp.solve(part)
    assert abs(got.objective - HighsSolver().solve(part).objective) <= 1e-9 * got.objective
    assert lp._last is not None and lp._last[1].pseudo.observations > 0


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="snapshots of the native LP engine")
@pytest.mark.parametrize("cap", [0, 64 << 20])
def test_leave_it_children_restart_from_their_parents_basis_within_the_cap(
    cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from themis.mechanism.solvers import lpbb as lpbb_mod
    from themis.mechanism.solvers.highs import HighsSolver
    from themis.mechanism.solvers.lp_engines import NativeEngine

    from ._instances import auction_problem

    restored: list[int] = []
    real = NativeEngine.restore

    def spy(self: NativeEngine, snap: bytes) -> None:
        restored.append(len(snap))
        real(self, snap)

    monkeypatch.setattr(NativeEngine, "restore", spy)
    monkeypatch.setattr(lpbb_mod, "SNAPSHOT_BYTES", cap)
    problem = auction_problem(256, 50, 5)
    lp = lpbb_mod.LpBranchAndBound()
    got = lp.solve(problem)
    assert lp.nodes > 1  # it branched
    assert abs(got.objective - HighsSolver().solve(problem).objective) <= 1e-9 * got.objective
    assert (len(restored) > 0) == (cap > 0)
