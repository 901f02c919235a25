"""Gavel-style finish-time fairness (Narayanan et al., OSDI 2020), placement-unaware:
minimise the max rho greedily - one GPU at a time to the app with the largest rho at its
tentative allocation, with the slowdown ignored (S = 1) and GPUs taken first-fit. Gavel
solves this as a convex program over time shares; with indivisible GPUs and leases the
greedy water-filling is its natural round-based counterpart."""

from __future__ import annotations

from themis.agent.fairness import rho
from themis.cluster.topology import Locality
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


class GavelFtfPolicy(Policy):
    name = "gavel"

    def allocate(self, ctx: RoundContext) -> Allocation:
        models = {a.spec.id: a.model() for a in ctx.apps}
        fctx = {a.spec.id: ctx.fairness(a.spec.id) for a in ctx.apps}

        def key(app: AppState, n: int) -> tuple[float, ...]:
            m = models[app.spec.id]
            return (-rho(m, len(app.held) + n, Locality.SLOT, fctx[app.spec.id]),)

        return greedy(ctx, key, unit=True, placement_aware=False)
