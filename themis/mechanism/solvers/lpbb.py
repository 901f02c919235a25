"""Exact LP-based branch and cut over the LP relaxation (open source).

The set-packing relaxation of the proportional-fair problem (x in [0, 1]) is tight but
fractional on contested offers: menus list interchangeable placements of equally good
bundles, and the LP mixes them (half-integral points, odd cycles of conflicts). So:

* **Cuts at the root of every solve** (:mod:`themis.mechanism.solvers.cuts`): clique,
  {0, 1/2}-, odd-cycle and mod-k (k = 3, 5, 7) cuts are separated and added to the LP
  until none is violated or the bound stops moving. They are valid for every integer
  point, so they stay in the LP for the auction's other solves of the same problem
  (measured: the root LP closes the gap of most 256-GPU x 50-app auctions and of the
  symmetric 20-bidder rounds of ``bench_rounds``, where branching on columns alone
  needed thousands of LPs).
  Plus a *count cut* on the starving apps of ``PackingProblem.starving``: the number of
  them served is at most K, the exact maximum of the small cardinality problem found by
  a search over classes of apps with the same menu (:meth:`_Relaxation.max_served`) - the
  LP can serve all 20 starving apps of a round (an integral number) when the menus allow
  only 19 - or floor(v) for v the certified LP maximum when that search runs out of
  budget.
* **LP per node.** One LP per problem, re-solved with changed column bounds
  (warm-started dual simplex: our compiled engine, or HiGHS, see
  :mod:`themis.mechanism.solvers.lp_engines`). A node fixes some columns to 1 (their app's
  other columns and every column sharing a GPU with them are fixed to 0) and some to 0.
* **Certified bounds.** The solver's numbers are never trusted for pruning: from the LP's
  row duals y (clipped to >= 0), weak duality gives our own upper bound of the node,
  ``sum(y * rhs) + sum over columns of max(d_c lo_c, d_c hi_c)`` with reduced gains
  ``d = gain - A^T y`` (cut rows included) - valid for any y >= 0. A node is pruned when
  that bound cannot beat the incumbent by more than 1e-9 (relative), the conformance
  tolerance.
* **Incumbents.** Greedy rounding of every LP solution (columns by decreasing x), and for
  the auction's solves without app i the proportional-fair optimum minus app i.
* **Solves without a winner** start from the optimum's root basis (saved by the LP engine
  once the optimum's root cuts are in; the cuts added since get basic slacks), so only
  the excluded app's columns change - not also the previous solve's app. And they fix
  columns by reduced cost: with the certified bound U of a node and its reduced gains d
  (both from the same duals y >= 0), forcing a free column c to 1 bounds the node by
  U + d_c, so a column at 0 in the node's LP point with U + d_c <= incumbent (+ the
  pruning tolerance) is set to 0 in that node and its subtree. Not in the optimum's
  solve: there it would change which of equally good allocations is kept (its value
  alone matters in the other solves).
* **Branching** on pseudo-costs learnt over the problem's solves (the fractional column
  whose branches are expected to drop the bound most, :mod:`branching`); the "take it"
  child first (depth first).

A node budget (and an integral LP optimum that the dual bound cannot certify, a numerical
corner case) raise :class:`SolverUnavailable`, so that the automatic chain hands the rest
of the solves to a MILP back-end.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverBudgetExceeded,
    SolverError,
    SolverUnavailable,
    node_budget,
    require_aligned,
    require_budget,
)
from themis.mechanism.solvers.branching import PseudoCosts
from themis.mechanism.solvers.cardinality import MaxServed
from themis.mechanism.solvers.cuts import MOD_K, Row, conflict_matrix, separate
from themis.mechanism.solvers.highs import PackingLp, require_highs
from themis.mechanism.solvers.lp_engines import ENGINES, make_engine, weak_duality_bound

INTEGRAL_TOL = 1e-6  # an LP value this close to 0 or 1 counts as integral
RTOL = 1e-9  # optimality tolerance (relative), as the conformance suite's
ROOT_CUT_ROUNDS = 40  # separation rounds at the root of each solve
NODE_CUT_ROUNDS = 0  # ... at the other nodes
STALL_ROUNDS = 10  # stop separating after this many rounds that barely moved the bound
STALL_GAIN = 1e-7  # "barely": by less than this (relative)
# ... or, in an impatient solve, after this many rounds each closing less than this
# fraction of the gap to the incumbent (a point the cuts only nibble at: branch)
GAP_STALL_ROUNDS = 5
GAP_STALL = 0.02
# an impatient solve's node budget (then: patient, full budget); 25 before reduced-cost
# fixing made branching cheaper - measured then: the simulator's 165 heaviest auctions
# 10.0 s with 25, 7.8 s with 100, same results; 256 x 50 unchanged (bench/RESULTS.md)
IMPATIENT_NODES = 100
# The optimum's solve gets this many times the per-solve budget: when lpbb gives up on
# it, HiGHS' MILP takes 50-350 ms at 256 x 50, where lpbb's nodes cost 0.2-0.5 ms
# (bench/RESULTS.md, "Design choices, measured")
OPTIMUM_BUDGET_FACTOR = 2
# Basis snapshots (one per node on the stack, ~8 k^2 bytes for k basic columns: up to
# ~1.2 MB at 1024 GPUs x 200 apps) are kept up to this many bytes per solve; past it, a
# node starts from the current basis
SNAPSHOT_BYTES = 64 << 20
# Budget of the exact count of starving apps (max_served). Counts that finish take few
# nodes (at most 5 in the Workload-2 simulation's 29, at most 9 on 256-GPU x 100-bidder
# rounds), while one that cannot finish - 100 starving bidders in 52-78 classes of menus,
# every lease ending together - burns its whole budget at some 18 us a node before K falls
# back to floor(v): 20,000 nodes cost 0.37 s of each such auction (bench/RESULTS.md, "500
# registered apps on 256 GPUs").
COUNT_NODE_LIMIT = 2_000


def _target(goals: Sequence[float], value: float) -> float:
    """What a node's bound must beat to matter: the incumbent ``value`` in an exact solve
    (no ``goals``), else the first goal above it (+inf when none is: every value from the
    incumbent up is bracketed alike). Goals ascending."""
    if not goals:
        return value
    k = bisect_right(goals, value)
    return goals[k] if k < len(goals) else math.inf


def _prune_level(goals: Sequence[float], value: float) -> float:
    """A node whose certified bound is at most this is pruned: the target plus the
    optimality tolerance."""
    return _target(goals, value) + RTOL * max(1.0, abs(value))


# A node left to explore: (lo, hi, cut rounds, and for a child: its parent's bound, the
# column branched on, up or down, the change of x there, the parent's LP basis to start
# from - or None: the current one)
_Node = tuple[np.ndarray, np.ndarray, int, float, int, bool, float, bytes | None]


class _Relaxation:
    """The LP relaxation of one problem (:class:`PackingLp`) with what the search needs,
    and the cuts added to it so far."""

    def __init__(self, problem: PackingProblem, engine: str = "auto") -> None:
        model = PackingLp(problem)
        self.problem = problem
        self.cols = model.cols
        self.masks = model.masks
        self.gain = model.gain
        self.gain_list: list[float] = model.gain.tolist()
        self.col_starts = np.ascontiguousarray(model.starts, dtype=np.int32)  # n + 1
        self.index = np.ascontiguousarray(model.index, dtype=np.int32)
        self.app_cols: dict[int, np.ndarray] = {}  # app -> its columns (consecutive)
        first = 0
        for i, size in enumerate(model.sizes):
            if size:
                self.app_cols[i] = np.arange(first, first + size, dtype=np.int32)
            first += size
        self.n_base_rows = model.n_rows
        # the LP's rows (for the conflicts and the {0, 1/2}-cuts), from its columns; one
        # per LP row, empty ones (apps without bundles) included, so that rows[r] is LP
        # row r and lines up with the LP's row values; all-ones coefficients are views of
        # one read-only array
        bounds = model.row_starts.tolist()
        members = model.members
        ones = np.ones(max(bounds[-1], 1), dtype=np.int64)
        ones.flags.writeable = False
        self.rows = [Row(members[a:b], ones[: b - a], 1)
                     for a, b in pairwise(bounds)]
        col_of = np.repeat(np.arange(len(model.cols), dtype=np.int32), np.diff(model.starts))
        self.conflict = conflict_matrix(len(model.cols), model.index, col_of)
        self.rhs = np.ones(self.n_base_rows)
        self.cut_cols = np.zeros(0, dtype=np.int64)
        self.cut_coefs = np.zeros(0)
        self.cut_rows = np.zeros(0, dtype=np.int64)
        self.engine = make_engine(model, engine)
        self.activity = np.zeros(self.n_base_rows)  # row values of the last LP solved
        # reduced gains d = gain - A^T y of the last certified bound (reduced-cost fixing)
        self.reduced = np.zeros(len(model.cols))
        self.lp_solves = 0  # statistics: LPs solved
        self.cut_off = False  # the last LP stopped at its cutoff (see lp)
        # per solve (excluded app): the number of cuts when its LP count limit was last
        # tried; the exact maximum numbers of starving apps served (built when needed)
        self.counted: dict[int | None, int] = {}
        # an impatient solve of this problem ran out of nodes: its points need the full
        # cutting effort, and so (measured) do the problem's other solves
        self.stubborn = False
        self._served: MaxServed | None = None
        # the row duals of the optimum's root LP, cuts in (bracketing solves' bound
        # without LP); set by the optimum's solve
        self.root_dual: np.ndarray | None = None
        self.pseudo = PseudoCosts(len(model.cols))  # learnt over the problem's solves

    def add_cuts(self, cuts: Sequence[Row]) -> None:
        """Add cut rows to the LP (kept for every later solve of this problem)."""
        if not cuts:
            return
        first = len(self.rhs)
        for cut in cuts:
            self.engine.add_row(cut.cols, cut.coefs.astype(np.float64), float(cut.rhs))
        self.rows.extend(cuts)
        self.rhs = np.concatenate([self.rhs, [float(cut.rhs) for cut in cuts]])
        self.cut_cols = np.concatenate([self.cut_cols, *(c.cols.astype(np.int64) for c in cuts)])
        self.cut_coefs = np.concatenate([self.cut_coefs,
                                         *(c.coefs.astype(np.float64) for c in cuts)])
        self.cut_rows = np.concatenate([self.cut_rows, np.repeat(
            np.arange(first, first + len(cuts), dtype=np.int64), [len(c.cols) for c in cuts])])

    @property
    def n_cuts(self) -> int:
        return len(self.rhs) - self.n_base_rows

    def lp(self, lo: np.ndarray, hi: np.ndarray,
           cutoff: float | None = None) -> tuple[np.ndarray, float]:
        """Solve the node's LP: (x, certified upper bound of the node); its reduced gains
        are left in ``reduced``. With a ``cutoff`` the engine may stop once its dual bound
        is at most the cutoff (``cut_off`` set; x is then no LP point)."""
        x = self._run(lo, hi, cutoff)
        return x, self._certified(self.gain, lo, hi, self.reduced)

    def _run(self, lo: np.ndarray, hi: np.ndarray, cutoff: float | None = None) -> np.ndarray:
        point = self.engine.solve(lo, hi, cutoff)
        self.cut_off = point.cut_off
        self.lp_solves += 1
        self.activity = point.activity
        self._dual: np.ndarray = np.maximum(0.0, point.dual)
        return point.x

    @property
    def dual(self) -> np.ndarray:
        """The last LP's row duals, clipped to >= 0."""
        return self._dual

    def certified_by(self, y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
        """The weak-duality upper bound of the gains over the LP (bounds lo, hi) given by
        row duals ``y`` >= 0 (one per row, cuts included) - valid for any such y."""
        return self._certified(self.gain, lo, hi, y=y)

    def _certified(self, objective: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   reduced: np.ndarray | None = None, y: np.ndarray | None = None) -> float:
        """Weak-duality upper bound of max objective.x over the LP (bounds lo, hi) from
        row duals ``y`` (default: the last LP's, clipped to >= 0); compiled when the
        extension was built (it reads this object's rows, not the engine's), else
        :meth:`_certified_py`. ``reduced``: an array that receives the reduced gains
        ``objective - A^T y``."""
        y = self._dual if y is None else y
        if weak_duality_bound is None:
            return self._certified_py(objective, lo, hi, reduced, y)
        return float(weak_duality_bound(y, objective, self.col_starts, self.index,
                                        self.cut_rows, self.cut_cols, self.cut_coefs,
                                        self.rhs, lo, hi, reduced))

    def _certified_py(self, objective: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      reduced: np.ndarray | None = None,
                      y: np.ndarray | None = None) -> float:
        """:meth:`_certified` with numpy (the reference of the compiled version)."""
        y = self._dual if y is None else y
        d = objective - np.add.reduceat(y[self.index], self.col_starts[:-1])
        if len(self.cut_cols):
            d -= np.bincount(self.cut_cols, weights=self.cut_coefs * y[self.cut_rows],
                             minlength=len(d))
        if reduced is not None:
            reduced[:] = d
        part = np.where(hi <= 0.0, 0.0, np.where(lo >= 1.0, d, np.maximum(0.0, d)))
        return float(np.dot(y, self.rhs) + part.sum())

    def count_cut(self, x: np.ndarray, excluded: int | None,
                  incumbent_served: int) -> Row | None:
        """The count cut of a solve: the starving apps but ``excluded`` get a GPU in at
        most K of them. Valid for every integer point of the whole problem (the excluded
        app's columns do not count, so freeing them cannot raise the number), hence kept
        like the other cuts. Returned only when it cuts x off, i.e. where the auction's
        lexicographic bonus makes the LP serve more starving apps than can be served:
        19.875 of 20, or all 20 fractionally when only 19 can be served (the menus of
        several apps name the same few GPUs: a pigeonhole the LP cannot see).

        K is the exact maximum (:meth:`max_served`), computed only when the LP serves
        more than the incumbent (``incumbent_served`` starving apps); when that solve
        exceeds its budget, K = floor(v) for v the certified LP maximum of the number,
        which only cuts a fractional number of apps served."""
        apps = [i for i in self.problem.starving if i != excluded and i in self.app_cols]
        if len(apps) < 2:
            return None
        cols = np.sort(np.concatenate([self.app_cols[i] for i in apps]))
        served = float(x[cols].sum())
        if served <= incumbent_served + INTEGRAL_TOL:
            return None
        # the whole problem's maximum bounds every solve's (removing an app cannot
        # raise it): try it first, it is computed once per auction
        limit = self.max_served(None)
        if excluded is not None and (limit is None or served <= limit + INTEGRAL_TOL):
            limit = self.max_served(excluded)
        if limit is None:
            limit = self._lp_count_limit(cols, served, excluded)
            if limit is None:
                return None
        if served <= limit + INTEGRAL_TOL:
            return None
        return Row(cols.astype(np.int32), np.ones(len(cols), dtype=np.int64), limit)

    def max_served(self, excluded: int | None) -> int | None:
        """The most starving apps (but ``excluded``) that can get a bundle at once, exact
        (cached), or None when that search exceeds its budget (the search over classes of
        interchangeable apps, see :mod:`themis.mechanism.solvers.cardinality`)."""
        starving = self.problem.starving
        if self._served is None:
            self._served = MaxServed(
                [[b.mask for b in self.problem.apps[i]] for i in starving], COUNT_NODE_LIMIT)
        if excluded is not None and excluded in starving:
            return self._served.maximum(starving.index(excluded))
        return self._served.maximum(None)

    def _lp_count_limit(self, cols: np.ndarray, served: float,
                        excluded: int | None) -> int | None:
        """floor(v), v the certified LP maximum of the number of starving apps served
        (tried again only after other cuts were added since the last try, which can
        lower v); None when ``served`` is integral or nothing new can be learnt."""
        if abs(served - round(served)) <= INTEGRAL_TOL or \
                self.counted.get(excluded) == self.n_cuts:
            return None
        self.counted[excluded] = self.n_cuts
        n = len(self.cols)
        count = np.zeros(n)
        count[cols] = 1.0
        lo, hi = np.zeros(n), np.ones(n)
        self.engine.set_gain(count)
        try:
            self._run(lo, hi)
            limit = self._certified(count, lo, hi)
        finally:
            self.engine.set_gain(self.gain)
        return int(np.floor(limit + 1e-9))

    def conflicts(self, c: int) -> np.ndarray:
        """Columns that cannot be chosen together with column c."""
        return np.nonzero(self.conflict[c])[0]

    def round(self, x: np.ndarray, hi: np.ndarray) -> tuple[list[int], float]:
        """Greedy packing by decreasing x among allowed columns: (choice, value). (A
        second pass giving left-out apps their best fitting bundle found better
        incumbents on one hard instance but cost more than it saved over the benchmark
        sets.)"""
        choice = [-1] * len(self.problem.apps)
        used = 0
        value = 0.0
        cand = np.flatnonzero(x > INTEGRAL_TOL)
        order = cand[np.argsort(-x[cand], kind="stable")]  # as a stable sort of all of -x
        cols, masks, gain = self.cols, self.masks, self.gain_list
        for c, allowed in zip(order.tolist(), (hi[order] > 0.0).tolist(), strict=True):
            i, j = cols[c]
            if not allowed or choice[i] >= 0 or masks[c] & used:
                continue
            choice[i] = j
            used |= masks[c]
            value += gain[c]
        return choice, value


class LpBranchAndBound(Solver):
    name = "lpbb"
    resumes_brackets = True  # its relaxation and cuts stay; one hard solve says little

    def __init__(self, node_limit: int = 100_000, node_limit_large: int | None = None,
                 root_cut_rounds: int = ROOT_CUT_ROUNDS,
                 node_cut_rounds: int = NODE_CUT_ROUNDS, lp_engine: str = "auto") -> None:
        require_highs()
        if lp_engine not in ENGINES:
            raise SolverError(f"lpbb: unknown LP engine {lp_engine!r}; valid: "
                              f"{', '.join(ENGINES)}")
        self.lp_engine = lp_engine  # see themis.mechanism.solvers.lp_engines
        self.node_limit = node_limit
        self.node_limit_large = node_limit_large  # see base.node_budget
        self.root_cut_rounds = root_cut_rounds
        self.node_cut_rounds = node_cut_rounds
        self.nodes = 0  # branch-and-bound nodes of the last call (statistics)
        self.cuts = 0  # cuts added by the last call (statistics)
        # The last problem, its relaxation and its optimum: the auction asks for the
        # optimum, then (in a second call) for the solves without each winner.
        self._last: tuple[PackingProblem, _Relaxation, Solution | None] | None = None

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.solve_many(problem, [excluded])[0]

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        return self._solve_many(problem, excluded, None)

    def bracket_many(
        self, problem: PackingProblem, excluded: Sequence[int | None],
        thresholds: Sequence[Sequence[float]],
    ) -> list[Solution]:
        """Solves that stop once their optimum is bracketed (:meth:`Solver.bracket_many`):
        a node is pruned when its certified bound cannot reach the first threshold above
        the incumbent (rather than the incumbent itself), and a solve without a winner
        whose bound from the optimum's root duals already can't needs no LP at all."""
        require_aligned(excluded, thresholds)
        return self._solve_many(problem, excluded, thresholds)

    def adopt(self, problem: PackingProblem, optimum: Solution) -> bool:
        """Use another back-end's optimum of the problem this solver last gave up on:
        its relaxation, with the cuts and root duals of that attempt, then brackets the
        solves without each winner from it (measured on the 256 x 50 benchmark's p95
        auction, where the optimum needs ~800 nodes: its 34 bracketing solves take ~0.9 s
        here, where HiGHS' MILP took 1.3 s for 10 of them; exact ones run out of nodes)."""
        if self._last is None or self._last[0] is not problem:
            return False
        self._last = (problem, self._last[1], optimum)
        return True

    def _solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None],
        thresholds: Sequence[Sequence[float]] | None,
    ) -> list[Solution]:
        self.nodes = 0
        self.cuts = 0
        if excluded:
            require_budget("lpbb", problem, self.node_limit, self.node_limit_large)
        if problem.n_bundles == 0:
            return [Solution((-1,) * len(problem.apps), 0.0) for _ in excluded]
        if self._last is not None and self._last[0] is problem:
            _, relax, best = self._last
        else:
            relax, best = _Relaxation(problem, self.lp_engine), None
        out: list[Solution] = []
        try:
            for k, e in enumerate(excluded):
                goals = sorted(thresholds[k]) if thresholds is not None else []
                hint = None
                if e is not None and best is not None:
                    hint = tuple(-1 if i == e else c for i, c in enumerate(best.choice))
                try:
                    # a solve without a winner cuts while the cuts close its gap fast
                    # and branches sooner; given the full cutting effort if it runs out
                    # of nodes that way (bench/RESULTS.md, "Design choices, measured"). So are
                    # the problem's later exact solves: such failures come in runs (the
                    # points in thirds of bench_rounds). Not its later
                    # bracketing solves: there the full effort's costly rounds (mod-k)
                    # cost more than the failures (measured: the 256 x 50 benchmark's
                    # 100 seeds 5.9 s -> 4.4 s, the same GPUs granted)
                    sol = self._solve(relax, e, hint, goals,
                                      patient=e is None or relax.stubborn)
                except SolverBudgetExceeded:
                    if e is None or relax.stubborn:
                        raise
                    relax.stubborn = thresholds is None
                    sol = self._solve(relax, e, hint, goals, patient=True)
                if e is None:
                    best = sol
                out.append(sol)
        except SolverUnavailable as exc:
            raise type(exc)(str(exc), out) from None
        finally:
            self._last = (problem, relax, best)
        return out

    @staticmethod
    def _cutoff(excluded: int | None, goals: Sequence[float], value: float) -> float | None:
        """The LP cutoff of a node: in a solve without a winner (whose value alone is
        used), an LP that cannot beat the target (:func:`_target`) prunes its node, so
        its solve may stop once its dual bound shows that; none in the optimum's solve,
        whose LP points decide which of equally good allocations is kept."""
        return None if excluded is None else _prune_level(goals, value)

    def _solve(self, relax: _Relaxation, excluded: int | None,
               hint: tuple[int, ...] | None, goals: Sequence[float] = (),
               patient: bool = True) -> Solution:
        """One solve, exact, or bracketing its optimum among ``goals`` (ascending; see
        :meth:`bracket_many`): then the search only has to show that no point beats the
        first goal above the incumbent, :func:`_target`. ``patient``: separate at the
        root until no cut is violated, the rounds are used up or the bound has barely
        moved for STALL_ROUNDS rounds; else without the mod-k families (costly rounds
        that pay off where the points in thirds persist, not on the simulator's many
        mid-size auctions: measured), stopping once GAP_STALL_ROUNDS rounds in a row each
        closed less than GAP_STALL of the gap to the incumbent, and with at most
        IMPATIENT_NODES nodes."""
        problem = relax.problem
        n = len(relax.cols)
        lo0, hi0 = np.zeros(n), np.ones(n)
        if excluded is not None and excluded in relax.app_cols:
            hi0[relax.app_cols[excluded]] = 0.0
        best_choice: list[int] = [-1] * len(problem.apps)
        best_val = 0.0
        if hint is not None:
            best_choice = list(hint)
            best_val = sum(problem.apps[i][c].gain for i, c in enumerate(hint) if c >= 0)
        limit = node_budget(problem, self.node_limit, self.node_limit_large)
        if excluded is None:
            limit *= OPTIMUM_BUDGET_FACTOR
        if not patient:
            limit = min(limit, IMPATIENT_NODES)
        if goals and excluded is not None and hint is not None and \
                relax.root_dual is not None:
            # the optimum's root duals, with the excluded app's row freed (any y >= 0
            # gives a valid bound): often enough to bracket the value without an LP
            y = np.zeros(len(relax.rhs))
            y[: len(relax.root_dual)] = relax.root_dual
            y[excluded] = 0.0  # app rows come first (highs.packing_structure)
            if relax.certified_by(y, lo0, hi0) <= _prune_level(goals, best_val):
                return Solution(tuple(best_choice), best_val)
        stack: list[_Node] = [(lo0, hi0, self.root_cut_rounds, math.nan, -1, False, 0.0, None)]
        nodes = 0
        held = 0  # bytes of the basis snapshots on the stack
        if excluded is not None:
            # start from the optimum's root basis (saved below): only app ``excluded``'s
            # columns change, where the last solve's basis had another app excluded
            relax.engine.restore_basis()
        while stack:
            lo, hi, cut_rounds, parent, col, up, change, snap = stack.pop()
            if snap is not None:
                held -= len(snap)
                relax.engine.restore(snap)
            nodes += 1
            self.nodes += 1
            if nodes > limit:
                raise SolverBudgetExceeded(f"lpbb: node limit {limit} reached")
            x, bound = relax.lp(lo, hi, self._cutoff(excluded, goals, best_val))
            if col >= 0:
                relax.pseudo.observe(col, up, change, parent - bound, relax.gain_list[col])
            stalls = 0
            while True:
                tol = RTOL * max(1.0, abs(best_val))
                target = _target(goals, best_val)
                if bound <= target + tol:
                    break
                if relax.cut_off:  # stopped early, yet not certified below: finish it
                    x, bound = relax.lp(lo, hi)
                    continue
                choice, value = relax.round(x, hi)
                if value > best_val:
                    best_choice, best_val = choice, value
                    tol = RTOL * max(1.0, abs(best_val))
                    target = _target(goals, best_val)
                    if bound <= target + tol:
                        break
                if excluded is not None:
                    # reduced-cost fixing: the certified bound with x_c = 1 forced is
                    # bound + d_c for a free column (d_c < 0), so a column with
                    # bound + d_c <= target + tol is 0 in every point of this node the
                    # pruning rule would keep; the node's children inherit hi. Only in
                    # the solves without a winner, whose value alone is used: in the
                    # optimum's it would change which of equally good allocations is
                    # kept (measured: same values, 6 of 1,005 simulator auctions with
                    # other GPUs), and the allocation is the search's first found. Only
                    # columns at 0 in x: a basic column's d_c is 0 but for rounding, and
                    # one fixed while fractional could be branched on (lo 1 > hi 0)
                    hi[(relax.reduced <= target + tol - bound) & (lo <= 0.0)
                       & (x <= INTEGRAL_TOL)] = 0.0
                frac = np.nonzero((x > INTEGRAL_TOL) & (x < 1.0 - INTEGRAL_TOL))[0]
                if len(frac) == 0:
                    # integral LP optimum: rounding took exactly it; it must meet the bound
                    if bound > value + tol:
                        raise SolverUnavailable("lpbb: integral LP optimum not certified "
                                                f"(bound {bound!r}, value {value!r})")
                    break
                cuts: list[Row] = []
                if cut_rounds > 0:
                    cuts = separate(x, relax.conflict, relax.rows, relax.activity,
                                    MOD_K if patient else (), rhs=relax.rhs)
                    served = sum(1 for i in problem.starving if best_choice[i] >= 0)
                    count = relax.count_cut(x, excluded, served)
                    if count is not None:
                        cuts.append(count)
                if cuts and stalls < (STALL_ROUNDS if patient else GAP_STALL_ROUNDS):
                    cut_rounds -= 1
                    relax.add_cuts(cuts)
                    self.cuts += len(cuts)
                    before = bound
                    x, bound = relax.lp(lo, hi, self._cutoff(excluded, goals, best_val))
                    slow = STALL_GAIN * max(1.0, abs(bound))
                    if not patient:
                        slow = max(slow, GAP_STALL * (before - best_val))
                    stalls = stalls + 1 if before - bound <= slow else 0
                    continue
                # pseudo-costs, learnt over this problem's solves (branching module)
                c = relax.pseudo.choose(frac, x, relax.gain)
                xc = float(x[c])
                lo_out, hi_out = lo.copy(), hi.copy()
                hi_out[c] = 0.0
                lo_in, hi_in = lo.copy(), hi.copy()
                lo_in[c] = 1.0
                hi_in[relax.conflicts(c)] = 0.0
                # the "leave it" child restarts from this node's basis, not from wherever
                # the "take it" subtree ended (seeds 0-299 of the 256 x 50 benchmark:
                # 21% fewer pivots, bench/RESULTS.md, "Design choices, measured")
                snap = relax.engine.snapshot() if held < SNAPSHOT_BYTES else None
                held += len(snap) if snap is not None else 0
                stack.append((lo_out, hi_out, self.node_cut_rounds, bound, c, False, xc, snap))
                stack.append((lo_in, hi_in, self.node_cut_rounds, bound, c, True,
                              1.0 - xc, None))  # explored first
                break
            if nodes == 1 and excluded is None:
                relax.engine.save_basis()  # the root LP with every cut of this solve
                relax.root_dual = relax.dual.copy()
        total = 0.0
        used = 0
        for i, c in enumerate(best_choice):
            if c >= 0:
                b = problem.apps[i][c]
                if used & b.mask or i == excluded:
                    raise SolverError("lpbb: infeasible incumbent")  # a bug, not input
                used |= b.mask
                total += b.gain
        return Solution(tuple(best_choice), total)
