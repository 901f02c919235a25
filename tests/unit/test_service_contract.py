"""Contract tests of the arbiter's gRPC service: a real server on 127.0.0.1:0, raw stubs.

Every rejected call must return the documented status code and leave the arbiter's state
unchanged (snapshot before == snapshot after).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.service import ArbiterServer
from themis.arbiter.testing import (
    GatedCluster,
    bundle,
    creds,
    register_request,
    settle,
    stub,
    wait_for,
)
from themis.rpc.offers import PROTOCOL_VERSION
from themis.rpc.v1 import arbiter_pb2 as pb

SC = grpc.StatusCode


def _gated(machines: int, gpus: int) -> GatedCluster:
    """``uniform_cluster``'s GPUs, free once the test opens the gate (:func:`_open_round`)."""
    return GatedCluster(uniform_cluster(machines, gpus).topology().values())


def _connected_then_open(server: ArbiterServer, *streams: Stream) -> None:
    """Every stream has its Hello (the app is connected), then the GPUs become free: the
    first round offers them to all the apps (a round that started before an app's stream
    opened would give every GPU to the others as leftover, and that app no offer)."""
    for st in streams:
        st.next("hello", timeout=10.0)
    backend = server.core.backend
    assert isinstance(backend, GatedCluster)
    backend.gate.set()


@pytest.fixture
def server() -> Iterator[ArbiterServer]:
    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=3.0, warning_s=1.0, fairness_knob=0.0,
                        heartbeat_s=0.5, round_delay_s=0.01, solver="bnb", seed=1)
    srv = ArbiterServer(_gated(2, 2), cfg, max_workers=32)
    srv.start(0)
    yield srv
    srv.stop(0)


@pytest.fixture
def arb(server: ArbiterServer) -> Iterator[Any]:
    channel, s = stub(server.address)
    yield s
    channel.close()


def register(s: Any, app: str, rho: float = math.inf, max_gpus: int = 4) -> str:
    resp = s.RegisterApp(register_request(app_id=app, rho=rho, max_gpus=max_gpus))
    assert resp.secret and resp.cluster_gpus == 4
    return str(resp.secret)


