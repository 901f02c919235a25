"""Back-end selection: ``auto`` prefers Gurobi when it is importable and licensed for the
model at hand, and otherwise falls back to the open-source default, logging why."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverBudgetExceeded,
    SolverError,
    SolverUnavailable,
    require_aligned,
)

log = logging.getLogger("themis.mechanism.solvers")


class FallbackSolver(Solver):
    """Tries ``primary`` first; on :class:`SolverUnavailable` (not installed, licence too
    small for this model, a budgeted back-end's node budget exceeded) solves the rest of
    the call with ``fallback`` - the solves the primary finished are kept - and logs the
    reason once per reason (unless ``quiet``). Handing over the whole rest, not only the
    solve that failed, was measured faster: budget failures come in runs (the solves
    without each winner of one hard auction). For the same reason a primary that gave up
    on a problem is not asked again about that problem (the auction's second call, the
    solves without each winner, goes straight to the fallback): the branch and bound,
    having run out of nodes on the proportional-fair solve, would repeat that solve and
    fail again (measured on the Workload-2 simulation: 2,868 such repeats, 5 s of its
    108 s of auctions) - unless the primary took over the fallback's optimum
    (:meth:`Solver.adopt`): then it is asked first for the problem's bracketing solves
    (:meth:`Solver.bracket_many`), which need no optimum of its own. In bracketing calls,
    a primary whose budget failures are per solve (:attr:`Solver.resumes_brackets`) hands
    over only the solve it failed and is asked again for the next (:meth:`_resume`)."""

    def __init__(self, primary: Solver | None, fallback: Solver, quiet: bool = False) -> None:
        self.primary = primary
        self.fallback = fallback
        self.quiet = quiet
        self._warned: set[str] = set()
        self._used: Solver = fallback if primary is None else primary
        self._gave_up: PackingProblem | None = None  # the last problem the primary gave up on
        # ... whose optimum (found by the fallback) the primary took over (Solver.adopt):
        # it is asked again for that problem's bracketing solves
        self._adopted: PackingProblem | None = None

    @property
    def name(self) -> str:  # type: ignore[override]
        """The back-end that finished the last call (for a nested chain: the one inside
        it that did)."""
        return self._used.name

    def _fall(self, exc: Exception) -> None:
        reason = str(exc)
        if not self.quiet and reason not in self._warned:
            self._warned.add(reason)
            log.warning("solver %s unavailable (%s); using %s", self.primary_name, reason,
                        self.fallback.name)
        self._used = self.fallback

    @property
    def primary_name(self) -> str:
        return self.primary.name if self.primary is not None else "none"

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.solve_many(problem, [excluded])[0]

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        return self._chain(problem, excluded, None)

    def bracket_many(
        self, problem: PackingProblem, excluded: Sequence[int | None],
        thresholds: Sequence[Sequence[float]],
    ) -> list[Solution]:
        require_aligned(excluded, thresholds)
        return self._chain(problem, excluded, thresholds)

    def _chain(
        self, problem: PackingProblem, excluded: Sequence[int | None],
        thresholds: Sequence[Sequence[float]] | None,
    ) -> list[Solution]:
        """:meth:`solve_many` (``thresholds`` None) or :meth:`bracket_many` down the
        chain: the primary, then the fallback for the solves the primary did not finish."""
        done: tuple[Solution, ...] = ()
        retry = thresholds is not None and problem is self._adopted
        resume = False  # the primary ran out of nodes in one bracketing solve: see below
        if self.primary is not None and (problem is not self._gave_up or retry):
            try:
                out = (self.primary.solve_many(problem, excluded) if thresholds is None
                       else self.primary.bracket_many(problem, excluded, thresholds))
                self._used = self.primary
                return out
            except SolverUnavailable as exc:
                self._fall(exc)
                self._gave_up = problem
                self._adopted = None
                done = exc.done[: len(excluded)]
                resume = (thresholds is not None and isinstance(exc, SolverBudgetExceeded)
                          and self.primary.resumes_brackets)
        self._used = self.fallback
        rest = list(excluded[len(done) :])
        if not rest:
            return list(done)
        if thresholds is not None:
            rest_th = list(thresholds[len(done):])
            if resume:
                return [*done, *self._resume(problem, rest, rest_th)]
            return [*done, *self.fallback.bracket_many(problem, rest, rest_th)]
        out = self.fallback.solve_many(problem, rest)
        if self.primary is not None and problem is self._gave_up and not retry and \
                None in rest and self.primary.adopt(problem, out[rest.index(None)]):
            self._adopted = problem
        return [*done, *out]

    def _resume(self, problem: PackingProblem, rest: list[int | None],
                thresholds: list[Sequence[float]]) -> list[Solution]:
        """Bracketing solves after the primary ran out of nodes on ``rest[0]``: the
        fallback takes that one solve, then the primary the next ones (again and again).
        Failures of a bracketing solve are sporadic, unlike those of exact solves, and a
        fallback MILP solve costs 10-30x a bracketing solve of lpbb (256 x 50 benchmark,
        seed 99: 24 solves handed over took 3.8 s; bench/RESULTS.md, "Design choices, measured")."""
        primary = self.primary
        if primary is None:
            raise SolverError("no primary back-end to resume")  # a bug, not input
        out: list[Solution] = []
        while rest:
            out.extend(self.fallback.bracket_many(problem, rest[:1], thresholds[:1]))
            self._used = self.fallback
            rest, thresholds = rest[1:], thresholds[1:]
            if not rest:
                break
            try:
                out.extend(primary.bracket_many(problem, rest, thresholds))
                self._used = primary
                break
            except SolverUnavailable as exc:
                k = len(exc.done[: len(rest)])
                out.extend(exc.done[:k])
                rest, thresholds = rest[k:], thresholds[k:]
                if not isinstance(exc, SolverBudgetExceeded):
                    self._fall(exc)
                    if rest:
                        out.extend(self.fallback.bracket_many(problem, rest, thresholds))
                    break
        return out


def _highs() -> Solver:
    from themis.mechanism.solvers.highs import HighsSolver

    return HighsSolver()


def _gurobi() -> Solver:
    from themis.mechanism.solvers.gurobi import GurobiSolver

    return GurobiSolver()


def _bnb() -> Solver:
    from themis.mechanism.solvers.bnb import BranchAndBoundSolver

    return BranchAndBoundSolver()


def _lpbb() -> Solver:
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    return LpBranchAndBound()


def _bruteforce() -> Solver:
    from themis.mechanism.solvers.bruteforce import BruteForceSolver

    return BruteForceSolver()


def _cpsat() -> Solver:
    from themis.mechanism.solvers.cpsat import CpSatSolver

    return CpSatSolver()


BACKENDS: dict[str, Callable[[], Solver]] = {
    "highs": _highs,
    "cpsat": _cpsat,
    "gurobi": _gurobi,
    "bnb": _bnb,
    "lpbb": _lpbb,
    "bruteforce": _bruteforce,
}
OPEN_SOURCE_DEFAULT = "highs"
FAST_NODE_LIMIT_GUROBI = 300  # auto-fast: bnb node budget before Gurobi
FAST_NODE_LIMIT_OPEN = 100  # ... before the LP branch and cut (no usable Gurobi)
FAST_LP_NODE_LIMIT = 200  # ... LP branch and cut budget (nodes per solve) before a MILP
# Models of more than base.LARGE_MODEL_BUNDLES bundles (large contested offers, e.g.
# 256 GPUs x 50 apps): symmetric alternatives make the pure-Python branch and bound
# explode (and its set-up alone costs ~5 ms a solve there), so it steps aside; the LP
# branch and cut, whose root cuts close most of these gaps, takes them - also before
# Gurobi, which it beats there (bench/RESULTS.md), but not on smaller models.
FAST_NODE_LIMIT_LARGE = 0
# ... and so it does, in open-fast, beyond this many bundles: within its 100 nodes it
# finished none of the simulator's captured auctions of more than 200 bundles and 2 of
# 138 of 150-200, nor any bench_rounds auction of more than 100 (bench/RESULTS.md,
# "Design choices, measured"); its failed attempts cost ~5 s of the Workload-2 simulation.
FAST_BNB_MAX_BUNDLES = 150
FAST_LP_NODE_LIMIT_LARGE = 200
FAST_LP_NODE_LIMIT_LARGE_GUROBI = 50  # auto-fast: Gurobi takes the hard ones sooner


def _open_fast() -> Solver:
    """bnb -> LP branch and cut -> HiGHS' MILP: every back-end open source."""
    from themis.mechanism.solvers.bnb import BranchAndBoundSolver
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    lp_then_milp = FallbackSolver(
        LpBranchAndBound(FAST_LP_NODE_LIMIT, FAST_LP_NODE_LIMIT_LARGE),
        BACKENDS[OPEN_SOURCE_DEFAULT](), quiet=True)
    return FallbackSolver(BranchAndBoundSolver(FAST_NODE_LIMIT_OPEN, FAST_NODE_LIMIT_LARGE,
                                               FAST_BNB_MAX_BUNDLES),
                          lp_then_milp, quiet=True)


CHAINS = ("auto", "auto-fast", "open-fast")
#: The solver of every driver unless told otherwise - the RM's engine, standalone, the
#: simulator, ``themis auction`` - and the one place that says so (the RM plugin's
#: ``EngineDefaults.java`` is generated from it: ``python -m themis.yarn.javagen``).
DEFAULT_SOLVER = "auto-fast"
#: Every name :func:`make_solver` takes.
SOLVER_NAMES = (*CHAINS, *sorted(BACKENDS))
#: The names a long-running service (the RM's engine) accepts: the chains and the exact
#: back-ends whose solves stay bounded on large offers (``bnb`` and ``bruteforce`` alone
#: can take exponential time there; ``cpsat`` needs the ``cpsat`` extra).
SERVICE_SOLVERS = ("auto-fast", "open-fast", "auto", "highs", "gurobi", "lpbb")


def make_solver(name: str = DEFAULT_SOLVER) -> Solver:
    """One of :data:`CHAINS` or :data:`BACKENDS`. Unknown names raise SolverError listing
    the valid ones; ``gurobi`` without gurobipy raises SolverUnavailable.

    * ``auto``: Gurobi when gurobipy imports and its licence covers the model, else HiGHS
      (the fallback is logged).
    * ``open-fast``: a chain of exact open-source back-ends, each with a per-solve
      budget, cheapest first: the pure-Python branch and bound (fast on the small offers
      of most rounds), the LP branch and cut over HiGHS' LP, HiGHS' MILP.
    * ``auto-fast``: with Gurobi, the pure-Python branch and bound (small models), the
      LP branch and cut (large ones), then ``auto``; without Gurobi, ``open-fast``.

    Budgets measured on the simulator's hardest auctions (bench/RESULTS.md)."""
    if name == "open-fast":
        return _open_fast()
    if name in ("auto", "auto-fast"):
        try:
            primary: Solver | None = _gurobi()
        except SolverUnavailable as exc:
            log.info("gurobi not used: %s", exc)
            primary = None
        if name == "auto-fast" and primary is None:
            return _open_fast()
        chain = FallbackSolver(primary, BACKENDS[OPEN_SOURCE_DEFAULT]())
        if name == "auto":
            return chain
        from themis.mechanism.solvers.bnb import BranchAndBoundSolver
        from themis.mechanism.solvers.lpbb import LpBranchAndBound

        large_first = FallbackSolver(LpBranchAndBound(0, FAST_LP_NODE_LIMIT_LARGE_GUROBI), chain,
                                     quiet=True)
        return FallbackSolver(
            BranchAndBoundSolver(FAST_NODE_LIMIT_GUROBI, FAST_NODE_LIMIT_LARGE), large_first,
            quiet=True)
    if name not in BACKENDS:
        valid = ", ".join(SOLVER_NAMES)
        raise SolverError(f"unknown solver {name!r}; valid: {valid}")
    return BACKENDS[name]()
