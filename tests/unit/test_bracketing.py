"""Payments only as exact as the allocation needs (themis.mechanism.auction, point 4):
the rounding thresholds, lpbb's bracketing solves, the chain forwarding them, and the
auction granting exactly the GPUs of the exact payments."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.auction import rounding_thresholds, run_auction
from themis.mechanism.instances import random_instance
from themis.mechanism.solvers import FallbackSolver, make_solver
from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverBudgetExceeded,
    SolverError,
    SolverUnavailable,
    evaluate,
)
from themis.mechanism.solvers.highs import HighsSolver
from themis.mechanism.solvers.lp_engines import NATIVE_AVAILABLE
from themis.mechanism.solvers.lpbb import LpBranchAndBound

from ._instances import auction_problem


def _kept(base: float, value: float, n: int, u: float) -> int:
    """The auction's rounding (run_auction) of c = exp(min(0, base - value))."""
    exact = min(1.0, math.exp(min(0.0, base - value))) * n
    keep = math.floor(exact)
    return keep + (1 if u < exact - keep else 0)


@given(base=st.floats(-50, 50), loss=st.floats(0, 5), n=st.integers(1, 16),
       u=st.floats(0, 1, exclude_max=True))
def test_the_kept_count_is_the_number_of_thresholds_above_the_value(
    base: float, loss: float, n: int, u: float
) -> None:
    value = base + loss  # OPT^-i >= OPT - g_i always (the optimum minus app i)
    ts = rounding_thresholds(base, n, u)
    assert ts == sorted(ts) and len(ts) == n
    above = sum(1 for t in ts if t > value)
    # away from a threshold (ties are a measure-zero tolerance question)
    if all(abs(t - value) > 1e-9 * max(1.0, abs(value)) for t in ts):
        assert _kept(base, value, n, u) == above


def _brackets(thresholds: Sequence[float], v: float, exact: float) -> bool:
    tol = 1e-9 * max(1.0, abs(exact))
    return v <= exact + tol and not any(v + tol < t < exact - tol for t in thresholds)


def _instance_solves(n_gpus: int, n_apps: int, seed: int) -> tuple[
        PackingProblem, Solution, list[int], list[list[float]]]:
    problem = auction_problem(n_gpus, n_apps, seed)
    opt = HighsSolver().solve(problem)
    winners = [i for i, c in enumerate(opt.choice) if c >= 0]
    rng = random.Random(seed)
    thresholds = []
    for i in winners:
        b = problem.apps[i][opt.choice[i]]
        thresholds.append(rounding_thresholds(opt.objective - b.gain, b.mask.bit_count(),
                                              rng.random()))
    return problem, opt, winners, thresholds


@pytest.mark.parametrize("size", [(64, 10), (128, 20)])
@pytest.mark.parametrize("seed", range(4))
def test_lpbb_brackets_each_optimum_without_a_winner(size: tuple[int, int], seed: int) -> None:
    """Every value lpbb returns is feasible, below the exact optimum without the winner
    and in the same bracket of thresholds; some solves stop short of the optimum (else
    the test would not exercise the early stop)."""
    problem, _, winners, thresholds = _instance_solves(*size, seed)
    exact = HighsSolver().solve_many(problem, winners)
    solver = LpBranchAndBound()
    solver.solve(problem)
    got = solver.bracket_many(problem, winners, thresholds)
    for e, ts, sol, ref in zip(winners, thresholds, got, exact, strict=True):
        assert sol.choice[e] == -1
        assert evaluate(problem, sol.choice) == pytest.approx(sol.objective, abs=1e-9)
        assert _brackets(ts, sol.objective, ref.objective), (e, sol.objective, ref.objective, ts)


def test_some_bracketing_solves_stop_short_of_the_optimum() -> None:
    short = 0
    for seed in range(4):
        problem, _, winners, thresholds = _instance_solves(128, 20, seed)
        exact = HighsSolver().solve_many(problem, winners)
        solver = LpBranchAndBound()
        solver.solve(problem)
        got = solver.bracket_many(problem, winners, thresholds)
        short += sum(1 for s, r in zip(got, exact, strict=True)
                     if s.objective < r.objective - 1e-6)
    assert short > 0


