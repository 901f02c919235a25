"""YARN's placement of an app's jobs (the control loop's ``place`` step for containers):
where to ask for a job's container and when to stop one or give GPUs back.

The AM knows its leases by GPU id ``<node>/<k>`` but YARN allocates containers: the AM asks
for node-local containers (``relaxLocality=false``) with a GPU count, on nodes where it holds
usable leases (:mod:`themis.am.margins`), and the RM commits them only there. Each pass:

1. runs on nodes where the app no longer holds enough usable GPUs are stopped (checkpoint);
2. runs of trials Hyperband no longer runs are stopped, their pending asks withdrawn;
3. every waiting job, in the core's job order, gets one node-local ask: on a node with free
   placeable GPUs, else parked on the demand node (the pending ask is what makes the app
   take part in rounds; the RM commits nothing there without a lease);
4. GPUs the app cannot use are given back: leases about to end at once, others after
   ``idle_release_s`` without a job to place on them. On a node, the GPUs of the
   soonest-ending leases go first: YARN counts GPUs per node, so the RM cuts a give-back
   from the app's soonest-ending leases there (``LeaseTable.shrink``), whichever ids the
   AM names. Naming others would leave the AM counting its runs there against a lease the
   RM no longer has, and stopping them when that lease ends although the RM's lease on the
   node goes on (and would be renewed in place).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from themis.am.hyperband import JobStatus
from themis.am.launchers.yarn.launcher import HOLDING
from themis.am.launchers.yarn.records import Run, node_of

if TYPE_CHECKING:
    from themis.am.launchers.yarn.am import AppMaster

log = logging.getLogger("themis.am.launchers.yarn.am")


def stop_unrun(am: AppMaster) -> None:
    """Runs of jobs Hyperband no longer runs: stop early-stopped ones, withdraw asks (with
    an arbiter or without one, themis.am.launchers.yarn.stock)."""
    for r in am.runs:
        job = am.hb.jobs.get(r.job_id)
        if job is None or job.status is JobStatus.RUNNING:
            continue
        if r.state == "requested" or (r.live and job.status is JobStatus.STOPPED):
            am._stop(r, f"job is {job.status.value}")


def reconcile(am: AppMaster, now: float, usable: dict[str, float],
              placeable: dict[str, float]) -> None:
    """One placement pass of ``am`` (module docstring)."""
    held = Counter(node_of(g) for g in usable)
    room = Counter(node_of(g) for g in placeable)
    g = am.spec.job_gpus()  # a job's GPUs (all of a distributed job's workers')
    holding = [r for r in am.runs if r.state in HOLDING]
    # 1. containers on nodes where the app no longer holds enough GPUs: stop (checkpoint)
    for node in sorted({r.node for r in holding}):
        on_node = [r for r in holding if r.node == node]
        # runs already stopping are on their way out: only the others must fit
        excess = sum(r.gpus for r in on_node if r.state != "stopping") - held.get(node, 0)
        for r in sorted((r for r in on_node if r.live), key=lambda r: -r.run_id):
            if excess <= 0:
                break
            if not r.live:  # stopped with its task group meanwhile
                continue
            am._stop(r, f"lease on {node} ends", lease_expiry=am._lease_end(node, now))
            excess -= sum(x.gpus for x in am.launcher.group_runs(r) if x.node == node)
    # 2. runs of jobs Hyperband no longer runs: stop early-stopped ones, withdraw asks
    stop_unrun(am)
    # 3. every waiting job has one node-local ask: on a node with free leased GPUs when
    #    there is one, else parked on the demand node (the RM commits nothing there
    #    without a lease; the pending ask is what makes the app take part in rounds)
    used: Counter[str] = Counter()
    for r in am.runs:
        if r.state in HOLDING:
            used[r.node] += r.gpus
    # free for new runs: GPUs no run uses, on leases that last long enough to start one
    free = {n: min(held[n] - used.get(n, 0), room.get(n, 0)) for n in held}
    asks = [r for r in am.runs if r.state == "requested"]
    parked: list[Run] = []  # one run per parked launch (a task group moves whole)
    for r in sorted(asks, key=lambda r: r.run_id):
        if free.get(r.node, 0) >= r.gpus:
            free[r.node] -= r.gpus
        elif all(p.job_id != r.job_id for p in parked):
            parked.append(r)
    busy_jobs = {r.job_id for r in am.runs if r.live or r.state == "stopping"}
    waiting = am.core.by_remaining_work(j for j in am.core.runnable()
                                          if j.id not in busy_jobs)
    cap = am.spec.max_parallel_jobs or 10**9
    active = len({r.job_id for r in am.runs if r.live})  # jobs, not task runs
    for r in parked:  # move parked asks to won nodes
        nodes = [n for n, f in free.items() if f >= g]
        if not nodes:
            break
        node = max(nodes, key=lambda n: (free[n], n))
        am._stop(r, f"ask moved to {node}")
        am._request(r.job_id, node, g)
        free[node] -= g
    unplaced = 0
    for job in waiting:
        if active >= cap:
            unplaced += 1
            continue
        nodes = [n for n, f in free.items() if f >= g]
        if nodes:
            node = max(nodes, key=lambda n: (free[n], n))
            free[node] -= g
        else:
            unplaced += 1
            # no parked asks before the agent is connected: the RM would count them as
            # demand and grant the app leases whose allocation events it never receives
            node = am.demand_node() if am._agent_connected() else ""
            if not node:
                continue
        am._request(job.id, node, g)
        active += 1
    # 4. give back GPUs the app cannot use: leases about to end at once, others after
    #    idle_release_s without a job to place on them
    give: list[str] = []
    all_leases = {k: v for k, v in am.leases().items() if v > now}
    def soonest_first(ids: Iterable[str]) -> list[str]:
        return sorted(ids, key=lambda k: (all_leases.get(k, now), k))

    ending = Counter(node_of(k) for k in all_leases if k not in usable)
    for node, count in ending.items():
        # GPUs of the node's ending leases not needed by runs still occupying it
        busy = max(0, used.get(node, 0) - held.get(node, 0))
        ids = soonest_first(k for k in all_leases if k not in usable and node_of(k) == node)
        give += ids[: max(0, count - busy)]
    spare_nodes = {n: f for n, f in free.items()
                   if f > 0 and (unplaced == 0 or active >= cap or f < g)}
    for gid in soonest_first(usable):
        gnode = node_of(gid)
        if spare_nodes.get(gnode, 0) > 0:
            since = am._idle_since.setdefault(gid, now)
            if now - since >= am.idle_release_s:
                give.append(gid)
                spare_nodes[gnode] -= 1
        else:
            am._idle_since.pop(gid, None)
    give = [x for x in give if x not in am._released]
    if give and am.agent is not None:
        am._released.update(give)
        try:
            am.agent.release(give)
            log.info("gave back GPUs %s", give)
        except Exception as e:
            log.info("release of %s refused: %s", give, e)
        for gid in give:
            am._idle_since.pop(gid, None)
