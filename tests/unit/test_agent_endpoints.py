"""Finding the agents' endpoint of the active RM (themis.agent.endpoints) and moving to it
(AgentClient with several candidates) when the RM fails over: two real in-process arbiters on
127.0.0.1, the first one stopped while the agent is connected."""

from __future__ import annotations

import socket
import time

import pytest

from themis.agent.client import AgentClient
from themis.agent.endpoints import agent_addresses, from_mapping, parse_addresses
from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.arbiter.testing import wait_for
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.model import AppModel, Job

P = "yarn.resourcemanager.themis."
HA = {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1,rm2"}


def addrs(conf: dict[str, str]) -> list[str]:
    return agent_addresses(from_mapping(conf))


def test_without_ha_one_candidate_as_before() -> None:
    assert addrs({}) == ["127.0.0.1:8642"]
    assert addrs({"yarn.resourcemanager.hostname": "0.0.0.0", P + "agent-port": "9"}) == [
        "127.0.0.1:9"]
    assert addrs({"yarn.resourcemanager.hostname": "rm.example", P + "agent-port": "9"}) == [
        "rm.example:9"]
    assert addrs({P + "agent-address": "proxy:1", P + "agent-port": "9"}) == ["proxy:1"]
    # HA ids without HA enabled are not read
    assert addrs({"yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
                  "yarn.resourcemanager.hostname.rm1": "a"}) == ["127.0.0.1:8642"]


def test_with_ha_one_candidate_per_rm_id_in_order() -> None:
    conf = dict(HA, **{"yarn.resourcemanager.hostname.rm1": "host-a",
                       "yarn.resourcemanager.hostname.rm2": "host-b",
                       P + "agent-port": "7000"})
    assert addrs(conf) == ["host-a:7000", "host-b:7000"]
    # per-RM port, RM address instead of hostname, per-RM address wins
    conf = dict(HA, **{"yarn.resourcemanager.address.rm1": "localhost:8032",
                       P + "agent-port.rm1": "7001",
                       "yarn.resourcemanager.hostname.rm2": "host-b",
                       P + "agent-address.rm2": "front-b:9"})
    assert addrs(conf) == ["127.0.0.1:7001", "front-b:9"]
    # nothing per RM: the shared hostname and port (deduplicated)
    assert addrs(dict(HA)) == ["127.0.0.1:8642"]


def test_with_ha_a_shared_agent_address_is_a_fixed_front() -> None:
    conf = dict(HA, **{P + "agent-address": "vip:8642",
                       "yarn.resourcemanager.hostname.rm1": "a",
                       "yarn.resourcemanager.hostname.rm2": "b"})
    assert addrs(conf) == ["vip:8642"]
    conf[P + "agent-address.rm2"] = "b:1"  # per-RM ones given: candidates per RM
    assert addrs(conf) == ["vip:8642", "b:1"]


def test_parse_addresses() -> None:
    assert parse_addresses(" a:1, ,b:2,a:1 ") == ["a:1", "b:2"]
    assert parse_addresses("") == []


def test_client_checks_every_candidate() -> None:
    bidder = ModelBidder(AppModel("a", time.time(), [Job("j", 1.0, 10.0, 1)]), time.time)
    # any host is a candidate (the RM host over the cluster's network), but each must be
    # host:port with a TCP port
    AgentClient("127.0.0.1:1,10.0.0.2:1", "a", bidder)
    with pytest.raises(ValueError, match=r"10\.0\.0\.2:70000"):
        AgentClient("127.0.0.1:1,10.0.0.2:70000", "a", bidder)
    with pytest.raises(ValueError, match="rm2"):
        AgentClient("rm1:8642,rm2", "a", bidder)
    with pytest.raises(ValueError, match="must be host:port"):
        AgentClient(" , ", "a", bidder)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def arbiter() -> ArbiterServer:
    cfg = ArbiterConfig(lease_s=5.0, bid_timeout_s=0.5, warning_s=0.15, fairness_knob=0.5,
                        heartbeat_s=0.3, round_delay_s=0.02, seed=3, solver="bnb")
    return ArbiterServer(uniform_cluster(1, 2), cfg, max_workers=8)


def test_agent_moves_to_the_other_rms_endpoint_after_failover() -> None:
    """Active on the first candidate, nothing on the second (a standby serves no endpoint);
    the first goes away and the second comes up: the agent reconnects and registers there
    within a bounded time (a back-off cycle over both candidates)."""
    first = arbiter()
    p1 = first.start(0)
    p2 = free_port()
    model = AppModel("app-a", time.time(), [Job("j", 1.0, 10_000.0, 2)])
    c = AgentClient(f"127.0.0.1:{p1},127.0.0.1:{p2}", model.id,
                    ModelBidder(model, time.time), backoff=(0.02, 0.3)).start()
    second = arbiter()
    try:
        assert wait_for(lambda: c.connected.is_set(), timeout=5)
        assert c.address == f"127.0.0.1:{p1}" and c.stats.registrations == 1
        first.stop(0)  # the active RM dies with its engine
        assert wait_for(lambda: c.stats.endpoint_switches >= 2, timeout=5)  # cycling
        assert second.start(p2) == p2  # the new active's endpoint
        t0 = time.monotonic()
        assert wait_for(lambda: c.connected.is_set() and c.address == f"127.0.0.1:{p2}",
                        timeout=10)
        took = time.monotonic() - t0
        assert took < 2.0, f"reconnected {took:.2f}s after the new endpoint came up"
        assert c.stats.registrations == 2 and c.epoch == second.core.epoch
        assert model.id in second.core._apps
    finally:
        c.stop()
        first.stop(0)
        second.stop(0)


class _BlackHoleProxy:
    """A TCP forwarder to ``target`` that can go silent: after :meth:`vanish` it stops
    forwarding and answering but keeps every socket open (no FIN, no RST), as a host that
    vanished from the network looks to its peers."""

    def __init__(self, target: int) -> None:
        import threading

        self.target = target
        self.silent = threading.Event()
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                a, _ = self.srv.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target))
            self.held += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.silent.is_set():
                continue  # swallowed: nothing answers, nothing closes
            try:
                dst.sendall(data)
            except OSError:
                return

    def vanish(self) -> None:
        self.silent.set()

    def close(self) -> None:
        self.srv.close()
        for s in self.held:
            s.close()


