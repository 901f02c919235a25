"""The cluster view the RM plugin sends each round, and the grant reply it expects.

Request (JSON, built by ``ClusterView.build`` in Java)::

    {"round": 3, "now_ms": ..., "fairness_knob": 0.8, "lease_duration_ms": 600000,
     "lease_spread_ms": 300000, "solver": "auto-fast",
     "nodes": [{"node_id": "h:45454", "host": "h", "rack": "/default-rack",
                "total_gpus": 4, "free_gpus": 2, "partition": ""}],
     "partitions": [{"partition": "gpu", "exclusive": true}],
     "apps": [{"app_id": "application_1_0001", "queue": "default", "user": "u",
               "pending_gpus": 2, "running_gpus": {"h:45454": 2},
               "asks": [{"gpus_per_container": 2, "containers": 1}],
               "partition": "", "accessible_partitions": ["gpu"]}],
     "queues": [{"queue": "root.default", "guaranteed_gpus": 4, "max_gpus": 4,
                 "partitions": {"gpu": {"guaranteed_gpus": 2, "max_gpus": 4}}}],
     "leases": [{"lease_id": 1, "app_id": ..., "node_id": ..., "gpus": 2,
                 "expiry_ms": ..., "state": "ACTIVE", "partition": ""}]}

``asks`` are the app's pending GPU container asks (one entry per container size, the
RM's pending asks summed over priorities and allocation ids); an app without ``asks`` asks
``pending_gpus`` single-GPU containers. The leftover step deals whole containers on one
node (:func:`themis.mechanism.round.distribute_leftover`).

``queue`` is the app's CapacityScheduler leaf queue (its path) and ``queues`` the GPU
entitlement of each leaf queue with apps: ``guaranteed_gpus`` from the queue's (absolute)
capacity, ``max_gpus`` from its maximum capacity (:mod:`themis.yarn.queues` shares the free
GPUs between queues with them). Both are optional: a view without ``queues`` is one round
over every app, as is a view whose apps all wait in one queue that may take every free GPU.
Partitions (YARN node labels; docs/yarn.md, "Partitions"): a node's ``partition`` is its
node label, ``""`` for the default partition; ``partitions`` lists the cluster's labels with
their exclusivity (a label missing there counts as exclusive, YARN's default). An app's
``partition`` is the one its GPU asks name (their node-label expression, which YARN fills
in from the queue's ``default-node-label-expression``), ``""`` for the default partition;
``accessible_partitions`` the labels its queue may access (``"*"``: any; absent: not
checked). A queue's ``guaranteed_gpus`` and ``max_gpus`` are its default partition's, and
``partitions`` maps a label to its entitlement there (from the per-label capacities; a
label missing there: none). All optional: a view without them is the default partition only
(:mod:`themis.yarn.partitions` runs one round per partition).
``leases`` tell which GPUs an app holds beyond its running containers (live: ``ACTIVE``
and ``expiry_ms`` after ``now_ms``).

Renewal in place (docs/yarn.md, "Renewal in place"; optional): a lease that ends soon is
flagged ``"renewing": true`` and its app's entry says, per node, how many of its GPUs are up
for renewal and the GPUs of each container running on them: ``"renewing": {"h:45454":
{"gpus": 2, "containers": [2]}}``. Those GPUs are offered beside the free ones, the app asks
for those containers again (they are not held), and a grant of them to the app renews its
lease (:func:`renewal_holders`).

``lease_spread_ms`` (optional, 0 when absent): a round's leases last ``lease_duration_ms`` +-
half of it, spread over the round's apps (:func:`themis.mechanism.round.lease_lengths`).

Reply: ``{"grants": [{"app_id": ..., "node_id": ..., "gpus": n, "lease_ms": m}], "info":
{...}}``, ``lease_ms`` the length of the app's leases of the round.
YARN counts GPUs per node, so GPU ids here are synthetic: ``<node_id>/<k>`` for the k-th
free GPU of the node; grants are summed back per node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from themis.mechanism.topology import Gpu


class ViewError(ValueError):
    """The RM sent a malformed cluster view (names the field)."""


#: the default partition (nodes without a node label, apps whose asks name none)
DEFAULT_PARTITION = ""


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: str
    rack: str
    total_gpus: int
    free_gpus: int
    #: the node's node label (YARN partition), "" for the default partition
    partition: str = DEFAULT_PARTITION


@dataclass(frozen=True, slots=True)
class AppView:
    app_id: str
    pending_gpus: int
    running_gpus: dict[str, int] = field(default_factory=dict)
    #: GPUs per container -> containers asked; empty: ``pending_gpus`` 1-GPU containers
    asks: dict[int, int] = field(default_factory=dict)
    #: CapacityScheduler leaf queue (path); "" when the view names none
    queue: str = ""
    #: the partition its GPU asks name, "" for the default partition
    partition: str = DEFAULT_PARTITION
    #: the labels its queue may access ("*": any); None when the view does not say
    accessible: frozenset[str] | None = None
    #: node -> (GPUs of its leases up for renewal there, GPUs of each container on them)
    renewing: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    def shape(self) -> dict[int, int]:
        """The container asks the leftover step deals whole (see :mod:`themis.mechanism.round`):
        its pending asks and the containers that run on its leases up for renewal."""
        out = self.pending_shape()
        for k, n in self.renewing_shape().items():
            out[k] = out.get(k, 0) + n
        return out

    def pending_shape(self) -> dict[int, int]:
        """Its pending container asks: GPUs per container -> containers."""
        return dict(self.asks) if self.asks else (
            {1: self.pending_gpus} if self.pending_gpus > 0 else {})

    def renewing_shape(self) -> dict[int, int]:
        """The containers that run on its leases up for renewal: GPUs each -> containers."""
        out: dict[int, int] = {}
        for _, sizes in self.renewing.values():
            for k in sizes:
                out[k] = out.get(k, 0) + 1
        return out

    def running(self) -> dict[str, int]:
        """GPUs of its containers per node, less those on leases up for renewal (they run
        on GPUs the round offers again: not held)."""
        out = dict(self.running_gpus)
        for n, (_, sizes) in self.renewing.items():
            out[n] = max(0, out.get(n, 0) - sum(sizes))
        return out


@dataclass(frozen=True, slots=True)
class QueueView:
    """A leaf queue's GPUs: guaranteed by its capacity, at most its maximum capacity's."""

    queue: str
    guaranteed_gpus: int
    max_gpus: int
    #: label -> (guaranteed, max) GPUs in that partition; the fields above are the default's
    partitions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def in_partition(self, partition: str) -> QueueView:
        """The queue's entitlement in ``partition`` (none in a label the view does not
        list for it: the queue has no capacity there)."""
        if partition == DEFAULT_PARTITION:
            return QueueView(self.queue, self.guaranteed_gpus, self.max_gpus)
        g, m = self.partitions.get(partition, (0, 0))
        return QueueView(self.queue, g, m)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A YARN node label: exclusive (only apps asking it use its nodes) or not (its idle
    resources may also serve default-partition asks)."""

    partition: str
    exclusive: bool


