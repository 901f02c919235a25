"""Benchmark: one round's offers and bids on the wire, by GPU (protocol version 1) and by
node (version 2, themis/rpc/offers.py), in one run on the same cluster and apps.

    python bench/bench_offers.py [--nodes 1000] [--gpus 4096] [--offered 3800]
                                 [--bidders 100] [--reps 5] [--json]

The cluster is YARN-like (GPU ids ``<node_id>/h<k>``, every GPU its own slot, 40 racks);
each bidder holds 4 GPUs on nodes not offered. Per round:

* arbiter: build every bidder's offer event and serialize it (what gRPC sends): version 1
  copies the round's common list of GpuInfo (built once per round, as since b102c40) and
  adds the held GPUs; version 2 copies the common counts per node and adds the held
  counts (the node table, sent once per stream and version, is reported apart);
* agent (one bidder): parse the offer and turn it into Gpu records (version 1:
  ``gpu_from_pb`` per GPU; version 2: :func:`decode_offer`), then its bid table's size
  on the wire (the table itself is the same, ``tests/unit/test_offers.py``) and the
  arbiter's mapping of it back to GPU ids.

Version 1's messages are built from a copy of its descriptors made here (the proto has
reserved those fields). Medians over ``--reps`` rounds; ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from themis.mechanism.bids import Bid, BidTable, make_bid_table
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.model import AppKind, AppModel, Job
from themis.mechanism.topology import Gpu, Topology
from themis.rpc.offers import (
    decode_offer,
    encode_gpus,
    fill_orders,
    node_index,
    table_from_pb,
    table_to_pb,
)
from themis.rpc.v1 import arbiter_pb2 as pb


def _v1_classes() -> tuple[Any, Any, Any]:
    """Version 1's GpuInfo, Offer (gpus = 2, held = 6) and BidTable (Bundle.gpu_ids = 1)."""
    f = descriptor_pb2.FileDescriptorProto(name="bench_v1.proto", package="bench.v1",
                                           syntax="proto3")
    lab, rep = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, \
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    T = descriptor_pb2.FieldDescriptorProto

    def msg(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = f.message_type.add(name=name)
        for fname, num, label, kind, type_name in fields:
            m.field.add(name=fname, number=num, label=label, type=kind,
                        **({"type_name": type_name} if type_name else {}))

    s, d, u64, i32, m = T.TYPE_STRING, T.TYPE_DOUBLE, T.TYPE_UINT64, T.TYPE_INT32, T.TYPE_MESSAGE
    msg("GpuInfo", ("id", 1, lab, s, ""), ("machine", 2, lab, s, ""), ("rack", 3, lab, s, ""),
        ("slot", 4, lab, s, ""))
    msg("Offer", ("round_id", 1, lab, u64, ""), ("gpus", 2, rep, m, ".bench.v1.GpuInfo"),
        ("deadline_unix", 3, lab, d, ""), ("cluster_gpus", 4, lab, i32, ""),
        ("active_apps", 5, lab, i32, ""), ("held", 6, rep, m, ".bench.v1.GpuInfo"),
        ("arbiter_epoch", 7, lab, s, ""))
    msg("Bundle", ("gpu_ids", 1, rep, s, ""), ("rho", 2, lab, d, ""))
    msg("BidTable", ("rho_current", 1, lab, d, ""), ("bundles", 2, rep, m, ".bench.v1.Bundle"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("bench.v1.GpuInfo")),
            get(pool.FindMessageTypeByName("bench.v1.Offer")),
            get(pool.FindMessageTypeByName("bench.v1.BidTable")))


def cluster(nodes: int, gpus: int, racks: int = 40) -> list[Gpu]:
    out = []
    for k in range(gpus):
        n = k % nodes
        node = f"nm-{n:04d}.rack{n % racks:02d}.example.com:45454"
        out.append(Gpu(f"{node}/h{k // nodes}", node, f"/rack{n % racks:02d}"))
    return out


def ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1e3, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000, help="NodeManagers (default: 1000)")
    ap.add_argument("--gpus", type=int, default=4096, help="GPUs in the cluster (default: 4096)")
    ap.add_argument("--offered", type=int, default=3800,
                    help="free GPUs offered in the round (default: 3800)")
    ap.add_argument("--bidders", type=int, default=100, help="bidders (default: 100)")
    ap.add_argument("--reps", type=int, default=5, help="rounds timed (default: 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    gpus = cluster(args.nodes, args.gpus)
    topo = Topology(gpus)
    offer, busy = gpus[:args.offered], gpus[args.offered:]
    held = {f"app{a}": busy[(4 * a) % max(1, len(busy)):][:4] for a in range(args.bidders)}
    GpuInfoV1, OfferV1, TableV1 = _v1_classes()

    def info(g: Gpu) -> Any:
        return GpuInfoV1(id=g.id, machine=g.machine, rack=g.rack, slot=g.slot)

    def round_v1() -> list[bytes]:
        common = OfferV1(round_id=7, deadline_unix=1.7e9, cluster_gpus=len(topo),
                         active_apps=1000, arbiter_epoch="e" * 32,
                         gpus=[info(g) for g in offer])
        out = []
        for a in held:
            o = OfferV1()
            o.CopyFrom(common)
            o.held.extend(info(g) for g in held[a])
            out.append(o.SerializeToString())
        return out

    def round_v2() -> list[bytes]:
        ni = node_index(topo)
        common = pb.Offer(round_id=7, deadline_unix=1.7e9, cluster_gpus=len(topo),
                          active_apps=1000, arbiter_epoch="e" * 32,
                          node_table_version=ni.version, free=encode_gpus(offer, ni))
        out = []
        for a in held:
            e = pb.Event()
            e.offer.CopyFrom(common)
            e.offer.held.CopyFrom(encode_gpus(held[a], ni))
            out.append(e.SerializeToString())
        return out

    def parse_v1(data: bytes) -> tuple[Gpu, ...]:
        m = OfferV1.FromString(data)
        return tuple(Gpu(id=x.id, machine=x.machine, rack=x.rack, slot=x.slot) for x in m.gpus)

    ni = node_index(topo)
    table_pb = ni.table

    def parse_v2(data: bytes) -> tuple[Gpu, ...]:
        m = pb.Event.FromString(data).offer
        return decode_offer(table_pb, m.free, m.held).gpus

    res: dict[str, Any] = {"nodes": args.nodes, "gpus": args.gpus, "offered": args.offered,
                           "bidders": args.bidders, "reps": args.reps}
    for name, build, parse in (("v1_per_gpu", round_v1, parse_v1),
                               ("v2_per_node", round_v2, parse_v2)):
        builds, parses = [], []
        sample = b""
        for _ in range(args.reps):
            t = time.perf_counter()
            msgs = build()
            builds.append(time.perf_counter() - t)
            sample = msgs[0]
            t = time.perf_counter()
            parse(sample)
            parses.append(time.perf_counter() - t)
        res[name] = {"offer_bytes": len(sample), "round_build_ms": ms(builds),
                     "agent_parse_ms": ms(parses)}
    res["v2_per_node"]["node_table_bytes"] = len(table_pb.SerializeToString())
    # One large app's bid table: bytes on the wire and the arbiter's mapping back.
    ctx = FairnessContext(now=1e5, cluster_gpus=len(topo), n_avg=1000.0)
    app = AppModel("big", 0.0, [Job(f"j{i}", 1.0, 1e6, 8) for i in range(64)],
                   kind=AppKind.CURVE_STOPPING)
    real = make_bid_table(app, [], offer, ctx)
    v1 = TableV1(rho_current=real.rho_current, bundles=[
        {"gpu_ids": list(b.gpus), "rho": b.rho} for b in real.bids]).SerializeToString()
    got = decode_offer(table_pb, encode_gpus(offer, ni), encode_gpus([], ni))
    mine = make_bid_table(app, [], got.gpus, ctx)
    wire = table_to_pb(mine, got.position).SerializeToString()
    fill = fill_orders(offer, ni)
    maps = []
    for _ in range(args.reps):
        t = time.perf_counter()
        back = table_from_pb("big", pb.BidTable.FromString(wire), fill)
        maps.append(time.perf_counter() - t)
    assert back == BidTable("big", real.rho_current, tuple(Bid(b.gpus, b.rho)
                                                            for b in real.bids))
    res["bid_table"] = {"bundles": len(real.bids), "gpu_ids": sum(len(b.gpus) for b in real.bids),
                        "v1_bytes": len(v1), "v2_bytes": len(wire),
                        "v2_map_back_ms": ms(maps)}
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"{args.nodes} nodes / {args.gpus} GPUs, {args.offered} offered, "
          f"{args.bidders} bidders, median of {args.reps}")
    for name in ("v1_per_gpu", "v2_per_node"):
        r = res[name]
        print(f"  {name:12s} offer {r['offer_bytes']:>8,} B  round build+serialize "
              f"{r['round_build_ms']:>8.2f} ms  agent parse {r['agent_parse_ms']:>7.2f} ms")
    print(f"  node table {res['v2_per_node']['node_table_bytes']:,} B (once per stream)")
    b = res["bid_table"]
    print(f"  bid table of {b['bundles']} bundles / {b['gpu_ids']:,} GPUs: v1 {b['v1_bytes']:,} B,"
          f" v2 {b['v2_bytes']:,} B, mapped back in {b['v2_map_back_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
