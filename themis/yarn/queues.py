"""CapacityScheduler queues: how one round's free GPUs are shared between leaf queues.

Themis's paper has no queues: one arbiter auctions every free GPU among all apps (section
3.3, Pseudocode 1). A YARN cluster divides its resources between leaf queues, each with a
guaranteed capacity and a maximum capacity. Themis keeps both, as hierarchical sharing
*above* the paper's per-app mechanism: each round first decides how many of the free GPUs
each queue gets, then runs the paper's round (:func:`themis.mechanism.round.run_round`:
filter by the fairness knob f, partial-allocation auction, leftover) among the apps of one
queue over that queue's GPUs. Finish-time fairness (rho) is thus compared within a queue;
between queues the admin's capacities decide.

A queue's *held* GPUs are those its apps hold (per node, the larger of the GPUs their
containers use and their live leases); its *demand* is what its apps ask for now. A round
over the free GPUs F:

1. **Guarantees.** Each queue with demand is entitled to ``min(guaranteed - held, demand,
   max - held)`` GPUs (nothing when it holds its guarantee). When F is smaller than the
   entitlements together, GPUs go one at a time to the queue of lowest ``held / guaranteed``
   (CapacityScheduler's own order: the queue furthest below its capacity first).
2. **Lending.** The GPUs left - guarantees of queues without demand, GPUs a queue's apps
   could not use in step 1 - are shared among the queues whose apps still ask, in the same
   order, up to each queue's ``max - held`` (a queue never exceeds its maximum capacity).

Each queue's GPUs are picked to keep it on as few nodes as possible (best fit: the node
whose free GPUs fit the share most tightly, else the node with the most free GPUs, and
repeat), and each step runs one paper round per queue over them. Every grant is a lease
(section 3.3.2): lent GPUs come back at their lease's expiry, when step 1 hands the owning
queue its guarantee before anything is lent again.

With one queue (every app in ``default``, the stock configuration) or a view without
queues, a round is exactly the paper's round over every free GPU, as without this module;
a lone queue with demand whose maximum capacity is below the free GPUs gets a compact pick
of ``max - held`` of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from themis.mechanism.topology import Gpu
from themis.yarn.view import ClusterView, QueueView, occupied_per_node


@dataclass(frozen=True, slots=True)
class QueueRound:
    """One paper round to run: ``apps`` (each wanting at most ``room[app]`` GPUs) over
    ``gpus``; ``phase`` is ``all`` (no sharing between queues), ``guarantee`` or ``lend``."""

    queue: str
    phase: str
    gpus: tuple[Gpu, ...]
    apps: tuple[str, ...]
    room: dict[str, int]


@dataclass(slots=True)
class QueueReport:
    """Per queue: entitlement, GPUs held before the round, GPUs granted by phase."""

    queue: QueueView
    held: int
    demand: int
    guarantee_gpus: int = 0
    lent_gpus: int = 0

    def info(self) -> dict[str, int]:
        return {"guaranteed_gpus": self.queue.guaranteed_gpus, "max_gpus": self.queue.max_gpus,
                "held_gpus": self.held, "demand_gpus": self.demand,
                "granted_guarantee_gpus": self.guarantee_gpus, "lent_gpus": self.lent_gpus}


@dataclass(slots=True)
class Plan:
    """The GPUs granted per app (ids) and the per-queue report (empty without queues)."""

    allocation: dict[str, list[str]] = field(default_factory=dict)
    reports: dict[str, QueueReport] = field(default_factory=dict)


RunRound = Callable[[QueueRound], Mapping[str, Sequence[str]]]
"""Runs one paper round; returns the GPU ids granted per app (a subset of the round's)."""


def held_gpus(view: ClusterView) -> dict[str, int]:
    """GPUs each app holds (:func:`themis.yarn.view.occupied_per_node`: a GPU handed over
    counts once), summed over nodes."""
    per = occupied_per_node(view)
    return {a.app_id: sum(per.get(a.app_id, {}).values()) for a in view.apps}


def shares(free: int, caps: Mapping[str, int], held: Mapping[str, int],
           guaranteed: Mapping[str, int]) -> dict[str, int]:
    """Hand ``free`` GPUs out one at a time, each to the queue of lowest ``held / guaranteed``
    (held counting what it got so far; queues without a guarantee come last, least held
    first; ties by name) among the queues below their ``caps``."""
    got = {q: 0 for q in caps}

    def key(q: str) -> tuple[int, float, str]:
        h = held.get(q, 0) + got[q]
        g = guaranteed.get(q, 0)
        return (0, h / g, q) if g > 0 else (1, float(h), q)

    for _ in range(max(0, free)):
        open_ = [q for q in caps if got[q] < caps[q]]
        if not open_:
            break
        got[min(open_, key=key)] += 1
    return {q: n for q, n in got.items() if n > 0}


def pick(gpus: Sequence[Gpu], counts: Mapping[str, int]) -> tuple[dict[str, tuple[Gpu, ...]],
                                                                  list[Gpu]]:
    """Choose ``counts[q]`` of ``gpus`` for each queue, largest share first, keeping each
    share on few nodes: the node whose free GPUs fit the rest of the share most tightly,
    else the node with the most free GPUs, until the share is complete. Returns the picks
    (in ``gpus`` order) and the GPUs left (in ``gpus`` order)."""
    by_node: dict[str, list[Gpu]] = {}
    for g in gpus:
        by_node.setdefault(g.machine, []).append(g)
    chosen: dict[str, set[str]] = {}
    for q in sorted(counts, key=lambda q: (-counts[q], q)):
        need, ids = counts[q], chosen.setdefault(q, set())
        while need > 0 and by_node:
            fits = [(len(v), m) for m, v in by_node.items() if len(v) >= need]
            node = min(fits)[1] if fits else max(by_node, key=lambda m: (len(by_node[m]), m))
            take, by_node[node] = by_node[node][:need], by_node[node][need:]
            if not by_node[node]:
                del by_node[node]
            ids.update(g.id for g in take)
            need -= len(take)
    picks = {q: tuple(g for g in gpus if g.id in ids) for q, ids in chosen.items() if ids}
    taken = set().union(*chosen.values()) if chosen else set()
    return picks, [g for g in gpus if g.id not in taken]


def plan_rounds(view: ClusterView, offer: Sequence[Gpu], wanting: Mapping[str, int],
                run: RunRound) -> Plan:
    """Share ``offer`` (the round's free GPUs) between the queues and run the paper's round
    per queue through ``run`` (see the module docstring); ``wanting``: app -> GPUs asked."""
    plan = Plan()
    queue_of = {a.app_id: a.queue for a in view.apps}
    apps = sorted(wanting)
    if not view.queues:
        _run(plan, run, QueueRound("", "all", tuple(offer), tuple(apps), dict(wanting)))
        return plan
    table = {q.queue: q for q in view.queues}
    held_app = held_gpus(view)
    members: dict[str, list[str]] = {}
    for a in apps:
        members.setdefault(queue_of[a], []).append(a)
    for name in sorted(members):
        q = table[name]
        plan.reports[name] = QueueReport(
            q, sum(n for a, n in held_app.items() if queue_of.get(a) == name),
            sum(wanting[a] for a in members[name]))
    reports = plan.reports
    headroom = {q: max(0, r.queue.max_gpus - r.held) for q, r in reports.items()}
    if len(members) == 1:
        (name,) = members
        mine = tuple(offer)
        if headroom[name] < len(mine):
            mine = pick(mine, {name: headroom[name]})[0].get(name, ())
        if mine:
            got = _run(plan, run, QueueRound(name, "all", mine, tuple(apps),
                                             dict(wanting)))
            r = reports[name]  # the part up to the guarantee, the rest borrowed
            r.guarantee_gpus = min(got, max(0, r.queue.guaranteed_gpus - r.held))
            r.lent_gpus = got - r.guarantee_gpus
        return plan
    held = {q: r.held for q, r in reports.items()}
    guaranteed = {q: r.queue.guaranteed_gpus for q, r in reports.items()}
    # 1. guarantees: unmet guarantee, capped by demand and by the maximum capacity
    caps = {q: min(max(0, guaranteed[q] - held[q]), r.demand, headroom[q])
            for q, r in reports.items()}
    picks, _ = pick(offer, shares(len(offer), caps, held, guaranteed))
    for name, gpus in sorted(picks.items()):
        got = _run(plan, run, QueueRound(name, "guarantee", gpus, tuple(members[name]),
                                         {a: wanting[a] for a in members[name]}))
        reports[name].guarantee_gpus = got
    # 2. lending: the GPUs nobody took, to the queues whose apps still ask, up to the maximum
    granted = {g for gs in plan.allocation.values() for g in gs}
    spare = [g for g in offer if g.id not in granted]
    room = {a: max(0, wanting[a] - len(plan.allocation.get(a, ()))) for a in apps}
    caps = {q: min(sum(room[a] for a in members[q]), headroom[q] - r.guarantee_gpus)
            for q, r in reports.items()}
    held = {q: held[q] + r.guarantee_gpus for q, r in reports.items()}
    picks, _ = pick(spare, shares(len(spare), caps, held, guaranteed))
    for name, gpus in sorted(picks.items()):
        wants = tuple(a for a in members[name] if room[a] > 0)
        got = _run(plan, run, QueueRound(name, "lend", gpus, wants,
                                         {a: room[a] for a in wants}))
        reports[name].lent_gpus = got
    return plan


def _run(plan: Plan, run: RunRound, r: QueueRound) -> int:
    """Run one round, check it granted only its own GPUs once each, record its grants;
    returns the number of GPUs granted."""
    mine = {g.id for g in r.gpus}
    seen: set[str] = set()
    for app, gpus in run(r).items():
        ids = list(gpus)
        bad = [g for g in ids if g not in mine or g in seen]
        if app not in r.room or bad:
            raise RuntimeError(f"queue {r.queue!r} ({r.phase}): round granted {app!r} GPUs "
                               f"{bad or ids} outside its offer or twice")
        seen.update(ids)
        plan.allocation.setdefault(app, []).extend(ids)
    return len(seen)
