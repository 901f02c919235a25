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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, groupby
from operator import attrgetter, not_

from themis.mechanism.auction import AuctionResult, run_auction
from themis.mechanism.bids import BidTable
from themis.mechanism.solvers.base import Solver
from themis.mechanism.topology import Gpu

_MACHINE_SLOT_ID = attrgetter("machine", "slot", "id")
_MACHINE = attrgetter("machine")
_ID = attrgetter("id")


class RoundError(ValueError):
    """Bad round parameters (fairness knob, lease length, app reports)."""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    app_id: str
    gpus: tuple[str, ...]
    start: float
    expiry: float
    via: str  # "auction", "leftover" or RENEWAL


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    bidders: tuple[str, ...]
    nonbidders: tuple[str, ...]
    auction: AuctionResult | None
    leftover: dict[str, tuple[str, ...]]
    unallocated: tuple[str, ...]
    grants: tuple[LeaseGrant, ...]
    allocation: dict[str, tuple[str, ...]] = field(default_factory=dict)  # auction+leftover


#: The ``via`` of a grant that renews, in place, the app's lease on the same node's GPUs
#: (YARN: a round before the lease ends gave them back to their holder; docs/yarn.md,
#: "Renewal in place"): the agent keeps the GPU ids it holds there and moves their expiry
RENEWAL = "renewal"

#: The fairness knob f of every driver unless told otherwise (paper, section 6.1: 0.8)
DEFAULT_FAIRNESS_KNOB = 0.8


def check_knob(fairness_knob: float) -> None:
    if not isinstance(fairness_knob, int | float) or not 0.0 <= fairness_knob < 1.0:
        raise RoundError(f"fairness knob f={fairness_knob!r} must be in [0, 1)")


def select_bidders(
    rho_current: Mapping[str, float],
    fairness_knob: float,
    rng: random.Random | None = None,
    priority: Mapping[str, float] | None = None,
    merge: Collection[str] = (),
) -> tuple[list[str], list[str]]:
    """Keep ceil((1-f) N) apps with the worst (largest) rho, at least one (line 17).

    ``priority`` (optional, app -> number, larger = worse off) is a secondary key: among
    apps of equal rho - in particular the apps holding no GPU, all at rho = +inf - the
    larger priority ranks first (starvation-aware filtering, docs/mechanism.md); an app
    missing from it ranks after those present. It never overrides rho: an app of larger
    rho ranks first whatever the priorities - except for the apps in ``merge`` (starvation =
    ``ranked``: the starving apps that have held GPUs before): such an app at rho = +inf
    with a priority ranks by that priority among all apps, as if it were its rho. Remaining
    ties are broken at random with ``rng`` (seeded: reproducible; a fixed order would
    always favour the same one of several equally badly off apps), else by app id."""
    check_knob(fairness_knob)
    for app, r in rho_current.items():
        if not isinstance(r, int | float) or math.isnan(r) or r < 0:
            raise RoundError(f"app {app!r}: current rho {r!r} must be a number >= 0")
    pri: dict[str, float] = {}
    for app, v in (priority or {}).items():
        if not isinstance(v, int | float) or math.isnan(v):
            raise RoundError(f"app {app!r}: filter priority {v!r} must be a number")
        pri[app] = float(v)
    merged = frozenset(merge)
    # one sort key per app, (-rank value, -priority, tie draw, id), the draws in id order
    keys: list[tuple[float, float, float, str]] = []
    for a in sorted(rho_current):
        r = rho_current[a]
        p = pri.get(a)
        value = p if p is not None and r == math.inf and a in merged else r
        keys.append((-value, math.inf if p is None else -p,
                     rng.random() if rng is not None else 0.0, a))
    if not keys:
        return [], []
    keys.sort()
    ranked = [k[3] for k in keys]
    keep = max(1, math.ceil((1.0 - fairness_knob) * len(ranked) - 1e-9))
    return ranked[:keep], ranked[keep:]


Shape = Mapping[str, Mapping[int, int]]
"""Container asks per app: GPUs per container -> number of containers (all of a container's
GPUs on one machine, as YARN places a container on one node)."""


