"""Instantaneous fair share: what a YARN FairScheduler queue does (its default intra-queue
policy ``fair``, or ``drf`` - Dominant Resource Fairness, Ghodsi et al., NSDI 2011 - which
with GPUs as the only scheduled resource is the same thing): every active app with demand
is entitled to an equal share of the GPUs, an app that needs less than its share leaves
the rest to the others, and a freed container goes to the app furthest below its share
(``FairSharePolicy``'s comparator: lowest usage first, ties by start time). That is
max-min fair water-filling on the GPU count.

Here: the free GPUs go one at a time to the app with the fewest GPUs (held + given this
round) that can still use one, ties by arrival then id; placement-unaware (first fit, an
app first gets back the GPUs whose lease it just lost, :mod:`themis.sim.policies.place`).
Apps' held leases are never preempted (the lease framework of all baselines), so the
equal share is reached at lease expiries, as FairScheduler reaches it by preemption after
its fair-share timeout.
"""

from __future__ import annotations

import heapq

from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.place import place


class FairSharePolicy(Policy):
    name = "fairshare"

    def allocate(self, ctx: RoundContext) -> Allocation:
        rooms = {a.spec.id: a.room() for a in ctx.apps}
        heap = [(len(a.held), a.spec.arrival, a.spec.id) for a in ctx.apps if rooms[a.spec.id] > 0]
        heapq.heapify(heap)
        counts: dict[str, int] = {}
        left = len(ctx.free)
        while heap and left > 0:
            have, arrival, app_id = heapq.heappop(heap)
            got = counts.get(app_id, 0) + 1
            counts[app_id] = got
            left -= 1
            if got < rooms[app_id]:
                heapq.heappush(heap, (have + 1, arrival, app_id))
        order = sorted(counts, key=lambda a: (-counts[a], a))
        return place(ctx, {a: counts[a] for a in order})
