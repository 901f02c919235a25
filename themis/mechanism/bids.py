"""Bid tables (paper section 3.3.1, Table 2; design brief section 3).

An agent answers an offer with one *bid table*: rho after receiving each candidate bundle
of offered GPUs, always including the empty bundle at rho_current. Enumerating every subset
is exponential, so the agent bids on a bounded *menu*:

* for each useful GPU count k (1..8, then powers of two and multiples of 8, and the app's
  remaining demand), the best-placed k GPUs: on a machine where the app already holds
  GPUs, else on the tightest machine that fits k (best fit keeps big machines whole),
  filling whole slots first; when no machine fits k, the best rack, else the whole offer;
* plus up to ``alternatives`` other placements of the same k: the other aligned blocks
  of k on the same machine (so two apps can share a machine), then other machines and
  racks, so that the auction can trade placement between apps (section 3.1.2);
* bundles that do not improve rho over a smaller bundle are dropped (useless GPUs).

rho is computed for the app's whole allocation (GPUs held + bundle), see
:mod:`themis.mechanism.fairness`.

The menu and the bid loop run compiled (``themis/mechanism/_menu.c``) when the extension was
built: :func:`candidate_bundles` and :func:`make_bid_table` then return exactly what their
pure-Python references :func:`candidate_bundles_py` and :func:`make_bid_table_py` return
(same bundles in the same order, same Gpu objects, same rho), which the tests check. (The
reference's memo of machine fill orders may hand out equal Gpu records of an earlier offer;
the compiled core always hands out the offer's own.)
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from themis.compiled import fell_back
from themis.mechanism.fairness import FairnessContext, RemainingTime, ideal_time
from themis.mechanism.model import AppModel
from themis.mechanism.topology import Gpu, Locality, locality_of

try:  # pragma: no cover - depends on the build
    from themis.mechanism import _menu
except ImportError:  # pragma: no cover
    _menu = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Bid:
    """One row of a bid table: the app's rho if it receives ``gpus`` (sorted GPU ids)."""

    gpus: tuple[str, ...]
    rho: float


@dataclass(frozen=True, slots=True)
class BidTable:
    """An app's answer to one offer. ``rho_current`` is the empty bundle's value (it may be
    +inf for an app holding no GPU); every bid has a finite positive rho."""

    app_id: str
    rho_current: float
    bids: tuple[Bid, ...]


def useful_counts(limit: int) -> list[int]:
    """GPU counts worth bidding on, up to ``limit``: 1..8, powers of two, multiples of 8,
    and ``limit`` itself."""
    if limit <= 0:
        return []
    counts = set(range(1, min(limit, 8) + 1))
    p = 16
    while p <= limit:
        counts.add(p)
        p *= 2
    counts.update(range(8, limit + 1, 8))
    counts.add(limit)
    return sorted(counts)


def _order_machine(gpus: list[Gpu]) -> list[Gpu]:
    """GPUs of one machine in fill order: fullest slots first, so k GPUs span few slots."""
    by_slot: dict[str, list[Gpu]] = {}
    for g in gpus:
        by_slot.setdefault(g.slot, []).append(g)
    slots = sorted(by_slot.values(), key=lambda s: (-len(s), s[0].slot))
    return [g for s in slots for g in sorted(s, key=lambda g: g.id)]


def fill_order(gpus: Sequence[Gpu]) -> list[Gpu]:
    """The fill order of one machine's GPUs, in which the menu takes them (fullest slots
    first, then by slot name; within a slot by GPU id). It depends on the machine's slot
    layout alone, which is why an offer can name a GPU by its position in it
    (:mod:`themis.rpc.offers`)."""
    return list(_ordered(list(gpus)))


class OfferIndex:
    """The app-independent part of an offer. Build it once per offer and pass it to every
    bidder's :func:`make_bid_table` (``index=``); building it is O(G log G).

    ``native`` is the offer indexed by the compiled menu core (None when the extension is
    not built, or when two GPUs share an id: the pure-Python reference is used then);
    ``groups`` is the reference's grouping, built on first use."""

    __slots__ = ("_groups", "gpus", "native", "size")

    def __init__(self, offer: Sequence[Gpu]) -> None:
        self.gpus = tuple(offer)
        self.size = len(self.gpus)
        if _menu is None:
            fell_back("themis.mechanism._menu")  # one warning per process
        self.native = None if _menu is None else _menu.offer(self.gpus)
        self._groups: OfferGroups | None = None

    @property
    def groups(self) -> OfferGroups:
        if self._groups is None:
            self._groups = OfferGroups(self.gpus)
        return self._groups