def cap_starving_bidders(
    bidders: Sequence[str], nonbidders: Sequence[str], rho_current: Mapping[str, float],
    free: Sequence[Gpu], shape: Shape | None = None,
) -> tuple[list[str], list[str]]:
    """Starvation-aware filtering, second half (docs/mechanism.md, "Starvation"): only as
    many starving bidders (rho = +inf) stay bidders as the offer can serve at once; the
    others join the non-bidders this round.

    Why: the auction serves as many starving bidders as the offer allows and, among them,
    prefers the one with the *lowest* rho once served (the largest gain log(rho_ref /
    rho(b))), the opposite of the filter's order; with fewer free GPUs than starving bidders
    the worst-off one then loses every round and, being a bidder, never gets leftover GPUs.
    Worse, two starving bidders after the same GPUs make the winner's hidden payment
    (section 3.3.1) all it won: its presence keeps the other unserved, so c_i ~ 0 and
    neither gets anything.

    Who stays: in the filter's order (worst off first), a starving bidder keeps its place
    when its smallest container (one GPU without a ``shape``: all of a container's GPUs on
    one machine, as YARN places it) still fits on one machine of the offer beside those of
    the starving bidders kept before it (best fit: the machine with the fewest GPUs left
    that fit it). Without shapes this keeps the first ``len(free)`` of them. The auction
    itself (bids, gains, payments) is unchanged."""
    starving = [a for a in bidders if math.isinf(rho_current[a])]
    unit = {a: min((k for k, n in (shape or {}).get(a, {}).items() if n > 0), default=1)
            for a in starving}
    if len(starving) <= len(free) and all(k == 1 for k in unit.values()):
        return list(bidders), list(nonbidders)
    left = sorted(Counter(map(_MACHINE, free)).values())
    dropped: set[str] = set()
    for a in starving:
        k = unit[a]
        i = next((j for j, c in enumerate(left) if c >= k), None)  # ``left`` is ascending
        if i is None:
            dropped.add(a)
            continue
        left[i] -= k
        left.sort()
    if not dropped:
        return list(bidders), list(nonbidders)
    return ([a for a in bidders if a not in dropped],
            [*nonbidders, *(a for a in bidders if a in dropped)])


def _asks(
    apps: Sequence[str], unlimited: int, room: Mapping[str, int] | None, shape: Shape | None
) -> dict[str, dict[int, int]]:
    """Each app's asks as ``{gpus per container: containers}``: its ``shape`` (capped by its
    ``room`` when given) or, without a shape, ``room`` single-GPU units (``unlimited``
    when ``room`` is None)."""
    out: dict[str, dict[int, int]] = {}
    for a in apps:
        if shape is not None and a in shape:
            ask: dict[int, int] = {}
            for k, n in shape[a].items():
                if isinstance(k, bool) or not isinstance(k, int) or k < 1 or \
                        isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise RoundError(f"app {a!r}: container ask {k!r} GPU(s) x {n!r} must be "
                                     "a whole number >= 1 of GPUs x a count >= 0")
                if n:
                    ask[k] = n
            out[a] = ask if room is None else _trim(ask, room.get(a, 0))
        else:
            n = unlimited if room is None else room.get(a, 0)
            out[a] = {1: n} if n > 0 else {}
    return out


