"""YARN node labels (partitions): which apps a round may offer each partition's free GPUs.

Themis's paper has one pool of GPUs (section 3.3). A YARN cluster with node labels splits
its nodes into partitions: the default partition (nodes without a label) and one per label.
An app's asks name one partition (their node-label expression, or its queue's
``default-node-label-expression``), and a queue may use a label only when it is among its
``accessible-node-labels``, with a guarantee and a maximum per label (the per-label
``capacity`` and ``maximum-capacity``). YARN's rules, kept here (docs/yarn.md,
"Partitions"):

1. **Each partition on its own.** The free GPUs of partition P are offered to the apps
   whose asks name P (and whose queue may access P); the queues share them by their
   guarantees and maxima *in P* (:func:`themis.yarn.queues.plan_rounds` on the view
   restricted to P: P's nodes, those apps, their GPUs held on P's nodes, the queues'
   entitlements in P). The paper's round - filter by f, auction, leftover - runs unchanged
   inside each partition, over that partition's GPUs only, so the leftover never crosses a
   partition either.
2. **Idle GPUs of a non-exclusive partition.** What P's own apps leave free in a
   *non-exclusive* P then goes to default-partition apps that still ask (YARN lets
   default-partition asks use a non-exclusive partition's idle resources, and applies no
   queue capacity there: the queues of those apps share them least-held-first, as queues
   without a guarantee). Each grant is a lease, so these GPUs come back to P's apps at the
   lease's expiry, when step 1 offers them to P's apps first. An exclusive partition's GPUs
   never reach an app outside it.

Without labels (every node and app in the default partition) this is one call of
:func:`~themis.yarn.queues.plan_rounds` over the whole view, i.e. the round as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from themis.mechanism.topology import Gpu
from themis.yarn.queues import QueueReport, RunRound, plan_rounds
from themis.yarn.view import DEFAULT_PARTITION, AppView, ClusterView, QueueView

#: a queue's access list that allows every label (CapacityScheduler's ``*``)
ANY_LABEL = "*"


@dataclass(slots=True)
class PartitionPlan:
    """The GPU ids granted per app; per partition, the queue reports of its own round
    (step 1) and the GPUs of a non-exclusive partition granted to default-partition apps
    (step 2), per app."""

    allocation: dict[str, list[str]] = field(default_factory=dict)
    reports: dict[str, dict[str, QueueReport]] = field(default_factory=dict)
    lent: dict[str, dict[str, int]] = field(default_factory=dict)


def may_use(app: AppView, partition: str) -> bool:
    """Whether step 1 offers ``partition``'s GPUs to ``app``: its asks name it and its queue
    may access it (every queue may use the default partition; an access list the view does
    not give is not checked)."""
    if app.partition != partition:
        return False
    if partition == DEFAULT_PARTITION or app.accessible is None:
        return True
    return partition in app.accessible or ANY_LABEL in app.accessible


def exclusive(view: ClusterView, partition: str) -> bool:
    """Whether ``partition`` is exclusive (a label the view does not list is: YARN's
    default); the default partition is nobody's to lend."""
    if partition == DEFAULT_PARTITION:
        return True
    for p in view.partitions:
        if p.partition == partition:
            return p.exclusive
    return True


def restrict(view: ClusterView, partition: str, apps: Sequence[str],
             queues: Sequence[QueueView] | None = None) -> ClusterView:
    """``view`` as seen from one partition: its nodes, the apps ``apps`` with their GPUs in
    use on those nodes, the leases on those nodes, and each queue's entitlement in the
    partition (``queues``: instead of the view's, for step 2); its apps' leases up for
    renewal there."""
    nodes = tuple(n for n in view.nodes if n.partition == partition)
    here = {n.node_id for n in nodes}
    wanted = set(apps)
    return replace(
        view,
        nodes=nodes,
        apps=tuple(replace(a, running_gpus={n: g for n, g in a.running_gpus.items()
                                            if n in here},
                           renewing={n: r for n, r in a.renewing.items() if n in here})
                   for a in view.apps if a.app_id in wanted),
        leases=tuple(x for x in view.leases if x.node_id in here),
        queues=tuple(queues) if queues is not None else tuple(
            q.in_partition(partition) for q in view.queues),
    )


def plan_partitions(view: ClusterView, offer: Sequence[Gpu], wanting: Mapping[str, int],
                    run: RunRound) -> PartitionPlan:
    """Share ``offer`` (the round's free GPUs) by partition and run the queues' rounds in
    each through ``run`` (see the module docstring); ``wanting``: app -> GPUs asked."""
    plan = PartitionPlan()
    part_of = {n.node_id: n.partition for n in view.nodes}
    by_part: dict[str, list[Gpu]] = {}
    for g in offer:
        by_part.setdefault(part_of.get(g.machine, DEFAULT_PARTITION), []).append(g)
    apps = {a.app_id: a for a in view.apps}
    # 1. each partition's GPUs to the apps that ask for it, shared by the queues' capacities
    for p in sorted(by_part):
        mine = sorted(a for a in wanting if a in apps and may_use(apps[a], p))
        if not mine:
            continue
        # every app of the partition stays in its view: what the ones that ask nothing hold
        # there counts against their queue's maximum (themis.yarn.queues.held_gpus)
        members = [a.app_id for a in view.apps if may_use(a, p)]
        got = plan_rounds(restrict(view, p, members), by_part[p],
                          {a: wanting[a] for a in mine}, run)
        _merge(plan, got.allocation)
        if got.reports:
            plan.reports[p] = got.reports
    # 2. idle GPUs of a non-exclusive partition to default-partition apps that still ask
    granted = {g for gs in plan.allocation.values() for g in gs}
    for p in sorted(by_part):
        spare = [g for g in by_part[p] if g.id not in granted]
        if not spare or exclusive(view, p):
            continue
        room = {a: wanting[a] - len(plan.allocation.get(a, ())) for a in sorted(wanting)
                if a in apps and may_use(apps[a], DEFAULT_PARTITION)}
        room = {a: n for a, n in room.items() if n > 0}
        if not room:
            continue
        # no queue capacity applies to a non-exclusive partition's idle GPUs in YARN: each
        # queue without a guarantee, up to every GPU of the partition
        everything = sum(max(0, n.total_gpus) for n in view.nodes if n.partition == p)
        queues = [QueueView(q.queue, 0, everything) for q in view.queues]
        members = [a.app_id for a in view.apps if may_use(a, DEFAULT_PARTITION)]
        got = plan_rounds(restrict(view, p, members, queues), spare, room, run)
        _merge(plan, got.allocation)
        plan.lent[p] = {a: len(ids) for a, ids in sorted(got.allocation.items())}
    return plan


def _merge(plan: PartitionPlan, allocation: Mapping[str, Sequence[str]]) -> None:
    for app, ids in allocation.items():
        plan.allocation.setdefault(app, []).extend(ids)