class OfferGroups:
    """The offer's GPUs grouped by machine in fill order, the rack of each machine (that
    of its first GPU in fill order), each rack's machines and free GPUs: the input of the
    pure-Python menu (:class:`_OfferView`)."""

    __slots__ = ("by_id", "machines", "rack_free", "rack_of", "racks")

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        self.by_id = {g.id: g for g in gpus}
        machines: dict[str, list[Gpu]] = {}
        for g in gpus:
            machines.setdefault(g.machine, []).append(g)
        self.machines = {m: _ordered(gs) for m, gs in machines.items()}
        self.rack_of = {m: gs[0].rack for m, gs in self.machines.items()}
        self.racks: dict[str, list[str]] = {}  # rack -> its machines, in offer order
        for m, r in self.rack_of.items():
            self.racks.setdefault(r, []).append(m)
        self.rack_free = {r: sum(len(self.machines[m]) for m in ms)
                          for r, ms in self.racks.items()}


_ORDER_CACHE: dict[tuple[Gpu, ...], list[Gpu]] = {}


def _ordered(gpus: list[Gpu]) -> list[Gpu]:
    """:func:`_order_machine`, memoised on the machine's free GPUs (consecutive offers
    mostly contain the same free sets; keyed by the GPU records, not their ids, so that a
    node that comes back with another layout is not served a stale order); callers must
    not mutate the result."""
    key = tuple(gpus)
    got = _ORDER_CACHE.get(key)
    if got is None:
        if len(_ORDER_CACHE) >= 8192:
            _ORDER_CACHE.clear()
        got = _ORDER_CACHE[key] = _order_machine(gpus)
    return got


_ID, _RACK, _MACHINE, _SLOT_KEY = (attrgetter(a) for a in ("id", "rack", "machine", "slot_key"))
_TIES: dict[str, dict[str, int]] = {}


def _ties(salt: str) -> dict[str, int]:
    """Per app (``salt``): a stable hash of each machine or rack name, filled on demand by
    :func:`_tie_of` (ties between equally good ones; cached, asked for every offer)."""
    got = _TIES.get(salt)
    if got is None:
        if len(_TIES) >= 4096:
            _TIES.clear()
        got = _TIES[salt] = {}
    return got


def _tie_of(ties: dict[str, int], salt: str, name: str) -> int:
    got = ties.get(name)
    if got is None:
        got = ties[name] = zlib.crc32(f"{salt}/{name}".encode())
    return got


