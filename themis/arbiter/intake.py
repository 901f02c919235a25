"""The arbiter's bid intake: rho reports in, offers out, bid tables in.

* ``ReportRho`` (the paper's visibility phase, section 4.2.2): the app's current finish-time
  fairness rho (section 3.2) is kept as its last report; the round's (1-f) filter picks the
  bidders by it (section 3.3.2). With rho = +inf and ``starvation`` served-now or ranked a
  report may carry the app's starving key (served-now rho and T_id seconds), which ages by 1 / T_id
  per second waited (Eq. 1) and orders the apps that hold no GPU (:meth:`_priority`;
  docs/mechanism.md, "Starvation").
* Offers: a round opened over some free GPUs (:class:`~themis.arbiter.base.OpenRound`)
  sends each bidder the free GPUs, the GPUs it holds, R_C and the number of active apps, and
  waits for the bids until all offered, still-connected apps have bid or the deadline
  passes (:meth:`_collect`; an app that does not bid is a non-bidder).
* ``SubmitBid``: a bid table (the partial-allocation auction's input, section 3.3.1,
  Table 2) is bounded, checked against the open round and validated before it is recorded;
  an identical re-submission is accepted, a different second table refused, and refused bids
  are counted by cause (:data:`REJECT_CAUSES`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from themis.arbiter.base import CoreBase, OpenRound
from themis.arbiter.config import MAX_KEY
from themis.arbiter.errors import CallError, Code
from themis.mechanism.auction import validate_tables
from themis.mechanism.bids import BidTable
from themis.mechanism.errors import InvalidBid, InvalidOffer
from themis.mechanism.fairness import parse_starvation
from themis.mechanism.topology import Gpu, Topology
from themis.rpc.convert import shape_to_pb
from themis.rpc.offers import (
    BundleError,
    encode_gpus,
    encode_runs,
    fill_orders,
    fill_positions,
    node_index,
    table_from_pb,
)
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.safeinput import short

#: Why a bid was refused, by the call's status code (a bounded set, for the RM's metrics):
#: a malformed table, a table over the size limits, a round that is not open for the app
#: (late, closed, or a different table resubmitted), unknown app or wrong credentials.
REJECT_CAUSES: dict[Code, str] = {
    Code.INVALID_ARGUMENT: "invalid",
    Code.RESOURCE_EXHAUSTED: "too_large",
    Code.FAILED_PRECONDITION: "not_open",
    Code.NOT_FOUND: "unauthenticated",
    Code.PERMISSION_DENIED: "unauthenticated",
}


def check_rho(rho: float, what: str) -> None:
    """A reported rho (at registration too): > 0, or +inf for an app that cannot finish."""
    if math.isnan(rho) or rho <= 0:
        raise CallError(Code.INVALID_ARGUMENT, f"{what}: rho {rho!r} must be > 0 (or +inf)")


def _check_key(rho: float, key: pb.StarvingKey, what: str) -> tuple[float, float]:
    """A ReportRho's starving key: only with rho = +inf, each number finite in (0, 1e18]."""
    if not math.isinf(rho):
        raise CallError(Code.INVALID_ARGUMENT,
                        f"{what}: starving: a key is only sent with rho = +inf (rho {rho!r})")
    for name in ("served_now_rho", "ideal_seconds"):
        v = getattr(key, name)
        if not (math.isfinite(v) and 0 < v <= MAX_KEY):
            raise CallError(Code.INVALID_ARGUMENT,
                            f"{what}: starving.{name} {v!r} must be a finite number in "
                            f"(0, {MAX_KEY:g}]")
    return key.served_now_rho, key.ideal_seconds