def _trim(ask: dict[int, int], limit: int) -> dict[int, int]:
    """Drop containers, largest first, until the asks total at most ``limit`` GPUs."""
    out = dict(ask)
    over = sum(k * n for k, n in out.items()) - max(0, limit)
    for k in sorted(out, reverse=True):
        if over <= 0:
            break
        drop = min(out[k], -(-over // k))
        out[k] -= drop
        over -= drop * k
    return {k: n for k, n in out.items() if n > 0}


def _take(ask: dict[int, int], avail: int) -> int:
    """Whole containers of ``ask`` that fit into ``avail`` GPUs of one machine, largest
    first; removes them from ``ask`` and returns their GPUs. Afterwards no container left in
    ``ask`` fits into what remains of ``avail``."""
    took = 0
    for k in sorted(ask, reverse=True):
        n = min(ask[k], (avail - took) // k)
        if n > 0:
            took += n * k
            if n == ask[k]:
                del ask[k]
            else:
                ask[k] -= n
    return took


def _deal(
    gpus: Sequence[Gpu],
    order: Sequence[str],
    asks: dict[str, dict[int, int]],
    previous: Mapping[str, str] | None,
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The leftover rule over apps in turn ``order``; ``asks`` is consumed.

    Runs every round on every free GPU (in the simulator, most of the cluster once the
    load drops, with a few apps asking for a few GPUs), so the per-GPU work is kept to
    sorts and C-level grouping; the order of ``rest`` below does not matter, as it is
    sorted on a unique key (GPU ids are unique)."""
    if not any(asks.values()):  # nobody asks for anything: every GPU is unused
        return {}, tuple(sorted(map(_ID, gpus)))
    grants: dict[str, list[str]] = {}
    rest: list[Gpu]
    # Renewal only when a previous holder asks for GPUs: otherwise every renewal
    # candidate would just go back to ``rest``, whose order does not matter (see above).
    if previous and any(asks.get(h) for h in set(previous.values())):
        # Renewal: only the GPUs with a previous holder, in ``gpus`` order.
        had = list(map(previous.__contains__, map(_ID, gpus)))
        renew = list(compress(gpus, had))
        if renew:
            rest = list(compress(gpus, map(not_, had)))
            claims: dict[tuple[str, str], list[Gpu]] = {}  # shaped holder's GPUs per machine
            for g in renew:
                holder = previous[g.id]
                ask = asks.get(holder)
                if not ask:
                    rest.append(g)
                elif ask.keys() == {1}:
                    grants.setdefault(holder, []).append(g.id)
                    _take(ask, 1)
                else:
                    claims.setdefault((holder, g.machine), []).append(g)
            for (holder, _), gs in claims.items():  # whole containers only, in GPU order
                n = _take(asks[holder], len(gs))
                grants.setdefault(holder, []).extend(g.id for g in gs[:n])
                rest.extend(gs[n:])
        else:
            rest = list(gpus)
    else:
        rest = list(gpus)
    multi = sorted({k for ask in asks.values() for k in ask if k > 1}, reverse=True)
    # Apps that can still take single GPUs, in turn order (the containers of k > 1 GPUs
    # placed below never change an app's 1-GPU asks); an app whose asks are used up
    # leaves the rotation for good (asks only decrease), so each turn costs O(1).
    takers = deque(a for a in order if asks.get(a, {}).get(1, 0) > 0)
    if not multi and not takers:  # nobody can take a GPU: all of them are unused
        return ({a: tuple(sorted(gs)) for a, gs in grants.items()},
                tuple(sorted(map(_ID, rest))))
    # Each machine's GPUs by slot, then id (machines in name order: every use below
    # breaks ties by machine name, so their order here does not matter).
    rest.sort(key=_MACHINE_SLOT_ID)
    machines = {m: [g.id for g in grp] for m, grp in groupby(rest, key=_MACHINE)}
    # Multi-GPU containers first, largest first (first fit decreasing): in turn order each
    # app places one container on the machine that fits it most tightly, so single GPUs
    # dealt below do not break up the machines such a container needs.
    for k in multi:
        turns = deque(a for a in order if asks.get(a, {}).get(k, 0) > 0)
        while turns:
            fit = [(len(ids), m) for m, ids in machines.items() if len(ids) >= k]
            if not fit:
                break
            _, m = min(fit)
            app = turns.popleft()
            ids = machines[m]
            grants.setdefault(app, []).extend(ids[:k])
            del ids[:k]
            asks[app][k] -= 1
            if asks[app][k] > 0:
                turns.append(app)
            else:
                del asks[app][k]
    # Single GPUs (1-GPU containers and apps without a shape): at each turn an app takes
    # what is left on the current machine, largest machines first, up to its asks.
    chunks = [ids for _, ids in sorted(machines.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    unused: list[str] = []
    for ids in chunks:
        if not takers:  # nobody left to take any: the rest is unused
            unused.extend(ids)
            continue
        pos = 0
        while pos < len(ids) and takers:
            app = takers.popleft()
            take = min(asks[app][1], len(ids) - pos)
            grants.setdefault(app, []).extend(ids[pos : pos + take])
            asks[app][1] -= take
            pos += take
            if asks[app][1] > 0:
                takers.append(app)
        unused.extend(ids[pos:])  # ``unused`` is sorted at the end
    return {a: tuple(sorted(gs)) for a, gs in grants.items()}, tuple(sorted(unused))


def container_units(shape: Shape | None) -> dict[str, int]:
    """Per app with a shape, the GPUs of which any of its asks is a whole number of
    containers (the gcd of its container sizes; 1 without asks)."""
    return {a: math.gcd(*(k for k, n in ask.items() if n > 0)) or 1
            for a, ask in (shape or {}).items()}


def _whole_containers(
    allocation: Mapping[str, tuple[str, ...]], offer: Sequence[Gpu], shape: Shape | None
) -> dict[str, tuple[str, ...]]:
    """The auction's allocation with, for apps whose asks have a shape, each machine's GPUs
    cut down to a multiple of the gcd of their container sizes. The auction already rounds
    such an app's kept share in whole containers (:func:`container_units`), but a bundle
    spread over machines can still leave a GPU on a machine that no container of the app
    fits (3 + 1 GPUs for 2-GPU containers). Such GPUs go to the leftover instead of idling
    under the app's lease; the app loses nothing it could use."""
    if not shape:
        return dict(allocation)
    machine = {g.id: g.machine for g in offer}
    out: dict[str, tuple[str, ...]] = {}
    units = container_units(shape)
    for app, gs in allocation.items():
        unit = units.get(app, 1)
        if unit == 1:
            out[app] = gs
            continue
        per: dict[str, list[str]] = {}
        for g in sorted(gs):
            per.setdefault(machine[g], []).append(g)
        out[app] = tuple(sorted(g for ids in per.values() for g in ids[: len(ids) // unit * unit]))
    return out


def distribute_leftover(
    gpus: Sequence[Gpu],
    nonbidders: Sequence[str],
    rng: random.Random,
    room: Mapping[str, int] | None = None,
    previous: Mapping[str, str] | None = None,
    shape: Shape | None = None,
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Give leftover GPUs at random to non-bidders (line 21).

    *Renewal first* (``previous``: GPU id -> the app whose lease on it just expired): a
    leftover GPU whose previous holder is among ``nonbidders`` and can still use it goes
    back to that holder, so that its job keeps running instead of paying a
    checkpoint/restart (our reading of section 3.3.2, see docs/mechanism.md). The other
    GPUs are dealt at random: non-bidders are put in a seeded random order and take turns;
    at each turn an app takes the GPUs left on the current machine (largest machines
    first), up to what it can still use (``room``; unlimited when not given), so leftovers
    stay machine-local.

    *Container shape* (``shape``: app -> ``{k: n}``, n containers of k GPUs): such an app
    is dealt only whole containers, all k GPUs of one on one machine, never a partial one.
    Containers of k > 1 GPUs are placed before single GPUs, largest first (first fit
    decreasing): in turn order, each app places one container on the machine with the
    fewest free GPUs that fit it. Single GPUs (1-GPU containers, apps without a shape) then
    follow the plain rule above, which is all there is without shapes (the simulator and
    standalone mode). O(G log G + A) for G GPUs and A apps, plus O(M) per multi-GPU
    container placed on M machines.
    Returns (grants, GPUs nobody could use) - the latter is empty when there are
    non-bidders and no room limits."""
    order = list(nonbidders)
    rng.shuffle(order)
    return _deal(gpus, order, _asks(order, len(gpus), room, shape), previous)


def lease_spread(lease_s: float, spread_s: float | None) -> float:
    """The spread of a round's lease lengths (:func:`lease_lengths`): ``spread_s``, by
    default (None) half of the lease, in every mode (yarn-site ``lease-spread-ms``)."""
    return lease_s / 2 if spread_s is None else spread_s


def check_spread(lease_s: float, spread_s: float) -> None:
    """A lease spread lies between 0 and the lease (:func:`lease_lengths`)."""
    if not 0 <= spread_s <= lease_s:
        raise RoundError(f"lease spread {spread_s!r} s must be between 0 and the lease "
                         f"length {lease_s!r} s")


def lease_lengths(apps: Sequence[str], lease_s: float, spread_s: float,
                  rng: random.Random) -> dict[str, float]:
    """How long each app's leases granted in one round last (seconds).

    Without a spread every lease lasts ``lease_s`` (section 3.3.2), so the leases of a
    round end together and the round at their end offers them all again: on a large
    cluster granted at once, every round offers the whole cluster (docs/yarn.md, "Scale").
    With ``spread_s`` (at most ``lease_s``) the apps' lengths are spaced evenly over
    ``lease_s - spread_s / 2`` .. ``lease_s + spread_s / 2`` in a random order: the mean
    stays ``lease_s``, an app's GPUs of the round still end together, and the next rounds
    each offer the GPUs of some of the apps. One app alone gets ``lease_s``."""
    check_spread(lease_s, spread_s)
    if spread_s == 0 or len(apps) < 2:
        return dict.fromkeys(apps, lease_s)
    order = list(apps)
    rng.shuffle(order)
    n = len(order)
    return {a: lease_s + spread_s * ((i + 0.5) / n - 0.5) for i, a in enumerate(order)}


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
    shape: Shape | None = None,
    priority: Mapping[str, float] | None = None,
    merge: Collection[str] = (),
    spread_s: float = 0.0,
) -> RoundOutcome:
    """One round: filter, auction, leftover, lease grants. ``collect_bids`` receives the
    bidders and returns the tables that arrived in time; missing ones count as
    non-bidders (late or vanished agents). ``previous`` (GPU id -> app whose lease on it
    just expired) makes the leftover step renew those GPUs to their holders first;
    ``shape`` (app -> ``{GPUs per container: containers}``) makes it deal such apps whole
    containers on one machine (:func:`distribute_leftover`); ``priority`` is the filter's
    secondary key (:func:`select_bidders`; for the apps in ``merge`` their rank) and,
    when given, caps the starving bidders (:func:`cap_starving_bidders`). Bidders'
    bundles are theirs. The leases last :func:`lease_lengths` (``spread_s``)."""
    if not math.isfinite(lease_s) or lease_s <= 0:
        raise RoundError(f"lease length {lease_s!r} s must be a positive number")
    check_spread(lease_s, spread_s)
    bidders, nonbidders = select_bidders(rho_current, fairness_knob, rng, priority, merge)
    free = list(offer)
    if priority is not None:
        bidders, nonbidders = cap_starving_bidders(bidders, nonbidders, rho_current, free,
                                                   shape)
    auction: AuctionResult | None = None
    tables: list[BidTable] = []
    if bidders and free:
        got = collect_bids(bidders)
        tables = [got[a] for a in bidders if a in got]
        late = [a for a in bidders if a not in got]
        nonbidders = [*nonbidders, *late]
        bidders = [t.app_id for t in tables]
    won: dict[str, tuple[str, ...]] = {}
    if tables:
        auction = run_auction(free, tables, solver, rng, unit=container_units(shape))
        won = _whole_containers(auction.allocation, offer, shape)
        # The leftover: the auction's (the offer less its allocation) and the GPUs of
        # partial containers (its allocation less ``won``, a subset of it), i.e. the offer
        # less ``won``: the offer's GPU ids are unique (run_auction validated them).
        kept = {g for gs in won.values() for g in gs}
        if kept:
            free = list(compress(free, map(not_, map(kept.__contains__, map(_ID, free)))))
    asks = _asks(nonbidders, len(free), room, shape)
    order = list(nonbidders)
    rng.shuffle(order)
    leftover, unallocated = _deal(free, order, asks, previous)
    if unallocated and bidders:
        # Work conservation (section 3.3.2): GPUs that no non-bidder can use - those the
        # auction withheld as hidden payments when f < 1/N leaves no non-bidders, or more
        # leftover than the non-bidders can take - go, by the same leftover rule, to any
        # app that can still use them rather than idling until the next round.
        held = Counter({a: len(gs) for a, gs in leftover.items()})
        held.update({a: len(gs) for a, gs in won.items()})
        everyone = [*bidders, *nonbidders]
        left = None if room is None else {a: room.get(a, 0) - held[a] for a in everyone}
        # shaped apps keep the containers still unplaced (a bidder's: minus what it won);
        # ``unallocated`` holds distinct ids of ``free`` (so as many as ``spare`` below)
        again = _asks(everyone, len(unallocated), left, None)
        for a in everyone:
            if shape is not None and a in shape:
                rest = asks[a] if a in asks else _asks([a], 0, None, shape)[a]
                again[a] = rest if left is None else _trim(rest, left[a])
        order = list(everyone)
        rng.shuffle(order)
        # Nobody asking for anything (the usual case: the bidders' rooms are filled),
        # _deal would give nothing and return ``unallocated`` as it is (sorted ids).
        if any(again.values()):
            idle = set(unallocated)
            spare = list(compress(free, map(idle.__contains__, map(_ID, free))))
            extra, unallocated = _deal(spare, order, again, previous)
            for app, gs in extra.items():
                leftover[app] = tuple(sorted((*leftover.get(app, ()), *gs)))
    allocation: dict[str, tuple[str, ...]] = {}
    grants: list[LeaseGrant] = []
    length = lease_lengths(sorted({*(a for a, gs in won.items() if gs), *leftover}),
                           lease_s, spread_s, rng)
    for app, gs in sorted(won.items()):
        if gs:
            allocation[app] = gs
            grants.append(LeaseGrant(app, gs, now, now + length[app], "auction"))
    for app, gs in sorted(leftover.items()):
        allocation[app] = tuple(sorted((*allocation.get(app, ()), *gs)))
        grants.append(LeaseGrant(app, gs, now, now + length[app], "leftover"))
    return RoundOutcome(
        bidders=tuple(bidders),
        nonbidders=tuple(nonbidders),
        auction=auction,
        leftover=leftover,
        unallocated=unallocated,
        grants=tuple(grants),
        allocation=allocation,
    )
