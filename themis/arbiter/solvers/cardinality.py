"""The most starving apps that can get a bundle at once (for lpbb's count cut).

The auction's lexicographic bonus (themis.arbiter.auction) makes the optimum serve as many
starving apps as the menus allow; the LP relaxation cannot see that limit when several
menus name the same few GPUs (a pigeonhole), so lpbb cuts the number served down to this
maximum. Every bundle is worth 1 here, so a bundle that contains another bundle of the
same app is never needed, and the combinatorial branch and bound proves these pigeonhole
bounds in milliseconds where the LP relaxation needs thousands of nodes (measured on
bench_rounds' rounds).

The maximum without app e follows from the maximum with everyone, K: it is K when a
largest choice does not serve e, and K - 1 when K is every app with a bundle (the others
are all served by that choice minus e; there are only K - 1 of them) - the case of every
auction of the simulator's Workload-2 run captured with two or more starving apps (317 of
317) and of 27 of 31 captured bench_rounds auctions. Otherwise the branch and bound
searches again, starting from the largest choice minus e.
"""

from __future__ import annotations

from collections.abc import Sequence

from themis.arbiter.solvers.base import Bundle, PackingProblem, SolverUnavailable
from themis.arbiter.solvers.bnb import BranchAndBoundSolver


class MaxServed:
    """Maximum number of apps served at once among ``menus`` (each app's bundle masks),
    with everyone (``maximum(None)``) and without app e (``maximum(e)``, e an index into
    ``menus``); None when the branch and bound exceeds ``node_limit`` nodes."""

    def __init__(self, n_gpus: int, menus: Sequence[Sequence[int]], node_limit: int) -> None:
        self.problem = PackingProblem(n_gpus, tuple(
            tuple(Bundle(m, 1.0) for m in masks) for masks in menus))
        self.bidders = sum(1 for masks in menus if masks)  # apps with a bundle
        # one solver: the searches without apps reuse the components and optimum of the first
        self._bnb = BranchAndBoundSolver(node_limit)
        self._max: dict[int | None, int | None] = {}
        self.served: tuple[bool, ...] = ()  # the apps a largest choice serves

    def maximum(self, excluded: int | None) -> int | None:
        if None not in self._max:
            self._search([None])
        whole = self._max[None]
        if whole is None or excluded is None or not self.served[excluded]:
            return whole
        if whole == self.bidders:
            return whole - 1
        if excluded not in self._max:
            self._search([e for e, s in enumerate(self.served) if s])
        return self._max[excluded]

    def _search(self, keys: list[int | None]) -> None:
        """The branch and bound without each of ``keys`` (None: without none)."""
        try:
            sols = self._bnb.solve_many(self.problem, keys)
        except SolverUnavailable as exc:  # over budget: keep the maxima found before
            sols = list(exc.done)
            for key in keys[len(sols):]:
                self._max[key] = None
        for key, sol in zip(keys, sols, strict=False):
            self._max[key] = round(sol.objective)
            if key is None:
                self.served = tuple(c >= 0 for c in sol.choice)