class BidIntake(CoreBase):
    """The bid-intake part of :class:`~themis.arbiter.state.ArbiterCore` (module doc)."""

    def _init_intake(self) -> None:
        self._rejected: dict[str, int] = {}  # bids refused since the last drain, by cause
        # per app, its bundles in the last round it bid in: hash of the sorted GPU ids -> rho
        # (the first bundle naming them), for Allocation.bundle_rho
        self._last_bids: dict[str, dict[int, float]] = {}

    def _bundle_rho(self, app_id: str, gpu_ids: Sequence[str]) -> float:
        """The rho of the bundle naming exactly ``gpu_ids`` (the GPUs granted) in the app's
        table of the last auction it bid in - the agent's cached table: what it reports
        next under the cached-table rule (proof of Theorem 3.3); 0.0 when none does (caller
        holds the lock)."""
        bids = self._last_bids.get(app_id)
        if bids is None or not gpu_ids:
            return 0.0
        return bids.get(hash(tuple(sorted(gpu_ids))), 0.0)

    # ----------------------------------------------------------------- rho
    def report_rho(self, app_id: str, secret: str, rho: float,
                   key: pb.StarvingKey | None = None) -> None:
        """The app's rho and, with rho = +inf, optionally its ``served-now`` filter key
        (kept only when the arbiter's starvation is served-now or ranked); a report without a
        key clears the previous one."""
        with self._cond:
            rec = self._auth(app_id, secret)
            check_rho(rho, f"app {app_id!r}")
            value = None if key is None else _check_key(rho, key, f"app {app_id!r}")
            rec.rho = rho
            rec.key = None if value is None else (*value, self.clock())

    def _keyed(self) -> bool:
        return parse_starvation(self.config.starvation).keyed

    def _priority(self, app_ids: Sequence[str], now: float) -> dict[str, float] | None:
        """The filter's secondary key for ``run_round`` (caller holds the lock): None unless
        starvation is served-now or ranked; else each starving app's reported key aged to
        ``now`` (served-now rho grows by 1 / T_id per second waited, Eq. 1), apps without a
        key left out (under served-now they rank after those with one, under ranked first,
        at +inf)."""
        if not self._keyed():
            return None
        out: dict[str, float] = {}
        for a in app_ids:
            rec = self._apps.get(a)
            if rec is None or rec.key is None or not math.isinf(rec.rho):
                continue
            value, ideal_s, at = rec.key
            out[a] = value + max(0.0, now - at) / ideal_s
        return out

    # ----------------------------------------------------------------- offers
    def _offer_event(self, app_id: str, r: OpenRound) -> pb.Event:
        """The app's offer: the round's common part, built once per round (free GPUs as
        counts per node, :mod:`themis.rpc.offers`), plus the GPUs the app holds, and the
        node table when the app's stream has not had its version (caller holds the lock)."""
        topo = self.backend.topology()
        ni = r.nodes
        if ni is None:
            ni = r.nodes = node_index(topo)
        if r.offer is None:
            r.offer = pb.Offer(
                round_id=r.round_id,
                deadline_unix=r.deadline,
                cluster_gpus=self.backend.cluster_gpus(),
                active_apps=len(self._apps),
                arbiter_epoch=self.epoch,
                cluster_shape=shape_to_pb(self.backend.shape()),
                node_table_version=ni.version,
                free=encode_gpus(r.gpus, ni),
            )
        event = pb.Event()
        offer = event.offer
        offer.CopyFrom(r.offer)
        held = (r.held.get(app_id, ()) if r.held is not None
                else [topo[g] for g in self._held_ids(app_id)])
        offer.held.CopyFrom(encode_gpus(held, ni))
        previous = r.previous.get(app_id)
        if previous:
            offer.previous.CopyFrom(encode_runs(previous, r.where))
        rec = self._apps.get(app_id)
        if rec is not None and rec.node_table != ni.version:
            offer.node_table.CopyFrom(ni.table)
            rec.node_table = ni.version
        return event

    def _collect(self, rid: int, offer: Sequence[Gpu], bidders: Sequence[str],
                 times: dict[str, float], held: Mapping[str, Sequence[Gpu]] | None = None,
                 previous: Mapping[str, Sequence[str]] | None = None,
                 ) -> dict[str, BidTable]:
        """Open round ``rid`` over ``offer``, send the offers and wait for the bids.
        ``held``: each bidder's GPUs when the lease owner is outside the core (the node
        table then also lists their nodes); None: the core's lease table. ``previous``:
        per bidder, the offered GPU ids whose lease it held until now (its offer names
        them; its bids put them first among equally placed bundles)."""
        with self._cond:
            r = OpenRound(rid, tuple(g.id for g in offer), frozenset(bidders),
                          self.clock() + self.config.bid_timeout_s, gpus=tuple(offer),
                          previous=dict(previous or {}))
            topo = self.backend.topology()
            if held is not None:
                r.held = {a: tuple(held.get(a, ())) for a in bidders}
                extra = [g for gs in r.held.values() for g in gs]
                if extra:
                    topo = Topology([*topo.values(), *extra])
            r.nodes = node_index(topo)
            r.fill = fill_orders(offer, r.nodes)
            if r.previous:
                r.where = fill_positions(r.fill)
            self._open = r
            for a in bidders:
                self._send(a, self._offer_event(a, r))
            times["offer"] = self.clock()
            times["offered"] = len(bidders)
            while not self._stopped:
                left = r.deadline - self.clock()
                if left <= 0 or all(a in r.tables for a in r.bidders if self._live(a)):
                    break
                self._cond.wait(left)
            r.closed = True
            times["closed"] = self.clock()
            return dict(r.tables)

    def _close_round(self, rid: int) -> frozenset[str]:
        """Close the open round ``rid`` (caller holds the lock): the apps it offered GPUs."""
        r, self._open = self._open, None
        if r is None or r.round_id != rid:
            return frozenset()
        for app, table in r.tables.items():
            bids: dict[int, float] = {}
            for b in table.bids:
                bids.setdefault(hash(b.gpus), b.rho)  # b.gpus: sorted (table_from_pb)
            self._last_bids[app] = bids
        return r.bidders

    # ----------------------------------------------------------------- bids
    def _check_table_size(self, app_id: str, table: pb.BidTable) -> None:
        """Bounds of a bid table, checked on the message before any other work (and
        without the lock): bundles, GPUs per bundle, GPU ids in all."""
        n = len(table.bundles)
        if n > self.config.max_bundles:
            raise CallError(Code.RESOURCE_EXHAUSTED,
                            f"app {short(app_id)}: table.bundles: {n} bundles exceed the limit of "
                            f"{self.config.max_bundles}")
        cluster = len(self.backend.topology())
        total = 0
        for k, b in enumerate(table.bundles):
            if not len(b.nodes) == len(b.starts) == len(b.counts):
                raise CallError(Code.INVALID_ARGUMENT,
                                f"app {short(app_id)}: table.bundles[{k}]: nodes, starts and "
                                f"counts have {len(b.nodes)}, {len(b.starts)} and "
                                f"{len(b.counts)} entries (one per run)")
            size = sum(b.counts)
            if size > cluster or len(b.nodes) > cluster:
                raise CallError(Code.INVALID_ARGUMENT,
                                f"app {short(app_id)}: table.bundles[{k}].counts: {size} GPUs "
                                f"in {len(b.nodes)} runs, more than the cluster's {cluster}")
            total += size
        if total > self.config.max_table_gpu_ids:
            raise CallError(Code.RESOURCE_EXHAUSTED,
                            f"app {short(app_id)}: table.bundles: {total} GPUs in all exceed "
                            f"the limit of {self.config.max_table_gpu_ids}")

    def _open_round_for(self, app_id: str, round_id: int) -> OpenRound:
        """The open round ``round_id`` if ``app_id`` may bid in it now (caller holds the
        lock)."""
        r = self._open
        if r is None or round_id != r.round_id:
            current = r.round_id if r is not None else self._round_id
            raise CallError(Code.FAILED_PRECONDITION,
                            f"app {app_id!r}: round {round_id} is stale (current round "
                            f"{current}{'' if r is not None else ', closed'})")
        if r.closed or self.clock() > r.deadline:
            raise CallError(Code.FAILED_PRECONDITION,
                            f"app {app_id!r}: late bid for round {round_id}: "
                            "the bid deadline has passed")
        if app_id not in r.bidders:
            raise CallError(Code.FAILED_PRECONDITION,
                            f"app {app_id!r} was not offered GPUs in round {round_id}")
        return r

    def _resubmitted(self, app_id: str, round_id: int, r: OpenRound, raw: bytes) -> bool:
        """True for an identical re-submission; raises for a different second table."""
        if app_id not in r.tables:
            return False
        if r.raw[app_id] == raw:
            return True  # idempotent re-submission of the same table
        raise CallError(Code.FAILED_PRECONDITION,
                        f"app {app_id!r} already bid in round {round_id}")

    def submit_bid(self, app_id: str, secret: str, round_id: int, table: pb.BidTable) -> None:
        """Records the app's bid table for the open round; a refused bid raises
        :class:`CallError` and is counted by cause (:meth:`drain_rejected_bids`)."""
        try:
            self._submit_bid(app_id, secret, round_id, table)
        except CallError as exc:
            cause = REJECT_CAUSES.get(exc.code, "other")
            with self._cond:
                self._rejected[cause] = self._rejected.get(cause, 0) + 1
            raise

    def drain_rejected_bids(self) -> dict[str, int]:
        """Bids refused since the last call, by cause (a key of :data:`REJECT_CAUSES`'s
        values); the counts restart at zero."""
        with self._cond:
            out, self._rejected = self._rejected, {}
        return out

    def _submit_bid(self, app_id: str, secret: str, round_id: int, table: pb.BidTable) -> None:
        """Bounds, then credentials and round state under the lock, then the table's
        validation *outside* the lock (a large table does not hold up other apps' calls or
        the round), then credentials and round state again and the table is recorded."""
        self._check_table_size(app_id, table)
        raw = table.SerializeToString(deterministic=True)
        with self._cond:
            self._auth(app_id, secret)
            r = self._open_round_for(app_id, round_id)
            if self._resubmitted(app_id, round_id, r, raw):
                return
            offer_ids = list(r.offer_ids)
        try:
            bid = table_from_pb(app_id, table, r.fill)
        except BundleError as exc:
            raise CallError(Code.INVALID_ARGUMENT,
                            f"app {app_id!r}: table.bundles[{exc.args[1]}]: {exc.args[0]}"
                            ) from exc
        try:
            validate_tables(offer_ids, [bid])
        except InvalidBid as exc:
            where = ("table.rho_current" if exc.bid_index is None
                     else f"table.bundles[{exc.bid_index}]")
            raise CallError(Code.INVALID_ARGUMENT,
                            f"app {app_id!r}: {where}: {exc.problem}") from exc
        except InvalidOffer as exc:  # pragma: no cover - the arbiter's own offer
            raise CallError(Code.INVALID_ARGUMENT, str(exc)) from exc
        with self._cond:
            self._auth(app_id, secret)
            self._open_round_for(app_id, round_id)  # still open (round ids are unique)
            if self._resubmitted(app_id, round_id, r, raw):
                return
            r.tables[app_id] = bid
            r.raw[app_id] = raw
            self._cond.notify_all()
