"""The committed generated code matches proto/themis/v1/arbiter.proto (drift check)."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GEN = ("arbiter_pb2.py", "arbiter_pb2.pyi", "arbiter_pb2_grpc.py")


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(REPO / "scripts/gen-proto.sh"), str(tmp_path)], check=True,
                   env=env, capture_output=True)
    for name in GEN:
        fresh = tmp_path / "themis/rpc/v1" / name
        committed = REPO / "themis/rpc/v1" / name
        assert filecmp.cmp(fresh, committed, shallow=False), (
            f"{committed} is stale: run scripts/gen-proto.sh")


def test_package_is_versioned() -> None:
    from themis.rpc.v1 import arbiter_pb2 as pb

    assert pb.DESCRIPTOR.package == "themis.v1"
    names = set(pb.DESCRIPTOR.services_by_name["Arbiter"].methods_by_name)
    assert names == {"RegisterApp", "ReportRho", "Events", "SubmitBid", "ReleaseGpus",
                     "Unregister"}


def test_bid_table_round_trip() -> None:
    import math

    from themis.mechanism.bids import Bid, BidTable
    from themis.mechanism.topology import Gpu, Topology
    from themis.rpc.offers import (
        decode_offer,
        encode_gpus,
        fill_orders,
        node_index,
        table_from_pb,
        table_to_pb,
    )

    topo = Topology([Gpu(f"g{k}", f"m{k // 2}", "r") for k in range(4)])
    ni = node_index(topo)
    got = decode_offer(ni.table, encode_gpus(topo.values(), ni), encode_gpus([], ni))
    stand_in = sorted(got.position, key=got.position.__getitem__)
    t = BidTable("a", math.inf, (Bid(tuple(stand_in[:2]), 2.0), Bid((stand_in[2],), 3.5)))
    back = table_from_pb("a", table_to_pb(t, got.position), fill_orders(list(topo.values()), ni))
    assert back == BidTable("a", math.inf, (Bid(("g0", "g1"), 2.0), Bid(("g2",), 3.5)))