class Stream:
    """Reads an app's event stream on a thread into a queue."""

    def __init__(self, s: Any, app: str, secret: str) -> None:
        self.call = s.Events(pb.EventsRequest(credentials=creds(app, secret)))
        self.events: queue.Queue[pb.Event] = queue.Queue()
        self.error: grpc.RpcError | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for ev in self.call:
                self.events.put(ev)
        except grpc.RpcError as exc:
            self.error = exc

    def next(self, kind: str, timeout: float = 5.0) -> Any:
        """The next event of ``kind`` within ``timeout`` s (heartbeats and other events in
        between do not extend it)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind} event within {timeout} s")
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                raise AssertionError(f"no {kind} event within {timeout} s") from None
            if ev.WhichOneof("kind") == kind:
                return getattr(ev, kind)

    def close(self) -> None:
        self.call.cancel()


def rejected(server: ArbiterServer, code: grpc.StatusCode, call: Any, *args: Any,
             match: str = "") -> str:
    """Run a call that must fail with ``code`` and change no state."""
    before = settle(server.core)
    with pytest.raises(grpc.RpcError) as info:
        call(*args)
    after = server.core.snapshot()
    assert info.value.code() == code, info.value.details()
    assert match in info.value.details()
    assert after == before, "a rejected call changed the arbiter's state"
    return str(info.value.details())


def test_register_errors(server: ArbiterServer, arb: Any) -> None:
    register(arb, "a")
    req = register_request
    rejected(server, SC.INVALID_ARGUMENT, arb.RegisterApp, req(app_id="", rho=1, max_gpus=1))
    rejected(server, SC.INVALID_ARGUMENT, arb.RegisterApp,
             req(app_id="b", rho=math.nan, max_gpus=1), match="rho")
    rejected(server, SC.INVALID_ARGUMENT, arb.RegisterApp,
             req(app_id="b", rho=-1.0, max_gpus=1), match="rho")
    rejected(server, SC.INVALID_ARGUMENT, arb.RegisterApp,
             req(app_id="b", rho=1.0, max_gpus=0), match="max_gpus")
    rejected(server, SC.ALREADY_EXISTS, arb.RegisterApp,
             req(app_id="a", rho=1.0, max_gpus=1), match="already registered")
    rejected(server, SC.FAILED_PRECONDITION, arb.RegisterApp,  # an agent of version 1
             pb.RegisterAppRequest(app_id="b", rho=1.0, max_gpus=1),
             match="app 'b': protocol version mismatch: the agent speaks themis protocol "
                   f"version 1, the arbiter version {PROTOCOL_VERSION}")


def test_credentials_errors_on_every_call(server: ArbiterServer, arb: Any) -> None:
    sa = register(arb, "a")
    sb = register(arb, "b")
    cases = [
        (creds("a", ""), SC.PERMISSION_DENIED, "missing secret"),
        (creds("a", "nope"), SC.PERMISSION_DENIED, "wrong secret"),
        (creds("a", sb), SC.PERMISSION_DENIED, "wrong secret"),  # b's secret, a's id
        (creds("b", sa), SC.PERMISSION_DENIED, "wrong secret"),  # another app's id
        (creds("", sa), SC.PERMISSION_DENIED, "missing credentials"),
        (creds("ghost", sa), SC.NOT_FOUND, "not registered"),
    ]
    for c, code, msg in cases:
        rejected(server, code, arb.ReportRho, pb.ReportRhoRequest(credentials=c, rho=2.0),
                 match=msg)
        rejected(server, code, arb.SubmitBid, pb.SubmitBidRequest(
            credentials=c, round_id=1, table=pb.BidTable(rho_current=2.0)), match=msg)
        rejected(server, code, arb.ReleaseGpus,
                 pb.ReleaseGpusRequest(credentials=c, gpu_ids=["m0-g0"]), match=msg)
        rejected(server, code, arb.Unregister, pb.UnregisterRequest(credentials=c), match=msg)
        rejected(server, code, lambda r: list(arb.Events(r)),
                 pb.EventsRequest(credentials=c), match=msg)


def test_report_rho_and_release_errors(server: ArbiterServer, arb: Any) -> None:
    sa = register(arb, "a")
    c = creds("a", sa)
    rejected(server, SC.INVALID_ARGUMENT, arb.ReportRho,
             pb.ReportRhoRequest(credentials=c, rho=math.nan))
    rejected(server, SC.INVALID_ARGUMENT, arb.ReportRho,
             pb.ReportRhoRequest(credentials=c, rho=0.0))
    rel = pb.ReleaseGpusRequest
    rejected(server, SC.INVALID_ARGUMENT, arb.ReleaseGpus, rel(credentials=c, gpu_ids=[]))
    rejected(server, SC.INVALID_ARGUMENT, arb.ReleaseGpus,
             rel(credentials=c, gpu_ids=["zz"]), match="unknown GPU")
    rejected(server, SC.FAILED_PRECONDITION, arb.ReleaseGpus,
             rel(credentials=c, gpu_ids=["m0-g0"]), match="does not hold")
    arb.ReportRho(pb.ReportRhoRequest(credentials=c, rho=1.5))
    assert server.core.snapshot()["apps"]["a"][1] == 1.5


def _open_round(server: ArbiterServer, arb: Any) -> tuple[str, str, Stream, Any]:
    """Two apps connected; f=0 so both are offered the 4 GPUs; nobody has bid yet."""
    sa = register(arb, "a")
    sb = register(arb, "b")
    st_a = Stream(arb, "a", sa)
    st_b = Stream(arb, "b", sb)
    _connected_then_open(server, st_a, st_b)
    offer = st_a.next("offer")
    other = st_b.next("offer", timeout=10.0)
    # (both connected before the GPUs were free: one round offers both; kept as a check)
    while offer.round_id < other.round_id:
        offer = st_a.next("offer", timeout=10.0)
    while other.round_id < offer.round_id:
        other = st_b.next("offer", timeout=10.0)
    assert other.round_id == offer.round_id
    assert sum(offer.free.counts) == 4 and offer.cluster_gpus == 4
    return sa, sb, st_a, offer


def test_bid_errors_change_nothing(server: ArbiterServer, arb: Any) -> None:
    sa, _sb, st_a, offer = _open_round(server, arb)
    c = creds("a", sa)
    rid = offer.round_id

    topo = server.core.backend.topology()

    def bid(rho0: float, *bundles: tuple[list[str], float] | pb.Bundle,
            round_id: int = rid) -> Any:
        return pb.SubmitBidRequest(credentials=c, round_id=round_id, table=pb.BidTable(
            rho_current=rho0, bundles=[b if isinstance(b, pb.Bundle) else bundle(topo, *b)
                                       for b in bundles]))

    inv = SC.INVALID_ARGUMENT
    rejected(server, inv, arb.SubmitBid, bid(2.0, (["m0-g0"], 1.0),
                                             pb.Bundle(rho=1.0, nodes=[0], starts=[1],
                                                       counts=[2])),
             match="app 'a': table.bundles[1]: run 0: positions 1..2 of node 0: the offer has "
                   "positions 0..1 there")
    rejected(server, inv, arb.SubmitBid, bid(2.0, pb.Bundle(rho=1.0, nodes=[7], starts=[0],
                                                            counts=[1])),
             match="app 'a': table.bundles[0]: run 0: node 7 has no GPU in the offer")
    rejected(server, inv, arb.SubmitBid, bid(2.0, pb.Bundle(rho=1.0, nodes=[0, 1],
                                                            counts=[1])),
             match="app 'a': table.bundles[0]: nodes, starts and counts have 2, 0 and 1 "
                   "entries")
    rejected(server, inv, arb.SubmitBid, bid(2.0, (["m0-g0", "m0-g0"], 1.0)), match="twice")
    rejected(server, inv, arb.SubmitBid, bid(2.0, (["m0-g0"], -1.0)), match="finite positive")
    rejected(server, inv, arb.SubmitBid, bid(2.0, (["m0-g0"], math.inf)))
    rejected(server, inv, arb.SubmitBid, bid(2.0, ([], 1.0)), match="empty bundle")
    rejected(server, inv, arb.SubmitBid, bid(math.nan), match="current rho")
    rejected(server, inv, arb.SubmitBid, bid(0.0), match="current rho")
    msg = rejected(server, SC.FAILED_PRECONDITION, arb.SubmitBid,
                   bid(2.0, round_id=rid + 5), match="stale")
    assert f"round {rid + 5}" in msg
    # A valid bid is accepted; the same one again is idempotent; a different one is refused.
    arb.SubmitBid(bid(2.0, (["m0-g0", "m0-g1"], 1.0)))
    arb.SubmitBid(bid(2.0, (["m0-g0", "m0-g1"], 1.0)))
    rejected(server, SC.FAILED_PRECONDITION, arb.SubmitBid, bid(2.0, (["m1-g0"], 1.0)),
             match="already bid")
    st_a.close()


def test_bid_tables_beyond_the_limits_are_refused_naming_the_field(
        server: ArbiterServer, arb: Any) -> None:
    sa, _sb, st_a, offer = _open_round(server, arb)
    c = creds("a", sa)

    topo = server.core.backend.topology()

    def bid(*bundles: list[str] | pb.Bundle, n: int = 1) -> Any:
        return pb.SubmitBidRequest(credentials=c, round_id=offer.round_id, table=pb.BidTable(
            rho_current=2.0, bundles=[b if isinstance(b, pb.Bundle) else bundle(topo, b, 1.0)
                                      for b in bundles] * n))

    limit = server.core.config.max_bundles
    rejected(server, SC.RESOURCE_EXHAUSTED, arb.SubmitBid, bid(["m0-g0"], n=limit + 1),
             match=f"app 'a': table.bundles: {limit + 1} bundles exceed the limit of {limit}")
    rejected(server, SC.INVALID_ARGUMENT, arb.SubmitBid,
             bid(["m0-g0"], pb.Bundle(rho=1.0, nodes=[0], starts=[0], counts=[5])),
             match="table.bundles[1].counts: 5 GPUs in 1 runs, more than the cluster's 4")
    rejected(server, SC.PERMISSION_DENIED, arb.SubmitBid, pb.SubmitBidRequest(
        credentials=creds("a", "s" * 10_000), round_id=offer.round_id), match="wrong secret")
    msg = rejected(server, SC.NOT_FOUND, arb.SubmitBid, pb.SubmitBidRequest(
        credentials=creds("a" * 1_000_000, "s"), round_id=offer.round_id))
    assert len(msg) < 200 and "at most 128 characters" in msg
    st_a.close()


def test_total_gpu_ids_of_a_table_are_bounded() -> None:
    cfg = ArbiterConfig(bid_timeout_s=3.0, fairness_knob=0.0, round_delay_s=0.01,
                        solver="bnb", max_table_gpu_ids=6)
    srv = ArbiterServer(_gated(2, 2), cfg, max_workers=8)
    srv.start(0)
    channel, s = stub(srv.address)
    try:
        sa, _sb, st_a, offer = _open_round(srv, s)
        table = pb.BidTable(rho_current=2.0, bundles=[
            bundle(srv.core.backend.topology(), ["m0-g0", "m0-g1", "m1-g0"], 1.0 + k)
            for k in range(3)])
        rejected(srv, SC.RESOURCE_EXHAUSTED, s.SubmitBid, pb.SubmitBidRequest(
            credentials=creds("a", sa), round_id=offer.round_id, table=table),
            match="table.bundles: 9 GPUs in all exceed the limit of 6")
        st_a.close()
    finally:
        channel.close()
        srv.stop(0)


@pytest.mark.parametrize("method", ["RegisterApp", "ReportRho", "SubmitBid", "ReleaseGpus",
                                    "Unregister", "Events"])
def test_bytes_that_do_not_parse_get_invalid_argument(server: ArbiterServer,
                                                      method: str) -> None:
    channel = grpc.insecure_channel(server.address)
    try:
        call = (channel.unary_stream if method == "Events" else channel.unary_unary)(
            f"/themis.v1.Arbiter/{method}")
        for body in (b"\xff\xff\xff", b"\x0a\x02\xff\xfe", b"\x0a\x80"):
            before = server.core.snapshot()
            with pytest.raises(grpc.RpcError) as info:
                res = call(body, timeout=5)
                if method == "Events":
                    next(iter(res))
            assert info.value.code() == SC.INVALID_ARGUMENT, info.value.details()
            assert "request: not a valid themis.v1." in info.value.details()
            assert server.core.snapshot() == before
    finally:
        channel.close()


def test_messages_beyond_the_size_limit_are_refused_before_parsing() -> None:
    srv = ArbiterServer(uniform_cluster(1, 2), ArbiterConfig(solver="bnb"), max_workers=4,
                        max_message_bytes=4096)
    srv.start(0)
    channel, s = stub(srv.address)
    try:
        with pytest.raises(grpc.RpcError) as info:
            s.RegisterApp(register_request(app_id="a" * 5000, rho=1.0, max_gpus=1))
        assert info.value.code() == SC.RESOURCE_EXHAUSTED
        assert server_apps(srv) == {}
        s.RegisterApp(register_request(app_id="a", rho=1.0, max_gpus=1))  # still serving
        assert set(server_apps(srv)) == {"a"}
    finally:
        channel.close()
        srv.stop(0)


def server_apps(srv: ArbiterServer) -> dict[str, Any]:
    return dict(srv.core.snapshot()["apps"])


def test_a_huge_bid_table_does_not_delay_the_others() -> None:
    """A 100,000-bundle table (1.8 MB) is refused from its bundle count alone, fast; the
    other app's bid is accepted and the round completes."""
    import time

    cfg = ArbiterConfig(bid_timeout_s=5.0, fairness_knob=0.0, round_delay_s=0.01,
                        solver="bnb")
    srv = ArbiterServer(_gated(2, 2), cfg, max_workers=8)
    srv.start(0)
    channel, s = stub(srv.address)
    try:
        sa, sb, st_a, offer = _open_round(srv, s)
        huge = pb.BidTable(rho_current=2.0, bundles=[
            pb.Bundle(nodes=[0], starts=[0], counts=[2], rho=1.0 + k * 1e-6)
            for k in range(100_000)])
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            s.SubmitBid(pb.SubmitBidRequest(credentials=creds("a", sa),
                                            round_id=offer.round_id, table=huge))
        assert info.value.code() == SC.RESOURCE_EXHAUSTED
        assert time.monotonic() - t0 < 2.0
        rounds = len(srv.core.stats)
        for app, secret in (("a", sa), ("b", sb)):
            s.SubmitBid(pb.SubmitBidRequest(credentials=creds(app, secret),
                                            round_id=offer.round_id, table=pb.BidTable(
                rho_current=2.0, bundles=[pb.Bundle(nodes=[0], starts=[0], counts=[1],
                                                    rho=1.0)])))
        assert srv.core.wait_rounds(rounds + 1, timeout=3.0)  # before the 5 s deadline
        st_a.close()
    finally:
        channel.close()
        srv.stop(0)