def test_dense_thresholds_make_the_bracketing_solve_exact() -> None:
    """With a threshold between every two achievable values, bracketing is solving."""
    problem, _, winners, _ = _instance_solves(64, 10, 1)
    exact = HighsSolver().solve_many(problem, winners)
    solver = LpBranchAndBound()
    solver.solve(problem)
    dense = [[r.objective + k * 1e-4 for k in range(-200, 200)] for r in exact]
    got = solver.bracket_many(problem, winners, dense)
    assert [s.objective for s in got] == pytest.approx([r.objective for r in exact], abs=1e-4)


def test_bracket_many_rejects_misaligned_thresholds() -> None:
    problem, _, winners, thresholds = _instance_solves(64, 10, 0)
    for solver in (LpBranchAndBound(), HighsSolver(), make_solver("open-fast")):
        with pytest.raises(SolverError, match="threshold lists"):
            solver.bracket_many(problem, winners, thresholds[:-1])


class _Bracketer(Solver):
    """Records the threshold lists it is given; gives up (budget) on the solves without
    the apps of ``fail_on``."""

    def __init__(self, fail_on: Sequence[int] = ()) -> None:
        self.fail_on = set(fail_on)
        self.seen: list[tuple[int | None, tuple[float, ...]]] = []
        self.calls = 0

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return Solution((-1,) * len(problem.apps), 0.0)

    def bracket_many(self, problem: PackingProblem, excluded: Sequence[int | None],
                     thresholds: Sequence[Sequence[float]]) -> list[Solution]:
        self.calls += 1
        done: list[Solution] = []
        for e, ts in zip(excluded, thresholds, strict=True):
            if e in self.fail_on:
                raise SolverBudgetExceeded("too hard", done)
            self.seen.append((e, tuple(ts)))
            done.append(self.solve(problem, e))
        return done


def test_the_chain_hands_the_rest_of_the_thresholds_to_the_fallback() -> None:
    p = auction_problem(64, 10, 0)
    primary, fallback = _Bracketer(fail_on=[2]), _Bracketer()
    chain = FallbackSolver(primary, fallback, quiet=True)
    out = chain.bracket_many(p, [0, 1, 2, 3], [[0.0], [1.0], [2.0], [3.0]])
    assert len(out) == 4
    assert primary.seen == [(0, (0.0,)), (1, (1.0,))]
    assert fallback.seen == [(2, (2.0,)), (3, (3.0,))]


class _Resuming(_Bracketer):
    """A primary whose budget failures are per bracketing solve (like lpbb)."""

    resumes_brackets = True


def test_a_resuming_primary_hands_over_only_the_solves_it_fails() -> None:
    p = auction_problem(64, 10, 0)
    primary, fallback = _Resuming(fail_on=[1, 2, 4]), _Bracketer()
    chain = FallbackSolver(primary, fallback, quiet=True)
    th = [[float(e)] for e in range(6)]
    out = chain.bracket_many(p, list(range(6)), th)
    assert len(out) == 6
    assert primary.seen == [(0, (0.0,)), (3, (3.0,)), (5, (5.0,))]
    assert fallback.seen == [(1, (1.0,)), (2, (2.0,)), (4, (4.0,))]
    assert primary.calls == 4  # the first call, then once after each handed-over solve
    assert chain.name == primary.name  # the primary finished the call


def test_a_primary_that_becomes_unavailable_hands_over_the_whole_rest() -> None:
    class _Unavailable(_Resuming):
        def bracket_many(self, problem: PackingProblem, excluded: Sequence[int | None],
                         thresholds: Sequence[Sequence[float]]) -> list[Solution]:
            if self.calls:
                self.calls += 1
                raise SolverUnavailable("licence gone")
            return super().bracket_many(problem, excluded, thresholds)

    p = auction_problem(64, 10, 0)
    primary, fallback = _Unavailable(fail_on=[1]), _Bracketer()
    chain = FallbackSolver(primary, fallback, quiet=True)
    out = chain.bracket_many(p, [0, 1, 2, 3], [[0.0], [1.0], [2.0], [3.0]])
    assert len(out) == 4
    assert primary.seen == [(0, (0.0,))]
    assert fallback.seen == [(1, (1.0,)), (2, (2.0,)), (3, (3.0,))]


