"""Offers and bundles by node and slot (protocol version 2, docs/protocol.md "Offers by node").

An offer (paper section 4.2.2, visibility phase) used to list every free GPU; at 4,096
GPUs that was ~230 kB per bidder. Here the cluster's nodes are a :class:`NodeTable`
(node id, rack, GPUs per slot), sent to an app's stream once per version, and an offer
carries counts per node (and per slot, for nodes with slots): a few kB at 4,096 GPUs over
1,000 nodes, built once per round and shared by every bidder (only the GPUs an app holds
differ).

The auction (section 3.3.1) is unchanged because a bundle still names GPUs exactly: the
GPUs of a node are told apart by their *position in the node's fill order*
(:func:`themis.mechanism.bids.fill_order`: fullest slots first, then slot name, then GPU
id), which depends on the node's slot layout only. The agent rebuilds the offer as
stand-in :class:`Gpu` records (:func:`decode_offer`: same machines and racks in the same
order, slots named so that they sort as the real ones do), runs the same bid-table code
on them, and sends each bundle as runs of positions (:func:`table_to_pb`); the arbiter
maps the positions back to the GPU ids of its own fill order (:func:`table_from_pb`).
The menu depends on GPU ids through the fill order only, so the bundles are those the
agent would have built from the real GPUs (``tests/unit/test_offers.py`` runs rounds
both ways and compares the auctions).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from themis.mechanism.bids import Bid, BidTable, fill_order
from themis.mechanism.topology import Gpu, Topology
from themis.rpc.v1 import arbiter_pb2 as pb

#: The protocol this code speaks. 1: offers listed every GPU (GpuInfo) and bundles named
#: GPU ids; 2: node table, counts per node and slot, bundles as runs of positions; 3: a
#: lease whose ``via`` is ``renewal`` renews the app's GPUs on its machine in place (the
#: agent keeps their ids: docs/yarn.md, "Renewal in place"), and an offer names the offered
#: GPUs whose lease the app held until now (``previous``), which its bids name first.
PROTOCOL_VERSION = 3
MISMATCH = "protocol version mismatch"  # in the refusal's message (the agent looks for it)


def version_of(field: int) -> int:
    """The version a RegisterApp message states (0, an absent field: version 1)."""
    return field or 1


def mismatch_message(app: str, agent: int, arbiter: int) -> str:
    """The one message of a refused registration (``app``: the app id as quoted in
    messages): both versions and what to upgrade."""
    a, b = version_of(agent), version_of(arbiter)
    older = ("the agent (the themis package of the application master)" if a < b
             else "the arbiter (the RM plugin's engine or the standalone arbiter)")
    return (f"app {app}: {MISMATCH}: the agent speaks themis protocol version {a}, the "
            f"arbiter version {b}; upgrade {older} to protocol version {max(a, b)}")


def runs(positions: Iterable[tuple[int, int]]) -> tuple[list[int], list[int], list[int]]:
    """(node, fill position) pairs as runs of consecutive positions: parallel lists of
    node indexes, first positions and lengths (as a Bundle or GpuRuns names GPUs)."""
    nodes: list[int] = []
    starts: list[int] = []
    counts: list[int] = []
    for n, k in sorted(positions):
        if nodes and nodes[-1] == n and starts[-1] + counts[-1] == k:
            counts[-1] += 1
        else:
            nodes.append(n)
            starts.append(k)
            counts.append(1)
    return nodes, starts, counts


# ------------------------------------------------------------------ arbiter side
@dataclass(frozen=True, slots=True)
class NodeIndex:
    """A topology as a :class:`pb.NodeTable`: node index per machine, slot index per slot
    (None for a node whose slots all hold one GPU)."""

    topology: Topology
    table: pb.NodeTable
    node: Mapping[str, int]
    slots: Sequence[Mapping[str, int] | None]

    @property
    def version(self) -> str:
        return self.table.version


_LAST: list[NodeIndex] = []


def node_index(topo: Topology) -> NodeIndex:
    """The node table of ``topo`` (memoised on the last topology object seen)."""
    if _LAST and _LAST[0].topology is topo:
        return _LAST[0]
    racks: dict[str, int] = {}
    nodes: list[pb.Node] = []
    node: dict[str, int] = {}
    slots: list[Mapping[str, int] | None] = []
    for machine, gpus in topo.machines.items():
        rack = racks.setdefault(topo.rack_of(machine), len(racks))
        per_slot: dict[str, int] = {}
        for g in gpus:
            per_slot[g.slot] = per_slot.get(g.slot, 0) + 1
        names = sorted(per_slot)
        singletons = all(n == 1 for n in per_slot.values())
        node[machine] = len(nodes)
        slots.append(None if singletons else {s: j for j, s in enumerate(names)})
        nodes.append(pb.Node(id=machine, rack=rack,
                             slot_gpus=[] if singletons else [per_slot[s] for s in names]))
    table = pb.NodeTable(racks=list(racks), nodes=nodes)
    table.version = hashlib.blake2b(table.SerializeToString(deterministic=True),
                                    digest_size=8).hexdigest()
    got = NodeIndex(topo, table, node, slots)
    _LAST[:] = [got]
    return got


def encode_gpus(gpus: Iterable[Gpu], ni: NodeIndex) -> pb.NodeGpus:
    """``gpus`` as counts per node (nodes in order of first appearance) and per slot."""
    counts: dict[int, int] = {}
    per_slot: dict[int, list[int]] = {}
    for g in gpus:
        n = ni.node[g.machine]
        counts[n] = counts.get(n, 0) + 1
        slots = ni.slots[n]
        if slots is not None:
            row = per_slot.get(n)
            if row is None:
                row = per_slot[n] = [0] * len(slots)
            row[slots[g.slot]] += 1
    return pb.NodeGpus(nodes=list(counts), counts=list(counts.values()),
                       slot_counts=[c for n in counts if n in per_slot for c in per_slot[n]])


def fill_orders(gpus: Sequence[Gpu], ni: NodeIndex) -> dict[int, list[str]]:
    """Per node index, the offered GPU ids in the node's fill order: position k of a
    bundle's run is ``fill_orders(...)[node][k]``."""
    by_node: dict[int, list[Gpu]] = {}
    for g in gpus:
        by_node.setdefault(ni.node[g.machine], []).append(g)
    return {n: [g.id for g in fill_order(gs)] for n, gs in by_node.items()}


