"""Independent parts of a packing problem.

Two apps are linked when a bundle of one shares a GPU with a bundle of the other; the
connected components of that relation are independent sub-problems: the optimum is the
sum of the components' optima, and removing app i changes only i's component. The
auction (Pseudocode 1, lines 6-8) therefore solves each component on its own, and solves
the component of each winner again without it - instead of the whole offer N+1 times
(the symmetric rounds of ``bench_rounds`` often split into two components of ~10 apps
each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from themis.mechanism.solvers.base import PackingProblem


@dataclass(frozen=True, slots=True)
class Part:
    """One component: its sub-problem and, for each of its apps, the app's index in the
    whole problem (``apps[k]`` is the original index of the sub-problem's app k)."""

    problem: PackingProblem
    apps: tuple[int, ...]


def components(problem: PackingProblem) -> list[list[int]]:
    """Apps with at least one bundle, grouped into independent sub-problems (apps linked
    through the GPUs they name), members ascending, in order of their first app."""
    parts: list[tuple[int, list[int]]] = []  # (GPUs named, apps), each part disjoint
    for i, bundles in enumerate(problem.apps):
        if not bundles:
            continue
        union = 0
        for b in bundles:
            union |= b.mask
        members = [i]
        rest = []
        for mask, apps in parts:
            if mask & union:  # i links this part: merge it
                union |= mask
                members.extend(apps)
            else:
                rest.append((mask, apps))
        rest.append((union, members))
        parts = rest
    return sorted((sorted(apps) for _, apps in parts), key=lambda apps: apps[0])


def subproblem(problem: PackingProblem, members: Sequence[int]) -> PackingProblem:
    """The problem restricted to ``members`` (same GPU indices; starving apps renumbered)."""
    local = {i: k for k, i in enumerate(members)}
    return PackingProblem(
        problem.n_gpus,
        tuple(problem.apps[i] for i in members),
        tuple(local[i] for i in problem.starving if i in local),
    )


def split(problem: PackingProblem) -> list[Part]:
    """The independent parts of ``problem`` (apps without bundles belong to none). A
    problem that is one component comes back as itself."""
    comps = components(problem)
    if len(comps) == 1 and len(comps[0]) == len(problem.apps):
        return [Part(problem, tuple(comps[0]))]
    return [Part(subproblem(problem, members), tuple(members)) for members in comps]
