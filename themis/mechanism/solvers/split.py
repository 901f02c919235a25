"""The split auction's configuration: a solver that also says when to split the round.

Above a measured size the exact auction's tail is unbounded (bench/RESULTS.md, "Split
auction"), so :func:`themis.mechanism.auction.run_auction`, handed a :class:`SplitSolver`,
splits the round into independent sub-auctions (:mod:`themis.mechanism.split`); below the
threshold it runs the exact auction with the inner solver, unchanged. The wrapper is how the
choice travels through every driver without changing their calls: a solver *name*,
``split:<name>`` (e.g. ``split:open-fast``), built by :func:`make_solver`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from themis.mechanism.solvers import auto
from themis.mechanism.solvers.base import PackingProblem, Solution, Solver, SolverError

SPLIT_PREFIX = "split:"
#: The names a long-running service (the RM's engine) accepts: the exact ones and the split
#: auction over the two fast chains (the split bounds the large rounds' solves).
SERVICE_SOLVERS = (*auto.SERVICE_SOLVERS, *(SPLIT_PREFIX + n for n in ("auto-fast",
                                                                      "open-fast")))


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """When and how to split a round's auction (defaults measured, bench/RESULTS.md).

    A round of G offered GPUs and A bidders is split into k = min(G // part_gpus,
    A // min_part_bidders) parts when G >= min_gpus and k >= 2; GPUs are dealt to parts in
    whole ``group``s (a rack's or a machine's offered GPUs), bidders as ``bidders`` says
    (:func:`themis.mechanism.split.plan_split`)."""

    min_gpus: int = 512
    part_gpus: int = 256
    min_part_bidders: int = 25
    group: Literal["rack", "machine"] = "rack"
    # "footprint": each bidder to the part holding most of its bundles (with room);
    # "random": POP's deal, round-robin in a seeded random order (measured: far worse)
    bidders: Literal["footprint", "random"] = "footprint"

    def __post_init__(self) -> None:
        if min(self.min_gpus, self.part_gpus, self.min_part_bidders) < 1:
            raise SolverError(f"split policy {self}: every size must be >= 1")
        if self.group not in ("rack", "machine"):
            raise SolverError(f"split policy: group {self.group!r} is not 'rack' or 'machine'")
        if self.bidders not in ("footprint", "random"):
            raise SolverError(f"split policy: bidders {self.bidders!r} is not 'footprint' or "
                              "'random'")

    def parts(self, n_gpus: int, n_bidders: int) -> int:
        """How many parts a round of ``n_gpus`` offered GPUs and ``n_bidders`` gets (1:
        not split)."""
        if n_gpus < self.min_gpus:
            return 1
        return max(1, min(n_gpus // self.part_gpus, n_bidders // self.min_part_bidders))


class SplitSolver(Solver):
    """``inner`` with a :class:`SplitPolicy`. As a plain :class:`Solver` it is ``inner``
    (every call delegates); :func:`~themis.mechanism.auction.run_auction` reads the
    policy and solves with ``inner``."""

    def __init__(self, inner: Solver, policy: SplitPolicy | None = None) -> None:
        self.inner = inner
        self.policy = policy or SplitPolicy()
        self.resumes_brackets = inner.resumes_brackets

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.inner.solve(problem, excluded)

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        return self.inner.solve_many(problem, excluded)

    def bracket_many(
        self, problem: PackingProblem, excluded: Sequence[int | None],
        thresholds: Sequence[Sequence[float]],
    ) -> list[Solution]:
        return self.inner.bracket_many(problem, excluded, thresholds)

    def adopt(self, problem: PackingProblem, optimum: Solution) -> bool:
        return self.inner.adopt(problem, optimum)


def make_solver(name: str = auto.DEFAULT_SOLVER) -> Solver:
    """:func:`themis.mechanism.solvers.auto.make_solver`, plus ``split:<name>``: ``<name>``
    wrapped in a :class:`SplitSolver` with the default :class:`SplitPolicy`."""
    if name.startswith(SPLIT_PREFIX):
        inner = name[len(SPLIT_PREFIX):]
        if inner.startswith(SPLIT_PREFIX):
            raise SolverError(f"unknown solver {name!r}: split of a split")
        return SplitSolver(auto.make_solver(inner))
    return auto.make_solver(name)
