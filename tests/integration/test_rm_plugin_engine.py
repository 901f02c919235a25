"""The Python half of the RM plugin bridge: view parsing, one real round, jar lookup.

The JVM half (real RM, real Py4J, engine killed mid-round) is tested by
``mvn -q verify`` in rm-plugin (EngineBridgeIT)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from themis.hadoop.jars import ENV_VAR, PluginJarNotFound, find_plugin_jar
from themis.mechanism.bids import Bid, BidTable
from themis.yarn.bids import ReportedBids
from themis.yarn.rounds import RoundEngine
from themis.yarn.view import ViewError, offer_of, parse_view


def _view(apps: list[dict[str, object]], free: tuple[int, int] = (4, 2)) -> str:
    return json.dumps(
        {
            "round": 7,
            "now_ms": 1_000_000,
            "fairness_knob": 0.8,
            "lease_duration_ms": 600_000,
            "solver": "auto",
            "nodes": [
                {
                    "node_id": "h1:1",
                    "host": "h1",
                    "rack": "/r1",
                    "total_gpus": 4,
                    "free_gpus": free[0],
                },
                {
                    "node_id": "h2:1",
                    "host": "h2",
                    "rack": "/r2",
                    "total_gpus": 4,
                    "free_gpus": free[1],
                },
            ],
            "apps": apps,
            "leases": [],
        }
    )


def _grants(reply: str) -> list[dict[str, object]]:
    out = json.loads(reply)["grants"]
    assert isinstance(out, list)
    return out


def test_leftover_respects_pending_and_free_gpus() -> None:
    engine = RoundEngine()
    reply = engine.run(
        _view([{"app_id": "a", "pending_gpus": 3}, {"app_id": "b", "pending_gpus": 1}])
    )
    grants = _grants(reply)
    per_app: dict[str, int] = {}
    per_node: dict[str, int] = {}
    for g in grants:
        per_app[str(g["app_id"])] = per_app.get(str(g["app_id"]), 0) + int(str(g["gpus"]))
        per_node[str(g["node_id"])] = per_node.get(str(g["node_id"]), 0) + int(str(g["gpus"]))
    assert per_app == {"a": 3, "b": 1}
    assert per_node.get("h1:1", 0) <= 4 and per_node.get("h2:1", 0) <= 2


def test_bidder_with_cached_table_wins_its_bundle() -> None:
    bids = ReportedBids()
    view = _view([{"app_id": "a", "pending_gpus": 2}, {"app_id": "b", "pending_gpus": 2}])
    # a table for this round's offer (GPU ids are unique per round: themis.yarn.view.gpu_id):
    # 'a' has the worst rho, so with f=0.8 and 2 apps it is the only bidder.
    h1 = [g.id for g in offer_of(parse_view(view)) if g.machine == "h1:1"]
    bids.report_table(BidTable("a", 5.0, (Bid((h1[0], h1[1]), 1.5),)))
    bids.report_rho("b", 1.0)
    engine = RoundEngine(bids)
    reply = json.loads(engine.run(view))
    assert reply["info"]["bidders"] == ["a"]
    granted_a = sum(g["gpus"] for g in reply["grants"] if g["app_id"] == "a")
    assert 1 <= granted_a <= 2


def test_nothing_to_do_when_no_app_wants_gpus() -> None:
    assert _grants(RoundEngine().run(_view([{"app_id": "a", "pending_gpus": 0}]))) == []


def test_malformed_view_names_the_field() -> None:
    with pytest.raises(ViewError, match="free_gpus"):
        parse_view(
            json.dumps(
                {
                    "round": 1,
                    "now_ms": 0,
                    "fairness_knob": 0.8,
                    "lease_duration_ms": 1,
                    "solver": "auto",
                    "nodes": [{"node_id": "x", "rack": "/r", "total_gpus": 1}],
                    "apps": [],
                }
            )
        )


def test_find_plugin_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / "themis-rm-plugin-9.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setenv(ENV_VAR, str(jar))
    assert find_plugin_jar() == jar
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.jar"))
    with pytest.raises(PluginJarNotFound, match=ENV_VAR):
        find_plugin_jar()


def test_agents_endpoint_offers_collects_bids_and_announces_grants() -> None:
    """YARN mode: a real agent over loopback gRPC is offered the RM's free GPUs, bids with
    the real bid-table code and is told its grant; an app without an agent is a non-bidder."""
    from themis.agent.client import AgentClient
    from themis.arbiter.config import ArbiterConfig
    from themis.arbiter.testing import wait_for
    from themis.mechanism.bidder import AllocationInfo, ModelBidder
    from themis.mechanism.model import AppModel, Job
    from themis.yarn.agents import AgentEndpoint

    endpoint = AgentEndpoint(ArbiterConfig(bid_timeout_s=5.0, fairness_knob=0.5))
    address = endpoint.start(0)
    got: list[AllocationInfo] = []
    app = AppModel("application_1_0001", 0.0, [Job("j", 1.0, 5000.0, 2, 5000.0)])
    client = AgentClient(address, "application_1_0001", ModelBidder(app, lambda: 10.0),
                         on_allocation=got.append)
    try:
        client.start()
        assert client.connected.wait(10)
        engine = RoundEngine(endpoint)
        reply = json.loads(engine.run(_view([
            {"app_id": "application_1_0001", "pending_gpus": 2},
            {"app_id": "application_1_0002", "pending_gpus": 1},  # no agent: rho 1.0
        ])))
        # rho(agent) is inf (no GPU yet) > 1.0, so with f=0.5 it is the one bidder.
        assert reply["info"]["bidders"] == ["application_1_0001"]
        mine = sum(g["gpus"] for g in reply["grants"] if g["app_id"] == "application_1_0001")
        assert mine == 2
        assert wait_for(lambda: bool(got), timeout=5.0)
        alloc = got[-1]
        assert alloc.was_bidder
        assert len(alloc.gpus) == 2
        # Synthetic ids name the node, so the AM knows where to ask for containers.
        nodes = {g.id.rpartition("/")[0] for g in alloc.gpus}
        granted_nodes = {g["node_id"] for g in reply["grants"]
                         if g["app_id"] == "application_1_0001"}
        assert nodes == granted_nodes
        assert client.stats.bids_sent == 1 and client.stats.bids_rejected == 0
    finally:
        client.stop()
        endpoint.stop()


class _FakeRm:
    """Stands in for the RM's lease table (the Java side is tested by FreedGpusIT)."""

    def __init__(self, refuse: str = "") -> None:
        self.events: list[tuple[str, str]] = []
        self.released: list[tuple[str, list[str]]] = []
        self.refuse = refuse
        self.held: dict[str, list[tuple[str, int, float]]] = {}  # app -> its live leases

    # LeaseOwner (themis.yarn.agents)
    def joined(self, app_id: str) -> None:
        self.events.append(("joined", app_id))

    def left(self, app_id: str) -> None:
        self.events.append(("left", app_id))

    def release(self, app_id: str, gpu_ids: Sequence[str]) -> int:
        from themis.arbiter.errors import CallError, Code

        if self.refuse:
            raise CallError(Code.INVALID_ARGUMENT, self.refuse)
        self.released.append((app_id, list(gpu_ids)))
        return len(gpu_ids)

    def leases(self, app_id: str) -> list[tuple[str, int, float]]:
        return list(self.held.get(app_id, []))

    # the Java entry point's names (EngineSupervisor.Registry), for RmLeases
    def agentJoined(self, app_id: str) -> None:
        self.joined(app_id)

    def agentLeft(self, app_id: str) -> None:
        self.left(app_id)

    def releaseGpus(self, app_id: str, gpu_ids_json: str) -> str:
        if self.refuse:
            return json.dumps({"ok": False, "error": self.refuse})
        ids = json.loads(gpu_ids_json)
        self.released.append((app_id, ids))
        return json.dumps({"ok": True, "released": len(ids)})

    def appLeases(self, app_id: str) -> str:
        return json.dumps([{"node_id": n, "gpus": g, "expiry_ms": e * 1000}
                           for n, g, e in self.held.get(app_id, [])])


