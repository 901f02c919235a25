"""The arbiter's gRPC service (proto/themis/v1/arbiter.proto) over an :class:`ArbiterCore`.

Only 127.0.0.1 is served. ``ArbiterServer(backend, config).start(port=0)`` returns the port.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import NoReturn, TypeVar

import grpc

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.state import ArbiterConfig, ArbiterCore, CallError
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")
HOST = "127.0.0.1"


def _abort(context: grpc.ServicerContext, exc: CallError) -> NoReturn:
    context.abort(getattr(grpc.StatusCode, exc.code.value), exc.message)
    raise AssertionError("unreachable")  # context.abort raises


def _call(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except CallError as exc:
        _abort(context, exc)


class ArbiterServicer(pb_grpc.ArbiterServicer):
    def __init__(self, core: ArbiterCore) -> None:
        self.core = core

    def RegisterApp(
        self, request: pb.RegisterAppRequest, context: grpc.ServicerContext
    ) -> pb.RegisterAppResponse:
        return _call(context, lambda: self.core.register(
            request.app_id, request.rho, request.max_gpus))

    def ReportRho(
        self, request: pb.ReportRhoRequest, context: grpc.ServicerContext
    ) -> pb.ReportRhoResponse:
        c = request.credentials
        _call(context, lambda: self.core.report_rho(c.app_id, c.secret, request.rho))
        return pb.ReportRhoResponse()

    def SubmitBid(
        self, request: pb.SubmitBidRequest, context: grpc.ServicerContext
    ) -> pb.SubmitBidResponse:
        c = request.credentials
        _call(context, lambda: self.core.submit_bid(
            c.app_id, c.secret, request.round_id, request.table))
        return pb.SubmitBidResponse()

    def ReleaseGpus(
        self, request: pb.ReleaseGpusRequest, context: grpc.ServicerContext
    ) -> pb.ReleaseGpusResponse:
        c = request.credentials
        _call(context, lambda: self.core.release(c.app_id, c.secret, list(request.gpu_ids)))
        return pb.ReleaseGpusResponse()

    def Unregister(
        self, request: pb.UnregisterRequest, context: grpc.ServicerContext
    ) -> pb.UnregisterResponse:
        c = request.credentials
        _call(context, lambda: self.core.unregister(c.app_id, c.secret))
        return pb.UnregisterResponse()

    def Events(
        self, request: pb.EventsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Event]:
        c = request.credentials
        gen, events = _call(context, lambda: self.core.open_stream(c.app_id, c.secret))
        context.add_callback(lambda: self.core.close_stream(c.app_id, gen))
        heartbeat = self.core.config.heartbeat_s
        try:
            while context.is_active():
                try:
                    event = events.get(timeout=heartbeat)
                except queue.Empty:
                    event = pb.Event(heartbeat=pb.Heartbeat(now_unix=self.core.clock()))
                if event is None:  # superseded by a newer stream, unregistered or stopping
                    return
                yield event
        finally:
            self.core.close_stream(c.app_id, gen)


class ArbiterServer:
    """A gRPC server + round loop. ``max_workers`` bounds concurrent calls; every connected
    agent holds one worker for its event stream, so it must exceed the number of apps."""

    def __init__(
        self,
        backend: ClusterBackend,
        config: ArbiterConfig | None = None,
        *,
        max_workers: int = 256,
        core: ArbiterCore | None = None,
    ) -> None:
        # ``core``: a subclass for external rounds (themis.yarn.agents.ExternalCore)
        self.core = core if core is not None else ArbiterCore(backend, config)
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self.port = 0
        self.host = HOST

    def start(self, port: int = 0, *, host: str = HOST, own_rounds: bool = True) -> int:
        """Serve on ``host:port`` (port 0 = ephemeral; returns the port). ``own_rounds=False``
        leaves round timing and leases to the caller (the YARN engine; see
        :meth:`ArbiterCore.collect_external`)."""
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers,
                                       thread_name_prefix="arbiter-rpc"),
            maximum_concurrent_rpcs=self._max_workers,
        )
        pb_grpc.add_ArbiterServicer_to_server(  # type: ignore[no-untyped-call]
            ArbiterServicer(self.core), server)
        try:
            self.port = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:  # grpcio raises RuntimeError when the port is taken
            raise OSError(f"arbiter: could not bind {host}:{port}: {exc}") from exc
        if self.port == 0:
            raise OSError(f"arbiter: could not bind {host}:{port} (in use?)")
        self.host = host
        server.start()
        if own_rounds:
            self.core.start()
        self._server = server
        log.info("arbiter listening on %s:%d (epoch %s)", host, self.port, self.core.epoch)
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, grace: float = 0.5) -> None:
        self.core.stop()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