def fill_positions(fill: Mapping[int, Sequence[str]]) -> dict[str, tuple[int, int]]:
    """Each offered GPU id's (node index, fill position), from :func:`fill_orders`."""
    return {gid: (n, k) for n, order in fill.items() for k, gid in enumerate(order)}


def encode_runs(ids: Iterable[str], where: Mapping[str, tuple[int, int]]) -> pb.GpuRuns:
    """Offered GPU ids as runs of fill positions (``where``: :func:`fill_positions` of the
    offer, built once per round); ids not in the offer are left out."""
    nodes, starts, counts = runs({where[g] for g in ids if g in where})
    return pb.GpuRuns(nodes=nodes, starts=starts, counts=counts)


class BundleError(ValueError):
    """A bundle's runs do not name offered GPUs (the message names the run)."""


def bundle_ids(b: pb.Bundle, fill: Mapping[int, Sequence[str]]) -> tuple[str, ...]:
    """The GPU ids a bundle's runs name (sorted; a GPU named twice stays twice, for the
    auction's validator to refuse)."""
    if not len(b.nodes) == len(b.starts) == len(b.counts):
        raise BundleError(f"nodes, starts and counts have {len(b.nodes)}, {len(b.starts)} "
                          f"and {len(b.counts)} entries (one per run)")
    out: list[str] = []
    for k, (n, start, count) in enumerate(zip(b.nodes, b.starts, b.counts, strict=True)):
        ids = fill.get(n)
        if ids is None:
            raise BundleError(f"run {k}: node {n} has no GPU in the offer")
        if count < 1 or start + count > len(ids):
            raise BundleError(f"run {k}: positions {start}..{start + count - 1} of node {n}: "
                              f"the offer has positions 0..{len(ids) - 1} there")
        out.extend(ids[start:start + count])
    return tuple(sorted(out))


def table_from_pb(app_id: str, m: pb.BidTable, fill: Mapping[int, Sequence[str]]
                  ) -> BidTable:
    """The bid table in GPU ids. Raises :class:`BundleError` with ``bid_index`` set as
    its second argument; the arbiter runs the auction's ``validate_tables`` on the result."""
    bids = []
    for k, b in enumerate(m.bundles):
        try:
            bids.append(Bid(bundle_ids(b, fill), b.rho))
        except BundleError as exc:
            raise BundleError(str(exc), k) from exc
    return BidTable(app_id=app_id, rho_current=m.rho_current, bids=tuple(bids))


# ------------------------------------------------------------------ agent side
@dataclass(frozen=True, slots=True)
class DecodedOffer:
    """An offer rebuilt as stand-in GPU records (same machines, racks, slot layout and fill
    order as the arbiter's) and each stand-in's (node index, fill position)."""

    gpus: tuple[Gpu, ...]
    held: tuple[Gpu, ...]
    position: Mapping[str, tuple[int, int]]
    previous: tuple[Gpu, ...] = ()  # offered stand-ins whose lease the app held until now


class OfferError(ValueError):
    """An offer that does not fit its node table (a broken or foreign arbiter)."""


_STAND_INS: dict[tuple[str, int, str], list[list[Gpu]]] = {}


