"""Discrete-event simulator (paper section 6.1, "event-based simulator").

Events live in a heap ordered by (time, sequence): app arrivals, lease expiries (one event
per lease cohort - the GPUs granted in one round share an expiry; expiries at the same
instant are processed together), job completions (an event only makes its instant happen:
what completed is found by advancing the apps, so there is one event per time). After the
events of an instant are applied, finished phases advance (successive-halving early stops),
finished apps release their GPUs, apps release GPUs no running job can use, and - if GPUs
were released or an app arrived or started a phase that can use more GPUs than it holds,
and GPUs are free - the policy runs one round; grants become leases expiring ``lease_s``
later (section 3.3.2).

Between events every job progresses at n / (serial_iter_time * S(locality)) iterations/s
(Eq. 1), except during the checkpoint/restart pause that follows any change of its GPU
set (section 6.2.3). Work is never lost: jobs checkpoint when their GPUs are taken away.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from themis.compiled import fell_back
from themis.mechanism.contention import ContentionTracker
from themis.mechanism.fairness import DEFAULT_IDEAL_TIME, IdealTime
from themis.mechanism.placement import PlacementProfile
from themis.mechanism.round import RoundError, check_spread, lease_lengths, lease_spread
from themis.mechanism.topology import Gpu, Topology
from themis.sim.errors import InvariantError, SimError
from themis.sim.isolated import isolated_finish_times
from themis.sim.policies.base import Policy, RoundContext, check_allocation
from themis.sim.state import (
    AppState,
    app_ideal_time,
    best_slowdowns,
    check_owners,
    floor_time,
)
from themis.sim.workload import AppSpec, Workload

try:  # pragma: no cover - depends on the build
    from themis.sim import _progress
except ImportError:  # pragma: no cover
    _progress = None  # type: ignore[assignment]

ARRIVE, EXPIRE, COMPLETE = 0, 1, 2
# The run allocates millions of short-lived, acyclic objects (models, bid tables, LP
# arrays): with CPython's default young-generation threshold (700 allocations) the cyclic
# collector scans them every few hundred allocations (measured: a few percent of a
# simulation). Raised during a run, restored after; cycles are still collected.
GC_YOUNG_THRESHOLD = 50_000


_NO_GPUS: frozenset[str] = frozenset()  # an app with no lease stopped at this instant


@dataclass(frozen=True, slots=True)
class SimConfig:
    lease_s: float = 600.0  # 10-minute leases (section 6.2)
    restart_s: float = 35.0  # container reallocation median (section 6.2.3)
    seed: int = 0
    check_invariants: bool = True
    max_time: float = math.inf  # stop (error) if the simulated clock passes this
    # Lease expiries are rounded up to a multiple of this, so that leases granted close
    # together expire (and are re-offered) in one round instead of one round each.
    expiry_quantum_s: float = 120.0
    # the leases of one round last lease_s +- lease_spread_s / 2, evenly spread over the
    # round's apps (themis.mechanism.round.lease_lengths); None: half of lease_s, as the
    # RM's and standalone mode's default; 0: all exactly lease_s (the paper's)
    lease_spread_s: float | None = None
    # T_id of rho, in the agents' bids and in the reported metric (themis.mechanism.fairness)
    ideal_time: IdealTime = DEFAULT_IDEAL_TIME
    # True: a job on a GPU whose lease ended pauses for restart_s even when its app won
    # the GPU back in the same round, as on YARN without renewal in place (renew-ahead-ms
    # = 0; docs/yarn.md, "Renewal in place"); False: a renewal to the holder costs nothing
    renewal_restarts: bool = False

    @property
    def spread_s(self) -> float:
        return lease_spread(self.lease_s, self.lease_spread_s)


@dataclass(slots=True)
class AppResult:
    """One finished app. Ideal times (seconds) of both forms of themis.mechanism.fairness
    with the app's N_avg at completion, and with N_avg = 1 (the app alone); ``t_floor``
    its completion time with the whole cluster to itself from its arrival
    (:func:`themis.sim.state.floor_time`); ``t_iso`` its completion time in Gavel's
    isolated 1/N share (:mod:`themis.sim.isolated`)."""

    id: str
    arrival: float
    finish: float
    t_id: float  # T_id in the run's form (SimConfig.ideal_time)
    n_avg: float
    gpu_time: float
    placement_score: float
    restarts: int
    kind: str
    placement: str
    t_id_paper: float = math.nan
    t_id_exact: float = math.nan
    t_alone_paper: float = math.nan  # T_id with N_avg = 1
    t_alone_exact: float = math.nan
    t_floor: float = math.nan
    t_iso: float = math.nan

    @property
    def jct(self) -> float:
        return self.finish - self.arrival

    @property
    def rho(self) -> float:
        return self.jct / self.t_id

    @property
    def rho_paper(self) -> float:
        return self.jct / self.t_id_paper

    @property
    def rho_exact(self) -> float:
        return self.jct / self.t_id_exact

    @property
    def rho_gavel(self) -> float:
        """Gavel's finish-time fairness: JCT / JCT in an isolated 1/N share."""
        return self.jct / self.t_iso

    # rho_floor: the app's rho with the whole cluster to itself from its arrival (N_avg 1)
    @property
    def rho_floor_paper(self) -> float:
        return self.t_floor / self.t_alone_paper

    @property
    def rho_floor_exact(self) -> float:
        return self.t_floor / self.t_alone_exact

    @property
    def rho_floor_gavel(self) -> float:
        return self.t_floor / self.t_alone_exact  # alone, the isolated share is the cluster


