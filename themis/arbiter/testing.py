"""Helpers for tests and benchmarks: an in-process arbiter on 127.0.0.1 and raw stubs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc

from themis.arbiter.cluster_backend import StaticCluster
from themis.arbiter.state import ArbiterCore
from themis.mechanism.topology import Gpu, Topology
from themis.rpc.offers import PROTOCOL_VERSION, fill_orders, node_index
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc


def stub(address: str) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(address)
    return channel, pb_grpc.ArbiterStub(channel)  # type: ignore[no-untyped-call]


def creds(app_id: str, secret: str) -> pb.Credentials:
    return pb.Credentials(app_id=app_id, secret=secret)


def settle(core: ArbiterCore, quiet_s: float = 0.1, timeout: float = 5.0) -> dict[str, Any]:
    """Wait until the arbiter's snapshot stops changing for ``quiet_s``; return it."""
    end = time.monotonic() + timeout
    last = core.snapshot()
    while time.monotonic() < end:
        time.sleep(quiet_s)
        now = core.snapshot()
        if now == last:
            return now
        last = now
    raise TimeoutError("arbiter state did not settle")


def wait_for(pred: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def bundle(topo: Topology, gpu_ids: Sequence[str], rho: float,
           offered: Sequence[Gpu] | None = None) -> pb.Bundle:
    """A bundle naming ``gpu_ids`` as agents send it (one run of fill positions per GPU,
    :mod:`themis.rpc.offers`) in an offer of ``offered`` (default: every GPU of
    ``topo``): tests speak GPU ids, the wire positions."""
    ni = node_index(topo)
    fill = fill_orders(list(offered if offered is not None else topo.values()), ni)
    where = {g: (n, k) for n, ids in fill.items() for k, g in enumerate(ids)}
    out = pb.Bundle(rho=rho)
    for g in gpu_ids:
        n, k = where[g]
        out.nodes.append(n)
        out.starts.append(k)
        out.counts.append(1)
    return out


def register_request(**fields: Any) -> pb.RegisterAppRequest:
    """A RegisterAppRequest of this protocol version (tests that call the service raw)."""
    return pb.RegisterAppRequest(protocol_version=PROTOCOL_VERSION, **fields)


class GatedCluster(StaticCluster):
    """A static cluster whose GPUs are free only once ``gate`` is set (nothing tells the
    arbiter: its periodic round finds them), so that every app of a test has connected
    before the first round offers anything."""

    def __init__(self, gpus: Iterable[Gpu]) -> None:
        super().__init__(gpus)
        self.gate = threading.Event()

    def free_gpus(self) -> list[Gpu]:
        return super().free_gpus() if self.gate.is_set() else []
