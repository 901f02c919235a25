"""SRSF (section 6.1, Tiresias [13]): apps report their remaining service (serial
GPU-seconds of work left, known exactly) and GPUs go one at a time to the app with the
least remaining service. Placement-unaware."""

from __future__ import annotations

from themis.mechanism.fairness import remaining_time
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


def remaining_service(app: AppState) -> float:
    """Serial GPU-seconds left: the agent's remaining time on one GPU."""
    return remaining_time(app.model(), 1)


class SrsfPolicy(Policy):
    name = "srsf"

    def allocate(self, ctx: RoundContext) -> Allocation:
        cache = {a.spec.id: remaining_service(a) for a in ctx.apps}

        def key(app: AppState, _n: int) -> tuple[float, ...]:
            return (cache[app.spec.id],)

        return greedy(ctx, key, unit=True, placement_aware=False)
