"""What an agent does with offers and allocations, independent of gRPC.

:class:`ModelBidder` is the default: bid tables from :func:`make_bid_table` on the app's
:class:`AppModel`, with the cached-table rule of the proof of Theorem 3.3 (paper appendix):

* re-asked for the same round (the arbiter re-sends an offer after a reconnect), the agent
  resends the cached table - it never re-bids differently for one round. A round is
  identified by (arbiter epoch, round id): a restarted arbiter numbers its rounds from 1
  again, and its round 1 is not the previous arbiter's;
* the rho it reports (visibility phase) comes from the cached table of the last auction it
  took part in: after an allocation - won in the auction or received as leftover - the new
  estimate is the cached rho of the received bundle (the bundle naming exactly the GPUs
  received if the table has one - the arbiter names its rho, ``bundle_rho``, as only it
  maps bundles to GPU ids - else the best bid with at most as many GPUs), never a fresh,
  possibly strategic, value.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from themis.mechanism.bids import BidTable, make_bid_table
from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    ClusterShape,
    FairnessContext,
    Starvation,
    ideal_time,
    parse_ideal_time,
    parse_starvation,
    rho,
    served_now_rho,
)
from themis.mechanism.model import AppModel, ModelError
from themis.mechanism.topology import Gpu, locality_of


@dataclass(frozen=True, slots=True)
class OfferInfo:
    round_id: int
    gpus: tuple[Gpu, ...]
    held: tuple[Gpu, ...]  # GPUs the app holds past this round
    deadline: float  # unix seconds
    cluster_gpus: int
    active_apps: int
    epoch: str = ""  # the arbiter's epoch (round ids restart at 1 when it restarts)
    shape: ClusterShape | None = None  # the cluster's largest slot/machine/rack, if sent
    # offered GPUs whose lease the app held until this round: its bids name them first
    # among equally placed bundles (make_bid_table's ``previous``)
    previous: tuple[Gpu, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocationInfo:
    round_id: int
    gpus: tuple[Gpu, ...]  # newly granted GPUs (may be empty)
    vias: tuple[str, ...]  # "auction" / "leftover", one per lease
    expiry: float  # latest expiry of the new leases (0 when nothing was granted)
    was_bidder: bool
    kept_fraction: float
    held: tuple[Gpu, ...] = ()  # every GPU the app holds after this round
    # the rho of the bid-table bundle naming exactly ``gpus`` (0.0: none), from the
    # arbiter, which maps the bundles to GPU ids (offers by node: themis.rpc.offers)
    bundle_rho: float = 0.0


class Bidder(Protocol):
    def max_gpus(self) -> int: ...

    def set_cluster_gpus(self, n: int) -> None: ...

    def set_ideal_time(self, form: str) -> None:
        """The cluster's form of T_id ("exact"/"paper"), announced at registration."""
        ...

    def set_starvation(self, form: str, shape: ClusterShape | None) -> None:
        """The cluster's starvation option ("inf"/"served-now"/"ranked") and shape, announced at
        registration."""
        ...

    def starving_key(self) -> tuple[float, float] | None:
        """(served-now rho, T_id seconds) to report with rho = +inf when the cluster uses
        ``served-now``; None otherwise."""
        ...

    def current_rho(self) -> float: ...

    def bid(self, offer: OfferInfo) -> BidTable: ...

    def on_allocation(self, alloc: AllocationInfo) -> float | None:
        """Return a new rho estimate to report, or None."""
        ...


def rho_from_table(table: BidTable, gpu_ids: tuple[str, ...]) -> float:
    """The cached table's rho for receiving ``gpu_ids``: the exact bundle if bid on, else
    the best bid of at most that many GPUs, else rho_current."""
    if not gpu_ids:
        return table.rho_current
    wanted = set(gpu_ids)
    for b in table.bids:
        if set(b.gpus) == wanted:
            return b.rho
    fits = [b.rho for b in table.bids if len(b.gpus) <= len(gpu_ids)]
    return min(fits, default=table.rho_current)


