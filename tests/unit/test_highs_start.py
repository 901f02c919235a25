"""HiGHS' MILP back-end starts each solve without a winner from the optimum without that
app (a feasible point: a lower bound from the outset)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from themis.mechanism.solvers import Solution, SolverError
from themis.mechanism.solvers import highs as highs_module
from themis.mechanism.solvers.highs import HighsSolver, PackingLp, _mip_start
from themis.mechanism.solvers.lpbb import LpBranchAndBound

from ._instances import auction_problem


@pytest.mark.parametrize("seed", [1, 3])
def test_highs_accepts_the_optimum_without_the_app_as_its_start(seed: int) -> None:
    problem = auction_problem(64, 10, seed)
    best = HighsSolver().solve(problem)
    for e in [i for i, c in enumerate(best.choice) if c >= 0][:3]:
        model = PackingLp(problem)
        h = model.highs(integer=True)
        idx = np.array([c for c, (i, _) in enumerate(model.cols) if i == e], dtype=np.int32)
        h.changeColsBounds(len(idx), idx, np.zeros(len(idx)), np.zeros(len(idx)))
        # no search of its own: whatever it reports is the start it accepted
        h.setOptionValue("mip_max_nodes", 0)
        h.setOptionValue("mip_heuristic_effort", 0.0)
        h.setOptionValue("presolve", "off")
        _mip_start(h, model.cols, best.choice, e)
        h.run()
        want = best.objective - problem.apps[e][best.choice[e]].gain
        assert h.getInfo().objective_function_value == pytest.approx(want, rel=1e-12)


def test_the_solves_without_each_winner_start_from_the_optimum_and_stay_exact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = auction_problem(128, 20, 4)
    plain = HighsSolver()
    monkeypatch.setattr(highs_module, "_mip_start", lambda *a: None)
    best = plain.solve(problem)
    winners = [i for i, c in enumerate(best.choice) if c >= 0]
    want = [s.objective for s in plain.solve_many(problem, winners)]
    monkeypatch.undo()
    starts: list[tuple[tuple[int, ...], int]] = []

    def spy(h: object, cols: object, choice: tuple[int, ...], excluded: int) -> None:
        starts.append((tuple(choice), excluded))
        _mip_start(h, cols, choice, excluded)  # type: ignore[arg-type]

    monkeypatch.setattr(highs_module, "_mip_start", spy)
    solver = HighsSolver()
    assert solver.solve(problem).objective == pytest.approx(best.objective, rel=1e-12)
    got = solver.solve_many(problem, winners)
    assert starts == [(best.choice, e) for e in winners]
    assert [s.objective for s in got] == pytest.approx(want, rel=1e-9)
    # a new problem forgets the old optimum: no start before its own is known
    other = auction_problem(64, 10, 2)
    starts.clear()
    solver.solve_many(other, [0])
    assert starts == []


def _short_first(monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """Make HiGHS' first ``times`` runs of a solve hand back an empty packing with the true
    bound (as highspy 1.16 handed back a MIP start with the optimum's value); the presolve
    setting of every run is recorded."""
    real = HighsSolver._optimum
    presolve: list[str] = []

    def short(self: HighsSolver, h: Any, cols: Any, problem: Any) -> tuple[Solution, float]:
        sol, bound = real(self, h, cols, problem)
        presolve.append(h.getOptionValue("presolve")[1])
        if len(presolve) <= times:
            return Solution((-1,) * len(sol.choice), 0.0), bound
        return sol, bound

    monkeypatch.setattr(HighsSolver, "_optimum", short)
    return presolve


def test_a_solution_short_of_its_bound_is_solved_again_without_presolve(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = auction_problem(64, 10, 2)
    want = LpBranchAndBound().solve(problem).objective
    presolve = _short_first(monkeypatch, 1)
    solver = HighsSolver()
    got = solver.solve(problem)
    assert got.objective == pytest.approx(want, rel=1e-12)
    assert presolve == ["choose", "off"]
    assert solver._last is not None
    assert solver._last[1].getOptionValue("presolve")[1] == "choose"  # type: ignore[attr-defined]


def test_a_solution_still_short_of_its_bound_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _short_first(monkeypatch, 2)
    with pytest.raises(SolverError, match="less than its proven bound"):
        HighsSolver().solve(auction_problem(64, 10, 2))
