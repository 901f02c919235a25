"""One round for the RM: cluster view JSON in, lease grants JSON out.

This only adapts data; the mechanism (filtering by f, partial-allocation auction,
leftover) is :func:`themis.mechanism.round.run_round`, run once per CapacityScheduler queue
that gets GPUs this round (:mod:`themis.yarn.queues`; once over every app without queues),
in each partition (YARN node label) over that partition's GPUs (:mod:`themis.yarn.partitions`).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from themis.mechanism.bids import BidTable
from themis.mechanism.round import RENEWAL, LeaseGrant, RoundOutcome, run_round
from themis.mechanism.solvers import Solver, make_solver
from themis.yarn.bids import BidSource, ReportedBids
from themis.yarn.partitions import plan_partitions
from themis.yarn.queues import QueueRound
from themis.yarn.view import (
    DEFAULT_PARTITION,
    cluster_of,
    grants_json,
    held_of,
    node_of,
    offer_of,
    parse_view,
    renewal_holders,
    renewing_per_node,
    waiting_asks,
)

log = logging.getLogger(__name__)


def renewals_marked(outcome: RoundOutcome, renewing: Mapping[str, Mapping[str, int]]
                    ) -> RoundOutcome:
    """The outcome with each app's GPUs on a node where its lease is up for renewal, up to
    that lease's GPUs, split off into a grant whose ``via`` is :data:`RENEWAL`: the RM renews
    the lease in place with them, and the app's agent keeps the GPU ids it holds there
    (docs/yarn.md, "Renewal in place")."""
    if not renewing:
        return outcome
    grants: list[LeaseGrant] = []
    for g in outcome.grants:
        left = dict(renewing.get(g.app_id, {}))
        kept: list[str] = []
        new: list[str] = []
        for x in g.gpus:
            n = node_of(x)
            if left.get(n, 0) > 0:
                left[n] -= 1
                kept.append(x)
            else:
                new.append(x)
        if kept:
            grants.append(replace(g, gpus=tuple(kept), via=RENEWAL))
        if new:
            grants.append(replace(g, gpus=tuple(new)))
    return replace(outcome, grants=tuple(grants))


class RoundEngine:
    def __init__(self, source: BidSource | None = None) -> None:
        self.source: BidSource = source if source is not None else ReportedBids()
        self._solvers: dict[str, Solver] = {}
        self._lock = threading.Lock()
        self.rounds = 0

    def _solver(self, name: str) -> Solver:
        if name not in self._solvers:
            self._solvers[name] = make_solver(name)
        return self._solvers[name]

    def run(self, request_json: str) -> str:
        with self._lock:
            started = time.perf_counter()
            view = parse_view(request_json)
            # what each app still asks, as container shapes (k GPUs on one node per
            # container), less what its leased GPUs without a container yet will take
            shape = waiting_asks(view)
            source = self.source
            # an app whose agent cannot hear grants now (its stream is down: an AM cut off
            # from the RM host) sits this round out, rather than hold leased, idle GPUs
            unreachable = sorted(source.unreachable(sorted(shape)))
            for a in unreachable:
                del shape[a]
            wanting = {a: sum(k * n for k, n in s.items()) for a, s in shape.items()}
            offer = offer_of(view)
            # starvation = served-now or ranked: the starving apps' filter keys (else
            # None); the source also learns the whole cluster, announced to agents
            priority = source.priority(sorted(wanting), cluster_of(view))
            merge = source.merged_keys(sorted(wanting))
            if not wanting or not offer:
                return grants_json([], {"round": view.round_id, "skipped": True,
                                        "bids_rejected": dict(self.source.rejected_bids())})
            rho = source.rho(sorted(wanting))
            # what each app holds in every partition: its offers carry them (section 4.2)
            held = held_of(view)
            # leases up for renewal in place (docs/yarn.md, "Renewal in place"): their
            # holder's offer names their GPUs (its bids name them first among equally placed
            # bundles), they go back to it first in the leftover step, and a grant of them
            # to it is announced as a renewal
            holders = renewal_holders(view)
            renewing = renewing_per_node(view)
            prepared = time.perf_counter()
            waited = [0.0]  # seconds spent waiting for bids (offers sent to tables in)
            solved = [0.0]  # ms spent in the auctions (each queue's, summed)
            rng = random.Random(view.round_id)
            bidders: list[str] = []
            nonbidders: list[str] = []
            lease_of: dict[str, float] = {}  # app -> the length of its leases of this round

            def run(r: QueueRound) -> dict[str, tuple[str, ...]]:
                gpus = list(r.gpus)

                mine: dict[str, list[str]] = {}  # per holder, its GPUs up for renewal
                for g in gpus:
                    if g.id in holders:
                        mine.setdefault(holders[g.id], []).append(g.id)

                def collect(who: Sequence[str]) -> Mapping[str, BidTable]:
                    t = time.perf_counter()
                    try:
                        return source.collect(who, gpus, {a: held.get(a, ()) for a in who},
                                              {a: mine[a] for a in who if a in mine})
                    finally:
                        waited[0] += time.perf_counter() - t

                outcome = run_round(
                    gpus,
                    {a: rho[a] for a in r.apps},
                    collect,
                    fairness_knob=view.fairness_knob,
                    lease_s=view.lease_duration_ms / 1000.0,
                    now=view.now_ms / 1000.0,
                    solver=self._solver(view.solver),
                    rng=rng,
                    room=r.room,
                    previous={g.id: holders[g.id] for g in gpus if g.id in holders} or None,
                    shape={a: shape[a] for a in r.apps},
                    priority=priority,
                    merge=merge,
                    # the round's leases end apart (lease_lengths), and the agents hear the
                    # ends the RM applies: the reply's lease_ms are these grants' lengths,
                    # one per app (its first sub-round's, when queues or partitions run
                    # several)
                    spread_s=view.lease_spread_ms / 1000.0,
                )
                outcome = replace(outcome, grants=tuple(
                    replace(lg, expiry=lg.start + lease_of.setdefault(
                        lg.app_id, lg.expiry - lg.start))
                    for lg in outcome.grants))
                if outcome.auction is not None:
                    solved[0] += outcome.auction.solve_ms
                source.announce(gpus, renewals_marked(outcome, renewing))
                bidders.extend(a for a in outcome.bidders if a not in bidders)
                nonbidders.extend(a for a in outcome.nonbidders if a not in nonbidders)
                return outcome.allocation

            plan = plan_partitions(view, offer, wanting, run)
            self.rounds += 1
            granted = sum(len(gs) for gs in plan.allocation.values())
            info: dict[str, object] = {
                "round": view.round_id,
                "bidders": bidders,
                "nonbidders": [a for a in nonbidders if a not in bidders],
                "unallocated": len(offer) - granted,
                "unreachable": unreachable,
                "elapsed_ms": round((time.perf_counter() - started) * 1000.0, 3),
                # where the round's time went (docs/yarn.md, "Scale"): view parsed and rho
                # read, bids awaited, the rest (auction, leftover, allocation notices)
                "offered_gpus": len(offer),
                "prepare_ms": round((prepared - started) * 1000.0, 3),
                "bid_wait_ms": round(waited[0] * 1000.0, 3),
                # the auctions' solve time (proportional-fair allocation and payments),
                # part of the rest beside leftover, lease grants and allocation notices
                "auction_ms": round(solved[0], 3),
                # for the RM's metrics: each app's rho this round (null when infinite:
                # JSON has no infinity) and bids refused since the last round, by cause
                "rho": {a: (r if math.isfinite(r) else None) for a, r in rho.items()},
                "bids_rejected": dict(source.rejected_bids()),
            }
            default = plan.reports.get(DEFAULT_PARTITION, {})
            if default:  # the default partition's queues, as before node labels
                info["queues"] = {q: r.info() for q, r in sorted(default.items())}
            labeled = sorted({p for p in plan.reports if p != DEFAULT_PARTITION} | set(plan.lent))
            if labeled:  # per node label: its queues' round, its idle GPUs lent to default apps
                info["partitions"] = {
                    p: {"queues": {q: r.info()
                                   for q, r in sorted(plan.reports.get(p, {}).items())},
                        "lent_to_default": plan.lent.get(p, {})}
                    for p in labeled}
            log.info("round %d: %s", view.round_id, info)
            return grants_json(sorted(plan.allocation.items()), info, lease_of)
