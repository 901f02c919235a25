"""Many Themis agents in one process, for the scale benchmark (bench/bench_scale.py).

Each app id read from ``--apps-file`` (one per line) gets the real agent code: an
:class:`~themis.agent.client.AgentClient` speaking the gRPC arbiter protocol
(RegisterApp, Events, SubmitBid, ReportRho) with a :class:`~themis.mechanism.bidder.ModelBidder`
on a synthetic single-job app of ``--demand`` GPUs. All clients share one gRPC channel (one
HTTP/2 connection; each app still has its own stream and credentials), so a thousand apps fit
in one process. In a real cluster every agent runs inside its own AM on its own host.

Stdout (JSON lines only): ``{"event": "registered", "n": N, "s": seconds}`` once every agent
has its Hello, then ``{"event": "stats", ...}`` every ``--stats-s`` seconds and at exit.
Exits when stdin closes (the benchmark's JVM went away) or after ``--timeout-s``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from themis.agent.client import AgentClient
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.model import AppModel, Job


def _emit(kind: str, **fields: object) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/scale_agents.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arbiter", required=True,
                   help="host:port of the engine's agents' endpoint (127.0.0.1 only)")
    p.add_argument("--apps-file", required=True, type=Path,
                   help="file with one YARN application id per line")
    p.add_argument("--demand", type=int, default=4,
                   help="most GPUs each synthetic job can use (default 4)")
    p.add_argument("--iters", type=float, default=1e6,
                   help="iterations left per job, 1 s each on one GPU (default 1e6)")
    p.add_argument("--register-timeout-s", type=float, default=300.0,
                   help="give up when not every agent registered by then (default 300)")
    p.add_argument("--stats-s", type=float, default=10.0,
                   help="seconds between stats lines (default 10)")
    p.add_argument("--timeout-s", type=float, default=3600.0,
                   help="exit after this many seconds at the latest (default 3600)")
    args = p.parse_args(argv)
    if args.demand < 1 or args.iters <= 0:
        p.error("--demand must be >= 1 and --iters > 0")
    return args


def _stats(clients: list[AgentClient]) -> dict[str, object]:
    return {
        "agents": len(clients),
        "offers": sum(c.stats.offers for c in clients),
        "bids": sum(c.stats.bids_sent for c in clients),
        "bids_rejected": sum(c.stats.bids_rejected for c in clients),
        "allocations": sum(c.stats.allocations for c in clients),
        "reconnects": sum(c.stats.reconnects for c in clients),
        "rss_mb": _rss_mb(),
    }


def _rss_mb() -> float:
    """This process's resident set now (ru_maxrss would count the forking JVM's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return -1.0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        app_ids = [x.strip() for x in args.apps_file.read_text().splitlines() if x.strip()]
    except OSError as exc:
        print(f"scale_agents: cannot read --apps-file: {exc}", file=sys.stderr)
        return 2
    if not args.arbiter.startswith("127.0.0.1:"):
        print(f"scale_agents: --arbiter {args.arbiter!r}: only 127.0.0.1 is allowed",
              file=sys.stderr)
        return 2
    channel = grpc.insecure_channel(args.arbiter)
    start = time.time()
    clients = []
    for i, app_id in enumerate(app_ids):
        model = AppModel(app_id, start, [Job(f"{app_id}-job", 1.0, args.iters, args.demand,
                                             args.iters)])
        clients.append(AgentClient(args.arbiter, app_id, ModelBidder(model, time.time),
                                   channel=channel, seed=i).start())
    deadline = start + args.register_timeout_s
    for c in clients:
        if not c.connected.wait(max(0.0, deadline - time.time())):
            print(f"scale_agents: {c.app_id} did not register within "
                  f"{args.register_timeout_s} s ({c.stats.last_error})", file=sys.stderr)
            return 1
    _emit("registered", n=len(clients), s=round(time.time() - start, 3))
    gone = threading.Event()

    def _watch_stdin() -> None:
        sys.stdin.read()
        gone.set()

    threading.Thread(target=_watch_stdin, daemon=True).start()
    end = start + args.timeout_s
    while not gone.wait(max(0.0, min(args.stats_s, end - time.time()))):
        _emit("stats", **_stats(clients))
        if time.time() >= end:
            break
    for c in clients:
        c.stop(unregister=False, timeout=0.5)
    _emit("stats", final=True, **_stats(clients))
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
