"""FIFO: what a YARN CapacityScheduler queue does by default (its intra-queue ordering
policy ``fifo``, ``yarn.scheduler.capacity.<queue>.ordering-policy``): apps are served in
submission order, and the app at the head of the queue gets every container it asks for
before the next app gets any.

Here: apps by arrival (ties by id); each takes all the GPUs it can use now (its room),
the next app gets what is left. Within an app the simulator's in-app scheduler splits the
GPUs among its jobs (docs/simulator.md; it serves the jobs with the most work left first,
not the app's job order - the policy only decides GPUs per app). Placement-unaware (YARN
does not see the GPU topology); an app gets back the GPUs whose lease it just lost, like a
container that keeps running (:mod:`themis.sim.policies.place`). Like every baseline it
runs in the lease framework: GPUs change hands only when a lease expires, so an earlier app
takes a later app's GPUs back at the later app's lease expiry (YARN's cross-queue
preemption plays that role; within one queue YARN would wait for the container to end).
"""

from __future__ import annotations

from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.place import place


class FifoPolicy(Policy):
    name = "fifo"

    def allocate(self, ctx: RoundContext) -> Allocation:
        left = len(ctx.free)
        counts: dict[str, int] = {}
        for app in sorted(ctx.apps, key=lambda a: (a.spec.arrival, a.spec.id)):
            if left == 0:
                break
            k = min(app.room(), left)
            if k > 0:
                counts[app.spec.id] = k
                left -= k
        return place(ctx, counts)
