"""The arbiter service's state machine, independent of gRPC (thread-safe).

Keeps the registered apps (id, secret, last rho, demand, event queue), the lease table and
the round loop: on a trigger (lease expiry, released GPUs, a new or reconnected app, an
app leaving) it runs the core's :func:`~themis.mechanism.round.run_round` over the free GPUs
of a :class:`~themis.arbiter.cluster_backend.ClusterBackend`, sending offers to the bidders
chosen by the fairness knob and collecting bids until the deadline. GPUs whose lease ran
out since the last round are passed as ``previous`` (renewed to a holder that does not
bid, docs/mechanism.md "Renewal"); GPUs given back (release, unregister) are offered in a
round ``round_delay_s`` later, not at the next lease expiry. Every ``round_interval_s`` the
loop also starts a round when GPUs are free while a connected app could use more
(work conservation, :meth:`ArbiterCore._idle_demand`).

Every public call validates everything before it changes anything: a call that raises
:class:`CallError` leaves the state exactly as it was.
"""

from __future__ import annotations

import hmac
import logging
import math
import queue
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.errors import CallError, Code
from themis.arbiter.leaselog import LeaseLog, LeaseLogError
from themis.mechanism.auction import validate_tables
from themis.mechanism.bids import BidTable
from themis.mechanism.errors import InvalidBid, InvalidOffer
from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    DEFAULT_STARVATION,
    Starvation,
    parse_ideal_time,
    parse_starvation,
)
from themis.mechanism.leases import LeaseTable
from themis.mechanism.model import ModelError
from themis.mechanism.round import (
    DEFAULT_FAIRNESS_KNOB,
    LeaseGrant,
    RoundOutcome,
    check_knob,
    run_round,
)
from themis.mechanism.solvers import DEFAULT_SOLVER, make_solver
from themis.mechanism.topology import Gpu
from themis.rpc.convert import gpus_to_pb, lease_to_pb, shape_to_pb, table_from_pb
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.safeinput import short

if TYPE_CHECKING:
    from themis.arbiter.registration import Registrar

log = logging.getLogger(__name__)

MAX_APP_ID = 128
MAX_APPS_HINT = 1024  # registered apps beyond which the registration history is pruned
MAX_SECRET = 256  # characters; a longer secret is wrong without being compared
DEFAULT_MAX_APPS = 4096  # ArbiterConfig.max_apps