def test_a_cancelled_stream_frees_its_worker_at_once() -> None:
    """An agent that goes away releases its worker thread when its stream ends, not at
    the next heartbeat: with 2 workers and a 60 s heartbeat, five streams opened and
    cancelled one after the other leave the server able to answer at once."""
    import time

    cfg = ArbiterConfig(heartbeat_s=60.0, solver="bnb")
    srv = ArbiterServer(uniform_cluster(1, 2), cfg, max_workers=2)
    srv.start(0, own_rounds=False)
    channel, s = stub(srv.address)
    try:
        secret = s.RegisterApp(register_request(app_id="a", rho=1.0, max_gpus=1)).secret
        t0 = time.monotonic()
        for _ in range(5):  # (a worker is freed a moment after the cancel: retry briefly)
            assert wait_for(lambda: _open_and_cancel(s, secret), timeout=5.0)
        assert wait_for(lambda: _answers(s, secret), timeout=5.0)
        assert time.monotonic() - t0 < 20.0  # not 60 s heartbeats
    finally:
        channel.close()
        srv.stop(0)


def _open_and_cancel(s: Any, secret: str) -> bool:
    call = s.Events(pb.EventsRequest(credentials=creds("a", secret)))
    try:
        return bool(next(iter(call)).WhichOneof("kind") == "hello")
    except grpc.RpcError:
        return False
    finally:
        call.cancel()


