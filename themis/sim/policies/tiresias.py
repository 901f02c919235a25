"""Tiresias (Gu et al., NSDI 2019, section 4.1 there), Discretized 2D-LAS and 2D-Gittins,
at app granularity as the Themis paper uses it (section 6.1: the service metric is the
GPU-time attained).

* Attained service W*t = GPU-seconds the app has held (``AppState.service``).
* K = 2 queues (Tiresias' default "foreground-background" choice) with one threshold
  ``threshold_gpu_s``; Q1 is served before Q2.
* 2D-LAS: FIFO within a queue by *first start time* (apps never started come after
  started ones, by arrival), so running apps are not churned.
* 2D-Gittins: within a queue, the Gittins index with quantum Delta = the queue's upper
  threshold (infinite in the last queue, where it degenerates to FIFO), computed from the
  empirical distribution of total service of apps finished so far; LAS until
  ``min_history`` apps have finished.
* Starvation: an app that has waited without any GPU for ``starve_s`` is promoted to Q1
  (its service counter restarts, as in Tiresias' STARVELIMIT).
* An app takes all GPUs it can use (its room), first fit (placement-unaware, as the
  Themis paper states for LAS in section 3.1).
"""

from __future__ import annotations

import bisect
import math

from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState


class TiresiasPolicy(Policy):
    def __init__(
        self,
        gittins: bool = False,
        threshold_gpu_s: float = 3600.0 * 16,
        starve_s: float = 3600.0 * 4,
        min_history: int = 10,
    ) -> None:
        self.gittins = gittins
        self.name = "tiresias-gittins" if gittins else "tiresias"
        self.threshold = threshold_gpu_s
        self.starve_s = starve_s
        self.min_history = min_history
        self.history: list[float] = []  # sorted total services of finished apps
        self.offset: dict[str, float] = {}
        self.first_start: dict[str, float] = {}

    def observe_finish(self, app: AppState, now: float) -> None:
        bisect.insort(self.history, app.service)
        self.offset.pop(app.spec.id, None)
        self.first_start.pop(app.spec.id, None)

    def gittins_index(self, attained: float, delta: float) -> float:
        """P(S - a <= D | S > a) / E[min(S - a, D) | S > a] over the history."""
        i = bisect.bisect_right(self.history, attained)
        rest = self.history[i:]
        if not rest:
            return 0.0
        done = sum(1 for s in rest if s - attained <= delta)
        spent = sum(min(s - attained, delta) for s in rest)
        return (done / len(rest)) / (spent / len(rest)) if spent > 0 else math.inf

    def allocate(self, ctx: RoundContext) -> Allocation:
        now = ctx.now
        for a in ctx.apps:
            waited_since = a.last_scheduled if a.last_scheduled >= 0 else a.spec.arrival
            if not a.held and now - waited_since >= self.starve_s:
                self.offset[a.spec.id] = a.service  # promote to Q1
            if a.held and a.spec.id not in self.first_start:
                self.first_start[a.spec.id] = a.last_scheduled
        use_gittins = self.gittins and len(self.history) >= self.min_history

        def key(app: AppState, _n: int) -> tuple[float, ...]:
            attained = app.service - self.offset.get(app.spec.id, 0.0)
            queue = 0 if attained < self.threshold else 1
            start = self.first_start.get(app.spec.id, math.inf)
            fifo = (start, app.spec.arrival)
            if use_gittins and queue == 0:
                g = self.gittins_index(app.service, self.threshold)
                return (queue, -g, *fifo)
            return (queue, 0.0, *fifo)

        return greedy(ctx, key, unit=False, placement_aware=False)