@dataclass(frozen=True, slots=True)
class ArbiterConfig:
    lease_s: float = 600.0
    bid_timeout_s: float = 5.0
    warning_s: float = 60.0  # lease warning this long before expiry (at most lease_s / 2)
    fairness_knob: float = DEFAULT_FAIRNESS_KNOB
    heartbeat_s: float = 5.0
    round_delay_s: float = 0.02  # coalesce triggers (e.g. a burst of registrations)
    # work conservation (paper, sections 3 and 4): every round_interval_s the round loop
    # starts a round when GPUs are free and a connected app can take more (YARN's
    # round-interval-ms, docs/yarn.md "Round trigger and free GPUs")
    round_interval_s: float = 1.0
    solver: str = DEFAULT_SOLVER
    seed: int = 0
    # the form of T_id agents use in rho, announced at registration (docs/mechanism.md)
    ideal_time: str = str(DEFAULT_IDEAL_TIME)
    # how the (1-f) filter orders apps holding no GPU (docs/mechanism.md, "Starvation"),
    # announced at registration: "served-now" uses the keys agents report with rho = +inf
    starvation: str = str(DEFAULT_STARVATION)
    # bid table bounds (docs/protocol.md, "Limits"): an agent's menu for a 4,096-GPU offer
    # has ~550 bundles and ~1.05 million GPU ids in all (themis.mechanism.bids)
    max_bundles: int = 1024
    max_table_gpu_ids: int = 1 << 21
    # per-app limit on registrations (docs/yarn.md, "Security"): at most this many accepted
    # RegisterApp calls of one app id per registration_window_s (RESOURCE_EXHAUSTED beyond)
    max_registrations: int = 10
    registration_window_s: float = 60.0
    # registered apps at once (docs/protocol.md, "Limits"): a round's work and messages grow
    # with them, so RegisterApp beyond gets RESOURCE_EXHAUSTED; registered apps are unaffected
    max_apps: int = DEFAULT_MAX_APPS

    def __post_init__(self) -> None:
        check_knob(self.fairness_knob)
        try:
            object.__setattr__(self, "ideal_time", str(parse_ideal_time(self.ideal_time)))
        except ModelError as exc:
            raise ValueError(f"arbiter config: {exc}") from None
        try:
            object.__setattr__(self, "starvation", str(parse_starvation(self.starvation)))
        except ModelError as exc:
            raise ValueError(f"arbiter config: {exc}") from None
        for name in ("lease_s", "bid_timeout_s", "heartbeat_s", "registration_window_s",
                     "round_interval_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"arbiter config: {name}={v!r} must be a positive number")
        for name in ("warning_s", "round_delay_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"arbiter config: {name}={v!r} must be a number >= 0")
        for name in ("max_bundles", "max_table_gpu_ids", "max_registrations", "max_apps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"arbiter config: {name}={v!r} must be an integer >= 1")

    @property
    def effective_warning_s(self) -> float:
        return min(self.warning_s, self.lease_s / 2)


@dataclass(slots=True)
class AppRecord:
    app_id: str
    secret: str
    rho: float
    max_gpus: int
    stream: int = 0  # generation of the open event stream, 0 = none
    # starvation = served-now: the reported key (served-now rho, T_id seconds, clock() of
    # the report), or None
    key: tuple[float, float, float] | None = None
    events: queue.SimpleQueue[pb.Event | None] | None = None


@dataclass(slots=True)
class OpenRound:
    round_id: int
    offer_ids: tuple[str, ...]
    bidders: frozenset[str]
    deadline: float
    tables: dict[str, BidTable] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)  # for idempotent re-submission
    closed: bool = False
    offer: pb.Offer | None = None  # the part of the offer that every bidder gets


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


def _check_rho(rho: float, what: str) -> None:
    if math.isnan(rho) or rho <= 0:
        raise CallError(Code.INVALID_ARGUMENT, f"{what}: rho {rho!r} must be > 0 (or +inf)")


MAX_KEY = 1e18  # bound of a starving key's numbers (themis.safeinput.Limits.max_number)


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


class ArbiterCore:
    def __init__(
        self,
        backend: ClusterBackend,
        config: ArbiterConfig | None = None,
        clock: Callable[[], float] = time.time,
        lease_log: LeaseLog | None = None,
        registrar: Registrar | None = None,
    ) -> None:
        """``lease_log``: the persisted lease log (:mod:`themis.arbiter.leaselog`); the
        leases it holds that are alive now are restored here, before any call is served,
        and every later grant is written to it before its app is told.
        ``registrar``: who may register (themis.arbiter.registration); None accepts any
        caller (library use and tests; the YARN engine and standalone mode always set one)."""
        self.registrar = registrar
        self.backend = backend
        self.config = config or ArbiterConfig()
        self.clock = clock
        self.epoch = uuid.uuid4().hex
        self._solver = make_solver(self.config.solver)
        self._rng = random.Random(self.config.seed)
        self._cond = threading.Condition()
        self._apps: dict[str, AppRecord] = {}
        self._leases = LeaseTable()
        # GPU id -> app whose lease on it ran out since the last round: the next round
        # renews such a GPU to that app when it does not bid and nothing else claims it
        # (run_round's ``previous``, docs/mechanism.md "Renewal")
        self._expired: dict[str, str] = {}
        self._round_id = 0
        self._open: OpenRound | None = None
        self._trigger = False
        self._trigger_at = 0.0
        self._check_at = 0.0  # clock() of the next work-conservation check (_idle_demand)
        # what the last round left (free GPUs, connected apps' room), None after a failed
        # round: a check that finds the same state starts no round (it could change nothing)
        self._settled: tuple[frozenset[str], tuple[tuple[str, int], ...]] | None = None
        self._stopped = False
        self._streams = 0
        self._registered: dict[str, list[float]] = {}  # app -> clock() of recent registrations
        self._thread: threading.Thread | None = None
        self.stats: list[RoundStats] = []
        self.outcomes: list[RoundOutcome] = []
        self._rejected: dict[str, int] = {}  # bids refused since the last drain, by cause
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

    # ----------------------------------------------------------------- helpers
    def _auth(self, app_id: str, secret: str) -> AppRecord:
        if not app_id:
            raise CallError(Code.PERMISSION_DENIED, "missing credentials: app_id is empty")
        if len(app_id) > MAX_APP_ID:
            raise CallError(Code.NOT_FOUND, f"app {short(app_id)} is not registered (app ids "
                                            f"have at most {MAX_APP_ID} characters)")
        rec = self._apps.get(app_id)
        if rec is None:
            raise CallError(Code.NOT_FOUND, f"app {app_id!r} is not registered")
        if not secret:
            raise CallError(Code.PERMISSION_DENIED, f"app {app_id!r}: missing secret")
        if len(secret) > MAX_SECRET or not hmac.compare_digest(rec.secret.encode(),
                                                                secret.encode()):
            raise CallError(Code.PERMISSION_DENIED, f"app {app_id!r}: wrong secret")
        return rec

    def _kick(self, delay: float | None = None) -> None:
        """Ask for a round (caller holds the lock)."""
        at = self.clock() + (self.config.round_delay_s if delay is None else delay)
        self._trigger_at = max(self._trigger_at, at) if self._trigger else at
        self._trigger = True
        self._cond.notify_all()

    def _send(self, app_id: str, event: pb.Event) -> None:
        rec = self._apps.get(app_id)
        if rec is not None and rec.events is not None:
            rec.events.put(event)

    def _held_ids(self, app_id: str) -> list[str]:
        return sorted(lease.gpu_id for lease in self._leases.held_by(app_id))

    def _leases_pb(self, app_id: str) -> list[pb.Lease]:
        groups: dict[tuple[float, float, str], list[str]] = {}
        for lease in self._leases.held_by(app_id):
            groups.setdefault((lease.start, lease.expiry, lease.via), []).append(lease.gpu_id)
        return [
            lease_to_pb(LeaseGrant(app_id, tuple(sorted(g)), s, e, v))
            for (s, e, v), g in sorted(groups.items())
        ]

    # ----------------------------------------------------------------- calls
    def register(self, app_id: str, rho: float, max_gpus: int,
                 token: str = "") -> pb.RegisterAppResponse:
        """Register ``app_id``; ``token`` proves the caller is its application master when the
        core has a :attr:`registrar`."""
        if not app_id or len(app_id) > MAX_APP_ID or not app_id.isprintable():
            raise CallError(Code.INVALID_ARGUMENT,
                            f"app_id {short(app_id)} must be 1-{MAX_APP_ID} printable "
                            "characters")
        _check_rho(rho, f"app {app_id!r}")
        if max_gpus < 1:
            raise CallError(Code.INVALID_ARGUMENT,
                            f"app {app_id!r}: max_gpus={max_gpus} must be >= 1")
        if self.registrar is not None:  # not under the lock: may ask the RM
            self.registrar.check(app_id, token)
        with self._cond:
            if app_id in self._apps:
                raise CallError(Code.ALREADY_EXISTS, f"app {app_id!r} is already registered")
            if len(self._apps) >= self.config.max_apps:
                raise CallError(Code.RESOURCE_EXHAUSTED,
                                f"app {app_id!r}: the arbiter has {len(self._apps)} registered "
                                f"apps (at most {self.config.max_apps}, max_apps); try again "
                                "when an app ends")
            now = self.clock()
            window = self.config.registration_window_s
            recent = [t for t in self._registered.get(app_id, []) if t > now - window]
            if len(recent) >= self.config.max_registrations:
                raise CallError(Code.RESOURCE_EXHAUSTED,
                                f"app {app_id!r}: {len(recent)} registrations in the last "
                                f"{window:g} s (at most {self.config.max_registrations}); "
                                "try again later")
            self._registered[app_id] = [*recent, now]
            if len(self._registered) > 4 * MAX_APPS_HINT:  # forget apps registered long ago
                self._registered = {a: t for a, t in self._registered.items()
                                    if t[-1] > now - window}
            secret = secrets.token_urlsafe(24)
            self._apps[app_id] = AppRecord(app_id, secret, rho, max_gpus)
            self._kick()
            return pb.RegisterAppResponse(
                secret=secret,
                arbiter_epoch=self.epoch,
                lease_seconds=self.config.lease_s,
                bid_timeout_seconds=self.config.bid_timeout_s,
                cluster_gpus=self.backend.cluster_gpus(),
                ideal_time=self.config.ideal_time,
                starvation=self.config.starvation,
                cluster_shape=shape_to_pb(self.backend.shape()),
            )

    def report_rho(self, app_id: str, secret: str, rho: float,
                   key: pb.StarvingKey | None = None) -> None:
        """The app's rho and, with rho = +inf, optionally its ``served-now`` filter key
        (kept only when the arbiter's starvation is served-now); a report without a key
        clears the previous one."""
        with self._cond:
            rec = self._auth(app_id, secret)
            _check_rho(rho, f"app {app_id!r}")
            value = None if key is None else _check_key(rho, key, f"app {app_id!r}")
            rec.rho = rho
            rec.key = None if value is None else (*value, self.clock())

    def _served_now(self) -> bool:
        return self.config.starvation == str(Starvation.SERVED_NOW)

    def _priority(self, app_ids: Sequence[str], now: float) -> dict[str, float] | None:
        """The filter's secondary key for ``run_round`` (caller holds the lock): None unless
        starvation = served-now; else each starving app's reported key aged to ``now``
        (served-now rho grows by 1 / T_id per second waited, Eq. 1), apps without a key
        left out (they rank after those with one)."""
        if not self._served_now():
            return None
        out: dict[str, float] = {}
        for a in app_ids:
            rec = self._apps.get(a)
            if rec is None or rec.key is None or not math.isinf(rec.rho):
                continue
            value, ideal_s, at = rec.key
            out[a] = value + max(0.0, now - at) / ideal_s
        return out

    def open_stream(
        self, app_id: str, secret: str,
        events: queue.SimpleQueue[pb.Event | None] | None = None,
    ) -> tuple[int, queue.SimpleQueue[pb.Event | None]]:
        """Open the app's event stream (closing a previous one: one stream per app); the
        first event is Hello. ``events``: the queue to use (the gRPC layer's, which wakes its
        event loop), else a new one."""
        with self._cond:
            rec = self._auth(app_id, secret)
            if self._stopped:
                raise CallError(Code.FAILED_PRECONDITION, "arbiter is shutting down")
            if rec.events is not None:
                rec.events.put(None)
            self._streams += 1
            rec.stream = self._streams
            rec.events = events if events is not None else queue.SimpleQueue()
            rec.events.put(pb.Event(hello=pb.Hello(
                arbiter_epoch=self.epoch, leases=self._leases_pb(app_id))))
            if self._open is not None and app_id in self._open.bidders and not self._open.closed \
                    and app_id not in self._open.tables:
                # Reconnected during a round it was offered: re-send the same offer.
                rec.events.put(self._offer_event(app_id, self._open))
            self._kick()
            return rec.stream, rec.events

    def close_stream(self, app_id: str, generation: int) -> None:
        with self._cond:
            rec = self._apps.get(app_id)
            if rec is not None and rec.stream == generation:
                rec.stream = 0
                rec.events = None
                self._cond.notify_all()  # a round waiting for this app's bid stops waiting

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
            size = len(b.gpu_ids)
            if size > cluster:
                raise CallError(Code.INVALID_ARGUMENT,
                                f"app {short(app_id)}: table.bundles[{k}].gpu_ids: {size} GPUs, "
                                f"more than the cluster's {cluster}")
            total += size
        if total > self.config.max_table_gpu_ids:
            raise CallError(Code.RESOURCE_EXHAUSTED,
                            f"app {short(app_id)}: table.bundles: {total} GPU ids in all exceed "
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
        bid = table_from_pb(app_id, table)
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

    def unregister(self, app_id: str, secret: str) -> None:
        with self._cond:
            self._auth(app_id, secret)
            self._drop(app_id)

    def expel(self, app_id: str) -> bool:
        """End ``app_id``'s registration without its secret (its YARN application or AM
        attempt ended; docs/yarn.md, "Security"): as :meth:`unregister`. False if it was not
        registered."""
        with self._cond:
            if app_id not in self._apps:
                return False
            self._drop(app_id)
        log.info("%s: registration ended (the application or its AM attempt ended)", app_id)
        return True

    def _drop(self, app_id: str) -> None:
        """Forget a registered app: its leases end, its stream closes (caller holds the lock)."""
        rec = self._apps[app_id]
        held = self._held_ids(app_id)
        self._leases.remove(held)
        self.backend.revoke(app_id, held)
        self._log_release(held)
        if rec.events is not None:
            rec.events.put(None)
        del self._apps[app_id]
        if self._open is not None:
            self._open.tables.pop(app_id, None)
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

    # ----------------------------------------------------------------- introspection
    def snapshot(self) -> dict[str, Any]:
        """Everything a call may change (for tests: rejected calls leave it unchanged)."""
        with self._cond:
            r = self._open
            return {
                "apps": {a: (x.secret, x.rho, x.max_gpus, x.stream, x.key)
                         for a, x in sorted(self._apps.items())},
                "leases": self._leases.snapshot(),
                "owners": self.backend.owners(),
                "round_id": self._round_id,
                "open": None if r is None else (r.round_id, r.closed, sorted(r.bidders),
                                                 dict(sorted(r.raw.items()))),
                "trigger": (self._trigger, self._trigger_at),
                "registrations": {a: list(t) for a, t in sorted(self._registered.items())},
            }

    def wait_rounds(self, n: int, timeout: float) -> bool:
        """Block until at least ``n`` rounds have completed (tests, benchmarks)."""
        end = time.monotonic() + timeout
        with self._cond:
            while len(self.stats) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

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

    def _connected(self) -> list[str]:
        return sorted(a for a, rec in self._apps.items() if rec.events is not None)

    def _live(self, app_id: str) -> bool:
        rec = self._apps.get(app_id)
        return rec is not None and rec.events is not None

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

    def _offer_event(self, app_id: str, r: OpenRound) -> pb.Event:
        """The app's offer: the round's common part, built once per round (100 bidders x
        256 GPUs cost 26 ms built one by one), plus the GPUs the app holds."""
        topo = self.backend.topology()
        if r.offer is None:
            r.offer = pb.Offer(
                round_id=r.round_id,
                gpus=gpus_to_pb(topo[g] for g in r.offer_ids),
                deadline_unix=r.deadline,
                cluster_gpus=self.backend.cluster_gpus(),
                active_apps=len(self._apps),
                arbiter_epoch=self.epoch,
                cluster_shape=shape_to_pb(self.backend.shape()),
            )
        event = pb.Event()
        event.offer.CopyFrom(r.offer)
        event.offer.held.extend(gpus_to_pb(topo[g] for g in self._held_ids(app_id)))
        return event

    def _collect(self, rid: int, offer: Sequence[Gpu], bidders: Sequence[str],
                 times: dict[str, float]) -> dict[str, BidTable]:
        """Open round ``rid`` over ``offer``, send the offers and wait for the bids."""
        with self._cond:
            r = OpenRound(rid, tuple(g.id for g in offer), frozenset(bidders),
                          self.clock() + self.config.bid_timeout_s)
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
        return r.bidders if r is not None and r.round_id == rid else frozenset()

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
            self._send(a, pb.Event(allocation=pb.Allocation(
                round_id=rid,
                leases=[lease_to_pb(g) for g in mine],
                gpus=gpus_to_pb(topo[x] for g in mine for x in g.gpus if x in topo),
                was_bidder=a in outcome.bidders,
                kept_fraction=auction.kept_fraction.get(a, 1.0) if auction else 1.0,
            )))

    # ----------------------------------------------------------------- external rounds
    # When someone else owns the leases and the round timing (the YARN ResourceManager),
    # the core serves only registration, rho, offers/bids and allocation notices: the
    # owner calls these two methods around its own run_round (the round loop is not started).
    def rho_of(self, app_ids: Sequence[str], default: float) -> dict[str, float]:
        """Last reported rho of each app; ``default`` for apps that never registered."""
        with self._cond:
            return {a: self._apps[a].rho if a in self._apps else default for a in app_ids}

    def priority_of(self, app_ids: Sequence[str]) -> dict[str, float] | None:
        """The filter's secondary key of ``app_ids`` now (see :meth:`_priority`): None
        unless the arbiter's starvation is served-now."""
        with self._cond:
            return self._priority(app_ids, self.clock())

    def collect_external(self, offer: Sequence[Gpu], bidders: Sequence[str]
                         ) -> tuple[int, dict[str, BidTable]]:
        """Offer ``offer`` to the registered, connected ``bidders``; (round id, bid tables)."""
        with self._cond:
            self._round_id += 1
            rid = self._round_id
            live = [a for a in bidders if self._live(a)]
        return rid, self._collect(rid, offer, live, {})

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
            room = {a: max(0, self._apps[a].max_gpus - len(self._leases.held_by(a)))
                    for a in apps}
            previous = {g.id: expired[g.id] for g in free if g.id in expired}
            now = self.clock()

        def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
            return self._collect(rid, free, bidders, times)

        outcome = run_round(free, rho, collect, fairness_knob=cfg.fairness_knob,
                            lease_s=cfg.lease_s, now=now, solver=self._solver,
                            rng=self._rng, room=room, previous=previous, priority=priority)
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