def _answers(s: Any, secret: str) -> bool:
    try:
        s.ReportRho(pb.ReportRhoRequest(credentials=creds("a", secret), rho=2.0), timeout=1)
        return True
    except grpc.RpcError:
        return False


@dataclass
class OneBidder:
    """A 2 x 2-GPU arbiter with f = 0.5 and two apps: a (rho 5, the only bidder) and b."""

    server: ArbiterServer
    stub: Any
    secret_a: str
    stream_a: Stream
    stream_b: Stream
    offer: Any  # a's offer of the first round


@contextmanager
def one_bidder(bid_timeout_s: float, heartbeat_s: float) -> Iterator[OneBidder]:
    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=bid_timeout_s, fairness_knob=0.5,
                        solver="bnb", heartbeat_s=heartbeat_s, round_delay_s=0.05)
    srv = ArbiterServer(_gated(2, 2), cfg, max_workers=16)
    srv.start(0)
    try:
        ch, s = stub(srv.address)
        sa = register(s, "a", rho=5.0)  # worst rho: the only bidder with f=0.5
        sb = register(s, "b", rho=1.0)
        st_a, st_b = Stream(s, "a", sa), Stream(s, "b", sb)
        _connected_then_open(srv, st_a, st_b)
        yield OneBidder(srv, s, sa, st_a, st_b, st_a.next("offer"))
        st_a.close()
        st_b.close()
        ch.close()
    finally:
        srv.stop(0)


