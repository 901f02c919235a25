"""Authenticated agents against a real gRPC arbiter on 127.0.0.1 (docs/yarn.md, "Security"):
registration tokens, the per-app registration limit, ending a registration from outside,
TLS, and idle calls that must not starve the service. Every rejected call leaves the
arbiter's state exactly as it was (snapshot before == snapshot after)."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pytest

from tests.unit._tls import self_signed
from themis.agent.client import AgentClient
from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import DEFAULT_MAX_APPS, ArbiterConfig
from themis.arbiter.registration import MAX_TOKEN, HmacRegistrar
from themis.arbiter.service import ArbiterServer
from themis.arbiter.state import ArbiterCore
from themis.arbiter.testing import creds, register_request, settle, stub, wait_for
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.model import AppModel, Job
from themis.rpc.tls import CERT_KEY, KEY_KEY, ServerTls, TlsError, channel_credentials
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc
from themis.yarn.engine import _parse
from themis.yarn.settings import VARIABLES, SettingError

SC = grpc.StatusCode


def config(**kw: Any) -> ArbiterConfig:
    base: dict[str, Any] = dict(lease_s=30.0, bid_timeout_s=1.0, fairness_knob=0.0,
                                heartbeat_s=0.3, round_delay_s=0.01, solver="bnb", seed=1,
                                max_registrations=3)
    base.update(kw)
    return ArbiterConfig(**base)


def authed_server(registrar: HmacRegistrar, tls: ServerTls | None = None,
                  max_workers: int = 8, **kw: Any) -> ArbiterServer:
    backend = uniform_cluster(2, 2)
    core = ArbiterCore(backend, config(**kw), registrar=registrar)
    srv = ArbiterServer(backend, core=core, tls=tls, max_workers=max_workers)
    srv.start(0)
    return srv


@pytest.fixture
def registrar() -> HmacRegistrar:
    return HmacRegistrar()


@pytest.fixture
def server(registrar: HmacRegistrar) -> Iterator[ArbiterServer]:
    srv = authed_server(registrar)
    yield srv
    srv.stop(0)


@pytest.fixture
def arb(server: ArbiterServer) -> Iterator[Any]:
    channel, s = stub(server.address)
    yield s
    channel.close()


def register(s: Any, app: str, token: str) -> pb.RegisterAppResponse:
    return s.RegisterApp(register_request(app_id=app, rho=math.inf, max_gpus=2,
                                               registration_token=token), timeout=5)


def rejected(server: ArbiterServer, call: Any) -> grpc.RpcError:
    before = settle(server.core)
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert settle(server.core) == before, "a rejected call changed the arbiter's state"
    return info.value


# ---------------------------------------------------------------- registration tokens
@pytest.mark.parametrize("case", ["missing", "wrong", "other app's", "oversized",
                                  "other arbiter's"])
def test_registration_without_proof_is_refused_and_changes_nothing(
        server: ArbiterServer, arb: Any, registrar: HmacRegistrar, case: str) -> None:
    token = {"missing": "", "wrong": "0" * 64, "other app's": registrar.token_for("b"),
             "oversized": "x" * (MAX_TOKEN + 1),
             "other arbiter's": HmacRegistrar().token_for("a")}[case]
    err = rejected(server, lambda: register(arb, "a", token))
    assert err.code() == SC.PERMISSION_DENIED, err.details()
    assert "registration token" in (err.details() or "")
    assert "a" not in server.core.snapshot()["apps"]
    # the rightful AM is not locked out by the attempt
    assert register(arb, "a", registrar.token_for("a")).secret


def test_squatter_cannot_take_a_registered_id(server: ArbiterServer, arb: Any,
                                              registrar: HmacRegistrar) -> None:
    resp = register(arb, "a", registrar.token_for("a"))
    err = rejected(server, lambda: register(arb, "a", "f" * 64))
    assert err.code() == SC.PERMISSION_DENIED  # refused before "already exists" is revealed
    assert server.core.snapshot()["apps"]["a"][0] == resp.secret


def test_per_app_registration_limit(server: ArbiterServer, arb: Any,
                                    registrar: HmacRegistrar) -> None:
    token = registrar.token_for("a")
    for _ in range(3):  # max_registrations=3 in the window
        resp = register(arb, "a", token)
        arb.Unregister(pb.UnregisterRequest(credentials=creds("a", resp.secret)), timeout=5)
    err = rejected(server, lambda: register(arb, "a", token))
    assert err.code() == SC.RESOURCE_EXHAUSTED, err.details()
    assert "3 registrations" in (err.details() or "")
    assert register(arb, "b", registrar.token_for("b")).secret  # other apps unaffected


def test_registered_apps_limit(registrar: HmacRegistrar) -> None:
    """``max_apps`` registered apps at once: one more gets RESOURCE_EXHAUSTED and changes
    nothing; the registered apps keep working; a place freed by an app that ends is taken."""
    server = authed_server(registrar, max_apps=3)
    channel, arb = stub(server.address)
    try:
        secrets = {a: register(arb, a, registrar.token_for(a)).secret for a in "abc"}
        stream = arb.Events(pb.EventsRequest(credentials=creds("a", secrets["a"])))
        assert next(iter(stream)).WhichOneof("kind") == "hello"
        err = rejected(server, lambda: register(arb, "d", registrar.token_for("d")))
        assert err.code() == SC.RESOURCE_EXHAUSTED, err.details()
        assert "3 registered apps (at most 3, max_apps)" in (err.details() or "")
        assert "d" not in server.core.snapshot()["registrations"]
        arb.ReportRho(pb.ReportRhoRequest(credentials=creds("a", secrets["a"]), rho=2.0),
                      timeout=5)  # the registered apps are unaffected
        assert server.core.snapshot()["apps"]["a"][1] == 2.0
        assert wait_for(lambda: server.core.snapshot()["apps"]["a"][3] > 0, 5)
        arb.Unregister(pb.UnregisterRequest(credentials=creds("c", secrets["c"])), timeout=5)
        assert register(arb, "d", registrar.token_for("d")).secret
        stream.cancel()
    finally:
        channel.close()
        server.stop(0)


def test_max_apps_setting() -> None:
    assert VARIABLES["THEMIS_MAX_APPS"][1] == str(DEFAULT_MAX_APPS) == "4096"
    assert ArbiterConfig().max_apps == DEFAULT_MAX_APPS
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_apps"):
            config(max_apps=bad)
    with mock.patch.dict(os.environ, {"THEMIS_MAX_APPS": "7"}):
        assert _parse(["--port", "1", "--token", "t"]).max_apps == 7
        assert _parse(["--port", "1", "--token", "t", "--max-apps", "9"]).max_apps == 9
    with mock.patch.dict(os.environ, {"THEMIS_MAX_APPS": "0"}), \
            pytest.raises(SettingError, match="THEMIS_MAX_APPS"):
        _parse(["--port", "1", "--token", "t"])


def test_expel_ends_the_registration_and_its_stream(server: ArbiterServer, arb: Any,
                                                    registrar: HmacRegistrar) -> None:
    resp = register(arb, "a", registrar.token_for("a"))
    call = arb.Events(pb.EventsRequest(credentials=creds("a", resp.secret)))
    assert next(iter(call)).WhichOneof("kind") == "hello"
    assert server.core.expel("a")
    assert list(call) == [] or all(e.WhichOneof("kind") == "heartbeat" for e in call)
    assert "a" not in server.core.snapshot()["apps"]
    assert not server.core.expel("a")  # already gone: nothing to do
    err = rejected(server, lambda: arb.ReportRho(pb.ReportRhoRequest(
        credentials=creds("a", resp.secret), rho=2.0), timeout=5))
    assert err.code() == SC.NOT_FOUND


def test_agent_client_registers_with_a_token_function(server: ArbiterServer,
                                                      registrar: HmacRegistrar) -> None:
    asked: list[int] = []

    def token() -> str:
        asked.append(1)
        return registrar.token_for("a")

    c = agent(server, "a", token=token)
    try:
        assert c.connected.wait(5)
        assert asked and c.stats.registrations == 1
        server.core.expel("a")  # e.g. its AM attempt ended: the agent registers again
        assert wait_for(lambda: c.stats.registrations == 2 and c.connected.is_set(), 5)
        assert len(asked) == 2
    finally:
        c.stop()


def agent(server: ArbiterServer, app: str, token: str | Any,
          tls: grpc.ChannelCredentials | None = None) -> AgentClient:
    model = AppModel(app, time.time(), [Job("j", 1.0, 1000.0, 2)])
    return AgentClient(server.address, app, ModelBidder(model, time.time),
                       registration_token=token, tls=tls).start()


# ---------------------------------------------------------------- TLS
def test_tls_endpoint_serves_tls_clients_only(tmp_path: Path, registrar: HmacRegistrar
                                              ) -> None:
    cert, key = self_signed(tmp_path)
    other, _ = self_signed(tmp_path, "other")
    srv = authed_server(registrar, ServerTls(str(cert), str(key)))
    try:
        c = agent(srv, "a", registrar.token_for("a"), tls=channel_credentials(str(cert)))
        try:
            assert c.connected.wait(10), c.stats.last_error
        finally:
            c.stop(unregister=False)
        for creds_ in (None, channel_credentials(str(other))):  # plaintext; untrusted cert
            channel = (grpc.insecure_channel(srv.address) if creds_ is None
                       else grpc.secure_channel(srv.address, creds_))
            s = pb_grpc.ArbiterStub(channel)  # type: ignore[no-untyped-call]
            err = rejected(srv, lambda s=s: register(s, "b", registrar.token_for("b")))
            assert err.code() == SC.UNAVAILABLE, err.details()
            channel.close()
        assert "b" not in srv.core.snapshot()["apps"]
    finally:
        srv.stop(0)


def test_tls_files_that_cannot_be_used_are_named(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [(ServerTls(str(tmp_path / "nope.crt"), str(key)), CERT_KEY, "no such file"),
             (ServerTls(str(cert), str(tmp_path / "nope.key")), KEY_KEY, "no such file"),
             (ServerTls(str(junk), str(key)), CERT_KEY, "not a PEM file"),
             (ServerTls(str(cert), str(junk)), KEY_KEY, "not a PEM file"),
             (ServerTls("", str(key)), CERT_KEY, "is not set")]
    for tls, setting, why in cases:
        srv = ArbiterServer(uniform_cluster(1, 1), config(), tls=tls)
        with pytest.raises(TlsError) as info:
            srv.start(0)
        assert setting in str(info.value) and why in str(info.value), str(info.value)
        assert srv.port == 0


# ---------------------------------------------------------------- starvation
def read_to_end(call: Any) -> None:
    """Read a server stream until it ends (or is cancelled by the test's clean-up)."""
    try:
        for _ in call:
            pass
    except grpc.RpcError:
        pass


def test_idle_calls_and_streams_do_not_starve_the_service(registrar: HmacRegistrar) -> None:
    """70 calls that never send their request and 70 streams of one app, against a server
    with 2 worker threads: another app still registers and reports rho, and the first app
    has exactly one open stream."""
    srv = authed_server(registrar, max_workers=2)
    stop = threading.Event()

    def never() -> Iterator[bytes]:
        stop.wait()
        yield from ()

    # its own connection (channels to one target share one by default)
    idle_channel = grpc.insecure_channel(srv.address,
                                         options=[("grpc.use_local_subchannel_pool", 1)])
    idle = [idle_channel.stream_stream("/themis.v1.Arbiter/Events")(never(), timeout=30)
            for _ in range(70)]
    ch, s = stub(srv.address)
    # a's 70 streams over two connections of their own (not the one b's calls use)
    a_channels = [grpc.insecure_channel(srv.address,
                                        options=[("grpc.use_local_subchannel_pool", 1)])
                  for _ in range(2)]
    a_stubs = [pb_grpc.ArbiterStub(c) for c in a_channels]  # type: ignore[no-untyped-call]
    streams: list[Any] = []
    try:
        a = register(s, "a", registrar.token_for("a"))
        streams = [a_stubs[k % 2].Events(pb.EventsRequest(credentials=creds("a", a.secret)))
                   for k in range(70)]
        for call in streams:
            assert next(iter(call)).WhichOneof("kind") == "hello"
        b = register(s, "b", registrar.token_for("b"))
        s.ReportRho(pb.ReportRhoRequest(credentials=creds("b", b.secret), rho=3.0), timeout=5)
        assert srv.core.snapshot()["apps"]["b"][1] == 3.0
        # one stream per app: the 69 superseded ones ended, the newest (in the server's
        # order) is still open. A client sees a stream's end only by reading up to it
        # (gRPC holds the status behind unread messages), so each stream is read to its
        # end on a thread of its own; is_active() alone depends on timing.
        readers = [threading.Thread(target=read_to_end, args=(c,), daemon=True)
                   for c in streams]
        for t in readers:
            t.start()
        assert wait_for(lambda: sum(not t.is_alive() for t in readers) == 69, 30)
        assert sum(t.is_alive() for t in readers) == 1
        ended = [c for c, t in zip(streams, readers, strict=True) if not t.is_alive()]
        assert all(c.code() == grpc.StatusCode.OK for c in ended)
        assert srv.core.snapshot()["apps"]["a"][3] != 0  # its record has an open stream
    finally:
        stop.set()
        for c in idle + streams:
            c.cancel()
        idle_channel.close()
        for c in a_channels:
            c.close()
        ch.close()
        srv.stop(0)