@dataclass(slots=True)
class SimResult:
    policy: str
    apps: list[AppResult]
    rounds: int
    round_ms: list[float]
    wall_s: float
    makespan: float
    extra: dict[str, float] = field(default_factory=dict)
    # GPU-seconds that GPUs were free while apps could have used them (their room):
    # what the policy and the lease timing left idle (work conservation, section 3)
    idle_wanted_s: float = 0.0


def advance_apps(apps: Iterable[AppState], now: float) -> int:
    """Every app's progress to ``now`` (an app holding nothing only has its clock moved),
    in order; returns the GPUs the apps could still use before they moved (the sum of
    their :meth:`AppState.room`). The reference of the compiled ``_progress.advance``."""
    wanted = 0
    for a in apps:
        room = a.open_demand - len(a.held)  # a.room(), inlined
        if room > 0:
            wanted += room
        if a.busy or a.held:
            a.progress(now)
        else:  # holds nothing: progress(now) would only move its clock
            a.last_progress = now
    return wanted


class Simulator:
    def __init__(
        self,
        topology: Topology,
        workload: Workload,
        policy: Policy,
        config: SimConfig | None = None,
    ) -> None:
        self.topo = topology
        self.workload = workload
        self.policy = policy
        self.cfg = config or SimConfig()
        if self.cfg.lease_s <= 0 or self.cfg.restart_s < 0:
            raise SimError("lease_s must be > 0 and restart_s >= 0")
        try:
            check_spread(self.cfg.lease_s, self.cfg.spread_s)
        except RoundError as exc:
            raise SimError(f"lease_spread_s: {exc}") from None
        self.rng = random.Random(self.cfg.seed)
        # the lease lengths' own draws: a spread leaves the policies' draws as they were
        self._lease_rng = random.Random(f"lease-{self.cfg.seed}")
        self.now = 0.0
        self.free: set[str] = set(topology)
        # each round lists the free GPUs in topology order: the GPUs (and their ids) in
        # that order, filtered by membership in ``free`` (one C-level pass, no sort), or,
        # when few are free, the free GPUs' positions in that order, sorted
        self._gpus: list[Gpu] = list(topology.values())
        self._gpu_ids: list[str] = [g.id for g in self._gpus]
        self._gpu_pos: dict[str, int] = {g: i for i, g in enumerate(self._gpu_ids)}
        self.apps: dict[str, AppState] = {}
        self.tracker = ContentionTracker(0.0)
        self.heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self.results: list[AppResult] = []
        self.rounds = 0
        self.round_ms: list[float] = []
        self._cohort = 0
        self._done_iters: dict[str, float] = {}
        self._sched_version: dict[str, int] = {}
        self._dirty: set[str] = set()  # apps whose held GPUs changed at this instant
        # apps re-split at this instant (AppState.assign: their version moved on), the only
        # ones whose next completion can have changed (see _schedule_completions)
        self._assigned: list[str] = []
        self._expired: dict[str, str] = {}  # GPU -> app whose lease ended at this instant
        # the times of the completion events in the heap (see _schedule_completions)
        self._completions: set[float] = set()
        self._slowdowns: dict[PlacementProfile, list[float]] = {}  # _best_slowdowns
        # the active apps by (arrival, id), as each round lists them; None when an app
        # arrived or finished since it was sorted
        self._by_arrival: list[AppState] | None = None

    def _push(self, t: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, kind, payload))

    # ---------------------------------------------------------------------------------
    def run(self, progress: Callable[[float], None] | None = None) -> SimResult:
        """Simulate to the end. ``progress`` is called after every instant with the serial
        GPU-seconds of the jobs finished so far (the workload's total is
        ``sum(a.total_work for a in workload.apps)``)."""
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], GC_YOUNG_THRESHOLD), *thresholds[1:])
        try:
            return self._run(progress)
        finally:
            gc.set_threshold(*thresholds)

    def _run(self, progress: Callable[[float], None] | None) -> SimResult:
        started = time.perf_counter()
        if _progress is None:
            fell_back("themis.sim._progress")  # one warning per process
        self._work_finished = 0.0  # serial GPU-seconds of the apps that finished
        self._idle_wanted_s = 0.0  # SimResult.idle_wanted_s
        for spec in self.workload.apps:
            self._push(spec.arrival, ARRIVE, spec)
        while self.heap:
            t = self.heap[0][0]
            if t > self.cfg.max_time:
                raise SimError(f"simulated time passed max_time={self.cfg.max_time}")
            self._advance(t)
            need_round = False
            while self.heap and self.heap[0][0] <= t:
                _, _, kind, payload = heapq.heappop(self.heap)
                if kind == COMPLETE:
                    self._completions.discard(t)
                need_round |= self._handle(kind, payload)
            need_round |= self._settle()
            if need_round and self.free and any(a.room() > 0 for a in self.apps.values()):
                self._round()
            stopped: dict[str, set[str]] = {}
            if self.cfg.renewal_restarts:
                for g, holder in self._expired.items():
                    stopped.setdefault(holder, set()).add(g)
            for app_id in sorted(self._dirty):
                if app_id in self.apps:
                    self.apps[app_id].assign(self.topo, self.now, self.cfg.restart_s,
                                             stopped.get(app_id, _NO_GPUS))
                    self._assigned.append(app_id)
            self._dirty.clear()
            self._expired.clear()
            self._schedule_completions()
            if self.cfg.check_invariants:
                self._check()
            if progress is not None:
                progress(self._work_finished + sum(a.work_finished for a in self.apps.values()))
        if self.apps:
            raise SimError(
                f"simulation ended with {len(self.apps)} unfinished apps "
                f"(e.g. {next(iter(self.apps))!r}): nothing left to schedule"
            )
        iso = isolated_finish_times(self.workload.apps, len(self.topo))
        for r in self.results:
            r.t_iso = iso[r.id]
        return SimResult(
            self.policy.name,
            sorted(self.results, key=lambda r: r.id),
            self.rounds,
            self.round_ms,
            time.perf_counter() - started,
            self.now,
            idle_wanted_s=self._idle_wanted_s,
        )

    def _advance(self, t: float) -> None:
        if t < self.now:
            raise InvariantError(f"clock went backwards: {t} < {self.now}")
        # one pass: the apps' room before they move (AppState.room, inlined: the GPUs they
        # could use while some were free) and their progress to t; compiled when built
        # (themis/sim/_progress.c: the same operations in the same order)
        if _progress is not None:
            wanted = _progress.advance(self.apps.values(), t)
        else:
            wanted = advance_apps(self.apps.values(), t)
        if t > self.now and self.free:
            self._idle_wanted_s += (t - self.now) * min(len(self.free), wanted)
        self.now = t

    def _handle(self, kind: int, payload: object) -> bool:
        if kind == ARRIVE:
            assert isinstance(payload, AppSpec)
            new = AppState(payload)
            self.apps[new.spec.id] = new
            self._by_arrival = None
            self.tracker.arrive(new.spec.id, self.now)
            return True
        if kind == EXPIRE:
            cohort: list[tuple[str, str]] = payload  # type: ignore[assignment]
            changed = False
            for app_id, g in cohort:
                app = self.apps.get(app_id)
                if app is not None and app.held.get(g) == self.now:
                    del app.held[g]
                    self.free.add(g)
                    self._expired[g] = app_id
                    self._dirty.add(app_id)
                    changed = True
            return changed
        return False  # a completion frees GPUs only through _settle

    def _settle(self) -> bool:
        """Phase ends, app completions and surplus releases at the current instant. Only
        apps whose jobs ended or whose phase started since they were last settled can have
        any: an app's demand falls only when a job ends, and a round grants at most its room."""
        released = False
        for app in [a for a in self.apps.values() if a.unsettled]:
            app.unsettled = False
            changed = False
            while app.phase_done:
                changed = True
                if not app.advance_phase(self.now):
                    self._finish(app)
                    released = True
                    break
            if app.spec.id not in self.apps:
                continue
            if changed:
                app.assign(self.topo, self.now, self.cfg.restart_s)
                self._assigned.append(app.spec.id)
                # a new phase may use more GPUs than the last one held: free GPUs must
                # not idle until the next lease expiry while it waits (work conservation)
                released |= app.room() > 0
            demand = app.open_demand  # app.demand_now()
            cleared = False
            for j in app.busy:  # done jobs give their GPUs back (only busy ones hold some)
                if j.iters_left <= j.done_below:  # j.done
                    j.gpus = ()
                    cleared = True
            if cleared:
                app.set_busy()
                self._dirty.add(app.spec.id)
            excess = len(app.held) - demand
            if excess > 0:
                for g in app.surplus(excess)[:excess]:
                    del app.held[g]
                    self.free.add(g)
                self._dirty.add(app.spec.id)
                released = True
        return released

    def _finish(self, app: AppState) -> None:
        n_avg = self.tracker.n_avg(app.spec.id, self.now)
        self.tracker.depart(app.spec.id, self.now)
        for g in app.held:
            self.free.add(g)
        app.held.clear()
        app.finish = self.now
        del self.apps[app.spec.id]
        self._by_arrival = None
        self._sched_version.pop(app.spec.id, None)
        self._done_iters.pop(app.spec.id, None)
        self.policy.observe_finish(app, self.now)
        score = app.score_time / app.service if app.service > 0 else 1.0
        self._work_finished += app.spec.total_work
        gpus = len(self.topo)
        t_id = {
            form: app_ideal_time(app.spec, gpus, n_avg, form) for form in IdealTime
        }
        self.results.append(
            AppResult(
                app.spec.id,
                app.spec.arrival,
                self.now,
                t_id[self.cfg.ideal_time],
                n_avg,
                app.gpu_time,
                score,
                app.restarts,
                app.spec.kind,
                app.spec.placement,
                t_id_paper=t_id[IdealTime.PAPER],
                t_id_exact=t_id[IdealTime.EXACT],
                t_alone_paper=app_ideal_time(app.spec, gpus, 1.0, IdealTime.PAPER),
                t_alone_exact=app_ideal_time(app.spec, gpus, 1.0, IdealTime.EXACT),
                t_floor=floor_time(app.spec, self.topo, self.cfg.restart_s,
                                   self._best_slowdowns(app.spec.profile)),
            )
        )

    def _best_slowdowns(self, profile: PlacementProfile) -> list[float]:
        """:func:`best_slowdowns` on the cluster, once per placement profile."""
        slow = self._slowdowns.get(profile)
        if slow is None:
            slow = self._slowdowns[profile] = best_slowdowns(self.topo, profile)
        return slow

    def _round(self) -> None:
        t0 = time.perf_counter()
        if self._by_arrival is None:  # the apps changed since the last round
            self._by_arrival = sorted(self.apps.values(),
                                      key=lambda a: (a.spec.arrival, a.spec.id))
        active = list(self._by_arrival)
        if len(self.free) * 8 < len(self._gpus):  # few free: sort their positions
            gpus = self._gpus
            free = [gpus[i] for i in sorted(map(self._gpu_pos.__getitem__, self.free))]
        else:
            free = list(compress(self._gpus, map(self.free.__contains__, self._gpu_ids)))
        ctx = RoundContext(
            self.now,
            free,
            self.topo,
            active,
            self.rng,
            lambda a: self.tracker.n_avg(a, self.now),
            self.cfg.lease_s,
            previous={g: a for g, a in self._expired.items() if g in self.free},
            ideal=self.cfg.ideal_time,
            free_ids=self.free,
        )
        alloc = self.policy.allocate(ctx)
        if self.cfg.check_invariants:
            check_allocation(ctx, alloc)
        q = self.cfg.expiry_quantum_s
        granted = sorted((a, gs) for a, gs in alloc.items() if gs)
        length = lease_lengths([a for a, _ in granted], self.cfg.lease_s,
                               self.cfg.spread_s, self._lease_rng)
        cohorts: dict[float, list[tuple[str, str]]] = {}
        for app_id, gs in granted:
            expiry = self.now + length[app_id]
            if q > 0:
                expiry = math.ceil(expiry / q - 1e-9) * q
            app = self.apps[app_id]
            cohort = cohorts.setdefault(expiry, [])
            for g in gs:
                self.free.remove(g)
                app.held[g] = expiry
                cohort.append((app_id, g))
            app.last_scheduled = self.now
            self._dirty.add(app_id)
        # Renewal: apps keep GPUs whose lease is being re-granted; a lease that expires
        # and is won back by the same app costs nothing (the job's GPU set is unchanged).
        for expiry, cohort in sorted(cohorts.items()):
            self._push(expiry, EXPIRE, cohort)
        self.rounds += 1
        self.round_ms.append((time.perf_counter() - t0) * 1e3)

    def _schedule_completions(self) -> None:
        """A completion event for every app re-split at this instant. An app's next
        completion changes only when its jobs' GPUs do (AppState.assign, which moves its
        version on); an app not re-split keeps the event already in the heap, and one that
        never held GPUs has none (it does not progress)."""
        apps = self.apps
        for app_id in self._assigned:
            app = apps.get(app_id)
            if app is None or self._sched_version.get(app_id) == app.version:
                continue
            t = app.next_completion(self.now)
            # A completion event only makes the instant t happen (handling it changes
            # nothing; events of one time are applied together), so one event per time is
            # enough: each renewal of an app's leases makes it schedule its completion
            # again, often at the very time already in the heap.
            if math.isfinite(t) and t not in self._completions:
                self._completions.add(t)
                self._push(t, COMPLETE, (app_id, app.version))
            self._sched_version[app_id] = app.version
        self._assigned.clear()

    def _check(self) -> None:
        check_owners(self.apps, self.free, self.topo)
        for a in self.apps.values():
            done = sum(a.iters_done.values())
            if done + 1e-6 < self._done_iters.get(a.spec.id, 0.0):
                raise InvariantError(f"app {a.spec.id!r}: completed work went backwards")
            self._done_iters[a.spec.id] = done


