"""The replayed cluster: its GPU topology (the RM's ``/ws/v1/cluster/nodes``, or
``--gpus N --gpus-per-node K``) and the policy it runs today (the RM's
``/ws/v1/cluster/scheduler``, its ``/conf``, or ``--current``).

* Topology: every node in state RUNNING with ``yarn.io/gpu`` in its ``totalResource``
  becomes a machine with that many GPUs, in its rack (``rack``, e.g. ``/default-rack``);
  nodes without GPUs and nodes in other states are counted, not replayed.
* Current policy (the simulator's baselines, docs/simulator.md): the CapacityScheduler
  (YARN's default) serves each queue in FIFO order -> ``fifo``, unless every leaf queue
  reports the ``fair`` ordering policy -> ``fairshare``; the FairScheduler -> ``fairshare``;
  the FifoScheduler -> ``fifo``. Queue capacities are not replayed: the simulated cluster
  is one pool (docs/preview.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from themis.mechanism.topology import Gpu, Topology, TopologyError
from themis.preview.history import GPU_RESOURCE, PreviewError
from themis.sim.cluster import build_cluster

#: --current: the scheduler a cluster runs -> the simulator's policy that plays it
SCHEDULER_POLICY = {"capacity": "fifo", "fair": "fairshare", "fifo": "fifo"}
SCHEDULER_CLASS = {
    "CapacityScheduler": "capacity",
    "FairScheduler": "fair",
    "FifoScheduler": "fifo",
}
SCHEDULER_TYPES = {"capacityScheduler": "capacity", "fairScheduler": "fair",
                   "fifoScheduler": "fifo"}
CLASS_KEY = "yarn.resourcemanager.scheduler.class"


@dataclass(frozen=True, slots=True)
class Current:
    """The cluster's scheduler today and the simulator policy that replays it."""

    scheduler: str  # capacity | fair | fifo
    policy: str  # fifo | fairshare
    source: str  # where it was read (or that it was given / defaulted)

    def to_dict(self) -> dict[str, str]:
        return {"scheduler": self.scheduler, "policy": self.policy, "source": self.source}


def current_given(scheduler: str, source: str) -> Current:
    if scheduler not in SCHEDULER_POLICY:
        raise PreviewError("--current", f"{scheduler!r} is not one of "
                                        f"{', '.join(SCHEDULER_POLICY)}")
    return Current(scheduler, SCHEDULER_POLICY[scheduler], source)


def current_from_scheduler(doc: Any, source: str) -> Current:
    """From a ``/ws/v1/cluster/scheduler`` body: ``scheduler.schedulerInfo.type``."""
    info = doc.get("scheduler", {}).get("schedulerInfo") if isinstance(doc, dict) else None
    kind = info.get("type") if isinstance(info, dict) else None
    if kind not in SCHEDULER_TYPES:
        raise PreviewError(source, f"unknown scheduler type {kind!r} (known: "
                                   f"{', '.join(SCHEDULER_TYPES)}); name it with --current")
    assert isinstance(info, dict)
    scheduler = SCHEDULER_TYPES[str(kind)]
    if scheduler == "capacity":
        orders = _leaf_orderings(info)
        if orders and all(o == "fair" for o in orders):
            return Current("capacity", "fairshare",
                           f"{source} (every leaf queue orders its apps 'fair')")
    return Current(scheduler, SCHEDULER_POLICY[scheduler], source)


def _leaf_orderings(queue: Mapping[str, Any]) -> list[str]:
    """The ``orderingPolicyInfo`` of every leaf queue under a CapacityScheduler queue."""
    out: list[str] = []
    queues = queue.get("queues")
    children = queues.get("queue") if isinstance(queues, dict) else None
    if isinstance(children, dict):
        children = [children]
    if not children:
        order = queue.get("orderingPolicyInfo")
        return [str(order)] if order is not None else []
    for c in children:
        if isinstance(c, dict):
            out.extend(_leaf_orderings(c))
    return out


