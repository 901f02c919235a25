"""Exact depth-first branch and bound for the proportional-fair set packing.

Pure Python over int bitsets. Apps are branched on in decreasing order of their best
gain; at each node the bound is the current value plus, for every app not yet decided,
its best gain among bundles that do not collide with the GPUs used so far. The incumbent
starts from a greedy packing (or, for the solves without app i, from the optimum with
app i removed, which is feasible). Exact: a node is pruned only when its bound cannot
beat the incumbent by more than a 1e-12 relative tolerance. A node budget guards against
pathological instances: past it the solver raises SolverUnavailable so that callers fall
back to a MILP back-end.
"""

from __future__ import annotations

from collections.abc import Sequence

from themis.arbiter.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverUnavailable,
)


class BranchAndBoundSolver(Solver):
    name = "bnb"

    def __init__(self, node_limit: int = 200_000) -> None:
        self.node_limit = node_limit

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self._solve(problem, excluded, None)

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        base: Solution | None = None
        out = []
        for e in excluded:
            hint = None
            if e is not None and base is not None:
                c = list(base.choice)
                if c[e] >= 0:
                    c[e] = -1
                hint = tuple(c)
            sol = self._solve(problem, e, hint)
            if e is None:
                base = sol
            out.append(sol)
        return out

    def _solve(
        self, problem: PackingProblem, excluded: int | None, hint: tuple[int, ...] | None
    ) -> Solution:
        n = len(problem.apps)
        # Per app: bundles sorted by gain, best first, as (gain, mask, original index).
        apps = []
        for i, bundles in enumerate(problem.apps):
            if i == excluded or not bundles:
                continue
            # Best gain first; among equal gains the earlier bundle (an agent lists its
            # best-placed bundles first, e.g. the GPUs it just held) wins the tie.
            rows = sorted(
                ((b.gain, b.mask, j) for j, b in enumerate(bundles)), key=lambda r: (-r[0], r[2])
            )
            apps.append((i, rows))
        apps.sort(key=lambda a: -a[1][0][0])
        m = len(apps)
        masks = [[r[1] for r in rows] for _, rows in apps]
        gains = [[r[0] for r in rows] for _, rows in apps]

        # Incumbent: the hint, else greedy in branching order.
        best_val = 0.0
        best_pick = [-1] * m
        if hint is not None:
            pos = {i: k for k, (i, _) in enumerate(apps)}
            used = 0
            for i, c in enumerate(hint):
                if c >= 0 and i in pos:
                    k = pos[i]
                    r = next(t for t, row in enumerate(apps[k][1]) if row[2] == c)
                    best_pick[k] = r
                    best_val += gains[k][r]
                    used |= masks[k][r]
        greedy_used = 0
        greedy_val = 0.0
        greedy = [-1] * m
        for k in range(m):
            for r, mk in enumerate(masks[k]):
                if not mk & greedy_used:
                    greedy_used |= mk
                    greedy_val += gains[k][r]
                    greedy[k] = r
                    break
        if greedy_val > best_val:
            best_val, best_pick = greedy_val, greedy

        pick = [-1] * m
        nodes = 0
        tol = 1e-12 * max(1.0, abs(best_val))

        def bound(k: int, used: int) -> float:
            total = 0.0
            for t in range(k, m):
                for r, mk in enumerate(masks[t]):
                    if not mk & used:
                        total += gains[t][r]
                        break
            return total

        def dfs(k: int, used: int, value: float) -> None:
            nonlocal best_val, best_pick, nodes
            nodes += 1
            if nodes > self.node_limit:
                raise SolverUnavailable(f"bnb: node limit {self.node_limit} reached")
            if k == m:
                if value > best_val + tol:
                    best_val = value
                    best_pick = list(pick)
                return
            if value + bound(k, used) <= best_val + tol:
                return
            for r, mk in enumerate(masks[k]):
                if not mk & used:
                    pick[k] = r
                    dfs(k + 1, used | mk, value + gains[k][r])
            pick[k] = -1
            dfs(k + 1, used, value)

        dfs(0, 0, 0.0)
        choice = [-1] * n
        total = 0.0
        for k, r in enumerate(best_pick):
            if r >= 0:
                i, rows = apps[k]
                choice[i] = rows[r][2]
                total += rows[r][0]
        return Solution(tuple(choice), total)