def test_agent_leaves_an_endpoint_whose_host_vanished() -> None:
    """The active RM's host vanishes (its connections go silent, nothing is closed or reset):
    HTTP/2 keepalive (themis.rpc.keepalive) ends the agent's Events stream and the agent
    registers at the other RM's endpoint within a ping interval plus its timeout, not after
    TCP's retransmission timeout (minutes)."""
    from themis.rpc import keepalive

    first, second = arbiter(), arbiter()
    proxy = _BlackHoleProxy(first.start(0))
    p2 = free_port()  # the second endpoint comes up once the agent is at the first: on a
    # loaded machine a slow first registration would otherwise send it to the second at once
    model = AppModel("app-a", time.time(), [Job("j", 1.0, 10_000.0, 2)])
    c = AgentClient(f"127.0.0.1:{proxy.port},127.0.0.1:{p2}", model.id,
                    ModelBidder(model, time.time), backoff=(0.02, 0.3)).start()
    try:
        assert wait_for(lambda: c.connected.is_set(), timeout=30)
        assert c.address == f"127.0.0.1:{proxy.port}" and c.stats.registrations == 1
        assert second.start(p2) == p2
        proxy.vanish()
        bound = (keepalive.TIME_MS + keepalive.TIMEOUT_MS) / 1000 + 5
        assert wait_for(lambda: c.address == f"127.0.0.1:{p2}" and c.connected.is_set(),
                        timeout=bound), (c.address, c.stats)
        assert c.stats.registrations == 2 and model.id in second.core._apps
    finally:
        c.stop(unregister=False)
        proxy.close()
        first.stop(0)
        second.stop(0)