class _NAvg:
    """Time-weighted average of the number of active apps seen in offers (N_avg)."""

    def __init__(self, start: float) -> None:
        self._start = start
        self._last = start
        self._value = 1.0
        self._integral = 0.0

    def observe(self, now: float, active: int) -> float:
        if now > self._last:
            self._integral += self._value * (now - self._last)
            self._last = now
        self._value = float(max(1, active))
        return self.value

    @property
    def value(self) -> float:
        span = self._last - self._start
        return max(1.0, self._integral / span) if span > 0 else self._value


class ModelBidder:
    def __init__(self, app: AppModel, clock: Callable[[], float], *, alternatives: int = 2
                 ) -> None:
        self.app = app
        self.clock = clock
        self.alternatives = alternatives
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, int], BidTable] = {}  # (epoch, round id) -> table
        self._last: BidTable | None = None  # table of the last auction taken part in
        self._rho = math.inf
        self._n_avg = _NAvg(app.start_time)
        self._cluster_gpus = 0
        self.ideal = DEFAULT_IDEAL_TIME  # the form of T_id (the arbiter's, once registered)
        self.starvation = Starvation.INF  # the arbiter's option, once registered
        self._shape: ClusterShape | None = None

    def max_gpus(self) -> int:
        return self.app.app_demand_max

    def set_cluster_gpus(self, n: int) -> None:
        self._cluster_gpus = n

    def set_ideal_time(self, form: str) -> None:
        """Use the cluster's form of T_id (raises ModelError naming the valid forms)."""
        self.ideal = parse_ideal_time(form)

    def set_starvation(self, form: str, shape: ClusterShape | None) -> None:
        """Use the cluster's starvation option (raises ModelError naming the valid ones)."""
        value = parse_starvation(form)
        with self._lock:
            self.starvation = value
            self._shape = shape

    def starving_key(self) -> tuple[float, float] | None:
        """The filter key of an app holding no GPU under ``served-now`` (docs/mechanism.md,
        "Starvation"): :func:`served_now_rho` with the agent's own fairness context (R_C
        and N_avg as for its last bid) and the best placement of the cluster's announced
        shape, and T_id, by which the arbiter ages the key; sent only with rho = +inf (the
        client's rule). None unless the cluster uses ``served-now`` and R_C and the shape
        are known."""
        with self._lock:
            shape = self._shape
            if (not self.starvation.keyed or shape is None
                    or self._cluster_gpus < 1):
                return None
            ctx = FairnessContext(self.clock(), self._cluster_gpus, self._n_avg.value,
                                  self.ideal)
            try:
                key = served_now_rho(self.app, ctx, shape.best_locality)
                t_id = ideal_time(self.app, ctx)
            except ModelError:
                return None
        if not (math.isfinite(key) and key > 0 and math.isfinite(t_id) and t_id > 0):
            return None
        return key, t_id

    def current_rho(self) -> float:
        with self._lock:
            return self._rho

    def bid(self, offer: OfferInfo) -> BidTable:
        with self._lock:
            key = (offer.epoch, offer.round_id)
            cached = self._tables.get(key)
            if cached is not None:
                return cached
            if offer.shape is not None:
                self._shape = offer.shape
            if offer.cluster_gpus >= 1:
                self._cluster_gpus = offer.cluster_gpus
            now = self.clock()
            ctx = FairnessContext(now, offer.cluster_gpus,
                                  self._n_avg.observe(now, offer.active_apps), self.ideal)
            table = make_bid_table(self.app, offer.held, offer.gpus, ctx,
                                   alternatives=self.alternatives,
                                   previous=[g.id for g in offer.previous])
            self._tables = {key: table}  # only the latest round is re-askable
            self._last = table
            self._rho = table.rho_current
            return table

    def on_allocation(self, alloc: AllocationInfo) -> float | None:
        with self._lock:
            if self._last is None:  # never bid yet (leftover only): the model's own estimate
                if not alloc.held or self._cluster_gpus < 1:
                    return None
                ctx = FairnessContext(self.clock(), self._cluster_gpus, self._n_avg.value,
                                      self.ideal)
                self._rho = rho(self.app, len(alloc.held), locality_of(alloc.held), ctx)
                return self._rho
            if alloc.bundle_rho > 0:  # the exact bundle was bid on
                self._rho = alloc.bundle_rho
            else:
                self._rho = rho_from_table(self._last, tuple(g.id for g in alloc.gpus))
            return self._rho