def test_late_bid_is_refused_and_app_is_non_bidder() -> None:
    with one_bidder(bid_timeout_s=0.3, heartbeat_s=0.5) as t:
        alloc_a = t.stream_a.next("allocation", timeout=5.0)  # deadline passed, round closed
        assert not alloc_a.was_bidder
        req = pb.SubmitBidRequest(credentials=creds("a", t.secret_a),
                                  round_id=t.offer.round_id,
                                  table=pb.BidTable(rho_current=5.0))
        with pytest.raises(grpc.RpcError) as info:
            t.stub.SubmitBid(req)
        assert info.value.code() == SC.FAILED_PRECONDITION
        out = t.server.core.outcomes[-1]
        assert out.bidders == () and "a" in out.nonbidders
        # As a non-bidder it shared the leftover GPUs with b.
        got = {g for g in out.allocation.get("a", ())}
        assert got and got == {g for lease in alloc_a.leases for g in lease.gpu_ids}
        assert t.stream_b.next("allocation").round_id == t.offer.round_id


def test_allocation_goes_to_offered_apps_and_leftover_takers_only() -> None:
    with one_bidder(bid_timeout_s=3.0, heartbeat_s=0.2) as t:
        every = ["m0-g0", "m0-g1", "m1-g0", "m1-g1"]
        t.stub.SubmitBid(pb.SubmitBidRequest(
            credentials=creds("a", t.secret_a), round_id=t.offer.round_id,
            table=pb.BidTable(rho_current=5.0, bundles=[
                bundle(t.server.core.backend.topology(), every, 1.0)])))
        alloc = t.stream_a.next("allocation")
        assert alloc.was_bidder and alloc.round_id == t.offer.round_id
        assert sorted(g for lease in alloc.leases for g in lease.gpu_ids) == every
        out = t.server.core.outcomes[-1]
        assert out.nonbidders == ("b",) and not out.leftover.get("b")
        # b was neither offered GPUs nor given any: its stream carries heartbeats only
        seen: list[str] = []
        while seen.count("heartbeat") < 3:
            seen.append(t.stream_b.events.get(timeout=2.0).WhichOneof("kind"))
        assert "allocation" not in seen and "offer" not in seen, seen