def test_agents_endpoint_passes_registration_release_and_departure_to_the_rm() -> None:
    """YARN mode: the RM keeps the leases, so an AM's registration, ReleaseGpus and
    Unregister over real gRPC reach the lease owner; a refused release is an error to the AM."""
    import grpc

    from themis.agent.client import AgentClient
    from themis.arbiter.config import ArbiterConfig
    from themis.arbiter.testing import wait_for
    from themis.mechanism.bidder import ModelBidder
    from themis.mechanism.model import AppModel, Job
    from themis.yarn.agents import AgentEndpoint

    rm = _FakeRm()
    endpoint = AgentEndpoint(ArbiterConfig(bid_timeout_s=1.0), owner=rm)
    address = endpoint.start(0)
    app = AppModel("application_1_0007", 0.0, [Job("j", 1.0, 5000.0, 2, 5000.0)])
    client = AgentClient(address, "application_1_0007", ModelBidder(app, lambda: 10.0))
    try:
        client.start()
        assert client.connected.wait(10)
        assert rm.events == [("joined", "application_1_0007")]
        client.leases["h1:1/0"] = 1e12  # as an Allocation would have recorded it
        client.release(["h1:1/0"])
        assert rm.released == [("application_1_0007", ["h1:1/0"])]
        assert "h1:1/0" not in client.leases
        rm.refuse = "GPU id 'x/0' names no node of the cluster"
        with pytest.raises(grpc.RpcError) as err:
            client.release(["x/0"])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "names no node" in str(err.value.details())
    finally:
        client.stop()
        endpoint.stop()
    assert wait_for(lambda: rm.events[-1] == ("left", "application_1_0007"), timeout=5.0)