class _OfferView:
    """The offer grouped for bundle construction, relative to the GPUs an app holds (and
    the GPUs whose lease it just lost, ``previous``: their machines before the held ones,
    and first within their machine, so that a renewal names the same GPUs and a job that
    ran on them keeps them rather than moving to a held machine's free GPU). The per-rack
    orders are built on first use: most menus are filled from single machines."""

    def __init__(
        self,
        offer: Sequence[Gpu] | OfferIndex,
        held: Sequence[Gpu],
        salt: str = "",
        previous: Iterable[str] = (),
    ) -> None:
        index = offer if isinstance(offer, OfferIndex) else OfferIndex(offer)
        self.groups = groups = index.groups
        self.machines = groups.machines  # copied below before it is changed
        self.rack_of = rack_of = groups.rack_of
        self.salt = salt
        prev_slots: set[tuple[str, str]] = set()
        by_id = groups.by_id
        prev_ids = {gid for gid in previous if gid in by_id}
        if prev_ids:
            self.machines = dict(groups.machines)
            for m in {by_id[gid].machine for gid in prev_ids}:
                gs = self.machines[m]
                prev_slots.update(g.slot_key for g in gs if g.id in prev_ids)
                self.machines[m] = sorted(
                    gs, key=lambda g: (g.slot_key not in prev_slots, g.id not in prev_ids)
                )  # stable: otherwise the usual fill order
        prev_machines = {m for m, _ in prev_slots}
        held_machines = {g.machine for g in held}
        held_racks = {g.rack for g in held}
        held_racks.update(rack_of[m] for m in prev_machines)
        machines = self.machines
        if held_machines or held_racks:
            self.affinity = {m: 0 if m in prev_machines else 1 if m in held_machines
                             else 2 if rack_of[m] in held_racks else 3 for m in machines}
        else:
            self.affinity = dict.fromkeys(machines, 3)
        # Ties between equally good machines are broken per app (a stable hash of the
        # app id), so that apps' menus spread over the offer instead of all naming the
        # same few machines.
        ties = self.ties = _ties(salt)
        for m in machines:
            if m not in ties:
                _tie_of(ties, salt, m)
        affinity = self.affinity
        # Preference order, computed once per (app, offer) rather than once per count.
        self.machine_order = sorted(
            machines, key=lambda m: (affinity[m], len(machines[m]), ties[m])
        )
        self.rack_free = groups.rack_free
        self.size = index.size
        self._by_rack: tuple[dict[str, list[str]], dict[str, list[str]], list[str]] | None = None

    def _rack_orders(self) -> tuple[dict[str, list[str]], dict[str, list[str]], list[str]]:
        """Per rack, its machines from the ones we like most then the largest (a tight
        fill) and from the ones we like most then the smallest (uses fragments); and the
        racks in preference order."""
        if self._by_rack is None:
            affinity, machines, ties = self.affinity, self.machines, self.ties
            racks = {
                r: sorted(ms, key=lambda m: (affinity[m], -len(machines[m]), ties[m]))
                for r, ms in self.groups.racks.items()
            }
            small_first = {
                r: sorted(ms, key=lambda m: (affinity[m], len(machines[m])))
                for r, ms in racks.items()
            }
            self.rack_affinity = {r: min(affinity[m] for m in ms) for r, ms in racks.items()}
            for r in racks:
                _tie_of(ties, self.salt, r)
            order = sorted(
                racks, key=lambda r: (self.rack_affinity[r], self.rack_free[r], ties[r])
            )
            self._by_rack = (racks, small_first, order)
        return self._by_rack

    def single_machine(self, k: int, limit: int) -> list[list[Gpu]]:
        """Up to ``limit`` machine-local bundles of k GPUs: the aligned blocks (consecutive
        runs of k in fill order, like a buddy allocator) of the preferred machines, so that
        several apps can bid on disjoint parts of one machine."""
        out: list[list[Gpu]] = []
        for m in self.machine_order:
            gs = self.machines[m]
            for start in range(0, len(gs) - k + 1, k):
                out.append(gs[start : start + k])
                if len(out) >= limit:
                    return out
        return out

    def _fill(self, machines: Iterable[str], k: int) -> list[Gpu]:
        out: list[Gpu] = []
        for m in machines:
            need = k - len(out)
            if need <= 0:
                break
            out.extend(self.machines[m][:need])
        return out

    def single_rack(self, k: int, limit: int) -> list[list[Gpu]]:
        """Rack-local bundles: per rack, a fill from the largest machines (tight) and one
        from the smallest (uses fragments and leaves big machines whole for others)."""
        out: list[list[Gpu]] = []
        racks, small_first, order = self._rack_orders()
        for r in order:
            if self.rack_free[r] < k:
                continue
            out.append(self._fill(racks[r], k))
            out.append(self._fill(small_first[r], k))
            if len(out) >= limit:
                break
        return out[:limit]

    def whole_offer(self, k: int) -> list[Gpu]:
        racks, _, _ = self._rack_orders()
        ties = self.ties
        order = sorted(
            racks, key=lambda r: (self.rack_affinity[r], -self.rack_free[r], ties[r])
        )
        return self._fill((m for r in order for m in racks[r]), k)


def candidate_bundles(
    offer: Sequence[Gpu] | OfferIndex,
    held: Sequence[Gpu],
    max_new: int,
    alternatives: int = 2,
    salt: str = "",
    previous: Iterable[str] = (),
) -> list[list[Gpu]]:
    """The menu of bundles (without rho), best-placed first for each count. ``salt``
    (the app id) breaks ties between equally good machines; ``previous`` (GPU ids whose
    lease the app just lost) are preferred like the machines the app holds. Compiled
    (``_menu.menu``) when the extension was built; :func:`candidate_bundles_py` is the
    reference."""
    index = offer if isinstance(offer, OfferIndex) else OfferIndex(offer)
    if _menu is None or index.native is None:
        return candidate_bundles_py(index, held, max_new, alternatives, salt, previous)
    return _menu.menu(index.native, held, previous, max_new, 1 + max(0, alternatives),
                      _ties(salt), salt, _tie_of)


def candidate_bundles_py(
    offer: Sequence[Gpu] | OfferIndex,
    held: Sequence[Gpu],
    max_new: int,
    alternatives: int = 2,
    salt: str = "",
    previous: Iterable[str] = (),
) -> list[list[Gpu]]:
    """:func:`candidate_bundles` in pure Python (the reference of the compiled menu)."""
    view = _OfferView(offer, held, salt, previous)
    seen: set[frozenset[int]] = set()
    menu: list[list[Gpu]] = []
    per_k = 1 + max(0, alternatives)
    for k in useful_counts(min(max_new, view.size)):
        options = view.single_machine(k, per_k)
        if len(options) < per_k:
            options += view.single_rack(k, 2 * per_k)
        if not options:
            options = [view.whole_offer(k)]
        for b in options:
            key = frozenset(map(id, b))  # an offer has one Gpu object per GPU
            if len(b) == k and key not in seen:
                seen.add(key)
                menu.append(b)
    return menu


def _room(app: AppModel, held: Sequence[Gpu]) -> int:
    """How many more GPUs the app bids for: what its running jobs can use now (the next
    phase's demand between phases), capped by app_demand_max, minus what it holds; 0 for
    a finished app (see :func:`make_bid_table`)."""
    if app.finished:
        return 0
    demand_max = app.app_demand_max
    usable = app.demand_now or demand_max  # between phases: the next phase's
    return min(demand_max, usable) - len(held)