def test_lpbb_resumes_brackets_and_bnb_does_not() -> None:
    from themis.mechanism.solvers.bnb import BranchAndBoundSolver

    assert LpBranchAndBound.resumes_brackets and not BranchAndBoundSolver.resumes_brackets
    assert not HighsSolver.resumes_brackets


@pytest.mark.parametrize("bracketing", [True, False])
def test_a_failed_bracketing_solve_does_not_make_the_later_ones_patient(
    bracketing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an impatient bracketing solve runs out of nodes, only that solve is retried
    with the full cutting effort (measured); an exact one makes the later ones patient
    too (measured)."""
    from themis.mechanism.solvers import lpbb as lpbb_mod

    problem, _, winners, thresholds = _instance_solves(64, 10, 0)
    lp = LpBranchAndBound()
    lp.solve(problem)
    calls: list[tuple[int | None, bool]] = []
    real = lpbb_mod.LpBranchAndBound._solve

    def spy(self: LpBranchAndBound, relax: object, excluded: int | None, hint: object,
            goals: Sequence[float] = (), patient: bool = True) -> Solution:
        calls.append((excluded, patient))
        if excluded == winners[0] and not patient:
            raise SolverBudgetExceeded("impatient solve out of nodes")
        return real(self, relax, excluded, hint, goals, patient)  # type: ignore[arg-type]

    monkeypatch.setattr(lpbb_mod.LpBranchAndBound, "_solve", spy)
    if bracketing:
        lp.bracket_many(problem, winners, thresholds)
    else:
        lp.solve_many(problem, winners)
    assert calls[:2] == [(winners[0], False), (winners[0], True)]
    assert [patient for _, patient in calls[2:]] == [not bracketing] * (len(winners) - 1)


@settings(deadline=None, max_examples=12)
@given(seed=st.integers(0, 10_000), size=st.sampled_from([(32, 6), (64, 10), (128, 20)]))
def test_the_auction_grants_exactly_the_gpus_of_the_exact_payments(
    seed: int, size: tuple[int, int]
) -> None:
    inst = random_instance(*size, seed=seed)
    exact = run_auction(inst.offer, inst.tables, make_solver("open-fast"),
                        random.Random(seed), exact_payments=True)
    fast = run_auction(inst.offer, inst.tables, make_solver("open-fast"), random.Random(seed))
    assert fast.allocation == exact.allocation
    assert fast.proportional_fair == exact.proportional_fair
    assert fast.leftover == exact.leftover
    for app, c in fast.kept_fraction.items():
        assert 0.0 <= c <= 1.0
        assert c >= exact.kept_fraction[app] - 1e-9  # from a value <= OPT^-i


@settings(deadline=None, max_examples=10)
@given(seed=st.integers(0, 10_000), size=st.sampled_from([(32, 6), (64, 10)]),
       unit=st.sampled_from([2, 3, 4]))
def test_rounding_in_containers_grants_the_gpus_of_the_exact_payments(
    seed: int, size: tuple[int, int], unit: int
) -> None:
    """Apps of ``unit``-GPU containers are rounded in containers; the bracketing solves
    then bracket over the bundle's containers and still grant exactly what the exact
    payments grant, in whole containers."""
    inst = random_instance(*size, seed=seed)
    units = {t.app_id: unit for t in inst.tables[::2]}  # half the apps, the others 1 GPU
    exact = run_auction(inst.offer, inst.tables, make_solver("open-fast"),
                        random.Random(seed), exact_payments=True, unit=units)
    fast = run_auction(inst.offer, inst.tables, make_solver("open-fast"), random.Random(seed),
                       unit=units)
    assert fast.allocation == exact.allocation
    for app, gs in fast.allocation.items():
        n = len(fast.proportional_fair[app])
        if app in units and n >= unit:
            assert len(gs) % unit == 0, (app, len(gs), n)


class _GivesUpOnOptimum(_Bracketer):
    """A primary that gives up on every proportional-fair solve (excluded None) and
    records what it adopts."""

    def __init__(self) -> None:
        super().__init__()
        self.adopted: list[Solution] = []
        self.exact_calls = 0

    def solve_many(self, problem: PackingProblem,
                   excluded: Sequence[int | None]) -> list[Solution]:
        self.exact_calls += 1
        raise SolverBudgetExceeded("too hard")

    def adopt(self, problem: PackingProblem, optimum: Solution) -> bool:
        self.adopted.append(optimum)
        return True


def test_a_primary_that_adopted_the_fallbacks_optimum_brackets_the_rest() -> None:
    p = auction_problem(64, 10, 0)
    primary, fallback = _GivesUpOnOptimum(), _Bracketer()
    chain = FallbackSolver(primary, fallback, quiet=True)
    opt = chain.solve(p)
    assert primary.adopted == [opt]
    chain.bracket_many(p, [0, 1], [[1.0], [2.0]])
    assert primary.seen == [(0, (1.0,)), (1, (2.0,))] and fallback.seen == []
    # exact solves without a winner still go straight to the fallback
    chain.solve_many(p, [0])
    assert primary.exact_calls == 1


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="node counts of the native LP engine")
def test_the_optimums_solve_gets_a_larger_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 101 of the 256 x 50 benchmark (in app order): lpbb proves its optimum in
    319 nodes, within twice its per-solve budget of 200 (OPTIMUM_BUDGET_FACTOR: HiGHS'
    MILP would take 100+ ms), but not within the budget itself."""
    from themis.mechanism.auction import _gains
    from themis.mechanism.solvers import lpbb as lpbb_mod
    from themis.mechanism.solvers.components import split

    inst = random_instance(256, 50, seed=101)
    problem, _ = _gains(inst.tables, {g.id: i for i, g in enumerate(inst.offer)})
    part = max(split(problem), key=lambda q: q.problem.n_bundles).problem
    assert lpbb_mod.OPTIMUM_BUDGET_FACTOR == 2
    LpBranchAndBound(200, 200).solve(part)
    monkeypatch.setattr(lpbb_mod, "OPTIMUM_BUDGET_FACTOR", 1)
    with pytest.raises(SolverBudgetExceeded):
        LpBranchAndBound(200, 200).solve(part)


def test_lpbb_brackets_from_an_adopted_optimum_where_it_cannot_find_one() -> None:
    """One of the 256 x 50 benchmark's hardest auctions (seed 99, in app order): lpbb
    gives up on the optimum, HiGHS finds it, lpbb adopts it and brackets the solves
    without a winner."""
    from themis.mechanism.auction import _gains
    from themis.mechanism.solvers.components import split

    inst = random_instance(256, 50, seed=99)
    problem, _ = _gains(inst.tables, {g.id: i for i, g in enumerate(inst.offer)})
    part = max(split(problem), key=lambda q: q.problem.n_bundles).problem
    lp = LpBranchAndBound(200, 200)
    with pytest.raises(SolverBudgetExceeded):
        lp.solve(part)
    opt = HighsSolver().solve(part)
    assert lp.adopt(part, opt)
    assert not lp.adopt(auction_problem(64, 10, 0), opt)  # not the problem it gave up on
    winners = [i for i, c in enumerate(opt.choice) if c >= 0][:8]
    rng = random.Random(0)
    thresholds = [rounding_thresholds(opt.objective - part.apps[i][opt.choice[i]].gain,
                                      part.apps[i][opt.choice[i]].mask.bit_count(),
                                      rng.random()) for i in winners]
    got = lp.bracket_many(part, winners, thresholds)
    exact = HighsSolver().solve_many(part, winners)
    for e, ts, sol, ref in zip(winners, thresholds, got, exact, strict=True):
        assert sol.choice[e] == -1
        assert _brackets(ts, sol.objective, ref.objective)
        # the adopted optimum minus the winner is the first incumbent: c_i <= 1
        assert sol.objective >= opt.objective - part.apps[e][opt.choice[e]].gain - 1e-9