def test_round_releases_and_unregister(server: ArbiterServer, arb: Any) -> None:
    sa, sb, st_a, offer = _open_round(server, arb)
    arb.SubmitBid(pb.SubmitBidRequest(
        credentials=creds("a", sa), round_id=offer.round_id,
        table=pb.BidTable(rho_current=math.inf,
                          bundles=[bundle(server.core.backend.topology(),
                                          ["m0-g0", "m0-g1"], 2.0)])))
    arb.SubmitBid(pb.SubmitBidRequest(
        credentials=creds("b", sb), round_id=offer.round_id,
        table=pb.BidTable(rho_current=math.inf,
                          bundles=[bundle(server.core.backend.topology(),
                                          ["m1-g0", "m1-g1"], 2.0)])))
    alloc = st_a.next("allocation")
    assert alloc.was_bidder and alloc.round_id == offer.round_id
    held = sorted(g for lease in alloc.leases for g in lease.gpu_ids)
    assert held and set(held) <= {"m0-g0", "m0-g1"}
    assert all(server.core.backend.owners()[g] == "a" for g in held)
    # A late bid for the finished round is refused.
    rejected(server, SC.FAILED_PRECONDITION, arb.SubmitBid, pb.SubmitBidRequest(
        credentials=creds("a", sa), round_id=offer.round_id,
        table=pb.BidTable(rho_current=2.0)))
    # b cannot release a's GPUs.
    rejected(server, SC.FAILED_PRECONDITION, arb.ReleaseGpus,
             pb.ReleaseGpusRequest(credentials=creds("b", sb), gpu_ids=held[:1]))
    arb.ReleaseGpus(pb.ReleaseGpusRequest(credentials=creds("a", sa), gpu_ids=held[:1]))
    assert held[0] not in server.core.backend.owners()
    arb.Unregister(pb.UnregisterRequest(credentials=creds("a", sa)))
    assert wait_for(lambda: "a" not in server.core.snapshot()["apps"])
    assert all(o != "a" for o in server.core.backend.owners().values())
    st_a.close()


def test_cluster_spec_files(tmp_path: Any) -> None:
    from themis.arbiter.cluster_backend import ClusterSpecError, load_cluster_spec

    y = tmp_path / "c.yaml"
    y.write_text("racks:\n  - name: r0\n    machines:\n"
                 "      - {name: m0, gpus: 4, gpus_per_slot: 2}\n      - {name: m1, gpus: 4}\n")
    c = load_cluster_spec(y)
    topo = c.topology()
    assert len(topo) == 8 and topo["m0-g3"].slot == "s1" and topo["m1-g3"].slot == "s3"
    j = tmp_path / "c.json"
    j.write_text('{"racks": [{"name": "r0", "machines": [{"name": "m0", "gpus": 0}]}]}')
    with pytest.raises(ClusterSpecError, match="gpus=0"):
        load_cluster_spec(j)
    with pytest.raises(ClusterSpecError, match="missing field 'racks'"):
        j.write_text("{}")
        load_cluster_spec(j)


