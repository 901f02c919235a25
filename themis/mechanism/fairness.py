"""Finish-time fairness rho = T_sh / T_id (paper section 3.2, Eq. 1 and Eq. 2).

Conventions (documented in docs/mechanism.md):

* An allocation G is assumed binding until the app completes (section 4.3.1).
* A phase's jobs share the phase's GPUs *work-conservingly*: jobs are checkpointed and
  moved at lease boundaries, so a phase with serial works w_j, per-job caps d_j and g GPUs
  lasts ``S(G) * max(sum_j w_j / g, max_j w_j / min(d_j, g))`` - McNaughton's bound for
  preemptible malleable jobs with linear speedup (Eq. 1's ``iter_time(G)`` for one job;
  Eq. 2's ``max_j T(G_j)`` for a phase). This reproduces Table 3 exactly (1, 2, 4, 8, 16
  GPUs -> rho 4, 2, 1, 0.5, 0.34).
* Future successive-halving phases use the median current job's iteration time
  (section 4.3.3).
* T_id has two forms (:class:`IdealTime`, selected by ``FairnessContext.ideal``):

  - ``exact`` (section 3.2's definition): the finish time of the app's own plan - its
    completed phases, its current phase at full size, its future phases - in an
    independent 1/N_avg share of the cluster, i.e. on g = R_C / N_avg GPUs, each phase
    lasting ``max(sum_j w_j / g, max_j w_j / min(d_j, g))`` with no slowdown. A
    fractional share g gives throughput g spread over the jobs that can use it (a job
    never faster than its cap d_j): the fluid form of the phase model above.
  - ``paper`` (section 4.3.1's approximation, Eq. 1/2): T_cluster * N_avg with
    T_cluster = B / min(R_C, app_demand_max), i.e. the whole budget at the app's largest
    demand.

* With no GPU at all an unfinished app never finishes: rho = +inf. The arbiter's (1-f)
  filter orders such apps by a secondary key (:class:`Starvation`, default
  ``served-now``: :func:`served_now_rho`; ``inf``, the paper's reading: they tie); rho
  itself and the bid tables stay as above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from themis.mechanism.model import AppModel, ModelError, PhaseShape
from themis.mechanism.topology import Gpu, Locality


class IdealTime(StrEnum):
    """Which T_id rho divides by (module doc; docs/mechanism.md, "Ideal time")."""

    EXACT = "exact"  # section 3.2: the app's plan on an independent R_C / N_avg share
    PAPER = "paper"  # section 4.3.1's approximation: B / min(R_C, app_demand_max) * N_avg


#: The default form, chosen by measurement on the evaluation sweep (docs/mechanism.md).
DEFAULT_IDEAL_TIME = IdealTime.EXACT
IDEAL_TIME_NAMES = tuple(str(m) for m in IdealTime)


def parse_ideal_time(value: str | IdealTime) -> IdealTime:
    """``"exact"``/``"paper"`` (any case, surrounding blanks ignored) -> :class:`IdealTime`."""
    if isinstance(value, IdealTime):
        return value
    try:
        return IdealTime(str(value).strip().lower())
    except ValueError:
        raise ModelError(
            f"ideal time {value!r}: must be one of {', '.join(IDEAL_TIME_NAMES)}"
        ) from None


@dataclass(frozen=True, slots=True)
class FairnessContext:
    """Cluster-wide inputs of rho: the clock, R_C (GPUs in the cluster), N_avg and the
    form of the ideal time T_id."""

    now: float
    cluster_gpus: int
    n_avg: float
    ideal: IdealTime = DEFAULT_IDEAL_TIME

    def __post_init__(self) -> None:
        if not math.isfinite(self.now):
            raise ModelError(f"fairness context: now={self.now!r} must be finite")
        if not isinstance(self.cluster_gpus, int) or self.cluster_gpus < 1:
            raise ModelError(f"fairness context: cluster_gpus={self.cluster_gpus!r} must be >= 1")
        if not math.isfinite(self.n_avg) or self.n_avg < 1.0:
            raise ModelError(f"fairness context: n_avg={self.n_avg!r} must be a number >= 1")
        if not isinstance(self.ideal, IdealTime):
            raise ModelError(
                f"fairness context: ideal={self.ideal!r} must be one of {IDEAL_TIME_NAMES}"
            )


def phase_time(works: Iterable[tuple[float, int]], gpus: int) -> float:
    """Unslowed makespan of jobs ``(serial_work, max_demand)`` on ``gpus`` GPUs."""
    total = 0.0
    longest = 0.0
    for work, cap in works:
        if work <= 0:
            continue
        total += work
        longest = max(longest, work / min(cap, gpus) if gpus > 0 else math.inf)
    if total == 0:
        return 0.0
    if gpus <= 0:
        return math.inf
    return max(total / gpus, longest)


class RemainingTime:
    """``remaining_time(app, g)`` for many g at once: the parts that do not depend on g
    (each phase's total work; per job cap, the largest work) are computed once, so a bid
    table's ~10-20 counts cost O(phases + caps) each instead of O(jobs). The values are
    those of :func:`phase_time`, bit for bit: the works are summed in the same order, and
    max_j w_j / m = (max_j w_j) / m for jobs sharing a cap (division by m > 0 is
    monotone)."""

    __slots__ = ("_future", "_longest", "_total")

    def __init__(self, app: AppModel) -> None:
        total = 0.0
        longest: dict[int, float] = {}  # job cap -> largest work left among its jobs
        for j in app.jobs:
            work = j.work_left
            if work <= 0:
                continue
            total += work
            if work > longest.get(j.max_demand, 0.0):
                longest[j.max_demand] = work
        self._total = total
        self._longest = tuple(longest.items())
        # future phases (section 4.3.3: the median current job's iteration time):
        # (the phase's total work, one job's work, its cap)
        self._future: list[tuple[float, float, int]] = []
        if app.future_phases:
            median = app.median_iter_time()
            cap = app.job_demand_max
            for p in app.future_phases:
                work = p.iters * median
                phase_total = 0.0
                for _ in range(p.jobs):
                    phase_total += work
                self._future.append((phase_total, work, cap))

    @property
    def parts(
        self,
    ) -> tuple[float, tuple[tuple[int, float], ...], tuple[tuple[float, float, int], ...]]:
        """What :meth:`__call__` evaluates: the current phase's total work, (cap, largest
        work among the jobs of that cap) pairs, and per future phase (its total work, one
        job's work, its cap). The compiled bid loop (``themis/mechanism/_menu.c``) evaluates
        the same expression from them, operation for operation."""
        return self._total, self._longest, tuple(self._future)

    def __call__(self, gpus: int, slowdown: float = 1.0) -> float:
        """Time to finish the app's remaining plan on ``gpus`` GPUs with slowdown S."""
        if self._total == 0:
            current = 0.0
        elif gpus <= 0:
            current = math.inf
        else:
            current = self._total / gpus
            for cap, work in self._longest:
                current = max(current, work / min(cap, gpus))
        if not self._future:
            return slowdown * current
        future = 0.0
        for phase_total, work, cap in self._future:
            if phase_total == 0:
                continue
            future += math.inf if gpus <= 0 else max(phase_total / gpus, work / min(cap, gpus))
        return slowdown * (current + future)


def remaining_time(app: AppModel, gpus: int, slowdown: float = 1.0) -> float:
    """Time to finish the app's remaining plan on ``gpus`` GPUs with slowdown S (Eq. 2's
    sum over phases of T_sh(i)): each phase's :func:`phase_time`, see
    :class:`RemainingTime` (build one to evaluate many counts)."""
    return RemainingTime(app)(gpus, slowdown)


class PlanTime:
    """``plan_time(app, g)`` for many g at once: the shapes of the app's plan (each
    completed phase, the work done they do not cover, the current phase at full size, the
    future phases) are taken once, so a call costs O(phases + caps). The values are those
    of :func:`plan_time`, bit for bit: it is this class, evaluated once."""

    __slots__ = ("_current", "_demand_max", "_done", "_future", "_scale", "_unknown")

    def __init__(self, app: AppModel) -> None:
        self._done = app.done_phases
        known = 0.0
        for shape in app.done_phases:
            known += shape.total
        unknown = app.work_done - known
        # work_done the completed phases do not cover: one phase capped at app_demand_max
        self._unknown = unknown if unknown > 1e-9 * max(1.0, app.work_done) else None
        self._demand_max = app.app_demand_max if self._unknown is not None else 1
        current = PhaseShape.of((j.iters_total * j.serial_iter_time, j.max_demand)
                                for j in app.jobs)
        self._current = current
        work = app.work_done + current.total
        future: list[PhaseShape] = []
        if app.future_phases:
            median = app.median_iter_time()
            cap = app.job_demand_max
            for p in app.future_phases:
                one = p.iters * median
                phase = PhaseShape(p.jobs * one, ((cap, one),))
                future.append(phase)
                work += phase.total
        self._future = tuple(future)
        # with an explicit budget B the plan is scaled to B
        self._scale = app.budget / work if app.budget is not None and work > 0 else None

    @property
    def progress_free(self) -> bool:
        """Whether the value depends on the plan alone, not on the jobs' progress (the
        work done beyond the completed phases, capped at app_demand_max, does)."""
        return self._unknown is None

    def __call__(self, gpus: float) -> float:
        """Length of the plan on ``gpus`` GPUs (see :func:`plan_time`)."""
        if gpus <= 0:
            return math.inf
        t = 0.0
        for shape in self._done:
            t += shape.time(gpus)
        if self._unknown is not None:
            t += self._unknown / min(gpus, self._demand_max)
        t += self._current.time(gpus)
        for phase in self._future:
            t += phase.time(gpus)
        if self._scale is not None:
            t *= self._scale
        return t


def plan_time(app: AppModel, gpus: float) -> float:
    """Length of the app's whole plan on ``gpus`` GPUs (may be fractional), no slowdown:
    each completed phase (``done_phases``; work_done they do not cover counts as one
    phase capped at app_demand_max), the current phase at full size (each job's
    ``iters_total``), and the future phases at the median iteration time with cap
    job_demand_max (section 4.3.3), one after the other. With an explicit budget B the
    plan is scaled to B (the budget apportioned as the plan apportions it).
    :class:`PlanTime` evaluates it for many ``gpus``."""
    if gpus <= 0:
        return math.inf
    return PlanTime(app)(gpus)


def ideal_time(app: AppModel, ctx: FairnessContext, plan: PlanTime | None = None) -> float:
    """T_id in the form ``ctx.ideal`` selects (module doc): ``exact`` = the plan on
    R_C / N_avg GPUs; ``paper`` = T_cluster * N_avg, T_cluster = B / min(R_C,
    app_demand_max). ``plan``: the app's :class:`PlanTime`, when the caller keeps one."""
    if ctx.ideal is IdealTime.EXACT:
        if plan is not None:
            return plan(ctx.cluster_gpus / ctx.n_avg)
        return plan_time(app, ctx.cluster_gpus / ctx.n_avg)
    t_cluster = app.total_work() / min(ctx.cluster_gpus, app.app_demand_max)
    return t_cluster * ctx.n_avg


def rho(app: AppModel, gpus: int, locality: Locality, ctx: FairnessContext, *,
        t_id: float | None = None, remaining: RemainingTime | None = None) -> float:
    """rho(G) for an allocation of ``gpus`` GPUs at ``locality`` (whole allocation, i.e.
    GPUs already held plus the bundle under consideration). ``t_id`` (the app's
    :func:`ideal_time` in ``ctx``) and ``remaining`` (its :class:`RemainingTime`): the
    same values computed by a caller that evaluates many rho of one app."""
    if t_id is None:
        t_id = ideal_time(app, ctx)
    if t_id <= 0:
        raise ModelError(f"app {app.id!r}: ideal finish time is zero (no work?)")
    elapsed = max(0.0, ctx.now - app.start_time)
    s = app.placement.slowdown(locality)
    if remaining is None:
        remaining = RemainingTime(app)
    return (elapsed + remaining(gpus, s)) / t_id


class Starvation(StrEnum):
    """How the (1-f) filter orders apps holding no GPU (docs/mechanism.md, "Starvation").

    ``served-now``: they rank above every app holding GPUs, among themselves by
    :func:`served_now_rho` (the rho each would have if served its full demand now), the
    worst first; at most one starving bidder per free GPU. ``ranked`` (the default): the
    same, except that a starving app that has held GPUs before ranks among *all* apps by
    that key against the others' current rho, so an app that just lost GPUs it was well
    served with ranks below an app stuck on too few; a newcomer (never served) still ranks
    above every app holding GPUs, since its key assumes a service it has not had
    (docs/mechanism.md, "Starvation"). ``inf`` (the paper's reading): they all report
    rho = +inf and tie; the filter draws among them at random. Only who bids changes: rho,
    the bid tables and the auction are the paper's."""

    INF = "inf"
    SERVED_NOW = "served-now"
    RANKED = "ranked"

    @property
    def keyed(self) -> bool:
        """Whether starving apps report a :func:`served_now_rho` key beside rho = +inf."""
        return self is not Starvation.INF

    @property
    def merges(self) -> bool:
        """Whether the key ranks starving apps that have held GPUs before among the apps
        holding GPUs (``ranked``) rather than above all of them."""
        return self is Starvation.RANKED


#: The default order, chosen by measurement (docs/evaluation.md, "The evaluation sweep",
#: and docs/mechanism.md, "Starvation"); ``served-now`` and ``inf`` (the paper's reading)
#: are options.
DEFAULT_STARVATION = Starvation.RANKED
STARVATION_NAMES = tuple(str(m) for m in Starvation)


def parse_starvation(value: str | Starvation) -> Starvation:
    """``"inf"``/``"served-now"``/``"ranked"`` (any case, blanks ignored) ->
    :class:`Starvation`."""
    if isinstance(value, Starvation):
        return value
    try:
        return Starvation(str(value).strip().lower())
    except ValueError:
        raise ModelError(
            f"starvation {value!r}: must be one of {', '.join(STARVATION_NAMES)}"
        ) from None


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """The largest group of GPUs at each locality level of a cluster (GPUs in one slot, one
    machine, one rack): all :func:`best_locality` needs, and what the arbiter announces to
    agents for ``served-now`` (proto ``ClusterShape``). Every count is >= 0."""

    slot: int
    machine: int
    rack: int

    def __post_init__(self) -> None:
        for name in ("slot", "machine", "rack"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ModelError(f"cluster shape: {name}={v!r} must be an integer >= 0")

    @classmethod
    def of(cls, cluster: Iterable[Gpu]) -> ClusterShape:
        slots: dict[tuple[str, str], int] = {}
        machines: dict[str, int] = {}
        racks: dict[str, int] = {}
        for g in cluster:
            slots[g.slot_key] = slots.get(g.slot_key, 0) + 1
            machines[g.machine] = machines.get(g.machine, 0) + 1
            racks[g.rack] = racks.get(g.rack, 0) + 1
        return cls(max(slots.values(), default=0), max(machines.values(), default=0),
                   max(racks.values(), default=0))

    def best_locality(self, gpus: int) -> Locality:
        """The tightest locality at which ``gpus`` GPUs of the cluster could be placed if
        they were all free: one slot, one machine, one rack, else the whole cluster."""
        if gpus <= 1:
            return Locality.SLOT
        for level, size in ((Locality.SLOT, self.slot), (Locality.MACHINE, self.machine),
                            (Locality.RACK, self.rack)):
            if size >= gpus:
                return level
        return Locality.CLUSTER


def best_locality(cluster: Sequence[Gpu], gpus: int) -> Locality:
    """The tightest locality at which ``gpus`` GPUs of ``cluster`` could be placed if
    they were all free: one slot, one machine, one rack, else the whole cluster."""
    return ClusterShape.of(cluster).best_locality(gpus)


def served_now_rho(
    app: AppModel, ctx: FairnessContext, place: Callable[[int], Locality], *,
    t_id: float | None = None, remaining: RemainingTime | None = None,
) -> float:
    """The filter key of a starving app under ``served-now``: Eq. 1's rho if the app were
    granted its full current demand now (``demand_now``, at most R_C GPUs) at the best
    placement the cluster allows (``place``: GPU count -> locality, e.g.
    :func:`best_locality` on the cluster), i.e. (time since arrival + remaining time on
    that allocation) / T_id. It grows with the time already spent waiting and is larger
    for an app whose wait weighs more against its ideal time (a short app that has waited
    long): the app the filter should let bid first. ``t_id``, ``remaining``: as for
    :func:`rho`."""
    g = max(1, min(app.demand_now, ctx.cluster_gpus))
    return rho(app, g, place(g), ctx, t_id=t_id, remaining=remaining)
