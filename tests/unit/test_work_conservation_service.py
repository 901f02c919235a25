"""Rounds never stall (paper, sections 3 and 4: work conservation), through the real gRPC
arbiter service with real agents (AgentClient + ModelBidder): with f = 0 there are no
non-bidders and the GPUs the auction withholds as hidden payments still go out in the same
round; GPUs that become free without any event (GPUs the back-end brings online, a round
that failed) are offered within ``round_interval_s``; a state no round can improve starts
no round, and rounds that keep failing are retried once per interval (the check cannot
spin)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import grpc
import pytest

from themis.agent.client import AgentClient
from themis.arbiter.cluster_backend import StaticCluster, gpus_from_spec
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.arbiter.testing import GatedCluster
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.model import AppModel, Job
from themis.mechanism.round import LeaseGrant
from themis.mechanism.topology import Gpu


def cluster_gpus(machines: int, per_machine: int) -> list[Gpu]:
    return gpus_from_spec({"racks": [{"name": "r0", "machines": [
        {"name": f"m{m}", "gpus": per_machine} for m in range(machines)]}]})


class FailingOnceCluster(StaticCluster):
    """A back-end that refuses the first round's grants (the round fails, its GPUs stay
    free and no event follows)."""

    def __init__(self, gpus: list[Gpu]) -> None:
        super().__init__(gpus)
        self.failed = threading.Event()

    def apply(self, grants: Sequence[LeaseGrant]) -> None:
        if grants and not self.failed.is_set():
            self.failed.set()
            raise RuntimeError("back-end refused the grants")
        super().apply(grants)


def app(name: str, jobs: int, gpus_per_job: int) -> AppModel:
    return AppModel(name, time.time(), [Job(f"j{j}", 1.0, 5000.0, gpus_per_job)
                                        for j in range(jobs)])


@contextmanager
def service(backend: StaticCluster, models: Sequence[AppModel], **kw: float
            ) -> Iterator[tuple[ArbiterServer, list[AgentClient]]]:
    cfg = ArbiterConfig(**{"lease_s": 300.0, "bid_timeout_s": 10.0, "heartbeat_s": 30.0,
                           "round_delay_s": 0.01, "seed": 1, **kw})  # type: ignore[arg-type]
    srv = ArbiterServer(backend, cfg, max_workers=2 * len(models) + 16)
    srv.start(0)
    channel = grpc.insecure_channel(srv.address)
    clients = [AgentClient(srv.address, m.id, ModelBidder(m, time.time), channel=channel,
                           seed=k, backoff=(0.05, 0.5)).start()
               for k, m in enumerate(models)]
    try:
        assert all(c.connected.wait(30) for c in clients)
        yield srv, clients
    finally:
        for c in clients:
            c.stop(unregister=False, timeout=1.0)
        channel.close()
        srv.stop(0)


def idle_while_wanted(srv: ArbiterServer) -> tuple[int, int]:
    """(free GPUs, connected apps that could take more) - both > 0 is a stall."""
    with srv.core._cond:
        free, room = srv.core._demand()
    return len(free), sum(1 for _, r in room if r > 0)


def test_f0_with_100_agents_leaves_no_gpu_idle() -> None:
    """f = 0: all 100 apps bid, nobody is a non-bidder; 64 GPUs, each app can use 2. After
    the first round no GPU idles (the hidden payments' GPUs went to apps that can use
    them), and every GPU is leased to exactly one app."""
    backend = GatedCluster(cluster_gpus(16, 4))
    models = [app(f"app-{k:03d}", 1, 2) for k in range(100)]
    with service(backend, models, fairness_knob=0.0, round_interval_s=0.5) as (srv, _):
        backend.gate.set()
        assert srv.core.wait_rounds(1, timeout=120)
        first = srv.core.outcomes[0]
        assert len(first.bidders) + len(first.nonbidders) == 100
        granted = [g for grant in first.grants for g in grant.gpus]
        assert sorted(granted) == sorted(backend.topology()), "GPUs idle after round 1"
        assert idle_while_wanted(srv)[0] == 0
        owners = backend.owners()
        assert len(owners) == 64 and len(set(owners)) == 64


@pytest.mark.parametrize("how", ["GPUs come online", "a round failed"])
def test_gpus_freed_without_an_event_get_a_round(how: str) -> None:
    gpus = cluster_gpus(2, 2)
    backend: StaticCluster = GatedCluster(gpus) if how == "GPUs come online" \
        else FailingOnceCluster(gpus)
    models = [app("a", 1, 2), app("b", 1, 2)]
    with service(backend, models, fairness_knob=0.5, round_interval_s=0.2) as (srv, _):
        if isinstance(backend, GatedCluster):
            time.sleep(0.5)  # registrations' rounds found no free GPU
            assert not srv.core.stats and len(backend.free_gpus()) == 0
            backend.gate.set()  # 4 GPUs free, and no event says so
        elif isinstance(backend, FailingOnceCluster):
            assert backend.failed.wait(10)  # the first round failed: 4 GPUs free, no event
            assert not backend.owners()
        assert srv.core.wait_rounds(1, timeout=5), "no round followed the free GPUs"
        assert len(backend.owners()) == 4
        assert idle_while_wanted(srv) == (0, 0)


def test_a_state_no_round_can_improve_starts_no_round() -> None:
    """One app that can use 2 of 4 GPUs: after its round 2 GPUs stay free and nobody can take
    them; the check runs every 0.05 s but starts no further round."""
    backend = StaticCluster(cluster_gpus(2, 2))
    with service(backend, [app("a", 1, 2)], fairness_knob=0.5, round_interval_s=0.05) \
            as (srv, _):
        assert srv.core.wait_rounds(1, timeout=10)
        time.sleep(0.3)
        n = len(srv.core.stats)
        time.sleep(1.0)
        assert len(srv.core.stats) == n
        assert idle_while_wanted(srv) == (2, 0)


class AlwaysFailingCluster(StaticCluster):
    """A back-end that refuses every grant: each round fails and its GPUs stay free."""

    def __init__(self, gpus: list[Gpu]) -> None:
        super().__init__(gpus)
        self.attempts = 0

    def apply(self, grants: Sequence[LeaseGrant]) -> None:
        if grants:
            self.attempts += 1
            raise RuntimeError("back-end refused the grants")


def test_rounds_that_keep_failing_are_retried_at_the_interval_only() -> None:
    backend = AlwaysFailingCluster(cluster_gpus(2, 2))
    with service(backend, [app("a", 1, 2)], fairness_knob=0.5, round_interval_s=0.25):
        time.sleep(0.5)
        start = backend.attempts
        time.sleep(1.5)
        assert 3 <= backend.attempts - start <= 8, backend.attempts - start