def progress_bar(workload: Workload, label: str, position: int = 0) -> Any:
    """A bar on stderr over the serial GPU-hours of ``workload``'s jobs (simulated work,
    not simulated time: arrivals end long before); ``position``: its line, for bars of
    simulations running at once. Advance it with :func:`advance_bar`."""
    from tqdm import tqdm

    total = sum(a.total_work for a in workload.apps) / 3600
    return tqdm(total=round(total, 1), desc=label, unit="GPU-h", leave=True,
                position=position,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} GPU-h "
                "[{elapsed}<{remaining}]")


def advance_bar(bar: Any, done_s: float) -> None:
    """Move ``bar`` to ``done_s`` serial GPU-seconds (the ``progress`` of
    :meth:`Simulator.run`), in steps of 0.1 GPU-hour."""
    h = min(bar.total or 0.0, round(done_s / 3600, 1))
    if h > bar.n:
        bar.update(h - bar.n)


def run_with_progress(sim: Simulator, label: str, progress: bool = True) -> SimResult:
    """Run one simulation; with ``progress`` a bar on stderr shows serial GPU-hours of
    finished jobs over the workload's total (:func:`progress_bar`)."""
    if not progress:
        return sim.run()
    bar = progress_bar(sim.workload, label)
    try:
        return sim.run(lambda done_s: advance_bar(bar, done_s))
    finally:
        bar.close()
