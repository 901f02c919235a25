"""Round-by-round auctions (paper section 3.3.2, Pseudocode 1 lines 13-23).

On a resource-available event (lease expiries): sort apps by their current rho, keep the
(1-f) fraction with the worst rho (at least one) as bidders, run the partial-allocation
auction on the free GPUs, hand the leftover GPUs at random (seeded) to the apps that did
not bid, and emit lease grants with expiry times.

This module is pure: the YARN engine, the gRPC arbiter service and the simulator all call
it; only the way bids are collected differs (``collect_bids``).
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from themis.agent.bids import BidTable
from themis.arbiter.auction import AuctionResult, run_auction
from themis.arbiter.solvers.base import Solver
from themis.cluster.topology import Gpu

_SLOT_THEN_ID = attrgetter("slot", "id")


class RoundError(ValueError):
    """Bad round parameters (fairness knob, lease length, app reports)."""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    app_id: str
    gpus: tuple[str, ...]
    start: float
    expiry: float
    via: str  # "auction" or "leftover"


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    bidders: tuple[str, ...]
    nonbidders: tuple[str, ...]
    auction: AuctionResult | None
    leftover: dict[str, tuple[str, ...]]
    unallocated: tuple[str, ...]
    grants: tuple[LeaseGrant, ...]
    allocation: dict[str, tuple[str, ...]] = field(default_factory=dict)  # auction+leftover


def check_knob(fairness_knob: float) -> None:
    if not isinstance(fairness_knob, int | float) or not 0.0 <= fairness_knob < 1.0:
        raise RoundError(f"fairness knob f={fairness_knob!r} must be in [0, 1)")


def select_bidders(
    rho_current: Mapping[str, float], fairness_knob: float, rng: random.Random | None = None
) -> tuple[list[str], list[str]]:
    """Keep ceil((1-f) N) apps with the worst (largest) rho, at least one (line 17).
    Ties in rho are broken at random with ``rng`` (seeded: reproducible; a fixed order
    would always favour the same one of several equally badly off apps), else by app id."""
    check_knob(fairness_knob)
    for app, r in rho_current.items():
        if not isinstance(r, int | float) or math.isnan(r) or r < 0:
            raise RoundError(f"app {app!r}: current rho {r!r} must be a number >= 0")
    apps = sorted(rho_current)
    tie = {a: rng.random() for a in apps} if rng is not None else {a: 0.0 for a in apps}
    ranked = sorted(apps, key=lambda a: (-rho_current[a], tie[a], a))
    if not ranked:
        return [], []
    keep = max(1, math.ceil((1.0 - fairness_knob) * len(ranked) - 1e-9))
    return ranked[:keep], ranked[keep:]


def distribute_leftover(
    gpus: Sequence[Gpu],
    nonbidders: Sequence[str],
    rng: random.Random,
    room: Mapping[str, int] | None = None,
    previous: Mapping[str, str] | None = None,
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Give leftover GPUs at random to non-bidders (line 21).

    *Renewal first* (``previous``: GPU id -> the app whose lease on it just expired): a
    leftover GPU whose previous holder is among ``nonbidders`` and can still use it goes
    back to that holder, so that its job keeps running instead of paying a
    checkpoint/restart (our reading of section 3.3.2, see docs/mechanism.md). The other
    GPUs are dealt at random: non-bidders are put in a seeded random order and take turns;
    at each turn an app takes the GPUs left on the current machine (largest machines
    first), up to what it can still use (``room``; unlimited when not given), so leftovers
    stay machine-local. O(G log G + A) for G GPUs and A apps.
    Returns (grants, GPUs nobody could use) - the latter is empty when there are
    non-bidders and no room limits."""
    order = list(nonbidders)
    rng.shuffle(order)
    remaining = {a: (room.get(a, 0) if room is not None else len(gpus)) for a in order}
    grants: dict[str, list[str]] = {}
    rest: Sequence[Gpu] = gpus
    if previous:
        rest = []
        for g in gpus:
            holder = previous.get(g.id)
            if holder is not None and remaining.get(holder, 0) > 0:
                grants.setdefault(holder, []).append(g.id)
                remaining[holder] -= 1
            else:
                rest.append(g)
    machines: dict[str, list[Gpu]] = {}
    for g in rest:
        machines.setdefault(g.machine, []).append(g)
    chunks = [gs for _, gs in sorted(machines.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    unused: list[str] = []
    # Apps that can still take GPUs, in turn order; an app whose room is used up leaves
    # the rotation for good, so each turn costs O(1) (rooms only decrease).
    takers = deque(a for a in order if remaining[a] > 0)
    for chunk in chunks:
        if not takers:  # nobody left to take GPUs (``unused`` is sorted at the end)
            unused.extend(g.id for g in chunk)
            continue
        ids = [g.id for g in sorted(chunk, key=_SLOT_THEN_ID)]
        pos = 0
        while pos < len(ids):
            if not takers:
                unused.extend(ids[pos:])
                break
            app = takers.popleft()
            take = min(remaining[app], len(ids) - pos)
            grants.setdefault(app, []).extend(ids[pos : pos + take])
            remaining[app] -= take
            pos += take
            if remaining[app] > 0:
                takers.append(app)
    return {a: tuple(sorted(gs)) for a, gs in grants.items()}, tuple(sorted(unused))


def run_round(
    offer: Sequence[Gpu],
    rho_current: Mapping[str, float],
    collect_bids: Callable[[Sequence[str]], Mapping[str, BidTable]],
    *,
    fairness_knob: float,
    lease_s: float,
    now: float,
    solver: Solver,
    rng: random.Random,
    room: Mapping[str, int] | None = None,
    previous: Mapping[str, str] | None = None,
) -> RoundOutcome:
    """One round: filter, auction, leftover, lease grants. ``collect_bids`` receives the
    bidders and returns the tables that arrived in time; missing ones count as
    non-bidders (late or vanished agents). ``previous`` (GPU id -> app whose lease on it
    just expired) makes the leftover step renew those GPUs to their holders first
    (:func:`distribute_leftover`)."""
    if not math.isfinite(lease_s) or lease_s <= 0:
        raise RoundError(f"lease length {lease_s!r} s must be a positive number")
    bidders, nonbidders = select_bidders(rho_current, fairness_knob, rng)
    auction: AuctionResult | None = None
    free = list(offer)
    tables: list[BidTable] = []
    if bidders and free:
        got = collect_bids(bidders)
        tables = [got[a] for a in bidders if a in got]
        late = [a for a in bidders if a not in got]
        nonbidders = [*nonbidders, *late]
        bidders = [t.app_id for t in tables]
    if tables:
        auction = run_auction(free, tables, solver, rng)
        left_ids = set(auction.leftover)
        free = [g for g in free if g.id in left_ids]
    leftover, unallocated = distribute_leftover(free, nonbidders, rng, room, previous)
    if unallocated and bidders:
        # Work conservation (section 3.3.2): GPUs that no non-bidder can use - those the
        # auction withheld as hidden payments when f < 1/N leaves no non-bidders, or more
        # leftover than the non-bidders can take - go, by the same leftover rule, to any
        # app that can still use them rather than idling until the next round.
        held = Counter({a: len(gs) for a, gs in leftover.items()})
        if auction is not None:
            held.update({a: len(gs) for a, gs in auction.allocation.items()})
        everyone = [*bidders, *nonbidders]
        left = None if room is None else {a: room.get(a, 0) - held[a] for a in everyone}
        idle = set(unallocated)
        extra, unallocated = distribute_leftover(
            [g for g in free if g.id in idle], everyone, rng, left, previous)
        for app, gs in extra.items():
            leftover[app] = tuple(sorted((*leftover.get(app, ()), *gs)))
    allocation: dict[str, tuple[str, ...]] = {}
    grants: list[LeaseGrant] = []
    if auction is not None:
        for app, gs in sorted(auction.allocation.items()):
            allocation[app] = gs
            grants.append(LeaseGrant(app, gs, now, now + lease_s, "auction"))
    for app, gs in sorted(leftover.items()):
        allocation[app] = tuple(sorted((*allocation.get(app, ()), *gs)))
        grants.append(LeaseGrant(app, gs, now, now + lease_s, "leftover"))
    return RoundOutcome(
        bidders=tuple(bidders),
        nonbidders=tuple(nonbidders),
        auction=auction,
        leftover=leftover,
        unallocated=unallocated,
        grants=tuple(grants),
        allocation=allocation,
    )
