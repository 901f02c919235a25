"""Conformance suite every proportional-fair back-end must pass: exact optimum (checked
against exhaustive search), feasibility, exclusion of an app, and degenerate inputs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings

from themis.mechanism.solvers import (
    Bundle,
    PackingProblem,
    Solution,
    Solver,
    SolverUnavailable,
    evaluate,
)
from themis.mechanism.solvers.auto import BACKENDS, CHAINS, make_solver
from themis.mechanism.solvers.bruteforce import BruteForceSolver

from ._instances import packing_problems

# the LP branch and cut once per LP engine (themis.mechanism.solvers.lp_engines)
_LP_ENGINE_VARIANTS = ("lpbb:highs", "lpbb:native")


def _make(name: str) -> Solver:
    if name in _LP_ENGINE_VARIANTS:
        from themis.mechanism.solvers.lpbb import LpBranchAndBound

        return LpBranchAndBound(lp_engine=name.split(":")[1])
    return make_solver(name)


def _backends() -> list[str]:
    names = []
    for name in [*sorted(BACKENDS), *CHAINS, *_LP_ENGINE_VARIANTS]:
        try:
            _make(name)
        except SolverUnavailable:
            continue
        names.append(name)
    return names


@pytest.fixture(params=_backends())
def solver(request: pytest.FixtureRequest) -> Solver:
    return _make(request.param)


def test_open_source_backends_are_always_available() -> None:
    assert {"highs", "bnb", "lpbb", "bruteforce", "open-fast", "lpbb:highs"} <= set(_backends())


def test_the_native_lp_engine_is_built() -> None:
    """pip compiles it (setup.py); without it lpbb silently runs on HiGHS, ~3-9x slower
    per LP - a build that lost it must not pass unnoticed."""
    from themis.mechanism.solvers.lp_engines import NATIVE_AVAILABLE

    assert NATIVE_AVAILABLE, "themis.mechanism.solvers._simplex was not built (C compiler?)"
    assert "lpbb:native" in _backends()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=packing_problems())
def test_optimal_and_feasible(solver: Solver, problem: PackingProblem) -> None:
    ref = BruteForceSolver().solve(problem)
    got = solver.solve(problem)
    assert evaluate(problem, got.choice) == pytest.approx(got.objective, abs=1e-9)
    assert got.objective == pytest.approx(ref.objective, rel=1e-9, abs=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=packing_problems())
def test_exclusion(solver: Solver, problem: PackingProblem) -> None:
    excluded = [None, *range(len(problem.apps))]
    sols = solver.solve_many(problem, excluded)
    for e, sol in zip(excluded, sols, strict=True):
        if e is not None:
            assert sol.choice[e] == -1
        ref = BruteForceSolver().solve(problem, e)
        assert sol.objective == pytest.approx(ref.objective, rel=1e-9, abs=1e-9)


def _resolve_sequence(solver: Solver, problem: PackingProblem) -> list[tuple[int | None, Solution]]:
    """The auction's pattern of re-solves of one problem on one solver (one re-used model
    where the back-end keeps one): the optimum, then without each winner and the optimum
    again in turn (``solve``), then without every app and with none (``solve_many``)."""
    best = solver.solve(problem)
    out: list[tuple[int | None, Solution]] = [(None, best)]
    for w in [i for i, c in enumerate(best.choice) if c >= 0]:
        out += [(w, solver.solve(problem, w)), (None, solver.solve(problem))]
    excluded: list[int | None] = [*range(len(problem.apps)), None]
    return out + list(zip(excluded, solver.solve_many(problem, excluded), strict=True))


def _check_resolves(solver: Solver, problem: PackingProblem) -> None:
    for e, sol in _resolve_sequence(solver, problem):
        ref = BruteForceSolver().solve(problem, e)
        assert sol.objective == pytest.approx(ref.objective, rel=1e-9, abs=1e-9), e
        assert evaluate(problem, sol.choice) == pytest.approx(sol.objective, abs=1e-9), e
        assert e is None or sol.choice[e] == -1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=packing_problems(max_gpus=6))
def test_resolves_on_one_model_match_brute_force(solver: Solver, problem: PackingProblem) -> None:
    _check_resolves(solver, problem)


# Problems on which highspy 1.16.0 returned a worse solution than the optimum it reported
# when a re-used model was solved again: the MIP start (the optimum without an app, or
# the last solution, which HiGHS keeps as the next start) came back in place of the
# optimum (themis.mechanism.solvers.highs.HighsSolver._run)
_B = Bundle
_RESOLVE_TRAPS = [
    PackingProblem(3, ((), (_B(4, 2.02),), (_B(2, 2.89), _B(3, 4.85), _B(4, 2.97)),
                       (_B(1, 1.32), _B(4, 1.28), _B(2, 1.88)))),
    PackingProblem(4, ((_B(9, 4.27),), (_B(1, 3.91), _B(10, 1.01), _B(8, 0.96), _B(1, 4.02)),
                       (_B(9, 4.83), _B(1, 0.72), _B(2, 4.25), _B(4, 1.69)),
                       (_B(8, 0.26), _B(11, 3.05)))),
    PackingProblem(4, ((_B(15, 2.09),), (_B(8, 3.97), _B(2, 3.4)), (_B(13, 3.34), _B(12, 1.64)),
                       (_B(7, 2.32), _B(13, 4.89), _B(4, 1.37)))),
]


@pytest.mark.parametrize("problem", _RESOLVE_TRAPS)
def test_resolves_that_misled_highs_match_brute_force(solver: Solver, problem: PackingProblem) -> None:
    _check_resolves(solver, problem)


def test_empty_and_bundleless(solver: Solver) -> None:
    p = PackingProblem(3, ((), ()))
    assert solver.solve(p).choice == (-1, -1)
    assert solver.solve(p).objective == 0


def test_conflict_prefers_the_larger_total(solver: Solver) -> None:
    # app0 wants {0,1} (3.0) or {0} (1.0); app1 wants {1} (2.5): best is {0}+{1} = 3.5
    p = PackingProblem(2, ((Bundle(0b11, 3.0), Bundle(0b01, 1.0)), (Bundle(0b10, 2.5),)))
    sol = solver.solve(p)
    assert sol.choice == (1, 0)
    assert sol.objective == pytest.approx(3.5)


def test_unknown_solver_lists_valid_names() -> None:
    from themis.mechanism.solvers import SolverError

    with pytest.raises(SolverError, match="valid: auto"):
        make_solver("cplex")


def test_bnb_ties_go_to_the_earlier_bundle_and_parts_are_independent() -> None:
    from themis.mechanism.solvers.bnb import BranchAndBoundSolver
    from themis.mechanism.solvers.components import components

    # app0: two equally good bundles, the later one on a higher mask; app1 and app2 form a
    # separate part (GPUs 4-5) that conflicts internally.
    p = PackingProblem(6, (
        (Bundle(0b0011, 1.0), Bundle(0b1100, 1.0)),
        (Bundle(0b010000, 2.0), Bundle(0b110000, 2.5)),
        (Bundle(0b100000, 1.0),),
    ))
    assert sorted(map(sorted, components(p))) == [[0], [1, 2]]
    s = BranchAndBoundSolver()
    sols = s.solve_many(p, [None, 0, 1, 2])
    assert sols[0].choice == (0, 0, 0)  # app0's tie goes to the agent's first bundle
    for e, sol in zip([None, 0, 1, 2], sols, strict=True):
        ref = BruteForceSolver().solve(p, e)
        assert sol.objective == pytest.approx(ref.objective)
        assert evaluate(p, sol.choice) == pytest.approx(sol.objective)
    assert sols[1].choice[0] == -1 and sols[1].choice[1:] == sols[0].choice[1:]


def _budgeted(name: str) -> Solver:
    if name == "bnb":
        from themis.mechanism.solvers.bnb import BranchAndBoundSolver

        return BranchAndBoundSolver(node_limit=3)
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    return LpBranchAndBound(node_limit=1)


@pytest.mark.parametrize("budgeted", ["bnb", "lpbb"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=packing_problems())
def test_fallback_keeps_the_solves_a_budgeted_backend_finished(
    budgeted: str, problem: PackingProblem
) -> None:
    from themis.mechanism.solvers import FallbackSolver

    chain = FallbackSolver(_budgeted(budgeted), BruteForceSolver(), quiet=True)
    excluded = [None, *range(len(problem.apps))]
    for e, sol in zip(excluded, chain.solve_many(problem, excluded), strict=True):
        assert sol.objective == pytest.approx(BruteForceSolver().solve(problem, e).objective)
        assert e is None or sol.choice[e] == -1


def test_lpbb_branches_on_a_fractional_relaxation() -> None:
    """Three apps, each wanting two of three GPUs (an odd cycle): the LP relaxation is
    worth 1.5 (every bundle at 1/2), the best packing 1. Without cuts the LP branch and
    bound must branch to find it; with a budget of one LP it gives up with
    SolverBudgetExceeded. With cuts, the root's clique cut closes the gap (one node)."""
    from themis.mechanism.solvers.base import SolverBudgetExceeded
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    p = PackingProblem(3, ((Bundle(0b011, 1.0),), (Bundle(0b110, 1.0),), (Bundle(0b101, 1.0),)))
    solver = LpBranchAndBound(root_cut_rounds=0)
    sol = solver.solve(p)
    assert sol.objective == pytest.approx(1.0)
    assert sum(c >= 0 for c in sol.choice) == 1
    assert solver.nodes > 1
    with pytest.raises(SolverBudgetExceeded):
        LpBranchAndBound(node_limit=1, root_cut_rounds=0).solve(p)
    cutting = LpBranchAndBound(node_limit=1)
    assert cutting.solve(p).objective == pytest.approx(1.0)
    assert cutting.nodes == 1 and cutting.cuts >= 1


