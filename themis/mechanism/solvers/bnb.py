"""Exact depth-first branch and bound for the proportional-fair set packing.

Pure Python over int bitsets.

* **Independent parts.** Apps are split into connected components (two apps are linked
  when a bundle of one shares a GPU with a bundle of the other); each component is
  solved on its own, and a solve without app i only re-solves i's component (the other
  components' optima do not change).
* **Dominated bundles** are dropped: a bundle that contains another bundle of the same
  app with at least the same gain is never needed.
* **Search.** Apps are branched on in decreasing order of their best gain, bundles in
  decreasing gain (ties: the agent's menu order, so a renewal bundle listed first wins a
  tie). A node is pruned when value + bound cannot beat the incumbent by more than a
  1e-12 relative tolerance; the bound is the smallest of (a) every undecided app's best
  bundle that does not collide with the GPUs used so far, (b) the LP bound of the
  multiple-choice knapsack "undecided apps share the c GPUs still free" (greedy over the
  upper concave hull of each app's (size, gain) points - a table per depth, so O(1) per
  node), and (c) a memo of sub-tree optima per (depth, GPUs still usable by the
  undecided apps). The incumbent starts from a greedy packing (for the solves without
  app i: from the optimum with app i removed, which is feasible).

Exact. A node budget guards against pathological instances: past it the solver raises
SolverUnavailable so that callers fall back to a MILP back-end.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverBudgetExceeded,
    SolverUnavailable,
    node_budget,
    require_budget,
)
from themis.mechanism.solvers.components import components


def capacity_bounds(
    gains: Sequence[Sequence[float]], masks: Sequence[Sequence[int]], n_gpus: int
) -> list[list[float]]:
    """``cap[k][c]``: the LP bound of the multiple-choice knapsack "apps k.. each pick at
    most one bundle, total size <= c" - greedy over the segments of each app's upper
    concave hull of (size, gain) from (0, 0), steepest first. A feasible completion at
    depth k uses disjoint GPUs among those still free, so this bounds it from above."""
    m = len(gains)
    segs: list[list[tuple[float, int]]] = []  # per app: (slope, length)
    for k in range(m):
        best_at: dict[int, float] = {}
        for g, mk in zip(gains[k], masks[k], strict=True):
            size = mk.bit_count()
            if g > best_at.get(size, 0.0):
                best_at[size] = g
        hull: list[tuple[int, float]] = [(0, 0.0)]
        for x, y in sorted(best_at.items()):
            if y <= hull[-1][1]:
                continue  # more GPUs for no more gain: never on the hull
            while len(hull) >= 2:
                (x1, y1), (x2, y2) = hull[-2], hull[-1]
                if (y2 - y1) * (x - x1) <= (y - y1) * (x2 - x1):
                    hull.pop()  # hull[-1] lies on or below the chord hull[-2] -> (x, y)
                else:
                    break
            hull.append((x, y))
        segs.append([((y2 - y1) / (x2 - x1), x2 - x1) for (x1, y1), (x2, y2) in pairwise(hull)])
    out = [[0.0] * (n_gpus + 1) for _ in range(m + 1)]
    pool: list[tuple[float, int]] = []
    for k in range(m - 1, -1, -1):
        pool.extend(segs[k])
        pool.sort(key=lambda t: -t[0])
        row = out[k]
        c = 0
        acc = 0.0
        for slope, length in pool:
            take = min(length, n_gpus - c)
            for _ in range(take):
                c += 1
                acc += slope
                row[c] = acc
            if c >= n_gpus:
                break
        for cc in range(c + 1, n_gpus + 1):
            row[cc] = acc
    return out


class BranchAndBoundSolver(Solver):
    name = "bnb"

    def __init__(self, node_limit: int = 200_000, node_limit_large: int | None = None,
                 max_bundles: int | None = None) -> None:
        self.node_limit = node_limit
        self.node_limit_large = node_limit_large  # see base.node_budget
        # models of more bundles are declined at once (SolverBudgetExceeded): a chain's
        # next back-end takes them
        self.max_bundles = max_bundles
        self.nodes = 0  # nodes explored by the last solve/solve_many (statistics)
        # The last problem solved, its components and their optima (problems are
        # immutable; the auction asks for the optimum, then for the solves without
        # each winner, on the same problem object).
        self._last: (
            tuple[PackingProblem, list[list[int]], list[tuple[dict[int, int], float]]] | None
        ) = None
        # Each app's undominated rows of the last problem: the same for every solve on it
        # (the optimum, then one without each winner)
        self._rows: tuple[PackingProblem, dict[int, list[tuple[float, int, int]]]] | None = None

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.solve_many(problem, [excluded])[0]

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        self.nodes = 0
        if excluded:
            require_budget("bnb", problem, self.node_limit, self.node_limit_large)
            if self.max_bundles is not None and problem.n_bundles > self.max_bundles:
                raise SolverBudgetExceeded(f"bnb: a model of {problem.n_bundles} bundles is "
                                           f"beyond {self.max_bundles}")
        if self._last is not None and self._last[0] is problem:
            _, comps, base = self._last  # the auction's N+1 solves: reuse the optimum
        else:
            comps = components(problem)
            base = [self._solve(problem, members, None) for members in comps]
            self._last = (problem, comps, base)
        comp_of = {i: c for c, members in enumerate(comps) for i in members}
        out: list[Solution] = []
        try:
            self._solve_each(problem, excluded, comps, comp_of, base, out)
        except SolverUnavailable as exc:
            raise type(exc)(str(exc), out) from None
        return out

    def _solve_each(
        self,
        problem: PackingProblem,
        excluded: Sequence[int | None],
        comps: list[list[int]],
        comp_of: dict[int, int],
        base: list[tuple[dict[int, int], float]],
        out: list[Solution],
    ) -> None:
        n = len(problem.apps)
        total = sum(v for _, v in base)
        for e in excluded:
            choice = [-1] * n
            if e is None or e not in comp_of:
                for pick, _ in base:
                    for i, j in pick.items():
                        choice[i] = j
                out.append(Solution(tuple(choice), total))
                continue
            c = comp_of[e]
            hint = dict(base[c][0])
            hint.pop(e, None)
            pick_e, val_e = self._solve(problem, [i for i in comps[c] if i != e], hint)
            for k, (pick, _) in enumerate(base):
                for i, j in (pick_e if k == c else pick).items():
                    choice[i] = j
            others = sum(v for k, (_, v) in enumerate(base) if k != c)
            out.append(Solution(tuple(choice), others + val_e))

    def _solve(
        self, problem: PackingProblem, members: Sequence[int], hint: dict[int, int] | None
    ) -> tuple[dict[int, int], float]:
        """Optimum of the sub-problem of ``members``: (app -> bundle index, value)."""
        apps: list[tuple[int, list[tuple[float, int, int]]]] = []
        if self._rows is None or self._rows[0] is not problem:
            self._rows = (problem, {})
        undominated = self._rows[1]
        for i in members:
            kept = undominated.get(i)
            if kept is None:
                kept = undominated[i] = self._undominated(problem, i)
            if kept:
                apps.append((i, kept))
        if not apps:
            return {}, 0.0
        apps.sort(key=lambda a: -a[1][0][0])
        m = len(apps)
        masks = [[r[1] for r in rows] for _, rows in apps]
        gains = [[r[0] for r in rows] for _, rows in apps]
        suffix = [0.0] * (m + 1)  # best gains of apps k.. summed (ignores conflicts)
        relevant = [0] * (m + 1)  # GPUs any of apps k.. could use
        for k in range(m - 1, -1, -1):
            suffix[k] = suffix[k + 1] + gains[k][0]
            u = 0
            for mk in masks[k]:
                u |= mk
            relevant[k] = relevant[k + 1] | u

        # Incumbent: the hint, else (or if better) greedy in branching order.
        best_val = 0.0
        best_pick = [-1] * m
        if hint:
            pos = {i: k for k, (i, _) in enumerate(apps)}
            for i, c in hint.items():
                k = pos.get(i, -1)
                if k < 0 or c < 0:
                    continue
                for t, row in enumerate(apps[k][1]):
                    if row[2] == c:
                        best_pick[k] = t
                        best_val += row[0]
                        break
                else:  # the hinted bundle was dominated: drop the hint
                    best_val, best_pick = 0.0, [-1] * m
                    break
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
        if greedy_val >= suffix[0]:  # every app got its best bundle: optimal
            return self._result(apps, greedy)
        cap = capacity_bounds(gains, masks, relevant[0].bit_count())

        pick = [-1] * m
        nodes = 0
        limit = node_budget(problem, self.node_limit, self.node_limit_large)
        tol = 1e-12 * max(1.0, abs(best_val))
        memo: dict[tuple[int, int], float] = {}

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
            if k == m:
                if value > best_val + tol:
                    best_val = value
                    best_pick = list(pick)
                return
            key = (k, used & relevant[k])
            ub = memo.get(key)
            if ub is not None and value + ub <= best_val + tol:
                return
            nodes += 1
            if nodes > limit:
                raise SolverBudgetExceeded(f"bnb: node limit {limit} reached")
            if value + cap[k][(relevant[k] & ~used).bit_count()] <= best_val + tol:
                return
            if value + bound(k, used) <= best_val + tol:
                return
            rest = suffix[k + 1]
            nxt = cap[k + 1]
            rel = relevant[k + 1]
            gk = gains[k]
            for r, mk in enumerate(masks[k]):
                if value + gk[r] + rest <= best_val + tol:
                    break  # rows are sorted by gain: no later row can do better
                if mk & used:
                    continue
                u = used | mk
                if value + gk[r] + nxt[(rel & ~u).bit_count()] <= best_val + tol:
                    continue
                pick[k] = r
                dfs(k + 1, u, value + gk[r])
            pick[k] = -1
            dfs(k + 1, used, value)
            # Every completion of this node is now known to be worth at most this.
            sub = best_val - value
            old = memo.get(key)
            memo[key] = sub if old is None or sub < old else old

        try:
            dfs(0, 0, 0.0)
        finally:
            self.nodes += nodes
        return self._result(apps, best_pick)

    @staticmethod
    def _undominated(problem: PackingProblem, i: int) -> list[tuple[float, int, int]]:
        """App ``i``'s bundles as (gain, mask, index), best gain first, without those
        that are a superset of an earlier, no worse bundle."""
        # Best gain first; among equal gains the earlier bundle (an agent lists its
        # best-placed bundles first, e.g. the GPUs it just held) wins the tie.
        rows = sorted(
            ((b.gain, b.mask, j) for j, b in enumerate(problem.apps[i])),
            key=lambda r: (-r[0], r[2]),
        )
        kept: list[tuple[float, int, int]] = []
        for row in rows:
            if not any(k[1] & row[1] == k[1] for k in kept):
                kept.append(row)  # not a superset of an earlier, no worse bundle
        return kept

    @staticmethod
    def _result(
        apps: Sequence[tuple[int, Sequence[tuple[float, int, int]]]], picks: Sequence[int]
    ) -> tuple[dict[int, int], float]:
        out: dict[int, int] = {}
        total = 0.0
        for k, r in enumerate(picks):
            if r >= 0:
                i, rows = apps[k]
                out[i] = rows[r][2]
                total += rows[r][0]
        return out, total
