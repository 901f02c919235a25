"""Runtime state of an app in the simulator, and the agent's view of it (AppModel).

Inside an app, GPUs are split among the running phase's jobs by the application
master's own rule (section 4.2.2: the hyper-parameter optimizer decides the split;
:func:`themis.am.packing.split`): running jobs keep their GPUs; the others go one to
each waiting job first, the jobs with the most work left first, then one at a time to
the job with the most work left per GPU it has, up to its max demand; a job that gains
GPUs is placed again on as few machines as possible. A job whose GPU set changes pays a
checkpoint/restart pause (section 6.2.3: 35 s median container reallocation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from themis.am.packing import JobNeed, split
from themis.mechanism.fairness import IdealTime
from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job, ModelError, PhaseShape
from themis.mechanism.placement import PlacementProfile
from themis.mechanism.topology import Gpu, Locality, Topology, locality_of
from themis.sim.errors import InvariantError
from themis.sim.workload import AppSpec

_DONE_EPS = 1e-9


def loss_at(iters_done: float, tau: float) -> float:
    """Simulated training loss: 1/sqrt(1 + i/tau) (SLAQ-style sublinear convergence)."""
    return 1.0 / math.sqrt(1.0 + max(0.0, iters_done) / tau)


@dataclass(slots=True)
class JobState:
    index: int
    iters_left: float
    iters_phase: float
    iters_done_total: float = 0.0  # all phases (for the loss curve)
    gpus: tuple[str, ...] = ()
    paused_until: float = 0.0
    slowdown: float = 1.0
    demand: int = 1  # the job's max GPU demand (from its spec; read in the hot loops)
    iter_time: float = 1.0  # its serial iteration time (ditto)
    done_below: float = field(init=False)  # done when iters_left is at most this

    def __post_init__(self) -> None:
        self.done_below = _DONE_EPS * max(1.0, self.iters_phase)

    @property
    def done(self) -> bool:
        return self.iters_left <= self.done_below


@dataclass(slots=True)
class AppState:
    spec: AppSpec
    phase: int = 0
    jobs: list[JobState] = field(default_factory=list)
    held: dict[str, float] = field(default_factory=dict)  # GPU id -> lease expiry
    work_done_prev: float = 0.0  # serial GPU-seconds of completed phases
    iters_done: dict[int, float] = field(default_factory=dict)  # job index -> cumulative
    service: float = 0.0  # attained GPU-seconds (Tiresias' W*t)
    gpu_time: float = 0.0
    score_time: float = 0.0  # integral of (1/S) * GPUs over time, for the placement score
    last_progress: float = 0.0
    finish: float | None = None
    version: int = 0
    restarts: int = 0
    last_scheduled: float = -1.0  # Tiresias: start time / last time it held GPUs
    # per phase: (jobs, the median job's iterations - the upper median), what model()
    # reports for a future phase (computed once: model() runs every round)
    medians: list[tuple[int, float]] = field(init=False, repr=False)
    # the running phase's jobs that hold GPUs, in job order (the only ones progress()
    # advances); kept by set_busy() wherever a job's GPU set changes
    busy: list[JobState] = field(init=False, repr=False)
    # the running phase's jobs not done yet and the sum of their demands, kept by
    # _start_phase() and progress() (the only places iters_left changes)
    open_jobs: int = field(init=False, repr=False)
    open_demand: int = field(init=False, repr=False)
    # the completed phases' shapes (the agent's view of its plan, for the exact T_id)
    done_shapes: tuple[PhaseShape, ...] = field(init=False, repr=False)
    work_finished: float = 0.0  # serial GPU-seconds of finished jobs (progress display)
    # changes whenever what model() reports may have changed (iterations done, the
    # phase): a policy may keep an app's model while the stamp holds
    stamp: int = 0
    # a job of the app ended, or its phase started, since the simulator last settled it
    # (phase ends, done jobs' GPUs, surplus releases): set by progress() and _start_phase()
    unsettled: bool = field(default=True, init=False, repr=False)
    # (phase, running jobs' indices, held GPUs) of the last split (assign())
    _split_of: tuple[int, list[int], frozenset[str]] | None = field(
        default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.done_shapes = ()
        self.medians = []
        for ph in self.spec.phases:
            its = sorted(it for _, it in ph)
            self.medians.append((len(ph), its[len(its) // 2]))
        self.last_progress = self.spec.arrival
        self._start_phase(0, self.spec.arrival)

    # --- phases ---------------------------------------------------------------------
    def _start_phase(self, p: int, now: float) -> None:
        self.phase = p
        self.stamp += 1
        self.unsettled = True
        jobs = self.spec.jobs
        self.jobs = [
            JobState(i, it, it, self.iters_done.get(i, 0.0), paused_until=now,
                     demand=jobs[i].max_demand, iter_time=jobs[i].serial_iter_time)
            for i, it in self.spec.phases[p]
        ]
        self.busy = []
        running = [j for j in self.jobs if j.iters_left > j.done_below]  # not j.done
        self.open_jobs = len(running)
        self.open_demand = sum([j.demand for j in running])

    def set_busy(self) -> None:
        """Recompute ``busy`` after jobs' GPU sets changed."""
        self.busy = [j for j in self.jobs if j.gpus]

    def advance_phase(self, now: float) -> bool:
        """Called when every job of the phase is done: next phase (True) or app done."""
        self.stamp += 1
        works = [(j.iters_phase * j.iter_time, j.demand) for j in self.jobs]
        for work, _ in works:
            self.work_done_prev += work
        self.done_shapes = (*self.done_shapes, PhaseShape.of(works))
        if self.phase + 1 >= len(self.spec.phases):
            return False
        self._start_phase(self.phase + 1, now)
        return True

    @property
    def phase_done(self) -> bool:
        return self.open_jobs == 0

    @property
    def profile(self) -> PlacementProfile:
        return self.spec.profile

    # --- demand ---------------------------------------------------------------------
    def demand_now(self) -> int:
        """GPUs the running phase can use right now."""
        return self.open_demand

    def room(self) -> int:
        return max(0, self.open_demand - len(self.held))  # demand_now(), inlined

    # --- progress -------------------------------------------------------------------
    def rate(self, j: JobState) -> float:
        """Iterations per second (Eq. 1: n / (serial_iter_time * S)), capped by demand."""
        if not j.gpus:
            return 0.0
        return min(len(j.gpus), j.demand) / (j.iter_time * j.slowdown)

    def progress(self, now: float) -> None:
        """Advance every job to ``now`` (allocation constant since ``last_progress``)."""
        t0 = self.last_progress
        if now < t0 - 1e-9:
            raise InvariantError(f"app {self.spec.id!r}: time went backwards {now} < {t0}")
        dt = max(0.0, now - t0)
        n_held = len(self.held)
        self.gpu_time += n_held * dt
        if self.busy:
            self.stamp += 1
        for j in self.busy:  # the hot loop of the simulator: jobs without GPUs do nothing
            n = len(j.gpus)
            self.service += n * dt
            self.score_time += n * dt / j.slowdown
            eff = now - (t0 if t0 > j.paused_until else j.paused_until)
            if eff > 0 and j.iters_left > j.done_below:
                rate = min(n, j.demand) / (j.iter_time * j.slowdown)  # self.rate(j), inlined
                step = min(j.iters_left, rate * eff)
                j.iters_left -= step
                j.iters_done_total += step
                self.iters_done[j.index] = j.iters_done_total
                if j.iters_left <= j.done_below:  # just finished
                    self.work_finished += j.iters_phase * j.iter_time
                    self.open_jobs -= 1
                    self.open_demand -= j.demand
                    self.unsettled = True
        # Idle held GPUs (not given to any job) still count as service held.
        self.last_progress = now

    def next_completion(self, now: float) -> float:
        best = math.inf
        for j in self.busy:  # the others do not progress
            r = self.rate(j)
            if r > 0 and not j.done:
                best = min(best, max(now, j.paused_until) + j.iters_left / r)
        return best

    # --- GPU split among jobs ------------------------------------------------------
    def assign(self, topo: Topology, now: float, restart_s: float,
               stopped: Set[str] = frozenset()) -> None:
        """Re-split the held GPUs among the running jobs (see module doc). The split is
        skipped when the held GPUs and the running jobs are those of the last split (a lease
        renewed to its holder): it is sticky, so it would give every job the GPUs it has.
        The version moves on either way, so that the simulator schedules the app's next
        completion again as it always did (the same events, the same results).
        ``stopped``: GPUs whose lease ended at this instant and whose jobs stopped even
        if the app won them back (SimConfig.renewal_restarts): a job holding one pauses
        again like a moved job."""
        running = [j for j in self.jobs if not j.done]
        indices = [j.index for j in running]
        last = self._split_of
        if last is not None and last[:2] == (self.phase, indices) and \
                last[2] == self.held.keys() and not stopped:
            self.version += 1
            return
        for j in self.jobs:
            if j.done:
                j.gpus = ()
        key = {j.index: f"{j.index:06d}" for j in running}
        got = split([JobNeed(key[j.index], self._work_left(j), j.demand) for j in running],
                    [topo[g] for g in self.held],  # (place() orders them)
                    {key[j.index]: j.gpus for j in running if j.gpus})
        for j in running:
            gpus = got.get(key[j.index], ())
            if set(gpus) != set(j.gpus) or (gpus and not stopped.isdisjoint(j.gpus)):
                j.gpus = gpus
                j.slowdown = self.profile.slowdown(locality_of(topo[g] for g in gpus))
                if gpus:
                    j.paused_until = max(j.paused_until, now + restart_s)
                    self.restarts += 1
        self.set_busy()
        self.version += 1
        self._split_of = (self.phase, indices, frozenset(self.held))

    def _work_left(self, j: JobState) -> float:
        return j.iters_left * self.spec.jobs[j.index].serial_iter_time

    def surplus(self, excess: int) -> list[str]:
        """``excess`` held GPUs to release: unused ones first, then those of the jobs with
        the least work left."""
        used: dict[str, float] = {}
        for j in self.busy:  # the jobs holding GPUs
            for g in j.gpus:
                used[g] = j.iters_left * self.spec.jobs[j.index].serial_iter_time
        order = sorted(self.held, key=lambda g: (g in used, used.get(g, 0.0), g))
        return order[:excess]

    # --- the agent's view -------------------------------------------------------------
    def model(self, error: float = 0.0, profile: PlacementProfile | None = None) -> AppModel:
        """The AppModel the agent reports (section 4.3); ``error`` scales iteration
        estimates by (1 + error) (Fig. 17), ``profile`` overrides slowdowns (Fig. 18)."""
        f = 1.0 + error
        if not (math.isfinite(f) and f > 0):
            raise ModelError(f"app {self.spec.id!r}: estimate error {error!r} must be > -1")
        # iteration times and demands come from the validated spec, the iteration counts
        # are clamped here: no need for Job's checks (this runs for every job every round)
        jobs = [
            Job.checked_elsewhere(
                f"j{j.index}",
                j.iter_time,
                max(0.0, j.iters_left) * f,
                j.demand,
                max(j.iters_phase * f, 1e-9),
            )
            for j in self.jobs
        ]
        future = [FuturePhase(n, median * f) for n, median in self.medians[self.phase + 1 :]]
        done = self.done_shapes
        if f != 1.0:
            done = tuple(PhaseShape(s.total * f, tuple((c, w * f) for c, w in s.longest))
                         for s in done)
        kind = {
            "single-job": AppKind.SINGLE_JOB,
            "multi-job": AppKind.CURVE_STOPPING,
            "successive-halving": AppKind.SUCCESSIVE_HALVING,
        }[self.spec.kind]
        return AppModel(
            self.spec.id,
            self.spec.arrival,
            jobs,
            future,
            kind,
            placement=profile or self.profile,
            work_done=self.work_done_prev * f,
            done_phases=done,
        )

    def update_model(self, m: AppModel, error: float = 0.0) -> None:
        """Bring ``m``, what :meth:`model` returned with ``error`` earlier in the same
        phase, up to date with the jobs' progress in place: within a phase only the
        iterations left change (the same values as a new :meth:`model`)."""
        f = 1.0 + error
        for job, j in zip(m.jobs, self.jobs, strict=True):
            job.iters_left = max(0.0, j.iters_left) * f

    def held_gpus(self, topo: Topology) -> list[Gpu]:
        if not self.held:  # most apps of a long queue: nothing to sort
            return []
        return [topo[g] for g in sorted(self.held)]

    def loss(self) -> float:
        """Best (lowest) current loss among the running jobs."""
        return min(loss_at(j.iters_done_total, self.spec.jobs[j.index].tau) for j in self.jobs)


