"""Exhaustive reference back-end: tries every assignment. Only for small instances
(tests, conformance suite); refuses problems with more than ``limit`` assignments."""

from __future__ import annotations

from themis.mechanism.solvers.base import PackingProblem, Solution, Solver, SolverError


class BruteForceSolver(Solver):
    name = "bruteforce"

    def __init__(self, limit: int = 2_000_000) -> None:
        self.limit = limit

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        size = 1
        for i, bundles in enumerate(problem.apps):
            if i != excluded:
                size *= len(bundles) + 1
        if size > self.limit:
            raise SolverError(f"bruteforce: {size} assignments exceed the limit {self.limit}")
        n = len(problem.apps)
        best_val = 0.0
        best = [-1] * n
        choice = [-1] * n

        def rec(i: int, used: int, value: float) -> None:
            nonlocal best_val, best
            if i == n:
                if value > best_val + 1e-12:
                    best_val = value
                    best = list(choice)
                return
            choice[i] = -1
            rec(i + 1, used, value)
            if i == excluded:
                return
            for j, b in enumerate(problem.apps[i]):
                if not used & b.mask:
                    choice[i] = j
                    rec(i + 1, used | b.mask, value + b.gain)
            choice[i] = -1

        rec(0, 0, 0.0)
        return Solution(tuple(best), best_val)
