"""What an agent knows about its app to compute finish-time fairness (paper section 4.3).

One model covers the paper's three app shapes:

* single-job apps (Eq. 1): one current phase with one job, no future phases;
* successive-halving apps (Eq. 2, Hyperband): the current phase's jobs, plus future
  phases given as (number of jobs, iterations per job) - their iteration time is the
  *median* of the current jobs' (section 4.3.3);
* performance-curve-stopping apps: the running jobs, each with the pessimistic forecast
  of iterations left; no future phases.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from themis.mechanism.placement import DEFAULT, PlacementProfile


class ModelError(ValueError):
    """An app or job description is invalid (names the app/job and the problem)."""


class AppKind(StrEnum):
    SINGLE_JOB = "single-job"
    SUCCESSIVE_HALVING = "successive-halving"
    CURVE_STOPPING = "curve-stopping"


def _check_positive(owner: str, name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and math.isfinite(value)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ModelError(f"{owner}: {name}={value!r} must be a finite number {bound}")


@dataclass(slots=True)
class Job:
    """A training job: serial iteration time on one GPU (no slowdown), iterations left in
    the current phase, and the most GPUs it can use (job_demand_max)."""

    id: str
    serial_iter_time: float
    iters_left: float
    max_demand: int
    iters_total: float = 0.0

    def __post_init__(self) -> None:
        if not self.id:
            raise ModelError("job id must be non-empty")
        owner = f"job {self.id!r}"
        _check_positive(owner, "serial_iter_time", self.serial_iter_time)
        _check_positive(owner, "iters_left", self.iters_left, allow_zero=True)
        if not isinstance(self.max_demand, int) or self.max_demand < 1:
            raise ModelError(f"job {self.id!r}: max_demand={self.max_demand!r} must be an int >= 1")
        if self.iters_total == 0.0:
            self.iters_total = self.iters_left
        _check_positive(owner, "iters_total", self.iters_total, allow_zero=True)

    @classmethod
    def checked_elsewhere(cls, id: str, serial_iter_time: float, iters_left: float,
                          max_demand: int, iters_total: float) -> Job:
        """A Job from values its caller has already validated (the simulator builds one
        per job per round from checked specs): the same object, without the checks."""
        job = object.__new__(cls)
        job.id = id
        job.serial_iter_time = serial_iter_time
        job.iters_left = iters_left
        job.max_demand = max_demand
        job.iters_total = iters_total
        return job

    @property
    def work_left(self) -> float:
        """Serial GPU-seconds left in the current phase."""
        return self.iters_left * self.serial_iter_time


@dataclass(frozen=True, slots=True)
class FuturePhase:
    """A successive-halving phase not started yet: ``jobs`` jobs of ``iters`` iterations."""

    jobs: int
    iters: float

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, int) or self.jobs < 1:
            raise ModelError(f"future phase: jobs={self.jobs!r} must be an int >= 1")
        _check_positive("future phase", "iters", self.iters)


@dataclass(frozen=True, slots=True)
class PhaseShape:
    """A phase as the exact ideal time needs it (section 3.2, docs/mechanism.md): its total
    serial work (GPU-seconds) and, per job cap, the largest serial work among the jobs of
    that cap. :meth:`time` is the phase's length on ``gpus`` GPUs, which may be a
    fraction (an independent 1/N share of the cluster)."""

    total: float
    longest: tuple[tuple[int, float], ...]  # (job cap, largest work among its jobs)

    @classmethod
    def of(cls, works: Iterable[tuple[float, int]]) -> PhaseShape:
        """The shape of jobs ``(serial work, max demand)``."""
        total = 0.0
        longest: dict[int, float] = {}
        for work, cap in works:
            if work <= 0:
                continue
            total += work
            if work > longest.get(cap, 0.0):
                longest[cap] = work
        return cls(total, tuple(sorted(longest.items())))

    def time(self, gpus: float) -> float:
        """``max(sum_j w_j / g, max_j w_j / min(d_j, g))`` (no slowdown): the fluid
        makespan of jobs with linear speedup up to their caps sharing g GPUs."""
        if self.total <= 0:
            return 0.0
        if gpus <= 0:
            return math.inf
        t = self.total / gpus
        for cap, work in self.longest:
            t = max(t, work / min(cap, gpus))
        return t


@dataclass(slots=True)
class AppModel:
    """An app as its agent sees it. ``budget`` is B of Eq. 2 in serial GPU-seconds; when
    omitted it is the total serial work of the app's plan (done + left + future)."""

    id: str
    start_time: float
    jobs: list[Job]
    future_phases: list[FuturePhase] = field(default_factory=list)
    kind: AppKind = AppKind.SINGLE_JOB
    budget: float | None = None
    placement: PlacementProfile = DEFAULT
    work_done: float = 0.0  # serial GPU-seconds already executed (for the default budget)
    # the completed phases' shapes, oldest first (for the exact ideal time, section 3.2);
    # work_done beyond their total is taken as one phase capped at app_demand_max
    done_phases: tuple[PhaseShape, ...] = ()

    def __post_init__(self) -> None:
        if not self.id:
            raise ModelError("app id must be non-empty")
        if not math.isfinite(self.start_time):
            raise ModelError(f"app {self.id!r}: start_time must be finite")
        if self.budget is not None:
            _check_positive(f"app {self.id!r}", "budget", self.budget)
        ids = [j.id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise ModelError(f"app {self.id!r}: duplicate job ids {sorted(ids)}")
        if self.kind is AppKind.SINGLE_JOB and (len(self.jobs) > 1 or self.future_phases):
            raise ModelError(f"app {self.id!r}: a single-job app has exactly one job")

    @property
    def finished(self) -> bool:
        return not self.future_phases and all(j.iters_left <= 0 for j in self.jobs)

    @property
    def job_demand_max(self) -> int:
        return max((j.max_demand for j in self.jobs), default=1)

    @property
    def demand_now(self) -> int:
        """GPUs the running jobs can use right now (sum of their job_demand_max)."""
        return sum(j.max_demand for j in self.jobs if j.iters_left > 0)

    @property
    def app_demand_max(self) -> int:
        """Most GPUs the app can use at once over its remaining plan (Eq. 2)."""
        d = 0  # job_demand_max and demand_now in one pass (rho asks for it every round)
        current = 0
        for j in self.jobs:
            if j.max_demand > d:
                d = j.max_demand
            if j.iters_left > 0:
                current += j.max_demand
        d = d or 1
        future = max((p.jobs * d for p in self.future_phases), default=0)
        return max(current, future, 1)

    def median_iter_time(self) -> float:
        """Median serial iteration time of the current jobs (section 4.3.3)."""
        times = sorted(j.serial_iter_time for j in self.jobs)
        if not times:
            raise ModelError(f"app {self.id!r}: no jobs to take a median iteration time from")
        n = len(times)
        mid = n // 2
        return times[mid] if n % 2 else (times[mid - 1] + times[mid]) / 2

    def total_work(self) -> float:
        """B: the budget if given, else the serial GPU-seconds of the whole plan: work of
        jobs no longer listed (``work_done``) + each listed job's ``iters_total`` + the
        future phases at the median iteration time."""
        if self.budget is not None:
            return self.budget
        m = self.median_iter_time() if self.jobs else 0.0
        future = sum(p.jobs * p.iters * m for p in self.future_phases)
        listed = sum(j.iters_total * j.serial_iter_time for j in self.jobs)
        return self.work_done + listed + future
