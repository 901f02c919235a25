"""Shared greedy allocator of the baselines (section 6.1: "on any resource availability,
all apps report <metric> and we allocate ... in order of <metric>").

``greedy`` serves apps in ascending ``key`` order. With ``unit=True`` it hands out one GPU
at a time and re-scores the app that got it (Optimus, SLAQ, Gavel-FTF); otherwise an app
takes all it can use at once (its room). GPUs are chosen placement-aware (best-placed) or
placement-unaware (first fit), see :mod:`themis.sim.policies.packing`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from themis.sim.policies.base import Allocation, RoundContext
from themis.sim.policies.packing import FreePool
from themis.sim.state import AppState

Key = Callable[[AppState, int], tuple[float, ...]]  # (app, GPUs given so far) -> priority


def greedy(ctx: RoundContext, key: Key, *, unit: bool, placement_aware: bool) -> Allocation:
    pool = FreePool(ctx.free, ctx.topology)
    rooms = {a.spec.id: a.room() for a in ctx.apps}
    given: dict[str, list[str]] = {}
    heap: list[tuple[tuple[float, ...], float, str]] = []
    by_id = {a.spec.id: a for a in ctx.apps}
    for a in ctx.apps:
        if rooms[a.spec.id] > 0:
            heap.append((key(a, 0), a.spec.arrival, a.spec.id))
    heapq.heapify(heap)
    while heap and len(pool):
        _, _, app_id = heapq.heappop(heap)
        app = by_id[app_id]
        got = given.setdefault(app_id, [])
        k = 1 if unit else rooms[app_id] - len(got)
        if placement_aware:
            held = [ctx.topology[g] for g in (*app.held, *got)]
            gpus = pool.best_placed(k, held)
        else:
            gpus = pool.first_fit(k)
        got.extend(g.id for g in gpus)
        if unit and len(got) < rooms[app_id]:
            heapq.heappush(heap, (key(app, len(got)), app.spec.arrival, app_id))
    return {a: tuple(sorted(gs)) for a, gs in given.items() if gs}
