"""The arbiter's gRPC service (proto/themis/v1/arbiter.proto) over an :class:`ArbiterCore`.

``ArbiterServer(backend, config).start(port=0, host=...)`` returns the port. The host is the
caller's: 127.0.0.1 by default (standalone mode, every AM on this machine); the YARN engine
binds ``yarn.resourcemanager.themis.agent-bind-host`` so AMs on NodeManager hosts reach it.

The server is a ``grpc.aio`` (asyncio) server on its own event-loop thread: a call waiting
for its request message, and an open ``Events`` stream, cost memory, not a worker thread, so
idle or slow clients cannot starve the service (docs/protocol.md, "Limits"). The work of a
call (the core's methods, which take locks and may ask the RM) runs on a bounded thread pool
after its request has arrived; each app has at most one open stream (a new one closes the
previous) and each connection at most ``MAX_STREAMS_PER_CONNECTION`` concurrent calls.
With ``tls`` (:class:`~themis.rpc.tls.ServerTls`) the port serves TLS only.

Input is bounded (docs/protocol.md, "Limits"): a request larger than ``max_message_bytes``
is refused by gRPC with RESOURCE_EXHAUSTED before it is parsed; bytes that do not parse as
the request message get INVALID_ARGUMENT (the methods are registered here with
deserializers that never raise, instead of the generated ``add_ArbiterServicer_to_server``,
whose failures reach clients as INTERNAL); bid tables are bounded by the core
(:meth:`ArbiterCore.submit_bid`); status messages are cut to ``MAX_DETAILS`` characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent import futures
from typing import Any, NoReturn, TypeAlias, TypeVar, cast

import grpc
import grpc.aio

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.errors import CallError
from themis.arbiter.state import ArbiterCore
from themis.rpc import keepalive
from themis.rpc.tls import ServerTls
from themis.rpc.v1 import arbiter_pb2 as pb

log = logging.getLogger(__name__)
T = TypeVar("T")
HOST = "127.0.0.1"  # the default bind host (standalone mode); see start()
MAX_MESSAGE_BYTES = 32 << 20  # a 4,096-GPU agent menu with long GPU ids is ~25 MB
MAX_DETAILS = 1024  # characters of a status message
# concurrent calls on one HTTP/2 connection: gRPC channels of one process to one address
# share a connection (the benchmark's 250 agents per process, standalone mode's apps), so
# this bounds what one connection can hold open, not what one app needs (one stream)
MAX_STREAMS_PER_CONNECTION = 1024
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Unary: TypeAlias = Callable[[Any, Context], Awaitable[Any]]
Streaming: TypeAlias = Callable[[Any, Context], AsyncIterator[Any]]


async def _abort(context: Context, exc: CallError) -> NoReturn:
    msg = exc.message
    if len(msg) > MAX_DETAILS:
        msg = f"{msg[:MAX_DETAILS - 40]}...({len(msg)} characters)"
    await context.abort(getattr(grpc.StatusCode, exc.code.value), msg)
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


async def _reject_malformed(request: Any, context: Context) -> None:
    if isinstance(request, _Malformed):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"request: not a valid {request.message} message ({request.error})")


def _guarded(method: Unary) -> Unary:
    async def call(request: Any, context: Context) -> Any:
        await _reject_malformed(request, context)
        return await method(request, context)
    return call


def _guarded_stream(method: Streaming) -> Streaming:
    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        await _reject_malformed(request, context)
        async for item in method(request, context):
            yield item
    return call


def add_servicer(servicer: ArbiterServicer, server: grpc.aio.Server) -> None:
    """Register the service's methods (as the generated code does, with total
    deserializers)."""
    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    methods: dict[str, tuple[Any, Any, Any]] = {  # name: (handler factory, request, response)
        "RegisterApp": (unary, pb.RegisterAppRequest, pb.RegisterAppResponse),
        "ReportRho": (unary, pb.ReportRhoRequest, pb.ReportRhoResponse),
        "Events": (stream, pb.EventsRequest, pb.Event),
        "SubmitBid": (unary, pb.SubmitBidRequest, pb.SubmitBidResponse),
        "ReleaseGpus": (unary, pb.ReleaseGpusRequest, pb.ReleaseGpusResponse),
        "Unregister": (unary, pb.UnregisterRequest, pb.UnregisterResponse),
    }
    service = pb.DESCRIPTOR.services_by_name["Arbiter"]
    assert set(methods) == set(service.methods_by_name), "proto and service out of step"
    handlers = {
        name: factory((_guarded_stream if factory is stream else _guarded)(
                          getattr(servicer, name)),
                      request_deserializer=_parser(req),
                      response_serializer=resp.SerializeToString)
        for name, (factory, req, resp) in methods.items()
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))


class _WakingQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """An app's event queue (filled by the core's threads) that wakes the stream's
    coroutine on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self.ready = asyncio.Event()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        with contextlib.suppress(RuntimeError):  # a closed loop: the server stopped
            self._loop.call_soon_threadsafe(self.ready.set)


