"""Helpers for tests and benchmarks: an in-process arbiter on 127.0.0.1 and raw stubs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from themis.arbiter.state import ArbiterCore
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc


def stub(address: str) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(address)
    return channel, pb_grpc.ArbiterStub(channel)  # type: ignore[no-untyped-call]


def creds(app_id: str, secret: str) -> pb.Credentials:
    return pb.Credentials(app_id=app_id, secret=secret)


def settle(core: ArbiterCore, quiet_s: float = 0.1, timeout: float = 5.0) -> dict[str, Any]:
    """Wait until the arbiter's snapshot stops changing for ``quiet_s``; return it."""
    end = time.monotonic() + timeout
    last = core.snapshot()
    while time.monotonic() < end:
        time.sleep(quiet_s)
        now = core.snapshot()
        if now == last:
            return now
        last = now
    raise TimeoutError("arbiter state did not settle")


def wait_for(pred: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()