def test_rm_leases_passes_early_events_on_attach_and_maps_the_rm_reply() -> None:
    """The engine's lease owner: registrations before the gateway is up are not lost; a
    release before it, or one the RM refuses, is a CallError naming why."""
    from themis.arbiter.errors import CallError
    from themis.yarn.engine import RmLeases

    owner = RmLeases()
    owner.joined("application_1_0001")
    owner.left("application_1_0002")
    with pytest.raises(CallError, match="not connected"):
        owner.release("application_1_0001", ["h1:1/0"])
    rm = _FakeRm()
    owner.attach(rm)
    assert rm.events == [("joined", "application_1_0001"), ("left", "application_1_0002")]
    owner.joined("application_1_0003")
    assert rm.events[-1] == ("joined", "application_1_0003")
    assert owner.release("application_1_0001", ["h1:1/0", "h1:1/1"]) == 2
    assert rm.released == [("application_1_0001", ["h1:1/0", "h1:1/1"])]
    rm.refuse = "unknown application application_1_0001"
    with pytest.raises(CallError, match="unknown application"):
        owner.release("application_1_0001", ["h1:1/0"])


def test_an_agent_that_connects_again_learns_its_leases_from_the_rm() -> None:
    """The leases live in the RM: an agent's Hello carries the app's live leases there (a
    reconnect, or a restarted engine, must not look like lost leases to its AM, which would
    stop its jobs); expired ones are left out; RmLeases reads them from the gateway."""
    import time

    from themis.agent.client import AgentClient
    from themis.arbiter.config import ArbiterConfig
    from themis.mechanism.bidder import ModelBidder
    from themis.mechanism.model import AppModel, Job
    from themis.yarn.agents import AgentEndpoint
    from themis.yarn.engine import RmLeases

    rm = _FakeRm()
    now = time.time()
    rm.held["application_1_0009"] = [("h1:1", 2, now + 600), ("h2:1", 1, now + 300),
                                      ("h1:1", 1, now + 120), ("h3:1", 4, now - 1)]
    owner = RmLeases()
    owner.attach(rm)
    endpoint = AgentEndpoint(ArbiterConfig(bid_timeout_s=1.0), owner=owner)
    address = endpoint.start(0)
    app = AppModel("application_1_0009", 0.0, [Job("j", 1.0, 5000.0, 2, 5000.0)])
    client = AgentClient(address, "application_1_0009", ModelBidder(app, time.time))
    try:
        client.start()
        assert client.connected.wait(10)
        assert sorted(client.held()) == ["h1:1/h0", "h1:1/h1", "h1:1/h2", "h2:1/h0"]
        assert abs(client.leases["h2:1/h0"] - (now + 300)) < 1e-3
        # a new engine (fresh epoch, no lease of its own): the agent registers again and
        # its Hello still carries what the RM holds
        endpoint.stop()
        endpoint = AgentEndpoint(ArbiterConfig(bid_timeout_s=1.0), owner=owner)
        endpoint.start(int(address.rsplit(":", 1)[1]))
        before = client.stats.registrations
        deadline = time.monotonic() + 20
        while client.stats.registrations == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.stats.registrations > before
        assert client.connected.wait(10)
        assert len(client.held()) == 4
        # an unknown caller gets no lease information
        assert owner.leases("application_1_0001") == []
    finally:
        client.stop()
        endpoint.stop()
