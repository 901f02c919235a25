"""Split auction: a large round as independent partial-allocation sub-auctions.

Above a measured size (:class:`~themis.mechanism.solvers.split.SplitPolicy`) the exact
auction's solves have an unbounded tail (1,024 GPUs x 200 bidders: 0.5-1 s median, up to
tens of seconds; bench/RESULTS.md, "Split auction"). POP (Narayanan et al., SOSP 2021)
bounds such problems by splitting resources and jobs into k parts and solving each alone.
Here:

* the offered GPUs are dealt to k parts in whole groups (a rack's offered GPUs by default,
  or a machine's): groups in a seeded random order, largest first, each to the part with
  the fewest GPUs so far (parts differ by at most one group);
* the bidders are dealt one by one, starving ones (rho_current = inf) first, each group in
  a seeded random order: each to the part, among those with room, inside which most of
  its bundles lie (room: equal numbers of bidders, and of starving bidders, per part).
  POP deals jobs at random; here that lost 25-35% of the proportional-fair objective at 4
  parts (agents' menus name few placements, mostly the same machines), this 3-5%;
* each bidder keeps only its bids whose bundle lies inside its part's GPUs. A bundle that
  spans parts is dropped: that is the split's cost (the placements of a bidder outside
  its part, and trades of GPUs between bidders of different parts, are lost).

The restricted problem's independent components (:mod:`themis.mechanism.solvers.components`)
lie within parts, so the exact auction's own machinery solves each part on its own, with
its hidden payments computed within the part: log c_i = (OPT_p - g_i) - OPT_p^-i. Each part
is the partial-allocation auction of its bidders (over their bids inside it) and its GPUs.
The partition depends on the round's seeded RNG, the bidders' ids, which of them hold no
GPU, the offer's topology and which GPUs each bid names - never on the rho values bid -
so misreporting rho (the paper's lying app, section 6.3) cannot move a bidder to another
part, and the auction of its part stays strategy-proof, Pareto-efficient over the part's
bids, and envy-free in the Nash-welfare sense among the part's bidders
(``tests/unit/test_split_auction.py``). Across parts neither PE nor EF is guaranteed, and
a bidder that changed *which GPUs* its bundles name could change its part.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from themis.mechanism.bids import BidTable
from themis.mechanism.solvers.base import PackingProblem
from themis.mechanism.solvers.split import SplitPolicy
from themis.mechanism.topology import Gpu


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """Which part each bidder and each offered GPU belongs to (parts 0..n_parts-1)."""

    n_parts: int
    part_of_app: dict[str, int]
    part_of_gpu: dict[str, int]

    def gpus(self, part: int) -> set[str]:
        return {g for g, p in self.part_of_gpu.items() if p == part}

    def restrict(self, table: BidTable) -> BidTable:
        """``table`` with only the bids whose bundle lies inside its app's part."""
        p = self.part_of_app[table.app_id]
        where = self.part_of_gpu
        bids = tuple(b for b in table.bids if all(where[g] == p for g in b.gpus))
        return BidTable(table.app_id, table.rho_current, bids)


def plan_split(
    offer: Sequence[Gpu], tables: Sequence[BidTable], policy: SplitPolicy, rng: random.Random
) -> SplitPlan | None:
    """The round's partition, or None when ``policy`` does not split it (then ``rng`` is
    not used). Depends on the tables' app ids and which are starving, not on their order
    or bids."""
    groups: dict[str, list[str]] = {}
    for g in offer:
        groups.setdefault(g.rack if policy.group == "rack" else g.machine, []).append(g.id)
    k = min(policy.parts(len(offer), len(tables)), len(groups))
    if k <= 1:
        return None
    keys = list(groups)
    rng.shuffle(keys)
    keys.sort(key=lambda key: -len(groups[key]))  # stable: random among equal sizes
    load = [0] * k
    part_of_gpu: dict[str, int] = {}
    for key in keys:
        p = min(range(k), key=lambda q: (load[q], q))
        load[p] += len(groups[key])
        for gid in groups[key]:
            part_of_gpu[gid] = p
    part_of_app = _assign_bidders(tables, part_of_gpu, k, rng, policy.bidders == "footprint")
    return SplitPlan(k, part_of_app, part_of_gpu)


def _assign_bidders(
    tables: Sequence[BidTable], part_of_gpu: dict[str, int], k: int, rng: random.Random,
    by_footprint: bool = True,
) -> dict[str, int]:
    """Each bidder to the part, among those with room, inside which most of its bundles
    lie (ties: the part with fewer bidders, then the lower index); starving bidders first,
    each group in a seeded random order. Room: ceil(A / k) bidders per part, of which at
    most ceil(S / k) starving (S of the A bidders starve). Without ``by_footprint``, the
    first part with room, i.e. POP's random deal."""
    order = sorted(tables, key=lambda t: t.app_id)
    starving = [t for t in order if math.isinf(t.rho_current)]
    rest = [t for t in order if not math.isinf(t.rho_current)]
    rng.shuffle(starving)
    rng.shuffle(rest)
    cap = -(-len(tables) // k)
    cap_starving = -(-len(starving) // k)
    count = [0] * k
    count_starving = [0] * k
    out: dict[str, int] = {}
    for t in starving + rest:
        inside = [0] * k
        for b in t.bids if by_footprint else ():
            parts = {part_of_gpu[g] for g in b.gpus}
            if len(parts) == 1:
                inside[parts.pop()] += 1
        starves = math.isinf(t.rho_current)
        room = [p for p in range(k)
                if count[p] < cap and (not starves or count_starving[p] < cap_starving)]
        best = max(room, key=lambda p: (inside[p], -count[p], -p)) if by_footprint else room[0]
        out[t.app_id] = best
        count[best] += 1
        count_starving[best] += starves
    return out


def restrict_problem(
    problem: PackingProblem,
    origin: Sequence[Sequence[int]],
    tables: Sequence[BidTable],
    index: dict[str, int],
    plan: SplitPlan,
) -> tuple[PackingProblem, list[list[int]]]:
    """The auction's packing problem (apps in ``tables`` order, GPU bits by ``index``)
    with each app's bundles cut to those inside its part, and the matching ``origin``
    (bid index of each kept bundle). Gains are unchanged, so objectives stay comparable
    with the whole problem's."""
    part_mask = [0] * plan.n_parts
    for gid, p in plan.part_of_gpu.items():
        part_mask[p] |= 1 << index[gid]
    apps = []
    kept_origin: list[list[int]] = []
    for t, bundles, orig in zip(tables, problem.apps, origin, strict=True):
        outside = ~part_mask[plan.part_of_app[t.app_id]]
        keep = [k for k, b in enumerate(bundles) if not b.mask & outside]
        apps.append(tuple(bundles[k] for k in keep))
        kept_origin.append([orig[k] for k in keep])
    return PackingProblem(problem.n_gpus, tuple(apps), problem.starving), kept_origin
