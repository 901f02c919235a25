"""OR-Tools CP-SAT back-end (optional, for comparison; ``pip install 'themis-yarn[cpsat]'``).

CP-SAT needs integer objective coefficients: gains are scaled by 1e9 and rounded, so the
optimum is exact up to ~1e-9 per bundle, within the conformance suite's tolerance."""

from __future__ import annotations

from typing import Any

from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverUnavailable,
    bits,
)

SCALE = 1e9
INSTALL = "themis-yarn[cpsat]"  # the extra that provides OR-Tools


class CpSatSolver(Solver):
    name = "cpsat"

    def __init__(self, workers: int = 1) -> None:
        # OR-Tools bundles its own, older libhighs: load highspy's first, or importing
        # highspy after ortools fails with an undefined symbol.
        from themis.mechanism.solvers import highs as _highs  # noqa: F401

        try:
            from ortools.sat.python import cp_model
        except ImportError as exc:  # pragma: no cover
            raise SolverUnavailable(f"cpsat needs OR-Tools, which does not import ({exc}): "
                                    f"pip install {INSTALL!r}") from exc
        self._cp: Any = cp_model
        self.workers = workers

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        cp = self._cp
        model = cp.CpModel()
        xs: list[tuple[int, int, Any]] = []
        by_gpu: dict[int, list[Any]] = {}
        for i, bundles in enumerate(problem.apps):
            if i == excluded or not bundles:
                continue
            row = []
            for j, b in enumerate(bundles):
                x = model.NewBoolVar(f"x{i}_{j}")
                xs.append((i, j, x))
                row.append(x)
                for g in bits(b.mask):
                    by_gpu.setdefault(g, []).append(x)
            model.AddAtMostOne(row)
        for vs in by_gpu.values():
            if len(vs) > 1:
                model.AddAtMostOne(vs)
        model.Maximize(sum(round(problem.apps[i][j].gain * SCALE) * x for i, j, x in xs))
        solver = cp.CpSolver()
        solver.parameters.num_workers = self.workers
        status = solver.Solve(model)
        if status != cp.OPTIMAL:
            raise SolverUnavailable(f"cpsat: status {solver.StatusName(status)}")
        choice = [-1] * len(problem.apps)
        total = 0.0
        for i, j, x in xs:
            if solver.Value(x):
                choice[i] = j
                total += problem.apps[i][j].gain
        return Solution(tuple(choice), total)