def current_from_conf(conf: Mapping[str, str], source: str) -> Current:
    """From the RM's configuration (``/conf``): ``yarn.resourcemanager.scheduler.class``
    (YARN's default is the CapacityScheduler; a subclass such as Themis' counts as its
    base by name)."""
    cls = conf.get(CLASS_KEY, "").strip()
    if not cls:
        return Current("capacity", "fifo", f"{source} (no {CLASS_KEY}: YARN's default)")
    for name, scheduler in SCHEDULER_CLASS.items():
        if cls.endswith(name):
            return Current(scheduler, SCHEDULER_POLICY[scheduler], source)
    raise PreviewError(source, f"{CLASS_KEY} = {cls[:120]!r} is none of "
                               f"{', '.join(SCHEDULER_CLASS)}; name it with --current")


@dataclass(frozen=True, slots=True)
class NodesInfo:
    topology: Topology
    nodes: int  # machines replayed
    skipped_no_gpu: int
    skipped_state: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": len(self.topology), "nodes": self.nodes,
                "nodes_without_gpus": self.skipped_no_gpu,
                "nodes_not_running": self.skipped_state, "source": self.source}


def topology_from_nodes(doc: Any, source: str) -> NodesInfo:
    """From a ``/ws/v1/cluster/nodes`` body (see the module doc)."""
    if not isinstance(doc, dict) or "nodes" not in doc:
        raise PreviewError(source, 'not an RM nodes response: expected {"nodes": {"node": '
                                   "[...]}} (GET /ws/v1/cluster/nodes)")
    body = doc["nodes"] if doc["nodes"] is not None else {}  # no node: {"nodes": null}
    nodes = body.get("node", []) if isinstance(body, dict) else None
    if isinstance(nodes, dict):
        nodes = [nodes]
    if not isinstance(nodes, list):
        raise PreviewError(source, "'nodes.node' must be a list of nodes")
    gpus: list[Gpu] = []
    used = no_gpu = not_running = 0
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise PreviewError(source, f"node {i + 1} is not an object")
        name = n.get("nodeHostName") or n.get("id")
        if not isinstance(name, str) or not name:
            raise PreviewError(source, f"node {i + 1} has no 'id' or 'nodeHostName'")
        if n.get("state", "RUNNING") != "RUNNING":
            not_running += 1
            continue
        count = _node_gpus(n, f"node {i + 1} ({name[:80]})", source)
        if count == 0:
            no_gpu += 1
            continue
        rack = n.get("rack") if isinstance(n.get("rack"), str) and n.get("rack") else \
            "/default-rack"
        used += 1
        gpus.extend(Gpu(f"{name}/gpu{k}", name, str(rack)) for k in range(count))
    if not gpus:
        raise PreviewError(source, f"no running node has {GPU_RESOURCE} ({len(nodes)} "
                                   f"nodes: {no_gpu} without GPUs, {not_running} not "
                                   "running); give the cluster's size with --gpus")
    try:
        topo = Topology(gpus)
    except TopologyError as exc:
        raise PreviewError(source, str(exc)) from None
    return NodesInfo(topo, used, no_gpu, not_running, source)


def _node_gpus(node: Mapping[str, Any], who: str, source: str) -> int:
    total = node.get("totalResource")
    infos = (total or {}).get("resourceInformations") if isinstance(total, dict) else None
    items = (infos or {}).get("resourceInformation") if isinstance(infos, dict) else None
    if isinstance(items, dict):
        items = [items]
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == GPU_RESOURCE:
            v = item.get("value")
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4096:
                raise PreviewError(source, f"{who}: {GPU_RESOURCE} value {v!r} is not a "
                                           "GPU count in [0, 4096]")
            return v
    return 0


def uniform_topology(gpus: int, per_node: int) -> NodesInfo:
    """``gpus`` GPUs on machines of ``per_node`` (the last one may have fewer), one rack."""
    if gpus < 1 or per_node < 1:
        raise PreviewError("--gpus/--gpus-per-node", "both must be >= 1")
    full, rest = divmod(gpus, per_node)
    shapes: list[tuple[int, list[int]]] = [(full, [per_node])] if full else []
    if rest:
        shapes.append((1, [rest]))
    topo = build_cluster(shapes, racks=1)
    return NodesInfo(topo, full + (1 if rest else 0), 0, 0,
                     f"--gpus {gpus} --gpus-per-node {per_node}")
