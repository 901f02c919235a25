"""The YARN engine's agents' endpoint with authenticated registration (docs/yarn.md,
"Security"): a real gRPC endpoint on 127.0.0.1 whose registrar asks "the RM" (a fake of the
gateway's ``verifyAmToken``, whose Java side AmTokenIT tests against a real RM), the RM
ending registrations (``appEnded``), and the engine's TLS start-up errors."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.unit._tls import self_signed
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.testing import creds, register_request, settle, stub
from themis.rpc.tls import CERT_KEY, ENABLED_KEY
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.yarn.agents import AgentEndpoint
from themis.yarn.auth import AmRmTokenRegistrar
from themis.yarn.engine import Py4JEngine, RmLeases, _agent_endpoint, _parse, main
from themis.yarn.rounds import RoundEngine

SC = grpc.StatusCode
APP, OTHER_APP = "application_1700000000000_0001", "application_1700000000000_0002"


class FakeRm:
    """The RM gateway's entry point as the engine calls it: tokens are "<app>:token"."""

    def __init__(self) -> None:
        self.joined: list[str] = []
        self.left: list[str] = []
        self.asked: list[tuple[str, str]] = []
        self.finished: set[str] = set()
        self.broken = False

    def verifyAmToken(self, app_id: str, token: str) -> str:
        self.asked.append((app_id, token))
        if self.broken:
            raise RuntimeError("gateway gone")
        if token.split(":")[0] not in (APP, OTHER_APP):
            return json.dumps({"ok": False, "error": "registration token is not an AMRMToken"})
        if token.split(":")[0] != app_id:
            return json.dumps({"ok": False, "error": "registration token of another application"})
        if app_id in self.finished:
            return json.dumps({"ok": False, "error": "the application has finished"})
        return json.dumps({"ok": True})

    def agentJoined(self, app_id: str) -> None:
        self.joined.append(app_id)

    def agentLeft(self, app_id: str) -> None:
        self.left.append(app_id)

    def releaseGpus(self, app_id: str, gpu_ids_json: str) -> str:
        return json.dumps({"ok": True, "released": 0})


@pytest.fixture
def rm() -> FakeRm:
    return FakeRm()


@pytest.fixture
def owner(rm: FakeRm) -> RmLeases:
    o = RmLeases()
    o.attach(rm)  # type: ignore[arg-type]
    return o


@pytest.fixture
def endpoint(owner: RmLeases) -> Iterator[AgentEndpoint]:
    ep = AgentEndpoint(ArbiterConfig(solver="bnb", heartbeat_s=0.3), owner=owner,
                       registrar=AmRmTokenRegistrar(owner.rm))
    ep.start(0)
    yield ep
    ep.stop()


def register(s: Any, app: str, token: str) -> pb.RegisterAppResponse:
    return s.RegisterApp(register_request(app_id=app, rho=math.inf, max_gpus=1,
                                               registration_token=token), timeout=5)


@pytest.mark.parametrize("token, code, why", [
    ("", SC.PERMISSION_DENIED, "missing registration token"),
    ("garbage", SC.PERMISSION_DENIED, "not an AMRMToken"),
    (f"{OTHER_APP}:token", SC.PERMISSION_DENIED, "another application"),
])
def test_refused_registrations_change_nothing(endpoint: AgentEndpoint, rm: FakeRm, token: str,
                                              code: grpc.StatusCode, why: str) -> None:
    channel, s = stub(endpoint.server.address)
    before = settle(endpoint.core)
    with pytest.raises(grpc.RpcError) as info:
        register(s, APP, token)
    assert info.value.code() == code and why in (info.value.details() or "")
    assert settle(endpoint.core) == before
    assert rm.joined == []  # the RM was not told of an agent
    assert register(s, APP, f"{APP}:token").secret  # the real AM still registers
    assert rm.joined == [APP]
    channel.close()


def test_finished_app_and_unreachable_rm_are_refused(endpoint: AgentEndpoint, rm: FakeRm,
                                                     owner: RmLeases) -> None:
    channel, s = stub(endpoint.server.address)
    rm.finished.add(APP)
    before = settle(endpoint.core)
    with pytest.raises(grpc.RpcError) as info:
        register(s, APP, f"{APP}:token")
    assert info.value.code() == SC.PERMISSION_DENIED
    assert "has finished" in (info.value.details() or "")
    rm.broken = True
    with pytest.raises(grpc.RpcError) as info:
        register(s, OTHER_APP, f"{OTHER_APP}:token")
    assert info.value.code() == SC.FAILED_PRECONDITION
    assert "could not ask the ResourceManager" in (info.value.details() or "")
    assert settle(endpoint.core) == before and rm.joined == []
    channel.close()


def test_no_registration_before_the_rm_is_connected() -> None:
    owner = RmLeases()  # not attached
    ep = AgentEndpoint(ArbiterConfig(solver="bnb"), owner=owner,
                       registrar=AmRmTokenRegistrar(owner.rm))
    ep.start(0)
    try:
        channel, s = stub(ep.server.address)
        with pytest.raises(grpc.RpcError) as info:
            register(s, APP, f"{APP}:token")
        assert info.value.code() == SC.FAILED_PRECONDITION
        assert ep.core.snapshot()["apps"] == {}
        channel.close()
    finally:
        ep.stop()


def test_rm_ends_a_registration(endpoint: AgentEndpoint, rm: FakeRm) -> None:
    channel, s = stub(endpoint.server.address)
    resp = register(s, APP, f"{APP}:token")
    stream = s.Events(pb.EventsRequest(credentials=creds(APP, resp.secret)))
    assert next(iter(stream)).WhichOneof("kind") == "hello"
    engine = Py4JEngine(RoundEngine(endpoint), expel=endpoint.core.expel)
    assert json.loads(engine.appEnded(APP)) == {"ended": True}
    assert all(e.WhichOneof("kind") == "heartbeat" for e in stream)  # the stream ended
    assert APP not in endpoint.core.snapshot()["apps"]
    assert rm.left == []  # the RM ended it: it is not told again
    assert json.loads(engine.appEnded(APP)) == {"ended": False}
    assert json.loads(Py4JEngine(RoundEngine(None)).appEnded(APP)) == {"ended": False}
    with pytest.raises(grpc.RpcError) as info:  # the old secret is gone
        s.ReportRho(pb.ReportRhoRequest(credentials=creds(APP, resp.secret), rho=1.0),
                    timeout=5)
    assert info.value.code() == SC.NOT_FOUND
    channel.close()


# ---------------------------------------------------------------- engine start-up
def test_engine_refuses_tls_on_without_files(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("THEMIS_AGENT_TLS", "THEMIS_AGENT_TLS_CERT", "THEMIS_AGENT_TLS_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert main(["--port", "1", "--token", "t", "--agent-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "cannot start the agents' endpoint" in err and CERT_KEY in err
    assert f"{ENABLED_KEY}=false" in err and "Traceback" not in err


def test_engine_serves_tls_or_explicit_plaintext(tmp_path: Path, owner: RmLeases) -> None:
    cert, key = self_signed(tmp_path)
    for argv, tls in ((["--agent-tls-cert", str(cert), "--agent-tls-key", str(key)], True),
                      (["--agent-tls", "off"], False)):
        ep, address = _agent_endpoint(_parse(["--agent-port", "0", *argv]), owner)
        assert ep is not None and address.startswith("127.0.0.1:")
        try:
            assert (ep.server.tls is not None) == tls
            assert isinstance(ep.core.registrar, AmRmTokenRegistrar)
        finally:
            ep.stop()
