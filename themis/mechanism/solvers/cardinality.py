"""The most starving apps that can get a bundle at once (for lpbb's count cut).

The auction's lexicographic bonus (themis.mechanism.auction) makes the optimum serve as many
starving apps as the menus allow; the LP relaxation cannot see that limit when several
menus name the same few GPUs (a pigeonhole), so lpbb cuts the number served down to this
maximum. Every bundle is worth 1 here, so a bundle that contains another bundle of the
same app is never needed: each menu is reduced to its minimal bundles.

**Apps with the same reduced menu are interchangeable.** The search therefore runs over
*classes* of apps with the same menu, each with its number of apps m: a class is served
by a set of pairwise disjoint bundles of its menu, at most m of them (which of its apps
gets which bundle does not matter). The rounds of ``bench_rounds`` have ~10 starving
apps in 3-4 classes per part; searching app by app explored the orders of each class
(~30,000 nodes, ~100 ms a search, often past the budget); by class, on 300 captured parts:
at most 120 nodes with everyone, 315 for all the searches without an app.

Depth-first over the classes (fewest bundles first), each class's choices largest first,
bounded by: served so far + for each class left, min(m, its bundles still free). The
choices are built lazily (one visited, and counted against the budget, before the next),
and for the last class only one choice per size is tried (the others end the same).

The maximum without app e is the maximum with e's class one app smaller: it is K (the
maximum with everyone) when a largest choice found leaves an app of e's class unserved,
K - 1 when K is every app with a bundle (the case of every auction of the simulator's
Workload-2 run captured with two or more starving apps, 317 of 317), and otherwise found
by a search that starts from K - 1 and stops as soon as it reaches K - once per class.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class BudgetExceeded(Exception):
    """A search needed more than its node budget."""


def minimal(masks: Sequence[int]) -> tuple[int, ...]:
    """The bundles of a menu that contain no other bundle of it (each once), smallest
    first."""
    out: list[int] = []
    for m in sorted(set(masks), key=lambda m: (m.bit_count(), m)):
        if not any(o & m == o for o in out):
            out.append(m)
    return tuple(out)


class MaxServed:
    """Maximum number of apps served at once among ``menus`` (each app's bundle masks),
    with everyone (``maximum(None)``) and without app e (``maximum(e)``, e an index into
    ``menus``); None when a search exceeds ``node_limit`` nodes."""

    def __init__(self, menus: Sequence[Sequence[int]], node_limit: int) -> None:
        self.node_limit = node_limit
        self.nodes = 0  # statistics: nodes of every search so far
        reduced = [minimal(masks) for masks in menus]
        index: dict[tuple[int, ...], int] = {}
        self.class_of: list[int] = []  # app -> its class (-1: no bundle)
        for menu in reduced:
            self.class_of.append(index.setdefault(menu, len(index)) if menu else -1)
        bundles = sorted(index, key=index.__getitem__)
        self.bundles = tuple(bundles)  # class -> its bundles
        self.size = [0] * len(bundles)  # class -> its number of apps
        for c in self.class_of:
            if c >= 0:
                self.size[c] += 1
        self.bidders = sum(self.size)  # apps with a bundle
        self._max: dict[int | None, int | None] = {}  # class left one app short -> maximum
        self._served: list[int] = []  # apps of each class a largest choice serves

    def maximum(self, excluded: int | None) -> int | None:
        if None not in self._max:
            found = self._search(self.size, 0, None)
            self._max[None] = None if found is None else sum(found)
            self._served = found or []
        whole = self._max[None]
        if whole is None or excluded is None:
            return whole
        c = self.class_of[excluded]
        if c < 0 or self._served[c] < self.size[c]:
            return whole  # a largest choice that leaves one of c's apps out
        if whole == self.bidders:
            return whole - 1
        if c not in self._max:
            size = list(self.size)
            size[c] -= 1
            found = self._search(size, whole - 1, whole)
            self._max[c] = None if found is None else max(whole - 1, sum(found))
        return self._max[c]

    def _search(self, size: Sequence[int], lower: int,
                target: int | None) -> list[int] | None:
        """Apps served per class by a largest choice with ``size[c]`` apps in class c
        (an empty list when none beats ``lower``), stopping early at ``target``; None
        over budget."""
        order = sorted((c for c in range(len(size)) if size[c] > 0),
                       key=lambda c: (len(self.bundles[c]), c))
        goal = sum(min(size[c], len(self.bundles[c])) for c in order)
        if target is not None:
            goal = min(goal, target)
        best: list[int] = [lower]
        best_served: list[list[int]] = [[]]
        served = [0] * len(size)
        nodes = [0]

        def visit(k: int, used: int, count: int) -> None:
            """Classes order[k:] left; ``count`` apps served so far."""
            nodes[0] += 1
            if nodes[0] > self.node_limit:
                raise BudgetExceeded
            if k == len(order):
                if count > best[0]:
                    best[0] = count
                    best_served[0] = list(served)
                return
            c = order[k]
            fitting = [m for m in self.bundles[c] if not m & used]
            # bound of the later classes after any choice for c: min(m, bundles still free)
            rest = sum(min(size[d], sum(1 for m in self.bundles[d] if not m & used))
                       for d in order[k + 1:])
            if count + min(size[c], len(fitting)) + rest <= best[0]:
                return
            last = k + 1 == len(order)
            # choices for class c: sets of pairwise disjoint fitting bundles, at most
            # size[c] of them, larger sets first
            for n in range(min(size[c], len(fitting)), -1, -1):
                if count + n + rest <= best[0]:
                    break  # neither this nor a smaller set can beat the incumbent
                for mask in _disjoint_sets(fitting, n, used):
                    served[c] = n
                    visit(k + 1, mask, count + n)
                    if best[0] >= goal:
                        return
                    if last:
                        break  # any other n bundles of the last class end the same
            served[c] = 0

        try:
            visit(0, 0, 0)
        except BudgetExceeded:
            return None
        finally:
            self.nodes += nodes[0]
        return best_served[0]


def _disjoint_sets(bundles: Sequence[int], n: int, used: int) -> Iterator[int]:
    """``used`` plus each way of choosing n pairwise disjoint bundles among ``bundles``
    (none of which meets ``used``), as the resulting masks (each once). Lazy: the search
    visits (and counts against its budget) one choice before the next is built, so a
    large class cannot make it enumerate C(bundles, n) sets at once."""
    seen: set[int] = set()

    def pick(start: int, left: int, mask: int) -> Iterator[int]:
        if left == 0:
            if mask not in seen:
                seen.add(mask)
                yield mask
            return
        for j in range(start, len(bundles) - left + 1):
            if not bundles[j] & mask:
                yield from pick(j + 1, left - 1, mask | bundles[j])

    return pick(0, n, used)
