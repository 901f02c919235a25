"""The arbiter's round loop: when rounds run, what they grant, and the leases they leave.

A round is asked for (:meth:`RoundLoop._kick`) on a trigger: a lease expiry, released GPUs,
a new or reconnected app, an app leaving; triggers within ``round_delay_s`` are coalesced,
and GPUs given back (release, unregister) are offered in a round ``round_delay_s`` later,
not at the next lease expiry (paper section 4.2.2). A round runs the core's
:func:`~themis.mechanism.round.run_round` (section 3.3.2, Pseudocode 1 lines 13-23) over
the free GPUs of the :class:`~themis.arbiter.cluster_backend.ClusterBackend`: the bidders
chosen by the fairness knob get offers and their bids are collected until the deadline (the
bid intake, :mod:`themis.arbiter.intake`). GPUs whose lease ran out since the last round
are passed as ``previous`` (renewed to a holder that does not bid, docs/mechanism.md
"Renewal"), and each holder's offer names them, so that its bids put them first among
equally placed bundles. Every ``round_interval_s`` the loop also starts a round when GPUs
are free while a connected app could use more (work conservation, sections 3 and 4;
:meth:`RoundLoop._idle_demand`).

A round's grants are leases of ``lease_s`` (section 3.3.2): written to the lease log
(:mod:`themis.arbiter.leaselog`) before any app is told, applied to the back-end, announced
to the apps concerned; warned of ``warning_s`` before their expiry, revoked at it; given
back early by ``ReleaseGpus``. When someone else owns the leases and the round timing (the
YARN ResourceManager), the loop is not started and the owner runs its rounds through
:meth:`RoundLoop.collect_external` and :meth:`RoundLoop.announce_external`.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from themis.arbiter.errors import CallError, Code
from themis.arbiter.intake import BidIntake
from themis.arbiter.leaselog import LeaseLog, LeaseLogError
from themis.mechanism.bids import BidTable
from themis.mechanism.fairness import parse_starvation
from themis.mechanism.round import LeaseGrant, RoundOutcome, run_round
from themis.mechanism.solvers import make_solver
from themis.mechanism.topology import Gpu
from themis.rpc.convert import gpus_to_pb, lease_to_pb
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.safeinput import short

# log lines of every part of the core carry one name, the core's
log = logging.getLogger("themis.arbiter.state")


@dataclass(frozen=True, slots=True)
class RoundStats:
    round_id: int
    apps: int
    bidders: int
    bids: int
    gpus: int
    offer_sent: float  # clock() when the offers were queued
    bids_closed: float  # all bids in, or the deadline
    allocation_sent: float  # clock() when the allocations were queued
    solve_ms: float


class RoundLoop(BidIntake):
    """The round-loop part of :class:`~themis.arbiter.state.ArbiterCore` (module doc), built
    on the bid intake that collects its rounds' bids."""

    def _init_loop(self, lease_log: LeaseLog | None) -> None:
        self._solver = make_solver(self.config.solver)
        self._rng = random.Random(self.config.seed)
        # GPU id -> app whose lease on it ran out since the last round: the next round
        # renews such a GPU to that app when it does not bid and nothing else claims it
        # (run_round's ``previous``, docs/mechanism.md "Renewal")
        self._expired: dict[str, str] = {}
        self._trigger = False
        self._trigger_at = 0.0
        self._check_at = 0.0  # clock() of the next work-conservation check (_idle_demand)
        # what the last round left (free GPUs, connected apps' room), None after a failed
        # round: a check that finds the same state starts no round (it could change nothing)
        self._settled: tuple[frozenset[str], tuple[tuple[str, int], ...]] | None = None
        self._thread: threading.Thread | None = None
        self.stats: list[RoundStats] = []
        self.outcomes: list[RoundOutcome] = []
        self.on_round: Callable[[RoundOutcome], None] | None = None
        self._log = lease_log
        self.restored: list[LeaseGrant] = []  # leases of a previous arbiter, from the log
        if lease_log is not None:
            self._restore(lease_log)

    def _restore(self, lease_log: LeaseLog) -> None:
        """Take over the live leases of the log: their GPUs are owned and leased (to app
        ids that may not be registered yet) until they expire or are given back."""
        grants = lease_log.open(self.clock(), self.backend.topology())
        owned = self.backend.owners()
        grants = [g for g in grants if not any(x in owned for x in g.gpus)]
        self.backend.apply(grants)
        for g in grants:
            self._leases.add(g)
        self.restored = grants
        if grants:
            log.info("lease log %s: honouring %d leases on %d GPUs of a previous arbiter",
                     lease_log.path, len(grants), sum(len(g.gpus) for g in grants))

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="arbiter-rounds", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            for rec in self._apps.values():
                if rec.events is not None:
                    rec.events.put(None)
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._log is not None:
            with self._cond:
                self._log.close()

    def _kick(self, delay: float | None = None) -> None:
        """Ask for a round (caller holds the lock)."""
        at = self.clock() + (self.config.round_delay_s if delay is None else delay)
        self._trigger_at = max(self._trigger_at, at) if self._trigger else at
        self._trigger = True
        self._cond.notify_all()

    # ----------------------------------------------------------------- leases
    def release(self, app_id: str, secret: str, gpu_ids: Sequence[str]) -> None:
        with self._cond:
            self._auth(app_id, secret)
            if not gpu_ids:
                raise CallError(Code.INVALID_ARGUMENT, f"app {app_id!r}: no GPU to release")
            topo = self.backend.topology()
            if len(gpu_ids) > len(topo):
                raise CallError(Code.INVALID_ARGUMENT,
                                f"app {app_id!r}: gpu_ids: {len(gpu_ids)} GPUs, more than the "
                                f"cluster's {len(topo)}")
            if len(set(gpu_ids)) != len(gpu_ids):
                raise CallError(Code.INVALID_ARGUMENT, f"app {app_id!r}: duplicate GPU ids")
            for g in gpu_ids:
                if g not in topo:
                    raise CallError(Code.INVALID_ARGUMENT,
                                    f"app {app_id!r}: unknown GPU {short(g)}")
                if self._leases.holder(g) != app_id:
                    raise CallError(Code.FAILED_PRECONDITION,
                                    f"app {app_id!r} does not hold a lease on GPU {g!r}")
            self._leases.remove(gpu_ids)
            self.backend.revoke(app_id, gpu_ids)
            self._log_release(gpu_ids)
            self._kick()

    def _log_release(self, gpu_ids: Sequence[str]) -> None:
        """Record released leases (caller holds the lock); a failure only makes a
        restarted arbiter honour them until their expiry."""
        if self._log is not None and gpu_ids:
            try:
                self._log.release(gpu_ids)
            except LeaseLogError as exc:
                log.warning("%s; a restarted arbiter honours these leases until expiry", exc)

    def _log_grants(self, grants: list[LeaseGrant]) -> list[LeaseGrant]:
        """Write a round's grants ahead of telling anyone (caller holds the lock); on a
        failure the grants are withdrawn (their GPUs stay free) and a round is retried a
        heartbeat later."""
        if self._log is None or not grants:
            return grants
        try:
            self._log.grants(grants)
        except LeaseLogError as exc:
            log.error("%s; the round's %d grants are withdrawn", exc, len(grants))
            self._kick(self.config.heartbeat_s)
            return []
        if self._log.needs_compaction:
            live: dict[tuple[str, float, float, str], list[str]] = {}
            for gid, (a, s, e, v, _) in self._leases.snapshot().items():
                live.setdefault((a, s, e, v), []).append(gid)
            try:
                self._log.compact([*(LeaseGrant(a, tuple(g), s, e, v)
                                     for (a, s, e, v), g in sorted(live.items())), *grants])
            except LeaseLogError as exc:
                log.warning("%s; compaction skipped, appending to the old log", exc)
        return grants

    # ----------------------------------------------------------------- round loop
    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = self.clock()
                self._expire_and_warn(now)
                if now >= self._check_at:
                    self._check_at = now + self.config.round_interval_s
                    if not self._trigger and self._idle_demand():
                        self._kick(0.0)
                ready = self._trigger and now >= self._trigger_at
                if ready and not self._connected():
                    self._trigger = False  # nobody to give GPUs to; next arrival kicks
                    ready = False
                if not ready:
                    self._cond.wait(self._sleep_for(now))
                    continue
                self._trigger = False
            try:
                self._round()
            except Exception:  # keep the arbiter alive; the round is lost, GPUs stay free
                log.exception("round failed")  # (until the next check, _idle_demand)
                with self._cond:
                    self._settled = None
                    if self._open is not None:
                        self._open.closed = True
                        self._open = None

    def _demand(self) -> tuple[frozenset[str], tuple[tuple[str, int], ...]]:
        """Free GPU ids and each connected app's room (GPUs it can still take: ``max_gpus``
        minus those it holds), caller holds the lock."""
        free = frozenset(g.id for g in self.backend.free_gpus())
        held = self._leases.held_counts()
        room = tuple((a, max(0, self._apps[a].max_gpus - held[a])) for a in self._connected())
        return free, room

    def _idle_demand(self) -> bool:
        """Work conservation (paper, sections 3 and 4; YARN: the round driver's
        ``round-interval-ms`` pass): True when GPUs are free while a connected app could take
        some, and the state is not the one the last round left (caller holds the lock).
        Rounds start on events (leases ending, GPUs given back, apps arriving); this check,
        once per ``round_interval_s``, covers free GPUs no event announced (a round that
        failed, GPUs the back-end freed by itself)."""
        free, room = self._demand()
        if not free or not any(r > 0 for _, r in room):
            return False
        return (free, room) != self._settled

    def _sleep_for(self, now: float) -> float:
        times = [now + self.config.heartbeat_s]
        nxt = self._leases.next_event(self.config.effective_warning_s)
        if nxt is not None:
            times.append(nxt)
        if self._trigger:
            times.append(self._trigger_at)
        else:
            times.append(self._check_at)
        return max(0.001, min(times) - now)

    def _expire_and_warn(self, now: float) -> None:
        expired = self._leases.expired(now)
        if expired:
            self._leases.remove(x.gpu_id for x in expired)
            by_app: dict[str, list[str]] = {}
            for x in expired:
                by_app.setdefault(x.app_id, []).append(x.gpu_id)
                self._expired[x.gpu_id] = x.app_id
            for app, gids in by_app.items():
                self.backend.revoke(app, gids)
            self._kick(0.0)
        due = self._leases.due_warnings(now, self.config.effective_warning_s)
        groups: dict[tuple[str, float], list[str]] = {}
        for x in due:
            x.warned = True
            groups.setdefault((x.app_id, x.expiry), []).append(x.gpu_id)
        for (app, expiry), gids in sorted(groups.items()):
            self._send(app, pb.Event(lease_warning=pb.LeaseWarning(
                gpu_ids=sorted(gids), expiry_unix=expiry)))

    def _announce(self, rid: int, grants: Sequence[LeaseGrant], outcome: RoundOutcome,
                  offered: frozenset[str]) -> None:
        """Send its allocation to every registered app that was offered GPUs (whether it bid
        or not) or is granted some (leftover); the other apps of the round are not told -
        nothing changed for them - which keeps a round's messages, and the rho reports that
        answer them, to the bidders and leftover takers instead of every app (caller holds
        the lock)."""
        auction = outcome.auction
        topo = self.backend.topology()
        by_app: dict[str, list[LeaseGrant]] = {}
        for g in grants:
            by_app.setdefault(g.app_id, []).append(g)
        for a in sorted((offered | by_app.keys()) & self._apps.keys()):
            mine = by_app.get(a, [])
            if mine:
                self._apps[a].served = True
            self._send(a, pb.Event(allocation=pb.Allocation(
                round_id=rid,
                leases=[lease_to_pb(g) for g in mine],
                gpus=gpus_to_pb(topo[x] for g in mine for x in g.gpus if x in topo),
                was_bidder=a in outcome.bidders,
                kept_fraction=auction.kept_fraction.get(a, 1.0) if auction else 1.0,
                bundle_rho=self._bundle_rho(a, [x for g in mine for x in g.gpus]),
            )))

    # ----------------------------------------------------------------- external rounds
    # When someone else owns the leases and the round timing (the YARN ResourceManager),
    # the core serves only registration, rho, offers/bids and allocation notices: the
    # owner calls these two methods around its own run_round (the round loop is not started).
    def rho_of(self, app_ids: Sequence[str], default: float) -> dict[str, float]:
        """Last reported rho of each app; ``default`` for apps that never registered."""
        with self._cond:
            return {a: self._apps[a].rho if a in self._apps else default for a in app_ids}

    def unreachable(self, app_ids: Sequence[str]) -> frozenset[str]:
        """The apps of ``app_ids`` that registered and whose event stream is down now (an
        AM cut off from this host, or between two streams): they would hear of no grant
        until their stream is back, so the owner's round leaves them out. Apps that never
        registered (no agent) are not among them."""
        with self._cond:
            return frozenset(a for a in app_ids if a in self._apps and not self._live(a))

    def merged_keys(self, app_ids: Sequence[str]) -> frozenset[str]:
        """The apps of ``app_ids`` whose starving key the filter ranks among the others'
        rho (``run_round``'s ``merge``): under starvation = ranked, the registered apps
        that have been granted GPUs before; none otherwise."""
        with self._cond:
            return self._merged(app_ids)

    def _merged(self, app_ids: Sequence[str]) -> frozenset[str]:
        if not parse_starvation(self.config.starvation).merges:
            return frozenset()
        return frozenset(a for a in app_ids if a in self._apps and self._apps[a].served)

    def priority_of(self, app_ids: Sequence[str]) -> dict[str, float] | None:
        """The filter's secondary key of ``app_ids`` now (see :meth:`_priority`): None
        unless the arbiter's starvation is served-now or ranked."""
        with self._cond:
            return self._priority(app_ids, self.clock())

    def collect_external(self, offer: Sequence[Gpu], bidders: Sequence[str],
                         held: Mapping[str, Sequence[Gpu]] | None = None,
                         previous: Mapping[str, Sequence[str]] | None = None,
                         ) -> tuple[int, dict[str, BidTable]]:
        """Offer ``offer`` to the registered, connected ``bidders``; (round id, bid tables).
        ``held``: the GPUs each bidder holds, from the lease owner (None: the core's own
        lease table), sent with its offer for the rho of its current allocation;
        ``previous``: per bidder, the offered GPU ids whose lease it held until now."""
        with self._cond:
            self._round_id += 1
            rid = self._round_id
            live = [a for a in bidders if self._live(a)]
        return rid, self._collect(rid, offer, live, {}, held, previous)

    def announce_external(self, rid: int, outcome: RoundOutcome) -> None:
        """Tell the registered apps of round ``rid`` what they were granted (see _announce)."""
        with self._cond:
            offered = self._close_round(rid)
            grants = [g for g in outcome.grants if g.app_id in self._apps]
            self._announce(rid, grants, outcome, offered)
            self.outcomes.append(outcome)
            self._cond.notify_all()

    def _round(self) -> None:
        cfg = self.config
        times: dict[str, float] = {}
        with self._cond:
            free = self.backend.free_gpus()
            apps = self._connected()
            expired, self._expired = self._expired, {}
            if not free or not apps:
                return
            self._round_id += 1
            rid = self._round_id
            rho = {a: self._apps[a].rho for a in apps}
            priority = self._priority(apps, self.clock())
            merged = self._merged(apps)
            room = {a: max(0, self._apps[a].max_gpus - len(self._leases.held_by(a)))
                    for a in apps}
            previous = {g.id: expired[g.id] for g in free if g.id in expired}
            now = self.clock()

        lost: dict[str, list[str]] = {}  # per holder, the GPUs of its expired leases
        for gid, holder in previous.items():
            lost.setdefault(holder, []).append(gid)

        def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
            return self._collect(rid, free, bidders, times, previous=lost)

        outcome = run_round(free, rho, collect, fairness_knob=cfg.fairness_knob,
                            lease_s=cfg.lease_s, now=now, solver=self._solver,
                            rng=self._rng, room=room, previous=previous, priority=priority,
                            merge=merged, spread_s=cfg.spread_s)
        with self._cond:
            offered = self._close_round(rid)
            # Apps that left during the round get nothing; their GPUs stay free.
            grants = [g for g in outcome.grants if g.app_id in self._apps]
            if len(grants) != len(outcome.grants):
                self._kick()
            grants = self._log_grants(grants)
            self.backend.apply(grants)
            for g in grants:
                self._leases.add(g)
            self._announce(rid, grants, outcome, offered)
            auction = outcome.auction
            done = self.clock()
            self.stats.append(RoundStats(
                round_id=rid, apps=len(apps), bidders=int(times.get("offered", 0)),
                bids=len(outcome.bidders), gpus=len(free),
                offer_sent=times.get("offer", now), bids_closed=times.get("closed", now),
                allocation_sent=done, solve_ms=auction.solve_ms if auction else 0.0))
            self.outcomes.append(outcome)
            if outcome.unallocated:
                log.debug("round %d: %d GPUs unallocated", rid, len(outcome.unallocated))
            self._settled = self._demand()
            self._cond.notify_all()
        if self.on_round is not None:
            self.on_round(outcome)