def test_expired_leases_are_renewed_to_holders_that_do_not_bid() -> None:
    """Renewal (docs/mechanism.md): at each expiry the GPUs go back to their holder when it
    does not bid and nothing else claims them. b and c never bid (their offers time out),
    so every round is leftover only; a random deal would swap the two machines between
    them in half of the rounds (both leases ending in one round), renewal never does. The first round waits 0.3 s for both
    apps' streams (round_delay_s coalesces the two arrivals), so that both hold GPUs from
    it on."""
    cfg = ArbiterConfig(lease_s=0.4, bid_timeout_s=0.05, warning_s=0.1, fairness_knob=0.5,
                        heartbeat_s=0.2, round_delay_s=0.3, solver="bnb", seed=3)
    srv = ArbiterServer(uniform_cluster(2, 2), cfg, max_workers=16)
    srv.start(0)
    ch, s = stub(srv.address)
    try:
        streams = [Stream(s, app, register(s, app, rho=2.0, max_gpus=2)) for app in "bc"]
        assert srv.core.wait_rounds(8, timeout=20.0)
        granted = [o.allocation for o in srv.core.outcomes if o.allocation]
        first = next(a for a in granted if len(a) == 2)  # both apps registered
        later = granted[granted.index(first):]
        assert len(later) >= 5
        # the leases of one round end apart (lease_spread_s: half of lease_s by default),
        # so a later round may renew only one app's: always to the same app
        assert all(a.items() <= first.items() for a in later), later
        assert sorted(g for gs in first.values() for g in gs) == ["m0-g0", "m0-g1", "m1-g0",
                                                                  "m1-g1"]
        for st in streams:
            st.close()
    finally:
        ch.close()
        srv.stop(0)


def test_gpus_of_an_app_that_leaves_go_to_a_waiting_app_at_once() -> None:
    """a holds every GPU under a 30 s lease; b registers and waits. When a unregisters
    (an app that finished), the next round offers its GPUs at once: b holds them within
    a second, not at a's lease expiry."""
    import time

    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=0.2, warning_s=1.0, fairness_knob=0.5,
                        heartbeat_s=0.5, round_delay_s=0.05, solver="bnb", seed=1)
    srv = ArbiterServer(uniform_cluster(2, 2), cfg, max_workers=16)
    srv.start(0)
    ch, s = stub(srv.address)
    try:
        sa = register(s, "a", rho=1.0, max_gpus=4)
        st_a = Stream(s, "a", sa)
        alloc = st_a.next("allocation")  # a's offer times out: a takes all 4 as leftover
        assert sum(len(lease.gpu_ids) for lease in alloc.leases) == 4
        st_b = Stream(s, "b", register(s, "b", rho=1.0, max_gpus=2))
        settle(srv.core)
        assert "b" not in srv.core.backend.owners().values()
        t0 = time.monotonic()
        s.Unregister(pb.UnregisterRequest(credentials=creds("a", sa)))
        got = st_b.next("allocation", timeout=2.0)
        assert time.monotonic() - t0 < 1.0
        assert sum(len(lease.gpu_ids) for lease in got.leases) == 2
        st_a.close()
        st_b.close()
    finally:
        ch.close()
        srv.stop(0)


def test_an_offer_names_the_gpus_of_the_apps_expired_lease() -> None:
    """After a's lease ends, its next offer names the GPUs of that lease (``previous``),
    so that its bids put them first among equally placed bundles (docs/protocol.md)."""
    cfg = ArbiterConfig(lease_s=0.5, bid_timeout_s=0.1, warning_s=0.1, fairness_knob=0.5,
                        heartbeat_s=0.2, round_delay_s=0.05, solver="bnb", seed=1)
    srv = ArbiterServer(uniform_cluster(2, 2), cfg, max_workers=16)
    srv.start(0)
    ch, s = stub(srv.address)
    try:
        st = Stream(s, "a", register(s, "a", rho=2.0, max_gpus=2))
        first_offer = st.next("offer")
        table = first_offer.node_table
        assert not first_offer.HasField("previous")
        alloc = st.next("allocation")  # a does not bid: it takes 2 GPUs as leftover
        held = sorted(g for lease in alloc.leases for g in lease.gpu_ids)
        assert len(held) == 2
        for _ in range(20):  # the rounds after its lease ended
            offer = st.next("offer")
            if offer.HasField("previous"):
                break
        else:
            raise AssertionError("no offer named the GPUs of a's expired lease")
        named = {table.nodes[n].id for n in offer.previous.nodes}
        assert named == {g.split("-")[0] for g in held}
        assert sum(offer.previous.counts) == len(held)
        st.close()
    finally:
        ch.close()
        srv.stop(0)