class ArbiterServicer:
    """The service's methods, as coroutines; the core's work runs on ``pool``."""

    def __init__(self, core: ArbiterCore, pool: futures.ThreadPoolExecutor) -> None:
        self.core = core
        self._pool = pool

    async def _call(self, context: Context, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        except CallError as exc:
            await _abort(context, exc)

    async def RegisterApp(self, request: pb.RegisterAppRequest, context: Context
                          ) -> pb.RegisterAppResponse:
        r = request
        return await self._call(context, lambda: self.core.register(
            r.app_id, r.rho, r.max_gpus, r.registration_token, r.protocol_version))

    async def ReportRho(self, request: pb.ReportRhoRequest, context: Context
                        ) -> pb.ReportRhoResponse:
        c = request.credentials
        key = request.starving if request.HasField("starving") else None
        await self._call(context, lambda: self.core.report_rho(c.app_id, c.secret, request.rho,
                                                               key))
        return pb.ReportRhoResponse()

    async def SubmitBid(self, request: pb.SubmitBidRequest, context: Context
                        ) -> pb.SubmitBidResponse:
        c = request.credentials
        await self._call(context, lambda: self.core.submit_bid(
            c.app_id, c.secret, request.round_id, request.table))
        return pb.SubmitBidResponse()

    async def ReleaseGpus(self, request: pb.ReleaseGpusRequest, context: Context
                          ) -> pb.ReleaseGpusResponse:
        c = request.credentials
        await self._call(context, lambda: self.core.release(c.app_id, c.secret,
                                                            list(request.gpu_ids)))
        return pb.ReleaseGpusResponse()

    async def Unregister(self, request: pb.UnregisterRequest, context: Context
                         ) -> pb.UnregisterResponse:
        c = request.credentials
        await self._call(context, lambda: self.core.unregister(c.app_id, c.secret))
        return pb.UnregisterResponse()

    async def Events(self, request: pb.EventsRequest, context: Context
                     ) -> AsyncIterator[pb.Event]:
        c = request.credentials
        events = _WakingQueue(asyncio.get_running_loop())
        try:  # in memory, under the core's lock: short enough for the event loop
            gen, _ = self.core.open_stream(c.app_id, c.secret, events)
        except CallError as exc:
            await _abort(context, exc)
        heartbeat = self.core.config.heartbeat_s
        try:
            while True:
                event = _next(events)
                if event is _EMPTY:
                    try:
                        await asyncio.wait_for(events.ready.wait(), heartbeat)
                        continue
                    except TimeoutError:
                        event = pb.Event(heartbeat=pb.Heartbeat(now_unix=self.core.clock()))
                if event is None:  # superseded by a newer stream, unregistered or stopping
                    return
                yield cast(pb.Event, event)
        finally:  # also when the client went away (the coroutine is cancelled)
            self.core.close_stream(c.app_id, gen)


_EMPTY = object()


def _next(events: _WakingQueue) -> object:
    """The next queued event, or _EMPTY (clearing the wake-up flag first, so a put after
    this check wakes the waiter)."""
    events.ready.clear()
    try:
        return events.get_nowait()
    except queue.Empty:
        return _EMPTY


def _bracketed(host: str) -> str:
    """``host`` as it goes before ``:port``: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class ArbiterServer:
    """A gRPC server (asyncio, on its own thread) + round loop. ``max_workers`` bounds the
    threads that run the calls' work (not the open calls or streams)."""

    def __init__(
        self,
        backend: ClusterBackend,
        config: ArbiterConfig | None = None,
        *,
        max_workers: int = 32,
        core: ArbiterCore | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        tls: ServerTls | None = None,
    ) -> None:
        # ``core``: a subclass for external rounds (themis.yarn.agents.ExternalCore)
        self.core = core if core is not None else ArbiterCore(backend, config)
        self._max_workers = max_workers
        self._max_message_bytes = max_message_bytes
        self.tls = tls
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: futures.ThreadPoolExecutor | None = None
        self.port = 0
        self.host = HOST

    def start(self, port: int = 0, *, host: str = HOST, own_rounds: bool = True) -> int:
        """Serve on ``host:port`` (port 0 = ephemeral; returns the port). ``own_rounds=False``
        leaves round timing and leases to the caller (the YARN engine; see
        :meth:`ArbiterCore.collect_external`). Raises :class:`~themis.rpc.tls.TlsError`
        for unusable TLS files, OSError when the address cannot be bound."""
        creds = self.tls.credentials() if self.tls is not None else None
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="arbiter-grpc",
                                  daemon=True)
        thread.start()
        pool = futures.ThreadPoolExecutor(max_workers=self._max_workers,
                                          thread_name_prefix="arbiter-rpc")
        try:
            self.port = asyncio.run_coroutine_threadsafe(
                self._serve(host, port, creds, pool), loop).result(timeout=60)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            pool.shutdown(wait=False)
            raise
        self._loop, self._thread, self._pool = loop, thread, pool
        self.host = _bracketed(host)
        if own_rounds:
            self.core.start()
        log.info("arbiter listening on %s:%d (%s, epoch %s)", host, self.port,
                 "TLS" if creds is not None else "plaintext", self.core.epoch)
        return self.port

    async def _serve(self, host: str, port: int, creds: grpc.ServerCredentials | None,
                     pool: futures.ThreadPoolExecutor) -> int:
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", self._max_message_bytes),
            ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
            *keepalive.SERVER_OPTIONS,  # agents' pings (themis.rpc.keepalive)
        ])
        add_servicer(ArbiterServicer(self.core, pool), server)
        address = f"{_bracketed(host)}:{port}"
        try:
            bound = (server.add_secure_port(address, creds) if creds is not None
                     else server.add_insecure_port(address))
        except RuntimeError as exc:  # grpcio raises RuntimeError when the port is taken
            raise OSError(f"arbiter: could not bind {address}: {exc}") from exc
        if bound == 0:
            raise OSError(f"arbiter: could not bind {address} (in use?)")
        await server.start()
        self._server = server
        return int(bound)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, grace: float = 0.5) -> None:
        self.core.stop()
        loop, server = self._loop, self._server
        if loop is not None and server is not None:
            try:
                asyncio.run_coroutine_threadsafe(server.stop(grace), loop).result(grace + 10)
            except (futures.TimeoutError, RuntimeError) as exc:
                log.warning("arbiter: gRPC server did not stop cleanly: %s", exc)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._server = self._loop = self._thread = self._pool = None


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