@dataclass(frozen=True, slots=True)
class LeaseView:
    app_id: str
    node_id: str
    gpus: int
    expiry_ms: int
    state: str
    #: the partition of its node when it was granted
    partition: str = DEFAULT_PARTITION
    #: offered for renewal in place this round (its GPUs are in the offer)
    renewing: bool = False

    def live(self, now_ms: int) -> bool:
        """As the RM's ``Lease.isLive``: active and not past its expiry."""
        return self.state == "ACTIVE" and now_ms < self.expiry_ms


@dataclass(frozen=True, slots=True)
class ClusterView:
    round_id: int
    now_ms: int
    fairness_knob: float
    lease_duration_ms: int
    solver: str
    nodes: tuple[NodeView, ...]
    apps: tuple[AppView, ...]
    queues: tuple[QueueView, ...] = ()
    leases: tuple[LeaseView, ...] = ()
    partitions: tuple[PartitionView, ...] = ()
    lease_spread_ms: int = 0


def _get(obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in obj:
        raise ViewError(f"{where}: missing field {key!r}")
    value = obj[key]
    if kind is float and isinstance(value, int):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ViewError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _asks(app: Mapping[str, Any]) -> dict[int, int]:
    where = f"apps[{app.get('app_id')!r}].asks[]"
    raw = app.get("asks", [])
    if not isinstance(raw, list):
        raise ViewError(f"{where}: must be a list, got {raw!r}")
    out: dict[int, int] = {}
    for ask in raw:
        if not isinstance(ask, dict):
            raise ViewError(f"{where}: each ask must be an object, got {ask!r}")
        k = _get(ask, "gpus_per_container", int, where)
        n = _get(ask, "containers", int, where)
        if k < 1 or n < 0:
            raise ViewError(f"{where}: gpus_per_container must be >= 1 and containers >= 0, "
                            f"got {k} x {n}")
        if n:
            out[k] = out.get(k, 0) + n
    return out


def parse_view(text: str) -> ClusterView:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ViewError(f"cluster view is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ViewError("cluster view must be a JSON object")
    nodes = tuple(
        NodeView(
            node_id=_get(n, "node_id", str, "nodes[]"),
            rack=_get(n, "rack", str, "nodes[]") or "/default-rack",
            total_gpus=_get(n, "total_gpus", int, "nodes[]"),
            free_gpus=_get(n, "free_gpus", int, "nodes[]"),
            partition=_opt_str(n, "partition", "nodes[]"),
        )
        for n in _get(raw, "nodes", list, "view")
    )
    apps = tuple(
        AppView(
            app_id=_get(a, "app_id", str, "apps[]"),
            pending_gpus=_get(a, "pending_gpus", int, "apps[]"),
            running_gpus={str(k): int(v) for k, v in a.get("running_gpus", {}).items()},
            asks=_asks(a),
            queue=_get(a, "queue", str, "apps[]") if "queue" in a else "",
            partition=_opt_str(a, "partition", "apps[]"),
            accessible=_accessible(a),
            renewing=_renewing(a),
        )
        for a in _get(raw, "apps", list, "view")
    )
    queues = tuple(_queue(q) for q in _list(raw, "queues"))
    names = [q.queue for q in queues]
    if len(set(names)) != len(names):
        raise ViewError(f"queues[]: a queue is listed twice: {sorted(names)}")
    if queues:
        unknown = sorted({a.queue for a in apps} - set(names))
        if unknown:
            raise ViewError(f"apps[]: queue(s) {unknown} not in the view's queues {sorted(names)}")
    leases = tuple(
        LeaseView(
            app_id=_get(x, "app_id", str, "leases[]"),
            node_id=_get(x, "node_id", str, "leases[]"),
            gpus=_get(x, "gpus", int, "leases[]"),
            expiry_ms=_get(x, "expiry_ms", int, "leases[]"),
            state=_get(x, "state", str, "leases[]"),
            partition=_opt_str(x, "partition", "leases[]"),
            renewing=_get(x, "renewing", bool, "leases[]") if "renewing" in x else False,
        )
        for x in _list(raw, "leases")
    )
    partitions = tuple(
        PartitionView(_get(p, "partition", str, "partitions[]"),
                      _get(p, "exclusive", bool, "partitions[]"))
        for p in _list(raw, "partitions")
    )
    lease_ms = _get(raw, "lease_duration_ms", int, "view")
    spread_ms = _get(raw, "lease_spread_ms", int, "view") if "lease_spread_ms" in raw else 0
    if not 0 <= spread_ms <= lease_ms:
        raise ViewError(f"view: lease_spread_ms {spread_ms} must be between 0 and "
                        f"lease_duration_ms {lease_ms}")
    return ClusterView(
        round_id=_get(raw, "round", int, "view"),
        now_ms=_get(raw, "now_ms", int, "view"),
        fairness_knob=_get(raw, "fairness_knob", float, "view"),
        lease_duration_ms=lease_ms,
        lease_spread_ms=spread_ms,
        solver=_get(raw, "solver", str, "view"),
        nodes=nodes,
        apps=apps,
        queues=queues,
        leases=leases,
        partitions=partitions,
    )


def _list(raw: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """An optional list of objects (absent: empty)."""
    items = raw.get(key, [])
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise ViewError(f"view: field {key!r} must be a list of objects, got {items!r}")
    return items


def _opt_str(obj: Mapping[str, Any], key: str, where: str) -> str:
    """An optional string field ("" when absent: the default partition)."""
    return _get(obj, key, str, where) if key in obj else DEFAULT_PARTITION


def _renewing(app: Mapping[str, Any]) -> dict[str, tuple[int, tuple[int, ...]]]:
    where = f"apps[{app.get('app_id')!r}].renewing"
    raw = app.get("renewing", {})
    if not isinstance(raw, dict):
        raise ViewError(f"{where}: must map nodes to objects, got {raw!r}")
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for node, r in raw.items():
        if not isinstance(r, dict):
            raise ViewError(f"{where}[{node!r}]: must be an object, got {r!r}")
        gpus = _get(r, "gpus", int, f"{where}[{node!r}]")
        sizes = _get(r, "containers", list, f"{where}[{node!r}]")
        if gpus < 1 or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1
                               for k in sizes):
            raise ViewError(f"{where}[{node!r}]: need gpus >= 1 and containers of >= 1 GPU, "
                            f"got {gpus} and {sizes!r}")
        out[str(node)] = (gpus, tuple(sizes))
    return out


def _accessible(app: Mapping[str, Any]) -> frozenset[str] | None:
    if "accessible_partitions" not in app:
        return None
    where = f"apps[{app.get('app_id')!r}]"
    raw = _get(app, "accessible_partitions", list, where)
    if not all(isinstance(x, str) for x in raw):
        raise ViewError(f"{where}: accessible_partitions must be a list of strings, got {raw!r}")
    return frozenset(raw)


def _entitlement(q: Mapping[str, Any], where: str) -> tuple[int, int]:
    guaranteed = _get(q, "guaranteed_gpus", int, where)
    limit = _get(q, "max_gpus", int, where)
    if not 0 <= guaranteed <= limit:
        raise ViewError(f"{where}: need 0 <= guaranteed_gpus <= max_gpus, got {guaranteed} and "
                        f"{limit}")
    return guaranteed, limit


def _queue(q: Mapping[str, Any]) -> QueueView:
    name = _get(q, "queue", str, "queues[]")
    where = f"queues[{name!r}]"
    guaranteed, limit = _entitlement(q, where)
    labels = q.get("partitions", {})
    if not isinstance(labels, dict) or not all(isinstance(v, dict) for v in labels.values()):
        raise ViewError(f"{where}: field 'partitions' must map labels to objects, got {labels!r}")
    per = {str(label): _entitlement(e, f"{where}.partitions[{label!r}]")
           for label, e in labels.items()}
    return QueueView(name, guaranteed, limit, per)


def gpu_id(node_id: str, k: int, round_tag: str = "") -> str:
    """The id of a node's k-th GPU (free, in an offer, or of the cluster): ``node/k``, or
    ``node/<round tag>.k`` in a round's offer. An AM keys its leases by these ids, so a
    GPU granted in one round must not take the id of one the same app still holds from an
    earlier round on that node (else the later lease hides the earlier one and that GPU
    idles): offers tag their ids with the round (``r<round id>-<now ms>``, unique across
    engine and RM restarts too)."""
    return f"{node_id}/{round_tag}.{k}" if round_tag else f"{node_id}/{k}"


def node_of(gpu: str) -> str:
    node, sep, _ = gpu.rpartition("/")
    if not sep:
        raise ViewError(f"GPU id {gpu!r} has no node part")
    return node


def _offered(view: ClusterView) -> list[tuple[Gpu, str]]:
    """The offer's GPUs with the app whose lease on each is up for renewal ("" for a free
    GPU): per node its free GPUs, then its renewing ones app by app, ids unique to this
    round (:func:`gpu_id`)."""
    tag = f"r{view.round_id}-{view.now_ms}"
    renewing: dict[str, list[tuple[str, int]]] = {}
    for a in view.apps:
        for node, (g, _) in sorted(a.renewing.items()):
            renewing.setdefault(node, []).append((a.app_id, g))
    out: list[tuple[Gpu, str]] = []
    for n in view.nodes:
        holders = [""] * max(0, n.free_gpus)
        for app, g in sorted(renewing.get(n.node_id, [])):
            holders += [app] * g
        out += [(Gpu(gpu_id(n.node_id, k, tag), n.node_id, n.rack), h)
                for k, h in enumerate(holders)]
    return out


def offer_of(view: ClusterView) -> list[Gpu]:
    """The GPUs a round offers, as topology GPUs (machine = YARN node id), with ids unique
    to this round (:func:`gpu_id`): the free ones and those of leases up for renewal."""
    return [g for g, _ in _offered(view)]


def renewal_holders(view: ClusterView) -> dict[str, str]:
    """Offered GPU id -> the app whose lease on it is up for renewal (the free GPUs left
    out): the leftover step gives these back to their holder first (``run_round``'s
    ``previous``), and a grant of a node's GPUs to such an app renews its lease there."""
    return {g.id: h for g, h in _offered(view) if h}


def renewing_per_node(view: ClusterView) -> dict[str, dict[str, int]]:
    """GPUs of each app's leases up for renewal, per node (apps with none left out)."""
    return {a.app_id: {n: g for n, (g, _) in a.renewing.items()}
            for a in view.apps if a.renewing}


def cluster_of(view: ClusterView) -> list[Gpu]:
    """Every GPU of the view's nodes, free or not (``node/k``: for the cluster's size and
    shape only, never leased by these ids)."""
    return [
        Gpu(gpu_id(n.node_id, k), n.node_id, n.rack)
        for n in view.nodes
        for k in range(max(0, n.total_gpus))
    ]


def _live_leased(view: ClusterView) -> dict[str, dict[str, int]]:
    """GPUs of each app's live leases, per node (those up for renewal left out)."""
    leased: dict[str, dict[str, int]] = {}
    for lease in view.leases:
        if lease.live(view.now_ms) and not lease.renewing:
            per = leased.setdefault(lease.app_id, {})
            per[lease.node_id] = per.get(lease.node_id, 0) + max(0, lease.gpus)
    return leased


def held_per_node(view: ClusterView) -> dict[str, dict[str, int]]:
    """GPUs each app holds, per node: the larger of its containers' and its live leases'
    there (as the RM's ``ClusterView.grantableGpus`` counts them); apps holding none are
    left out."""
    leased = _live_leased(view)
    out: dict[str, dict[str, int]] = {}
    for a in view.apps:
        mine = leased.get(a.app_id, {})
        running = a.running()
        per = {n: max(max(0, running.get(n, 0)), mine.get(n, 0))
               for n in sorted(set(running) | set(mine))}
        per = {n: k for n, k in per.items() if k > 0}
        if per:
            out[a.app_id] = per
    return out


def occupied_per_node(view: ClusterView) -> dict[str, dict[str, int]]:
    """:func:`held_per_node` without the GPUs it counts twice during a handover. A round may
    lease GPUs to another app before their holder's lease ends (renewal in place offers
    them ahead of the end), and a container may run on after its lease ended (grace,
    checkpoint): until the old lease ends and the container exits, both apps count those
    GPUs. On a node whose apps together count more GPUs than it has, the excess is taken
    off the outgoing apps first: those whose containers there outlive their live leases,
    then those whose leases there end soonest (the lessee keeps the GPUs). A queue's holding
    (:mod:`themis.yarn.queues`) is counted this way: counted twice, a handover made a queue
    look above its maximum capacity and its apps got nothing while GPUs were free. Nodes
    the view no longer lists keep their count."""
    held = held_per_node(view)
    over = {n.node_id: sum(per.get(n.node_id, 0) for per in held.values()) - max(0, n.total_gpus)
            for n in view.nodes}
    over = {n: x for n, x in over.items() if x > 0}
    if not over:  # no handover under way: every GPU counted once already
        return held
    leased = _live_leased(view)
    ends: dict[tuple[str, str], int] = {}  # (app, node) -> its soonest live lease end there
    for lease in view.leases:
        if lease.live(view.now_ms) and not lease.renewing:
            key = (lease.app_id, lease.node_id)
            ends[key] = min(ends.get(key, lease.expiry_ms), lease.expiry_ms)
    out = {a: dict(per) for a, per in held.items()}
    for node, excess in over.items():
        # the outgoing first: an app without a live lease there, then by soonest lease end
        order = sorted((a for a in sorted(out) if out[a].get(node, 0) > 0),
                       key=lambda a: ends.get((a, node), 0))
        for a in order:  # first what its containers hold beyond its leases
            cut = min(max(0, out[a][node] - leased.get(a, {}).get(node, 0)), excess)
            out[a][node] -= cut
            excess -= cut
        for a in order:  # then its leased GPUs
            cut = min(out[a][node], excess)
            out[a][node] -= cut
            excess -= cut
    return {a: kept for a, per in out.items() if (kept := {n: k for n, k in per.items() if k > 0})}


def leased_unused(view: ClusterView) -> dict[str, dict[str, int]]:
    """GPUs of each app's live leases that none of its containers uses yet, per node (apps
    and nodes with none left out): granted in an earlier round, their containers come at
    the node's next heartbeat."""
    leased = _live_leased(view)
    out: dict[str, dict[str, int]] = {}
    for a in view.apps:
        running = a.running()
        per = {n: k - max(0, running.get(n, 0))
               for n, k in sorted(leased.get(a.app_id, {}).items())}
        per = {n: k for n, k in per.items() if k > 0}
        if per:
            out[a.app_id] = per
    return out


def waiting_asks(view: ClusterView) -> dict[str, dict[int, int]]:
    """The container asks a round still has to serve, per app (apps with none left out):
    its pending asks less those its leased, unused GPUs will take. YARN places a GPU
    container only where the app holds a lease with room (the RM's lease gate), so a pending
    ask of an app with such a lease is served there at the node's next heartbeat; counting
    it again would lease the app a second GPU for the same container. Each node's unused
    GPUs take the largest containers that fit, one at a time. They take pending asks only:
    a container on a lease up for renewal stays asked, so that the round offers its GPUs
    back to it (renewed in place, it runs on; taken by an unused GPU, it would restart
    there, and a round left with nothing to decide would let the one renewal offer at this
    expiry pass)."""
    unused = leased_unused(view)
    out: dict[str, dict[int, int]] = {}
    for a in view.apps:
        left = a.pending_shape()
        for free in unused.get(a.app_id, {}).values():
            while True:
                fits = [k for k, n in left.items() if n > 0 and k <= free]
                if not fits:
                    break
                k = max(fits)
                left[k] -= 1
                free -= k
        for k, n in a.renewing_shape().items():
            left[k] = left.get(k, 0) + n
        left = {k: n for k, n in left.items() if n > 0}
        if left:
            out[a.app_id] = left
    return out


def held_of(view: ClusterView) -> dict[str, tuple[Gpu, ...]]:
    """The GPUs each app holds (:func:`held_per_node`) as stand-in topology GPUs
    (``<node>/held-<app>-<k>``: never offered, never leased by these ids) on the view's
    nodes, so that an agent's rho of its current allocation counts them (section 4.2: the
    bid table's empty bundle is the app's rho with what it holds). GPUs on a node the view
    no longer lists (lost) are gone and left out."""
    rack = {n.node_id: n.rack for n in view.nodes}
    return {a: tuple(Gpu(f"{n}/held-{a}-{k}", n, rack[n])
                     for n, c in per.items() if n in rack for k in range(c))
            for a, per in held_per_node(view).items()}


def grants_json(allocation: Iterable[tuple[str, Iterable[str]]], info: Mapping[str, Any],
                lease_s: Mapping[str, float] | None = None) -> str:
    """Sum per-GPU allocations to per-(app, node) grants and encode the reply; ``lease_s``:
    each app's lease length (seconds), sent as ``lease_ms``."""
    per: dict[tuple[str, str], int] = {}
    for app, gpus in allocation:
        for g in gpus:
            key = (app, node_of(g))
            per[key] = per.get(key, 0) + 1
    grants: list[dict[str, Any]] = []
    for (a, n), c in sorted(per.items()):
        grant: dict[str, Any] = {"app_id": a, "node_id": n, "gpus": c}
        if lease_s is not None:
            grant["lease_ms"] = round(lease_s[a] * 1000)
        grants.append(grant)
    return json.dumps({"grants": grants, "info": dict(info)})