def phase_shapes(spec: AppSpec) -> list[PhaseShape]:
    """The shape of each phase of the app's plan (serial work and cap per job)."""
    return [
        PhaseShape.of((it * spec.jobs[i].serial_iter_time, spec.jobs[i].max_demand) for i, it in ph)
        for ph in spec.phases
    ]


def app_ideal_time(
    spec: AppSpec, cluster_gpus: int, n_avg: float, ideal: IdealTime = IdealTime.PAPER
) -> float:
    """T_id of the app's whole plan (themis.mechanism.fairness, section 3.2 / Eq. 2):
    ``paper``: B / min(R_C, app_demand_max) * N_avg, app_demand_max = the largest phase
    demand; ``exact``: the phases one after the other on R_C / N_avg GPUs."""
    n = max(1.0, n_avg)
    if ideal is IdealTime.EXACT:
        return sum(s.time(cluster_gpus / n) for s in phase_shapes(spec))
    demand = max(sum(spec.jobs[i].max_demand for i, _ in ph) for ph in spec.phases)
    return spec.total_work / min(cluster_gpus, demand) * n


def best_slowdowns(topo: Topology, profile: PlacementProfile) -> list[float]:
    """S of the tightest placement ``k`` GPUs can have in ``topo``, for k = 0..len(topo):
    a slot, else a machine, else a rack, else the cluster."""
    slot: dict[tuple[str, str], int] = {}
    machine: dict[str, int] = {}
    rack: dict[str, int] = {}
    for g in topo.values():
        slot[(g.machine, g.slot)] = slot.get((g.machine, g.slot), 0) + 1
        machine[g.machine] = machine.get(g.machine, 0) + 1
        rack[g.rack] = rack.get(g.rack, 0) + 1
    limits = ((max(slot.values()), Locality.SLOT), (max(machine.values()), Locality.MACHINE),
              (max(rack.values()), Locality.RACK))
    out = []
    for k in range(len(topo) + 1):
        loc = next((lv for size, lv in limits if k <= size), Locality.CLUSTER)
        out.append(profile.slowdown(loc))
    return out


