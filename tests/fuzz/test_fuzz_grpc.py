"""Fuzzing the arbiter's gRPC service (a real server on 127.0.0.1): adversarial messages
and raw bytes get only the documented status codes, a refused call changes nothing, and an
accepted bid table passes the auction's validator within the table limits."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz._fuzz import byte_mutations, fuzz_settings
from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.arbiter.testing import bundle, creds, register_request, stub, wait_for
from themis.mechanism.auction import validate_tables
from themis.rpc.offers import PROTOCOL_VERSION
from themis.rpc.v1 import arbiter_pb2 as pb

SC = grpc.StatusCode
DOCUMENTED = {SC.OK, SC.INVALID_ARGUMENT, SC.PERMISSION_DENIED, SC.NOT_FOUND,
              SC.ALREADY_EXISTS, SC.FAILED_PRECONDITION, SC.RESOURCE_EXHAUSTED}
GPUS = [f"m{m}-g{g}" for m in range(2) for g in range(4)]  # uniform_cluster(2, 4)
# strings protobuf accepts (valid UTF-8): hostile for the arbiter, not for the encoder
TEXT = st.text(max_size=12) | st.sampled_from(
    ["", " ", "\n", "a\n", "\x00", "é", "{x}", "a" * 129, "a" * 5000, *GPUS, "a", "b", "c"])
DOUBLE = st.floats() | st.sampled_from([0.0, -0.0, -1.0, 1e-320, 1e308, math.inf, -math.inf,
                                        math.nan, 1.0, 2.5])


@dataclass
class Arena:
    """A server whose rounds the test drives (own_rounds=False): apps a and b have open
    streams and an open round offering every GPU; c is a victim of the other calls."""

    server: ArbiterServer
    stub: Any
    channel: grpc.Channel
    secrets: dict[str, str] = field(default_factory=dict)
    streams: list[Any] = field(default_factory=list)
    collector: threading.Thread | None = None

    def register(self, app: str) -> None:
        resp = self.stub.RegisterApp(pb.RegisterAppRequest(
            protocol_version=PROTOCOL_VERSION, app_id=app, rho=2.0, max_gpus=8))
        self.secrets[app] = resp.secret

    def open_round(self) -> int:
        """Close the open round (b bids) if a already bid in it, and open a new one."""
        core = self.server.core
        r = core._open
        if r is not None and not r.closed and "a" not in r.tables:
            return r.round_id
        if r is not None and not r.closed:
            self.stub.SubmitBid(pb.SubmitBidRequest(
                credentials=creds("b", self.secrets["b"]), round_id=r.round_id,
                table=pb.BidTable(rho_current=2.0)))
        if self.collector is not None:
            self.collector.join(10)
        topo = core.backend.topology()
        self.collector = threading.Thread(
            target=core.collect_external, args=([topo[g] for g in GPUS], ["a", "b"]),
            daemon=True)
        self.collector.start()
        end = time.monotonic() + 5
        while time.monotonic() < end:
            r = core._open
            if r is not None and not r.closed and "a" not in r.tables:
                return r.round_id
            time.sleep(0.001)
        raise AssertionError("no round opened")


@pytest.fixture(scope="module")
def arena() -> Iterator[Arena]:
    cfg = ArbiterConfig(bid_timeout_s=3600.0, heartbeat_s=60.0, solver="bnb",
                        max_bundles=32, max_table_gpu_ids=64)
    srv = ArbiterServer(uniform_cluster(2, 4), cfg, max_workers=16)
    srv.start(0, own_rounds=False)
    channel, s = stub(srv.address)
    a = Arena(srv, s, channel)
    for app in ("a", "b", "c"):
        a.register(app)
    for app in ("a", "b"):
        a.streams.append(s.Events(pb.EventsRequest(credentials=creds(app, a.secrets[app]))))
    end = time.monotonic() + 5
    while time.monotonic() < end and not all(srv.core._live(x) for x in ("a", "b")):
        time.sleep(0.01)
    yield a
    for call in a.streams:
        call.cancel()
    channel.close()
    srv.stop(0)


def call_code(fn: Any, request: Any) -> tuple[grpc.StatusCode, Any]:
    try:
        return SC.OK, fn(request, timeout=10)
    except grpc.RpcError as exc:
        assert "Exception" not in (exc.details() or ""), exc.details()
        return exc.code(), exc.details()


@st.composite
def bid_requests(draw: st.DrawFn, secret: str, round_id: int) -> pb.SubmitBidRequest:
    who = draw(st.sampled_from(["good"] * 6 + ["wrong", "other", "long", "empty"]))
    c = {"good": creds("a", secret), "wrong": creds("a", draw(TEXT)),
         "other": creds("b", secret), "long": creds("a" * 200, secret),
         "empty": pb.Credentials()}[who]
    rid = draw(st.sampled_from([round_id] * 8 + [0, round_id + 1, 2**64 - 1]))
    small = st.integers(0, 8) | st.integers(0, 2**32 - 1)
    bundles = draw(st.lists(st.builds(
        lambda n, s, c, r: pb.Bundle(nodes=n, starts=s, counts=c, rho=r),
        st.lists(small, max_size=6), st.lists(small, max_size=6), st.lists(small, max_size=6),
        st.floats(0.1, 5.0) | DOUBLE), max_size=40))
    if draw(st.booleans()):  # mostly well-formed bundles, to reach the accepting path
        topo = uniform_cluster(2, 4).topology()
        bundles = [bundle(topo, sorted(set(draw(st.lists(st.sampled_from(GPUS), max_size=6)))
                                       ) or [GPUS[0]],
                          b.rho if b.rho > 0 and math.isfinite(b.rho) else 1.0)
                   for b in bundles[:8]]
    table = pb.BidTable(rho_current=draw(st.floats(0.5, 10.0) | DOUBLE), bundles=bundles)
    return pb.SubmitBidRequest(credentials=c, round_id=rid, table=table)


@fuzz_settings(150)
@given(st.data())
def test_submit_bid(arena: Arena, data: st.DataObject) -> None:
    rid = arena.open_round()
    core = arena.server.core
    request = data.draw(bid_requests(arena.secrets["a"], rid))
    before = core.snapshot()
    code, _ = call_code(arena.stub.SubmitBid, request)
    event(code.name)
    assert code in DOCUMENTED
    if code != SC.OK:
        assert core.snapshot() == before, "a refused call changed the arbiter's state"
        return
    table = core._open.tables["a"]
    validate_tables(list(core._open.offer_ids), [table])  # raises if invalid
    assert len(table.bids) <= core.config.max_bundles
    assert sum(len(b.gpus) for b in table.bids) <= core.config.max_table_gpu_ids


@st.composite
def other_calls(draw: st.DrawFn, secret_c: str) -> tuple[str, Any]:
    c = draw(st.sampled_from([creds("c", secret_c), creds("c", secret_c),
                              creds("c", "x"), pb.Credentials()]) |
             st.builds(creds, TEXT, TEXT))
    kind = draw(st.sampled_from(["RegisterApp", "ReportRho", "ReleaseGpus", "Unregister",
                                 "Events"]))
    if kind == "RegisterApp":
        return kind, register_request(app_id=draw(TEXT), rho=draw(DOUBLE),
                                           max_gpus=draw(st.integers(-(2**31), 2**31 - 1)))
    if kind == "ReportRho":
        return kind, pb.ReportRhoRequest(credentials=c, rho=draw(DOUBLE))
    if kind == "ReleaseGpus":
        return kind, pb.ReleaseGpusRequest(credentials=c, gpu_ids=draw(st.lists(
            st.sampled_from(GPUS) | TEXT, max_size=12)))
    if kind == "Unregister":
        return kind, pb.UnregisterRequest(credentials=c)
    return kind, pb.EventsRequest(credentials=c)


def check_call(arena: Arena, kind: str, request: Any) -> grpc.StatusCode:
    core = arena.server.core
    before = core.snapshot()
    if kind == "Events":
        call = arena.stub.Events(request, timeout=2)
        try:
            first = next(iter(call))
            assert first.WhichOneof("kind") == "hello"
            assert first.hello.arbiter_epoch == core.epoch
            code = SC.OK
        except grpc.RpcError as exc:
            code = exc.code()
        finally:
            call.cancel()
        if code == SC.OK:  # the stream's end reaches the core asynchronously: wait for it
            app = request.credentials.app_id
            assert wait_for(lambda: core.snapshot()["apps"].get(app, (0, 0, 0, 0))[3] == 0)
        return code
    code, resp = call_code(getattr(arena.stub, kind), request)
    after = core.snapshot()
    if code != SC.OK:
        assert after == before, f"a refused {kind} changed the arbiter's state"
    elif kind == "RegisterApp":
        assert resp.secret and resp.arbiter_epoch == core.epoch
        app = after["apps"][request.app_id]
        assert 0 < len(request.app_id) <= 128 and request.app_id.isprintable()
        assert app[1] == request.rho and request.rho > 0 and app[2] >= 1
    elif kind == "ReportRho":
        assert after["apps"][request.credentials.app_id][1] == request.rho > 0
    elif kind == "Unregister":
        assert request.credentials.app_id not in after["apps"]
    return code


@fuzz_settings(150)
@given(st.data())
def test_other_calls(arena: Arena, data: st.DataObject) -> None:
    if "c" not in arena.server.core.snapshot()["apps"]:
        arena.register("c")
    kind, request = data.draw(other_calls(arena.secrets["c"]))
    code = check_call(arena, kind, request)
    event(f"{kind} {code.name}")
    assert code in DOCUMENTED


METHODS = ["RegisterApp", "ReportRho", "SubmitBid", "ReleaseGpus", "Unregister", "Events"]


@fuzz_settings(150)
@given(st.data())
def test_raw_bytes(arena: Arena, data: st.DataObject) -> None:
    """Bytes that may not parse as the method's request: documented codes only, and the
    server keeps serving."""
    method = data.draw(st.sampled_from(METHODS))
    valid = {
        "RegisterApp": register_request(app_id="z",
                                             rho=1.0, max_gpus=1),
        "ReportRho": pb.ReportRhoRequest(credentials=creds("c", "x"), rho=1.0),
        "SubmitBid": pb.SubmitBidRequest(credentials=creds("a", "x"), round_id=1,
                                         table=pb.BidTable(rho_current=1.0, bundles=[
                                             pb.Bundle(nodes=[0], starts=[0], counts=[2],
                                                       rho=0.5)])),
        "ReleaseGpus": pb.ReleaseGpusRequest(credentials=creds("c", "x"), gpu_ids=GPUS[:1]),
        "Unregister": pb.UnregisterRequest(credentials=creds("c", "x")),
        "Events": pb.EventsRequest(credentials=creds("c", "x")),
    }[method].SerializeToString()
    raw = data.draw(byte_mutations(valid, [b"\xff", b"\x80", b"\x0a\x7f", b"\x12\x00"]) |
                    st.binary(max_size=64))
    channel = arena.channel
    if method == "Events":
        call = channel.unary_stream(f"/themis.v1.Arbiter/{method}")(raw, timeout=2)
        try:
            next(iter(call))
            code = SC.OK
        except grpc.RpcError as exc:
            code = exc.code()
        except StopIteration:
            code = SC.OK
        finally:
            call.cancel()
    else:
        code, _ = call_code(channel.unary_unary(f"/themis.v1.Arbiter/{method}"), raw)
    event(f"{method} {code.name}")
    assert code in DOCUMENTED
    code, _ = call_code(arena.stub.ReportRho, pb.ReportRhoRequest(
        credentials=creds("a", arena.secrets["a"]), rho=2.0))
    assert code == SC.OK  # still serving