def make_bid_table(
    app: AppModel,
    held: Sequence[Gpu],
    offer: Sequence[Gpu] | OfferIndex,
    ctx: FairnessContext,
    *,
    alternatives: int = 2,
    previous: Iterable[str] = (),
    t_id: float | None = None,
    remaining: RemainingTime | None = None,
) -> BidTable:
    """Compute an app's bid table for an offer (rho of Eq. 1/2 for held + bundle).

    ``offer`` may be a prebuilt :class:`OfferIndex` (shared by all bidders of a round).
    ``previous``: ids of offered GPUs whose lease the app just lost; bundles naming them
    come first among equally placed ones, so that a renewal costs the job no restart.
    Bundles are capped at what the app's running jobs can use *now*
    (:attr:`AppModel.demand_now`; the next phase's demand between phases): a GPU beyond
    that would idle until the lease ends (section 3.3.2: leases are re-auctioned, so GPUs
    for a later phase are bid for when that phase runs).

    ``t_id`` and ``remaining``: the app's :func:`ideal_time` in ``ctx`` and its
    :class:`RemainingTime`, when the caller already has them (the same values).

    Compiled (``_menu.bids``: menu, locality and rho of each bundle, the bid rows) when the
    extension was built; :func:`make_bid_table_py` is the reference."""
    index = offer if isinstance(offer, OfferIndex) else OfferIndex(offer)
    if _menu is None or index.native is None:
        return make_bid_table_py(app, held, index, ctx, alternatives=alternatives,
                                 previous=previous)
    if t_id is None:
        t_id = ideal_time(app, ctx)
    elapsed = max(0.0, ctx.now - app.start_time)
    if remaining is None:
        remaining = RemainingTime(app)
    slowdown = app.placement.slowdown
    slowdowns = (slowdown(Locality.SLOT), slowdown(Locality.MACHINE),
                 slowdown(Locality.RACK), slowdown(Locality.CLUSTER))
    rho_current = (elapsed + slowdowns[locality_of(held)] * remaining(len(held))) / t_id
    room = _room(app, held)
    if room <= 0:
        return BidTable(app.id, rho_current, ())
    bids = _menu.bids(index.native, held, previous, room, 1 + max(0, alternatives),
                      _ties(app.id), app.id, _tie_of, remaining.parts, slowdowns, elapsed,
                      t_id, rho_current, Bid)
    return BidTable(app.id, rho_current, bids)


def make_bid_table_py(
    app: AppModel,
    held: Sequence[Gpu],
    offer: Sequence[Gpu] | OfferIndex,
    ctx: FairnessContext,
    *,
    alternatives: int = 2,
    previous: Iterable[str] = (),
) -> BidTable:
    """:func:`make_bid_table` in pure Python (the reference of the compiled bid loop)."""
    t_id = ideal_time(app, ctx)
    elapsed = max(0.0, ctx.now - app.start_time)
    cache: dict[int, float] = {}
    remaining = RemainingTime(app)
    held_slots = {g.slot_key for g in held}
    held_machines = {g.machine for g in held}
    held_racks = {g.rack for g in held}

    def rho_for(bundle: Sequence[Gpu]) -> float:
        """rho of held + bundle (locality of the union, from the held GPUs' sets)."""
        n = len(held) + len(bundle)
        if n not in cache:
            cache[n] = remaining(n)
        if len(held_racks.union(map(_RACK, bundle))) > 1:
            loc = Locality.CLUSTER
        elif len(held_machines.union(map(_MACHINE, bundle))) > 1:
            loc = Locality.RACK
        elif len(held_slots.union(map(_SLOT_KEY, bundle))) > 1:
            loc = Locality.MACHINE
        else:
            loc = Locality.SLOT
        s = app.placement.slowdown(loc)
        return (elapsed + s * cache[n]) / t_id

    rho_current = rho_for(())
    room = _room(app, held)
    if room <= 0:
        return BidTable(app.id, rho_current, ())
    menu = candidate_bundles_py(offer, held, room, alternatives, app.id, previous)
    bids: list[Bid] = []
    best = math.inf  # best rho of any smaller bundle kept so far
    size = 0
    best_below = math.inf  # best rho among bundles strictly smaller than ``size``
    for bundle in sorted(menu, key=len):
        if len(bundle) != size:
            best_below, size = best, len(bundle)
        value = rho_for(bundle)
        if not math.isfinite(value) or value >= rho_current:
            continue
        if value >= best_below:
            continue  # a smaller bundle already does at least as well
        best = min(best, value)
        bids.append(Bid(tuple(sorted(map(_ID, bundle))), value))
    return BidTable(app.id, rho_current, tuple(bids))
