"""Turning per-app GPU counts into GPUs, for the baselines that decide counts first
(FIFO, fair share, Gavel's round mechanism).

* An app first gets back the free GPUs whose lease it has just lost (``ctx.previous``):
  Gavel keeps a re-scheduled job on its current workers ("lease extension",
  ``Scheduler._schedule_jobs_on_workers``), and a YARN container keeps running on its node
  until it is released or preempted. A renewed GPU costs no restart (docs/simulator.md).
* The rest go first fit in cluster order (placement-unaware, see
  :mod:`themis.sim.policies.packing`), apps with the most GPUs still to place first, as
  Gavel assigns workers in decreasing scale factor to limit fragmentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress
from operator import attrgetter, not_

from themis.sim.policies.base import Allocation, RoundContext
from themis.sim.policies.packing import FreePool

_ID = attrgetter("id")


def place(ctx: RoundContext, counts: Mapping[str, int]) -> Allocation:
    """GPUs for ``counts`` (app id -> GPUs, in priority order; sum <= free GPUs)."""
    if sum(counts.values()) > len(ctx.free):
        raise ValueError(f"counts {dict(counts)} exceed the {len(ctx.free)} free GPUs")
    topo = ctx.topology
    previous: dict[str, list[str]] = {}
    if ctx.previous:
        free = ctx.free_id_set()
        for gid, holder in ctx.previous.items():
            if gid in free:
                previous.setdefault(holder, []).append(gid)
    out: dict[str, list[str]] = {}
    taken: set[str] = set()
    for app, k in counts.items():
        keep = sorted(previous.get(app, ()), key=topo.index)[: max(0, k)]
        out[app] = keep
        taken.update(keep)
    rest = sorted(counts, key=lambda a: -(counts[a] - len(out[a])))  # stable: priority order
    if any(counts[a] > len(out[a]) for a in rest):  # else no GPU comes from the pool
        pool = FreePool(
            compress(ctx.free, map(not_, map(taken.__contains__, map(_ID, ctx.free))))
            if taken else ctx.free, topo)
        for app in rest:
            need = counts[app] - len(out[app])
            if need > 0:
                out[app].extend(g.id for g in pool.first_fit(need))
    return {a: tuple(sorted(gs)) for a, gs in out.items() if gs}
