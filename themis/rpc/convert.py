"""Conversions between the core's dataclasses and the v1 protobuf messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from themis.mechanism.fairness import ClusterShape
from themis.mechanism.model import ModelError
from themis.mechanism.round import LeaseGrant
from themis.mechanism.topology import Gpu
from themis.rpc.v1 import arbiter_pb2 as pb


def gpu_to_pb(g: Gpu) -> pb.GpuInfo:
    return pb.GpuInfo(id=g.id, machine=g.machine, rack=g.rack, slot=g.slot)


def gpu_from_pb(m: pb.GpuInfo) -> Gpu:
    """Raises TopologyError (a ValueError) for empty fields."""
    return Gpu(id=m.id, machine=m.machine, rack=m.rack, slot=m.slot)


def gpus_to_pb(gpus: Iterable[Gpu]) -> list[pb.GpuInfo]:
    return [gpu_to_pb(g) for g in gpus]


def shape_to_pb(shape: ClusterShape | None) -> pb.ClusterShape | None:
    if shape is None:
        return None
    return pb.ClusterShape(slot_gpus=shape.slot, machine_gpus=shape.machine,
                           rack_gpus=shape.rack)


def shape_from_pb(m: pb.RegisterAppResponse | pb.Offer, field: str) -> ClusterShape | None:
    """The message's cluster shape; None when absent, or invalid (negative counts)."""
    if not m.HasField(field):
        return None
    x = getattr(m, field)
    try:
        return ClusterShape(x.slot_gpus, x.machine_gpus, x.rack_gpus)
    except ModelError:
        return None


def lease_to_pb(g: LeaseGrant) -> pb.Lease:
    """The arbiter's clock is wall-clock seconds (``time.time``), so start/expiry are unix."""
    return pb.Lease(gpu_ids=list(g.gpus), start_unix=g.start, expiry_unix=g.expiry, via=g.via)


def ids(gpus: Sequence[Gpu]) -> list[str]:
    return [g.id for g in gpus]
