"""Optimus, the throughput baseline as the Themis paper implements it (section 6.1):
apps report their throughput scaling - new over old throughput with one more GPU - and
GPUs go one at a time to the highest ratio (apps with no GPU first: infinite ratio).
Throughput = remaining work / remaining time (Eq. 2 model, so per-job demand caps and
phases count); each GPU is the best-placed one for the app."""

from __future__ import annotations

import math

from themis.mechanism.fairness import remaining_time
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


class OptimusPolicy(Policy):
    name = "optimus"

    def allocate(self, ctx: RoundContext) -> Allocation:
        models = {a.spec.id: a.model() for a in ctx.apps}

        def key(app: AppState, n: int) -> tuple[float, ...]:
            m = models[app.spec.id]
            have = len(app.held) + n
            if have == 0:
                return (-math.inf,)
            old = remaining_time(m, have)
            new = remaining_time(m, have + 1)
            return (-(old / new) if new > 0 else 0.0,)

        return greedy(ctx, key, unit=True, placement_aware=True)