def test_lpbb_retries_a_solve_without_a_winner_with_the_full_cutting_effort(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A solve without a winner stops cutting early (here: at once) and branches; when
    that exceeds its node budget it is solved again with the full cutting effort, which
    closes this odd triangle at the root, instead of giving up."""
    import themis.mechanism.solvers.lpbb as lpbb

    monkeypatch.setattr(lpbb, "GAP_STALL_ROUNDS", 0)
    triangle = ((Bundle(0b011, 1.0),), (Bundle(0b110, 1.0),), (Bundle(0b101, 1.0),))
    p = PackingProblem(4, (*triangle, (Bundle(0b1000, 1.0),)))  # app 3: a GPU of its own
    solver = lpbb.LpBranchAndBound(node_limit=1)
    (sol,) = solver.solve_many(p, [3])
    assert sol.objective == pytest.approx(1.0) and sol.choice[3] == -1
    assert solver.cuts >= 1


def test_lpbb_solves_the_rest_of_a_problem_patiently_after_one_ran_out_of_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Impatient solves that run out of nodes come in runs (the same fractional points
    reappear without each winner): after the first, the problem's later solves get the
    full cutting effort at once instead of first wasting their impatient budget."""
    import themis.mechanism.solvers.lpbb as lpbb

    monkeypatch.setattr(lpbb, "GAP_STALL_ROUNDS", 0)
    triangle = ((Bundle(0b011, 1.0),), (Bundle(0b110, 1.0),), (Bundle(0b101, 1.0),))
    own = ((Bundle(0b01000, 1.0),), (Bundle(0b10000, 1.0),))  # apps 3, 4: a GPU each
    p = PackingProblem(5, (*triangle, *own))
    calls: list[tuple[int | None, bool]] = []
    solve = lpbb.LpBranchAndBound._solve

    def recording(self: lpbb.LpBranchAndBound, relax: object, excluded: int | None,
                  hint: object, goals: Sequence[float] = (),
                  patient: bool = True) -> Solution:
        calls.append((excluded, patient))
        return solve(self, relax, excluded, hint, goals, patient)  # type: ignore[arg-type]

    monkeypatch.setattr(lpbb.LpBranchAndBound, "_solve", recording)
    solver = lpbb.LpBranchAndBound(node_limit=1)
    sols = solver.solve_many(p, [3, 4])
    assert [s.objective for s in sols] == pytest.approx([2.0, 2.0])
    assert calls == [(3, False), (3, True), (4, True)]


class _Recorder(Solver):
    """A fake back-end that records what it was asked; optionally fails on one app."""

    def __init__(self, name: str, fail_on: int | None = None, budget: bool = True) -> None:
        self.name = name
        self.fail_on = fail_on
        self.budget = budget
        self.asked: list[int | None] = []

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.solve_many(problem, [excluded])[0]

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        from themis.mechanism.solvers.base import SolverBudgetExceeded

        done: list[Solution] = []
        for e in excluded:
            if e == self.fail_on:
                cls = SolverBudgetExceeded if self.budget else SolverUnavailable
                raise cls("too hard", done)
            self.asked.append(e)
            done.append(Solution((-1,) * len(problem.apps), 0.0))
        return done


@pytest.mark.parametrize("budget", [True, False])
def test_fallback_keeps_finished_solves_and_hands_over_the_rest(budget: bool) -> None:
    from themis.mechanism.solvers import FallbackSolver

    p = PackingProblem(1, tuple((Bundle(1, 1.0),) for _ in range(4)))
    primary, fallback = _Recorder("p", fail_on=1, budget=budget), _Recorder("f")
    chain = FallbackSolver(primary, fallback, quiet=True)
    out = chain.solve_many(p, [None, 0, 1, 2, 3])
    assert len(out) == 5
    assert primary.asked == [None, 0] and fallback.asked == [1, 2, 3]
    assert chain.name == "f"


def test_a_primary_that_gave_up_on_a_problem_is_not_asked_about_it_again() -> None:
    """The auction's second call (the solves without each winner) on a problem whose
    proportional-fair solve the primary gave up on goes straight to the fallback; another
    problem is the primary's again."""
    from themis.mechanism.solvers import FallbackSolver

    p = PackingProblem(1, tuple((Bundle(1, 1.0),) for _ in range(3)))
    # the primary fails on the proportional-fair solve (excluded None), the fallback never
    primary, fallback = _Recorder("p", fail_on=None), _Recorder("f", fail_on=-1)
    chain = FallbackSolver(primary, fallback, quiet=True)
    chain.solve_many(p, [None])
    chain.solve_many(p, [0, 1])
    assert primary.asked == [] and fallback.asked == [None, 0, 1]
    q = PackingProblem(1, tuple((Bundle(1, 1.0),) for _ in range(3)))
    chain.solve_many(q, [0])
    assert primary.asked == [0] and chain.name == "p"


def test_a_nested_chain_names_the_backend_that_finished() -> None:
    """The open-fast chain nests one fallback in another: its name is the back-end that
    finished the last call, however deep (the benchmarks report it)."""
    from themis.mechanism.solvers import FallbackSolver

    p = PackingProblem(1, ((Bundle(1, 1.0),), (Bundle(1, 1.0),)))
    inner = FallbackSolver(_Recorder("lp", fail_on=0), _Recorder("milp"), quiet=True)
    chain = FallbackSolver(_Recorder("bb", fail_on=1), inner, quiet=True)
    chain.solve_many(p, [None, 0])
    assert chain.name == "bb"
    chain.solve_many(p, [None, 1])  # bb fails on 1, lp takes it
    assert chain.name == "lp"
    chain.solve_many(p, [1, 0])  # bb fails on 1, lp fails on 0, the MILP finishes
    assert chain.name == "milp"


@pytest.mark.parametrize("budgeted", ["bnb", "lpbb"])
def test_a_zero_budget_for_large_models_hands_them_over_at_once(budgeted: str) -> None:
    from themis.mechanism.solvers.base import LARGE_MODEL_BUNDLES, SolverBudgetExceeded
    from themis.mechanism.solvers.bnb import BranchAndBoundSolver
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    def make() -> Solver:
        if budgeted == "bnb":
            return BranchAndBoundSolver(1000, 0)
        return LpBranchAndBound(1000, 0)

    small = PackingProblem(2, ((Bundle(0b01, 1.0), Bundle(0b11, 1.5)), (Bundle(0b10, 1.0),)))
    assert make().solve(small).objective == pytest.approx(2.0)
    n = LARGE_MODEL_BUNDLES + 1
    large = PackingProblem(n, tuple((Bundle(1 << k, 1.0),) for k in range(n)))
    with pytest.raises(SolverBudgetExceeded):
        make().solve(large)


def test_bnb_declines_models_beyond_its_bundle_limit_before_searching() -> None:
    from themis.mechanism.solvers.base import SolverBudgetExceeded
    from themis.mechanism.solvers.bnb import BranchAndBoundSolver

    p = PackingProblem(4, tuple((Bundle(1 << a, 1.0), Bundle(1 << (a + 1) % 4, 0.5))
                                for a in range(4)))  # 8 bundles
    with pytest.raises(SolverBudgetExceeded, match="8 bundles"):
        BranchAndBoundSolver(1000, max_bundles=7).solve(p)
    solver = BranchAndBoundSolver(1000, max_bundles=8)
    assert solver.solve(p).objective == pytest.approx(BruteForceSolver().solve(p).objective)
