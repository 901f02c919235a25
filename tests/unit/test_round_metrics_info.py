"""What the engine tells the RM for its metrics (rm-plugin ThemisMetrics): each app's rho in
the round reply (null when infinite, so the reply stays strict JSON) and bids refused by
cause, counted by the arbiter core and drained once per round."""

from __future__ import annotations

import json
import math

import pytest

from themis.arbiter.errors import CallError
from themis.arbiter.intake import REJECT_CAUSES
from themis.arbiter.state import ArbiterCore
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.yarn.agents import OfferView
from themis.yarn.bids import ReportedBids
from themis.yarn.rounds import RoundEngine


def _strict(raw: str) -> dict[str, object]:
    def refuse(name: str) -> float:
        raise AssertionError(f"reply is not strict JSON: {name}")

    out = json.loads(raw, parse_constant=refuse)
    assert isinstance(out, dict)
    return out


def _view() -> str:
    return json.dumps({
        "round": 3, "now_ms": 1_000_000, "fairness_knob": 0.5, "lease_duration_ms": 60_000,
        "solver": "auto",
        "nodes": [{"node_id": "h1:1", "host": "h1", "rack": "/r", "total_gpus": 4,
                   "free_gpus": 4}],
        "apps": [{"app_id": "application_1_0001", "pending_gpus": 1},
                 {"app_id": "application_1_0002", "pending_gpus": 1}],
        "leases": [],
    })


def test_round_reply_carries_each_apps_rho_and_null_for_infinity() -> None:
    bids = ReportedBids()
    bids.report_rho("application_1_0001", 2.5)
    bids.report_rho("application_1_0002", math.inf)
    reply = _strict(RoundEngine(bids).run(_view()))
    info = reply["info"]
    assert isinstance(info, dict)
    assert info["rho"] == {"application_1_0001": 2.5, "application_1_0002": None}
    assert info["bids_rejected"] == {}


def test_skipped_round_still_reports_rejected_bids() -> None:
    view = json.loads(_view())
    view["apps"] = []
    info = _strict(RoundEngine().run(json.dumps(view)))["info"]
    assert isinstance(info, dict)
    assert info["skipped"] is True and info["bids_rejected"] == {}


def test_refused_bids_are_counted_by_cause_and_drained() -> None:
    core = ArbiterCore(OfferView())
    secret = core.register("application_1_0001", 1.0, 2).secret
    table = pb.BidTable()
    with pytest.raises(CallError):
        core.submit_bid("application_1_0001", "wrong", 1, table)
    with pytest.raises(CallError):
        core.submit_bid("application_1_0009", secret, 1, table)
    with pytest.raises(CallError):  # no round is open
        core.submit_bid("application_1_0001", secret, 1, table)
    assert core.drain_rejected_bids() == {"unauthenticated": 2, "not_open": 1}
    assert core.drain_rejected_bids() == {}
    assert set(REJECT_CAUSES.values()) == {"invalid", "too_large", "not_open",
                                           "unauthenticated"}


def test_round_info_times_the_auction_apart_from_the_round() -> None:
    """bench/bench_scale.py reports the auction's share of a round from ``auction_ms`` /
    ``elapsed_ms``: the auctions' solve time is there when apps bid, 0 when none does."""
    from themis.mechanism.bids import Bid, BidTable
    from themis.yarn.view import offer_of, parse_view

    gpus = sorted(g.id for g in offer_of(parse_view(_view())))
    bids = ReportedBids()
    for i, app in enumerate(("application_1_0001", "application_1_0002")):
        bids.report_table(BidTable(app, 2.0, (Bid((gpus[i],), 1.0),)))
    info = _strict(RoundEngine(bids).run(_view()))["info"]
    assert isinstance(info, dict)
    assert info["bidders"]  # the fairness filter offers to (1 - f) of the apps: one here
    assert isinstance(info["auction_ms"], float)
    assert 0.0 < info["auction_ms"] <= info["elapsed_ms"]  # type: ignore[operator]
    idle = _strict(RoundEngine(ReportedBids()).run(_view()))["info"]
    assert isinstance(idle, dict)
    assert idle["bidders"] == [] and idle["auction_ms"] == 0.0
