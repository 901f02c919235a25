"""Gandiva, the efficiency baseline as the Themis paper implements it (section 6.1):
"all apps report their placement preferences and we allocate resources in a greedy
highest preference first manner". An app's preference strength is how much it loses when
spread (its cross-rack slowdown S); the most placement-sensitive apps pick first (FIFO
among equals) and each gets its best-placed bundle. Time-slicing/packing of GPUs is not
modelled (as in the paper)."""

from __future__ import annotations

from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


class GandivaPolicy(Policy):
    name = "gandiva"

    def allocate(self, ctx: RoundContext) -> Allocation:
        def key(app: AppState, _n: int) -> tuple[float, ...]:
            return (-app.profile.cluster,)

        return greedy(ctx, key, unit=False, placement_aware=True)
