"""Conformance suite every proportional-fair back-end must pass: exact optimum (checked
against exhaustive search), feasibility, exclusion of an app, and degenerate inputs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from themis.arbiter.solvers import Bundle, PackingProblem, Solver, SolverUnavailable, evaluate
from themis.arbiter.solvers.auto import BACKENDS, make_solver
from themis.arbiter.solvers.bruteforce import BruteForceSolver

from ._instances import packing_problems


def _backends() -> list[str]:
    names = []
    for name in [*sorted(BACKENDS), "auto", "auto-fast"]:
        try:
            make_solver(name)
        except SolverUnavailable:
            continue
        names.append(name)
    return names


@pytest.fixture(params=_backends())
def solver(request: pytest.FixtureRequest) -> Solver:
    return make_solver(request.param)


def test_open_source_backends_are_always_available() -> None:
    assert {"highs", "bnb", "bruteforce"} <= set(_backends())


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
    from themis.arbiter.solvers import SolverError

    with pytest.raises(SolverError, match="valid: auto"):
        make_solver("cplex")


def test_bnb_ties_go_to_the_earlier_bundle_and_parts_are_independent() -> None:
    from themis.arbiter.solvers.bnb import BranchAndBoundSolver, components

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


@settings(max_examples=25, deadline=None)
@given(problem=packing_problems())
def test_fallback_keeps_the_solves_bnb_finished(problem: PackingProblem) -> None:
    from themis.arbiter.solvers import FallbackSolver
    from themis.arbiter.solvers.bnb import BranchAndBoundSolver

    chain = FallbackSolver(BranchAndBoundSolver(node_limit=3), BruteForceSolver(), quiet=True)
    excluded = [None, *range(len(problem.apps))]
    for e, sol in zip(excluded, chain.solve_many(problem, excluded), strict=True):
        assert sol.objective == pytest.approx(BruteForceSolver().solve(problem, e).objective)
        assert e is None or sol.choice[e] == -1
