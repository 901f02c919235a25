"""The slow link of the fault trials (tests/integration/slowlink.py): what one side sends
arrives ``delay_s`` later, in order and whole; the other way is not held; stop() closes
the relayed connections."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.slowlink import DelayRelay, slow_rules


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_bytes_sent_arrive_after_the_delay_in_order(echo_port: int) -> None:
    relay = DelayRelay("127.0.0.1", "127.0.0.1", [echo_port], 0.5)
    ports = relay.start()
    try:
        with socket.create_connection(("127.0.0.1", ports[echo_port]), timeout=10) as s:
            payload = bytes(range(256)) * 1024  # 256 kB, many chunks
            t0 = time.monotonic()
            s.sendall(payload)
            got = b""
            while len(got) < len(payload):
                got += s.recv(65536)
            took = time.monotonic() - t0
        assert got == payload
        assert 0.5 <= took < 5.0, took
        assert relay.connections == 1
    finally:
        relay.stop()


def test_stop_closes_the_relayed_connections(echo_port: int) -> None:
    relay = DelayRelay("127.0.0.1", "127.0.0.1", [echo_port], 0.0)
    ports = relay.start()
    s = socket.create_connection(("127.0.0.1", ports[echo_port]), timeout=10)
    try:
        s.sendall(b"x")
        assert s.recv(1) == b"x"
        relay.stop()
        assert s.recv(1) == b""  # closed by the relay
    finally:
        s.close()


def test_rules_send_new_connections_through_the_relay_and_reset_old_ones() -> None:
    rules = slow_rules("I", "172.31.0.4", "172.31.0.1", {8030: 40001, 8642: 40002})
    assert rules[0] == ["-t", "nat", "-I", "OUTPUT", "-d", "172.31.0.4", "-p", "tcp",
                        "--dport", "8030", "-j", "DNAT", "--to-destination", "172.31.0.1:40001"]
    assert rules[-1][-4:] == ["-j", "REJECT", "--reject-with", "tcp-reset"]
    assert [r[2] for r in slow_rules("D", "172.31.0.4", "172.31.0.1", {8030: 1})[:1]] == ["-D"]