def _stand_ins(table: pb.NodeTable, n: int, tag: str) -> list[list[Gpu]]:
    """Node ``n``'s stand-in GPUs per slot (one list for a node without slots), as many as
    the node has, built once per node table version (offers repeat the same nodes). Ids
    are ``<node>#<tag><slot>.<k>`` (slotted nodes, slot names ``<slot>`` zero-padded in slot
    order) or ``<node>#<tag><k>`` (each GPU its own slot, named by its id): they sort as
    the fill order needs."""
    key = (table.version, n, tag)
    got = _STAND_INS.get(key)
    if got is None:
        if len(_STAND_INS) >= 1 << 16:
            _STAND_INS.clear()
        node = table.nodes[n]
        if node.rack >= len(table.racks):
            raise OfferError(f"node {node.id!r}: rack {node.rack} is not in the node table")
        rack = table.racks[node.rack]
        if node.slot_gpus:
            got = [[Gpu(f"{node.id}#{tag}{j:05d}.{k:05d}", node.id, rack, f"{j:05d}")
                    for k in range(size)] for j, size in enumerate(node.slot_gpus)]
        else:
            got = [[]]  # grown on demand: the node's GPU count is not in the table
        _STAND_INS[key] = got
    return got


def _expand(table: pb.NodeTable, ng: pb.NodeGpus, tag: str
            ) -> list[tuple[int, list[Gpu], list[Gpu]]]:
    """Per listed node: its index, its stand-in GPUs and the same in fill order (fullest
    slots first, then slot order; within a slot by id, as
    :func:`themis.mechanism.bids.fill_order` orders them)."""
    if len(ng.nodes) != len(ng.counts):
        raise OfferError(f"{len(ng.nodes)} nodes but {len(ng.counts)} counts")
    out: list[tuple[int, list[Gpu], list[Gpu]]] = []
    pos = 0
    for n, count in zip(ng.nodes, ng.counts, strict=True):
        if n >= len(table.nodes):
            raise OfferError(f"node {n} is not in node table {table.version}")
        node = table.nodes[n]
        slots = _stand_ins(table, n, tag)
        if not node.slot_gpus:
            have = slots[0]
            if len(have) < count:
                if count > 1 << 16:
                    raise OfferError(f"node {node.id!r}: {count} GPUs")
                rack = table.racks[node.rack]
                have.extend(Gpu(f"{node.id}#{tag}{k:05d}", node.id, rack)
                            for k in range(len(have), count))
            gs = have[:count]
            out.append((n, gs, gs))
            continue
        row = ng.slot_counts[pos:pos + len(node.slot_gpus)]
        pos += len(node.slot_gpus)
        if len(row) != len(node.slot_gpus) or sum(row) != count or any(
                c > size for c, size in zip(row, node.slot_gpus, strict=True)):
            raise OfferError(f"node {node.id!r}: slot counts {list(row)} do not add up to "
                             f"{count} within slots of {list(node.slot_gpus)}")
        gs = [g for j, c in enumerate(row) for g in slots[j][:c]]
        order = sorted((j for j, c in enumerate(row) if c), key=lambda j: (-row[j], j))
        out.append((n, gs, [g for j in order for g in slots[j][:row[j]]]))
    return out


def decode_offer(table: pb.NodeTable, free: pb.NodeGpus, held: pb.NodeGpus,
                 previous: pb.GpuRuns | None = None) -> DecodedOffer:
    """The offer's stand-in GPUs (nodes in offer order), held GPUs and the offered
    stand-ins at the ``previous`` runs; raises :class:`OfferError`."""
    nodes = _expand(table, free, "f")
    position = {g.id: (n, k) for n, _, order in nodes for k, g in enumerate(order)}
    return DecodedOffer(tuple(g for _, gs, _ in nodes for g in gs),
                        tuple(g for _, gs, _ in _expand(table, held, "h") for g in gs),
                        position,
                        _at_runs(previous, {n: order for n, _, order in nodes}))


def _at_runs(r: pb.GpuRuns | None, order: Mapping[int, Sequence[Gpu]]) -> tuple[Gpu, ...]:
    """The offered stand-ins that runs ``r`` name (none for None)."""
    if r is None:
        return ()
    if not len(r.nodes) == len(r.starts) == len(r.counts):
        raise OfferError(f"previous: nodes, starts and counts have {len(r.nodes)}, "
                         f"{len(r.starts)} and {len(r.counts)} entries (one per run)")
    out: list[Gpu] = []
    for k, (n, start, count) in enumerate(zip(r.nodes, r.starts, r.counts, strict=True)):
        gs = order.get(n, ())
        if count < 1 or start + count > len(gs):
            raise OfferError(f"previous: run {k}: positions {start}..{start + count - 1} of "
                             f"node {n}: the offer has {len(gs)} GPU(s) there")
        out.extend(gs[start:start + count])
    return tuple(out)


def table_to_pb(table: BidTable, position: Mapping[str, tuple[int, int]]) -> pb.BidTable:
    """Each bundle as runs of consecutive fill positions, by node index."""
    bundles = []
    for b in table.bids:
        nodes, starts, counts = runs(position[g] for g in b.gpus)
        bundles.append(pb.Bundle(rho=b.rho, nodes=nodes, starts=starts, counts=counts))
    return pb.BidTable(rho_current=table.rho_current, bundles=bundles)