def floor_time(spec: AppSpec, topo: Topology, restart_s: float,
               slowdowns: Sequence[float] | None = None) -> float:
    """The app's completion time with the whole cluster to itself from its arrival - what
    no scheduler can beat: each phase on all R_C GPUs, every job at the slowdown of the
    tightest placement its GPUs can have (a lower bound when not all jobs can get theirs
    at once), ``max(sum_j S_j w_j / R_C, max_j S_j w_j / min(d_j, R_C))``, plus the
    checkpoint/restart pause that starts each phase's jobs. ``slowdowns``:
    ``best_slowdowns(topo, spec.profile)``, when the caller keeps it."""
    g = len(topo)
    slow = best_slowdowns(topo, spec.profile) if slowdowns is None else slowdowns
    total = 0.0
    for ph in spec.phases:
        works = [(it * spec.jobs[i].serial_iter_time * slow[min(spec.jobs[i].max_demand, g)],
                  spec.jobs[i].max_demand) for i, it in ph]
        total += restart_s + PhaseShape.of(works).time(g)
    return total


def check_owners(apps: Mapping[str, AppState], free: set[str], topo: Topology) -> None:
    """Invariants: a GPU is never held by two apps, held + free = capacity, jobs only use
    GPUs their app holds, and no job exceeds its demand."""
    seen: dict[str, str] = {}
    for a in apps.values():
        for g in a.held:
            if g in seen:
                raise InvariantError(f"GPU {g!r} held by {seen[g]!r} and {a.spec.id!r}")
            if g in free:
                raise InvariantError(f"GPU {g!r} is both free and held by {a.spec.id!r}")
            if g not in topo:
                raise InvariantError(f"GPU {g!r} held by {a.spec.id!r} is not in the cluster")
            seen[g] = a.spec.id
        if [id(j) for j in a.busy] != [id(j) for j in a.jobs if j.gpus]:
            raise InvariantError(f"app {a.spec.id!r}: busy jobs out of date")
        running = [j for j in a.jobs if not j.done]
        if (a.open_jobs, a.open_demand) != (len(running), sum(j.demand for j in running)):
            raise InvariantError(f"app {a.spec.id!r}: open job count or demand out of date")
        used: set[str] = set()
        for j in a.jobs:
            if len(j.gpus) > a.spec.jobs[j.index].max_demand:
                raise InvariantError(f"app {a.spec.id!r} job {j.index}: exceeds max demand")
            for g in j.gpus:
                if g not in a.held or g in used:
                    raise InvariantError(f"app {a.spec.id!r}: job uses GPU {g!r} it may not")
                used.add(g)
            if j.iters_left < -1e-6 or j.iters_left > j.iters_phase + 1e-6:
                raise InvariantError(f"app {a.spec.id!r} job {j.index}: iters_left out of range")
    if len(seen) + len(free) != len(topo):
        raise InvariantError(f"capacity: {len(seen)} held + {len(free)} free != {len(topo)}")
