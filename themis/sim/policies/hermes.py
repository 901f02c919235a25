"""Hermes (Son et al., Electronics 2021), convergence-aware priority, at app granularity.

Hermes' node scheduler runs, each time quantum, the jobs with the largest convergence
C(i) = relative decrease of the (smoothed) loss over the last quantum (its section 3 and
Algorithm 3); never-run jobs get their first quantum first. Here the quantum is the lease:
at each round an app's C is (L_prev - L_now) / L_prev measured since the previous round
it was seen (its best running job, i.e. the most promising hyper-parameter set), apps
without feedback yet come first (FIFO), then by largest C; each app takes all it can use,
first fit. Time-sharing of one GPU by several containers is not modelled.
"""

from __future__ import annotations

import math

from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


class HermesPolicy(Policy):
    name = "hermes"

    def __init__(self) -> None:
        self.last_loss: dict[str, float] = {}
        self.conv: dict[str, float] = {}

    def observe_finish(self, app: AppState, now: float) -> None:
        self.last_loss.pop(app.spec.id, None)
        self.conv.pop(app.spec.id, None)

    def allocate(self, ctx: RoundContext) -> Allocation:
        for a in ctx.apps:
            loss = a.loss()
            prev = self.last_loss.get(a.spec.id)
            if prev is not None and prev > 0 and loss < prev:
                self.conv[a.spec.id] = (prev - loss) / prev
            self.last_loss[a.spec.id] = loss

        def key(app: AppState, _n: int) -> tuple[float, ...]:
            c = self.conv.get(app.spec.id)
            return (0.0, app.spec.arrival) if c is None else (1.0, -c if math.isfinite(c) else 0)

        return greedy(ctx, key, unit=False, placement_aware=False)
