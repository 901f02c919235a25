"""The YARN engine's agents' endpoint serves more open event streams than worker threads.

Every registered AM holds one RPC (its event stream) for as long as it runs. A thread-per-
call gRPC server with 256 workers answered RESOURCE_EXHAUSTED from about 250 apps with
agents on, and each round waited for the bid deadline (bench/bench_scale.py, docs/yarn.md
"Scale"); the asyncio server (themis.arbiter.service) holds idle streams without threads."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from themis.arbiter.testing import register_request
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc
from themis.yarn.agents import AgentEndpoint
from themis.yarn.engine import _agent_endpoint, _parse

STREAMS = 300  # more than the 256 workers of the thread-per-call server


def _open_streams(address: str, n: int) -> tuple[grpc.Channel, list[Iterator[pb.Event]]]:
    """Registers n apps and opens their event streams (each waits for its Hello)."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.ArbiterStub(channel)  # type: ignore[no-untyped-call]
    streams = []
    for i in range(n):
        app = f"application_1_{i:04d}"
        secret = stub.RegisterApp(register_request(app_id=app, rho=1.0, max_gpus=1),
                                  timeout=10).secret
        events = stub.Events(pb.EventsRequest(credentials=pb.Credentials(app_id=app,
                                                                        secret=secret)))
        assert next(events).WhichOneof("kind") == "hello"
        streams.append(events)
    return channel, streams


def test_engine_default_serves_more_streams_than_the_old_limit() -> None:
    args = _parse(["--port", "1", "--token", "t", "--agent-port", "0", "--agent-tls", "off"])
    endpoint, address = _agent_endpoint(args)
    assert isinstance(endpoint, AgentEndpoint)
    channel, streams = _open_streams(address, STREAMS)
    try:  # one more unary call while every stream is open
        reply = pb_grpc.ArbiterStub(channel).RegisterApp(  # type: ignore[no-untyped-call]
            register_request(app_id="application_1_9999", rho=1.0, max_gpus=1), timeout=10)
        assert reply.secret
    finally:
        for s in streams:
            s.cancel()  # type: ignore[attr-defined]
        channel.close()
        endpoint.stop()
