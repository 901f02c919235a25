"""HTTP/2 keepalive of the agents' connections to the arbiter (docs/protocol.md,
"Connections").

An Events stream whose server host vanished (an RM host down, a failover to the other RM)
gets no TCP reset: without pings the agent would notice only after TCP's retransmission
timeout, minutes later. Agents ping every :data:`TIME_MS` and give up on a connection whose
ping is not answered within :data:`TIMEOUT_MS` (the stream ends with UNAVAILABLE and the
agent moves to its next endpoint candidate); the arbiter accepts pings that often, also
between calls, and never answers them with GOAWAY ``too_many_pings``.

The arbiter pings its agents on the same schedule. An agent whose host is cut off from the
arbiter's (a network partition) sends no reset either, and the arbiter's heartbeat events
would only queue up in its send buffers; with pings it drops the connection within
:data:`TIME_MS` + :data:`TIMEOUT_MS`, the app's event stream closes, and rounds leave the
app out until its agent is back (``ArbiterCore.unreachable``; docs/yarn.md, "Faults").
"""

from __future__ import annotations

TIME_MS = 5000
TIMEOUT_MS = 5000

#: the agent's channel options
CLIENT_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", TIME_MS),
    ("grpc.keepalive_timeout_ms", TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.ping_timeout_ms", TIMEOUT_MS),
]

#: the arbiter server's options
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", TIME_MS),
    ("grpc.keepalive_timeout_ms", TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),
]
