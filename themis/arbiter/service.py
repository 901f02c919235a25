"""The arbiter's gRPC service (proto/themis/v1/arbiter.proto) over an :class:`ArbiterCore`.

``ArbiterServer(backend, config).start(port=0, host=...)`` returns the port. The host is the
caller's: 127.0.0.1 by default (standalone mode, every AM on this machine); the YARN engine
binds ``yarn.resourcemanager.themis.agent-bind-host`` so AMs on NodeManager hosts reach it.

Input is bounded (docs/protocol.md, "Limits"): a request larger than ``max_message_bytes``
is refused by gRPC with RESOURCE_EXHAUSTED before it is parsed; bytes that do not parse as
the request message get INVALID_ARGUMENT (the methods are registered here with
deserializers that never raise, instead of the generated ``add_ArbiterServicer_to_server``,
whose failures reach clients as INTERNAL); bid tables are bounded by the core
(:meth:`ArbiterCore.submit_bid`); status messages are cut to ``MAX_DETAILS`` characters.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, NoReturn, TypeVar

import grpc

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.state import ArbiterConfig, ArbiterCore, CallError
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")
HOST = "127.0.0.1"  # the default bind host (standalone mode); see start()
MAX_MESSAGE_BYTES = 32 << 20  # a 4,096-GPU agent menu with long GPU ids is ~25 MB
MAX_DETAILS = 1024  # characters of a status message


def _abort(context: grpc.ServicerContext, exc: CallError) -> NoReturn:
    msg = exc.message
    if len(msg) > MAX_DETAILS:
        msg = f"{msg[:MAX_DETAILS - 40]}...({len(msg)} characters)"
    context.abort(getattr(grpc.StatusCode, exc.code.value), msg)
    raise AssertionError("unreachable")  # context.abort raises


class _Malformed:
    """Stands for request bytes that did not parse (answered with INVALID_ARGUMENT)."""

    __slots__ = ("error", "message")

    def __init__(self, message: str, error: str) -> None:
        self.message = message
        self.error = error


def _parser(kind: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return kind.FromString(data)
        except Exception as exc:  # DecodeError, or anything else the runtime raises
            return _Malformed(kind.DESCRIPTOR.full_name, str(exc)[:200])
    return parse


def _guarded(method: Callable[[Any, grpc.ServicerContext], T]
             ) -> Callable[[Any, grpc.ServicerContext], T]:
    def call(request: Any, context: grpc.ServicerContext) -> T:
        if isinstance(request, _Malformed):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"request: not a valid {request.message} message ({request.error})")
        return method(request, context)
    return call


def add_servicer(servicer: ArbiterServicer, server: grpc.Server) -> None:
    """Register the service's methods (as the generated code does, with total
    deserializers)."""
    methods: dict[str, tuple[Any, Any, Any]] = {  # name: (handler factory, request, response)
        "RegisterApp": (grpc.unary_unary_rpc_method_handler, pb.RegisterAppRequest,
                        pb.RegisterAppResponse),
        "ReportRho": (grpc.unary_unary_rpc_method_handler, pb.ReportRhoRequest,
                      pb.ReportRhoResponse),
        "Events": (grpc.unary_stream_rpc_method_handler, pb.EventsRequest, pb.Event),
        "SubmitBid": (grpc.unary_unary_rpc_method_handler, pb.SubmitBidRequest,
                      pb.SubmitBidResponse),
        "ReleaseGpus": (grpc.unary_unary_rpc_method_handler, pb.ReleaseGpusRequest,
                        pb.ReleaseGpusResponse),
        "Unregister": (grpc.unary_unary_rpc_method_handler, pb.UnregisterRequest,
                       pb.UnregisterResponse),
    }
    service = pb.DESCRIPTOR.services_by_name["Arbiter"]
    assert set(methods) == set(service.methods_by_name), "proto and service out of step"
    handlers = {
        name: factory(_guarded(getattr(servicer, name)), request_deserializer=_parser(req),
                      response_serializer=resp.SerializeToString)
        for name, (factory, req, resp) in methods.items()
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


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
        key = request.starving if request.HasField("starving") else None
        _call(context, lambda: self.core.report_rho(c.app_id, c.secret, request.rho, key))
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
        def ended() -> None:  # the client went away: free this worker now, not at the
            events.put(None)  # next heartbeat
            self.core.close_stream(c.app_id, gen)

        context.add_callback(ended)
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
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        # ``core``: a subclass for external rounds (themis.yarn.agents.ExternalCore)
        self.core = core if core is not None else ArbiterCore(backend, config)
        self._max_workers = max_workers
        self._max_message_bytes = max_message_bytes
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
            options=[("grpc.max_receive_message_length", self._max_message_bytes)],
        )
        add_servicer(ArbiterServicer(self.core), server)
        bind = f"[{host}]" if ":" in host and not host.startswith("[") else host
        try:
            self.port = server.add_insecure_port(f"{bind}:{port}")
        except RuntimeError as exc:  # grpcio raises RuntimeError when the port is taken
            raise OSError(f"arbiter: could not bind {host}:{port}: {exc}") from exc
        if self.port == 0:
            raise OSError(f"arbiter: could not bind {host}:{port} (in use?)")
        self.host = bind
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
