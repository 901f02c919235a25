"""Gurobi back-end through ``gurobipy`` (the paper's solver, section 6.2.3).

The pip wheel carries a size-limited licence (2000 variables/constraints); bigger models
raise GurobiError, which we turn into :class:`SolverUnavailable` so that the automatic
back-end falls back to the open-source one and says so in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverError,
    SolverUnavailable,
    bits,
)

try:  # pragma: no cover - import guard
    import gurobipy as gp

    _HAVE_GUROBI = True
except ImportError:  # pragma: no cover
    _HAVE_GUROBI = False


SMALL_MODEL_BUNDLES = 300
INSTALL = "themis-yarn[gurobi]"  # the extra that provides gurobipy


class GurobiSolver(Solver):
    name = "gurobi"

    def __init__(self) -> None:
        if not _HAVE_GUROBI:
            raise SolverUnavailable("gurobi needs gurobipy, which is not installed: "
                                    f"pip install {INSTALL!r}")
        try:
            self._env = gp.Env(params={"OutputFlag": 0, "Threads": 1})
        except gp.GurobiError as exc:  # no licence at all
            raise SolverUnavailable(f"gurobi: no usable licence ({exc}); gurobipy's pip wheel "
                                    "carries a size-limited one, a full one is named by "
                                    "GRB_LICENSE_FILE; or choose another solver (auto falls "
                                    "back to HiGHS)") from exc
        # the last problem's model: the auction's solves come in one or two calls (and a
        # fallback chain may hand them over one at a time)
        self._last: tuple[PackingProblem, Any, list[tuple[int, int, Any]],
                          dict[int, list[Any]]] | None = None

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.solve_many(problem, [excluded])[0]

    def _build(self, problem: PackingProblem) -> tuple[Any, list[tuple[int, int, Any]],
                                                       dict[int, list[Any]]]:
        m = gp.Model(env=self._env)
        m.Params.MIPGap = 0.0
        m.Params.MIPGapAbs = 1e-9
        # Small set-packing models solve ~2x faster without presolve, cuts and
        # heuristics (measured on 60 simulator auctions, same optima); large ones need
        # them (256 GPUs x 50 apps: p95 1.5 s with, 24 s without; bench_auction.py).
        # Exactness comes from the zero gap, not from these.
        if problem.n_bundles <= SMALL_MODEL_BUNDLES:
            m.Params.Presolve = 0
            m.Params.Cuts = 0
            m.Params.Heuristics = 0
        xs: list[tuple[int, int, Any]] = []
        app_vars: dict[int, list[Any]] = {}
        by_gpu: dict[int, list[Any]] = {}
        for i, bundles in enumerate(problem.apps):
            if not bundles:
                continue
            row = []
            for j, b in enumerate(bundles):
                x = m.addVar(vtype=gp.GRB.BINARY, obj=b.gain)
                xs.append((i, j, x))
                row.append(x)
                for g in bits(b.mask):
                    by_gpu.setdefault(g, []).append(x)
            app_vars[i] = row
            m.addConstr(gp.quicksum(row) <= 1)
        for vs in by_gpu.values():
            if len(vs) > 1:
                m.addConstr(gp.quicksum(vs) <= 1)
        m.ModelSense = gp.GRB.MAXIMIZE
        return m, xs, app_vars

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        """Build the model once and re-solve it per exclusion by fixing the excluded app's
        columns to zero (Gurobi warm-starts from the previous optimum)."""
        if problem.n_bundles == 0:
            return [Solution((-1,) * len(problem.apps), 0.0) for _ in excluded]
        try:
            if self._last is not None and self._last[0] is problem:
                _, m, xs, app_vars = self._last  # the same auction's next solves
            else:
                m, xs, app_vars = self._build(problem)
                self._last = (problem, m, xs, app_vars)
            out = []
            for e in excluded:
                fixed = app_vars.get(e, []) if e is not None else []
                for x in fixed:
                    x.UB = 0.0
                try:
                    m.optimize()
                    if m.Status != gp.GRB.OPTIMAL:
                        raise SolverError(f"gurobi: status {m.Status}")
                    choice = [-1] * len(problem.apps)
                    total = 0.0
                    for i, j, x in xs:
                        if x.X > 0.5:
                            choice[i] = j
                            total += problem.apps[i][j].gain
                    out.append(Solution(tuple(choice), total))
                finally:
                    for x in fixed:
                        x.UB = 1.0
            return out
        except gp.GurobiError as exc:
            self._last = None
            raise SolverUnavailable(f"gurobi: {exc}") from exc
