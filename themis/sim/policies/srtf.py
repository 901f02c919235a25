"""SRTF (section 6.1): apps report their remaining time with the GPUs they could get from
the offer (held + min(room, free)) and are served shortest-first; each gets its
best-placed bundle, so better packing shortens remaining times (efficiency secondary)."""

from __future__ import annotations

from themis.mechanism.fairness import remaining_time
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


class SrtfPolicy(Policy):
    name = "srtf"

    def allocate(self, ctx: RoundContext) -> Allocation:
        free = len(ctx.free)

        def key(app: AppState, _n: int) -> tuple[float, ...]:
            n = len(app.held) + min(app.room(), free)
            return (remaining_time(app.model(), n),)

        return greedy(ctx, key, unit=False, placement_aware=True)
