"""Solver back-end interface for the proportional-fair step (Pseudocode 1, line 6).

The problem handed to a back-end is already in *gain* form: for each app a list of
candidate bundles, each a set of GPU indices (``mask``, a Python int bitset) with a gain
>= 0 over the empty bundle. A back-end returns, for each app, the index of its chosen
bundle or -1 (empty), maximising the total gain subject to: at most one bundle per app
and bundles pairwise disjoint. Maximising the total gain is maximising
sum_i log(1/rho_i), i.e. the product of Pseudocode 1 (see themis.mechanism.auction).

Every back-end must be *exact* (optimal up to a 1e-9 relative tolerance) and pass the
shared conformance suite in tests/unit/test_solver_conformance.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class SolverError(RuntimeError):
    """A back-end could not solve a problem (licence, size limit, internal failure)."""


class SolverUnavailable(SolverError):
    """The back-end cannot be used here (not installed, no licence); callers fall back.
    ``done`` holds the solutions of the first entries of a ``solve_many`` call that were
    finished before giving up (a fallback only needs to solve the rest)."""

    def __init__(self, message: str, done: Sequence[Solution] = ()) -> None:
        super().__init__(message)
        self.done = tuple(done)


LARGE_MODEL_BUNDLES = 400  # budgeted back-ends may use a smaller budget beyond this


def node_budget(problem: PackingProblem, node_limit: int, node_limit_large: int | None) -> int:
    """The per-solve node budget of a budgeted back-end for ``problem``: ``node_limit``,
    or ``node_limit_large`` (when given) for models of more than LARGE_MODEL_BUNDLES
    bundles, where every node costs more and a MILP solver's cuts pay off sooner. A
    budget of 0 means: do not try (raise SolverBudgetExceeded at once)."""
    if node_limit_large is not None and problem.n_bundles > LARGE_MODEL_BUNDLES:
        return node_limit_large
    return node_limit


class SolverBudgetExceeded(SolverUnavailable):
    """A budgeted back-end (node limit) gave up on a solve; a fallback chain hands the
    rest of the call to the next back-end (without logging it as unavailable)."""


def require_budget(tag: str, problem: PackingProblem, node_limit: int,
                   node_limit_large: int | None) -> int:
    """:func:`node_budget`, raising SolverBudgetExceeded at once when it is 0."""
    budget = node_budget(problem, node_limit, node_limit_large)
    if budget <= 0:
        raise SolverBudgetExceeded(f"{tag}: no budget for a model of {problem.n_bundles} "
                                   "bundles")
    return budget


class Bundle(NamedTuple):
    """One candidate bundle (a named tuple: an auction builds ~700 of them per 256-GPU
    offer; measured 1.3-1.5x cheaper to build than the frozen dataclass it replaced)."""

    mask: int  # bit g set <=> GPU index g is in the bundle
    gain: float  # log(rho_empty / rho_bundle) (plus the starvation term), > 0


@dataclass(frozen=True, slots=True)
class PackingProblem:
    n_gpus: int
    apps: tuple[tuple[Bundle, ...], ...]  # apps[i] = candidate bundles of app i
    # Apps whose gains carry the auction's lexicographic bonus (starving apps, see
    # themis.mechanism.auction). Back-ends may use the fact that the number of them served
    # is an integer (lpbb's count cut); the gains alone define the optimum.
    starving: tuple[int, ...] = ()

    @property
    def n_bundles(self) -> int:
        return sum(len(b) for b in self.apps)


@dataclass(frozen=True, slots=True)
class Solution:
    choice: tuple[int, ...]  # per app: index into its bundles, or -1 for the empty bundle
    objective: float


def bits(mask: int) -> list[int]:
    """Indices of the set bits of a bundle mask (the GPU indices), lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def evaluate(problem: PackingProblem, choice: Sequence[int]) -> float:
    """Objective of a choice; raises SolverError if it is infeasible."""
    used = 0
    total = 0.0
    for bundles, c in zip(problem.apps, choice, strict=True):
        if c < 0:
            continue
        b = bundles[c]
        if used & b.mask:
            raise SolverError("infeasible choice: two chosen bundles share a GPU")
        used |= b.mask
        total += b.gain
    return total


class Solver(ABC):
    """One proportional-fair MILP back-end."""

    name: str = "abstract"
    # After SolverBudgetExceeded in one solve of a bracket_many call, a fallback chain
    # may hand that solve alone to its fallback and ask this back-end again for the rest
    # (True where budget failures of bracketing solves are per solve, not per problem).
    resumes_brackets: bool = False

    @abstractmethod
    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        """Optimal choice; app ``excluded`` (if any) must get the empty bundle."""

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        """Solve the problem once per entry of ``excluded`` (the N+1 solves of the
        auction). Back-ends may override to reuse work across the solves."""
        return [self.solve(problem, e) for e in excluded]

    def bracket_many(
        self, problem: PackingProblem, excluded: Sequence[int | None],
        thresholds: Sequence[Sequence[float]],
    ) -> list[Solution]:
        """Like :meth:`solve_many`, but each solve only has to *bracket* its optimum OPT
        among its ``thresholds`` (ascending): the returned choice is feasible (app
        ``excluded`` gets nothing) and its objective v satisfies: no threshold lies in
        (v, OPT], up to the 1e-9 relative tolerance - so v and OPT have the same number of
        thresholds above them. The auction's randomized rounding only needs that number
        (:func:`themis.mechanism.auction.run_auction`). An exact solve brackets every
        threshold list, hence this default; a back-end may stop a solve early instead
        (``lpbb``)."""
        require_aligned(excluded, thresholds)
        return self.solve_many(problem, excluded)

    def adopt(self, problem: PackingProblem, optimum: Solution) -> bool:
        """Take ``optimum``, the problem's optimum found by another back-end (after this
        one gave up on it), as the starting point of the problem's later solves without a
        winner; True when this back-end will use it (default: it will not)."""
        return False


def require_aligned(excluded: Sequence[int | None],
                    thresholds: Sequence[Sequence[float]]) -> None:
    """Raise SolverError unless there is one threshold list per solve."""
    if len(thresholds) != len(excluded):
        raise SolverError(f"{len(thresholds)} threshold lists for {len(excluded)} solves")
