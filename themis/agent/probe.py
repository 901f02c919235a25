"""A minimal agent for smoke-testing an arbiter endpoint: ``python -m themis.agent.probe``.

It registers an app over gRPC, bids on every offer with the real agent code
(:class:`~themis.mechanism.bidder.ModelBidder` on a synthetic single-job app) and prints one JSON
line per event (``registered``, ``offer``, ``allocation``, ``lease_warning``, ``done``) on
stdout. Admins use it to check that the ResourceManager's agents' endpoint answers; the
RM plugin's integration test uses it as a real agent next to a real RM.

The registration token (docs/yarn.md, "Security": on YARN the app's AMRMToken, URL-safe
encoded) is read from ``$THEMIS_REGISTRATION_TOKEN``.

Exit status: 0 when the awaited event happened (``--until``), 1 on timeout, 2 on bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from themis.agent.client import AgentClient
from themis.mechanism.bidder import AllocationInfo, ModelBidder, OfferInfo
from themis.mechanism.model import AppModel, Job
from themis.mechanism.round import RENEWAL
from themis.rpc.tls import channel_credentials

TOKEN_ENV = "THEMIS_REGISTRATION_TOKEN"


def _emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"event": kind, "t": round(time.time(), 3), **fields}), flush=True)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m themis.agent.probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arbiter", required=True,
                   help="host:port of the arbiter's gRPC service (on YARN: the RM host's "
                        "agents' endpoint, e.g. rm:8642)")
    p.add_argument("--app-id", required=True,
                   help="app id to register (on YARN: the application id, application_..._N)")
    p.add_argument("--demand", type=int, default=2,
                   help="most GPUs the synthetic job can use (default 2)")
    p.add_argument("--iter-time", type=float, default=1.0,
                   help="serial seconds per iteration on one GPU (default 1.0)")
    p.add_argument("--iters", type=float, default=3600.0,
                   help="iterations left (default 3600)")
    p.add_argument("--until", choices=["allocation", "grant", "renewal", "refused", "never"],
                   default="grant",
                   help="stop after the first allocation event, after the first one that "
                        "grants GPUs (default), after the first that renews a lease in "
                        "place (on YARN: docs/yarn.md, 'Renewal in place'), once the "
                        "arbiter refuses the registration (PERMISSION_DENIED, e.g. the app "
                        "has ended), or only at --timeout-s")
    p.add_argument("--timeout-s", type=float, default=60.0,
                   help="give up after this many seconds (default 60)")
    p.add_argument("--tls-ca", default="", metavar="PEM",
                   help="CA certificate(s) to trust: the endpoint serves TLS (on YARN unless "
                        "agent-tls.enabled=false; its agent-tls.trust-file); default: "
                        "plaintext")
    args = p.parse_args(argv)
    if args.demand < 1:
        p.error(f"--demand {args.demand}: must be >= 1")
    if args.iter_time <= 0 or args.iters <= 0 or args.timeout_s <= 0:
        p.error("--iter-time, --iters and --timeout-s must be > 0")
    return args


def _await_refusal(client: AgentClient, done: threading.Event, deadline: float) -> None:
    """Set ``done`` once the client's last error is a refusal (the client itself retries)."""
    while time.time() < deadline:
        if (client.stats.last_error or "").startswith("PERMISSION_DENIED"):
            done.set()
            return
        time.sleep(0.1)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    start = time.time()
    app = AppModel(args.app_id, start, [Job("probe-job", args.iter_time, args.iters,
                                            args.demand, args.iters)])
    bidder = ModelBidder(app, time.time)
    done = threading.Event()

    def on_offer(o: OfferInfo) -> None:
        # offers name GPUs by node (protocol version 2): GPUs per node, not stand-in ids
        _emit("offer", round=o.round_id, gpus=dict(Counter(g.machine for g in o.gpus)),
              held=dict(Counter(g.machine for g in o.held)), active_apps=o.active_apps)

    def on_allocation(a: AllocationInfo) -> None:
        _emit("allocation", round=a.round_id, gpus=[g.id for g in a.gpus], vias=list(a.vias),
              was_bidder=a.was_bidder, kept_fraction=a.kept_fraction, expiry=a.expiry)
        if args.until == "allocation" or (args.until == "grant" and a.gpus) or (
                args.until == "renewal" and RENEWAL in a.vias):
            done.set()

    def on_warning(gpus: tuple[str, ...], expiry: float) -> None:
        _emit("lease_warning", gpus=list(gpus), expiry=expiry)

    try:
        # the registration token from the environment, not the command line (ps shows that)
        client = AgentClient(args.arbiter, args.app_id, bidder, on_offer=on_offer,
                             on_allocation=on_allocation, on_lease_warning=on_warning,
                             registration_token=os.environ.get(TOKEN_ENV, ""),
                             tls=channel_credentials(args.tls_ca) if args.tls_ca else None)
    except ValueError as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return 2
    client.start()
    if client.connected.wait(min(args.timeout_s, 30.0)):
        _emit("registered", app_id=args.app_id, epoch=client.epoch)
    if args.until == "refused":
        _await_refusal(client, done, start + args.timeout_s)
    ok = done.wait(max(0.0, args.timeout_s - (time.time() - start)))
    client.stop(unregister=True)
    _emit("done", ok=ok, offers=client.stats.offers, bids=client.stats.bids_sent,
          allocations=client.stats.allocations, last_error=client.stats.last_error)
    return 0 if ok or args.until == "never" else 1


if __name__ == "__main__":
    sys.exit(main())
