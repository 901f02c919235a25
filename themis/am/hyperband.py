"""Hyperband app scheduler (Li et al., JMLR 2018) with synchronous successive halving.

Plan. With maximum resource ``R`` per configuration and halving rate ``eta``:
``s_max = floor(log_eta R)``, ``B = (s_max + 1) R``; bracket ``s`` (from ``s_max`` down
to 0) starts ``n = ceil(B / R * eta^s / (s + 1))`` configurations with ``r = R eta^-s``
each, and rung ``i`` (0..s) keeps ``n_i = floor(n eta^-i)`` configurations trained to
``r_i = r eta^i`` units in total. One resource unit is ``steps_per_unit`` training
steps; survivors resume from their checkpoint, so rung ``i`` costs each survivor
``steps(r_i) - steps(r_{i-1})`` more steps.

Execution. Brackets run one after the other; within a bracket rungs are synchronous:
when every job of the rung has reached its step target, the ``n_{i+1}`` jobs with the
best objective value (:class:`themis.am.objective.Objective`: the lowest ``eval_loss`` by
default, or the highest value of a ``maximize`` metric; ties: job id) are promoted, the
others are stopped early. A job whose value is unknown or not finite ranks last. With a
target value, the first report that reaches it ends the search: that job is finished,
every other one stopped. (``HyperbandJob.loss`` holds the objective value, whatever the
metric.)

Maximum GPU demand of a job in rung ``i`` is ``min(max_gpus_per_job, eta^i)``: like the
paper's successive halving (section 4.3.2), survivors may use more GPUs. A ``gang`` job (a
distributed job, :mod:`themis.am.taskgroup`) always demands ``max_gpus_per_job``: it runs
on all of its workers' GPUs or not at all.

Agent interface (paper Figure 7, Eq. 2): :meth:`Hyperband.to_app_model` gives the
:class:`themis.mechanism.model.AppModel` of the app - the current rung's jobs (serial
iteration time estimate, iterations left, iterations of the rung, max demand) and the
future rungs of this and later brackets as :class:`~themis.mechanism.model.FuturePhase`.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from themis.am.objective import Objective
from themis.am.searchspace import SearchSpace, Value
from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job, PhaseShape
from themis.mechanism.placement import DEFAULT, PlacementProfile


class HyperbandError(ValueError):
    """Invalid Hyperband parameters or an inconsistent job report."""


@dataclass(frozen=True, slots=True)
class Rung:
    n: int  # configurations in this rung
    r: float  # resource units per configuration, cumulative


@dataclass(frozen=True, slots=True)
class Bracket:
    s: int
    rungs: tuple[Rung, ...]


def s_max_of(max_resource: float, eta: int) -> int:
    """floor(log_eta R), computed without floating-point surprises at exact powers."""
    s = 0
    while eta ** (s + 1) <= max_resource * (1 + 1e-12):
        s += 1
    return s


def hyperband_brackets(max_resource: float, eta: int = 3) -> list[Bracket]:
    """Every bracket of Hyperband for ``R`` and ``eta`` (Li et al., Algorithm 1)."""
    if eta < 2:
        raise HyperbandError(f"eta must be an integer >= 2, got {eta}")
    if not (math.isfinite(max_resource) and max_resource >= 1):
        raise HyperbandError(f"max resource R must be >= 1, got {max_resource}")
    s_max = s_max_of(max_resource, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        n = -(-(s_max + 1) * eta**s // (s + 1))  # ceil((s_max+1) eta^s / (s+1))
        r = max_resource / eta**s
        rungs = tuple(Rung(n // eta**i, r * eta**i) for i in range(s + 1))
        brackets.append(Bracket(s, rungs))
    return brackets


def plan_configurations(max_resource: float, eta: int,
                        brackets: Sequence[int] | None = None) -> int:
    """Configurations (jobs) a plan starts: the first rungs of its brackets (all, or the
    chosen ``brackets``). Spec parsers bound it before any configuration is sampled."""
    chosen = None if brackets is None else set(brackets)
    return sum(b.rungs[0].n for b in hyperband_brackets(max_resource, eta)
               if chosen is None or b.s in chosen)


class JobStatus(StrEnum):
    RUNNING = "running"  # in the current rung, step target not reached
    RUNG_DONE = "rung-done"  # reached the current rung's target; waiting for the others
    STOPPED = "stopped"  # stopped early by successive halving
    FINISHED = "finished"  # completed the last rung of its bracket


@dataclass
class HyperbandJob:
    id: str
    config: dict[str, Value]
    bracket: int  # index into Hyperband.plan
    rung: int
    target_steps: int
    rung_start_steps: int = 0
    steps_done: int = 0
    loss: float | None = None
    serial_iter_time: float | None = None
    status: JobStatus = JobStatus.RUNNING

    @property
    def iters_left(self) -> int:
        return max(0, self.target_steps - self.steps_done)


@dataclass(frozen=True, slots=True)
class RungOutcome:
    """What happened when a rung completed."""

    bracket: int
    rung: int
    promoted: tuple[str, ...]
    stopped: tuple[str, ...]
    finished: tuple[str, ...]  # jobs that completed their bracket's last rung
    started: tuple[str, ...]  # jobs of the next bracket, if one started


@dataclass(frozen=True, slots=True)
class JobState:
    """What the agent needs about one job of the current rung."""

    job_id: str
    serial_iter_time: float
    iters_done: int
    iters_left: int
    max_demand: int


@dataclass
class Hyperband:
    """Synchronous Hyperband over ``space``. Drive it with :meth:`report`."""

    space: SearchSpace
    max_resource: float
    eta: int = 3
    steps_per_unit: int = 1
    seed: int = 0
    max_gpus_per_job: int = 1
    gang: bool = False  # every job runs on exactly max_gpus_per_job GPUs
    app_id: str = "app"
    default_iter_time: float = 1.0  # serial seconds/step assumed before any profile
    brackets: Sequence[int] | None = None  # which s to run (default: all, s_max first)
    objective: Objective = field(default_factory=Objective)
    plan: list[Bracket] = field(init=False)
    jobs: dict[str, HyperbandJob] = field(init=False, default_factory=dict)
    bracket_index: int = field(init=False, default=0)
    rung_index: int = field(init=False, default=0)
    target_reached: str | None = field(init=False, default=None)  # job that reached it

    def __post_init__(self) -> None:
        if self.steps_per_unit < 1:
            raise HyperbandError(f"steps_per_unit must be >= 1, got {self.steps_per_unit}")
        if self.max_gpus_per_job < 1:
            raise HyperbandError(f"max_gpus_per_job must be >= 1, got {self.max_gpus_per_job}")
        plan = hyperband_brackets(self.max_resource, self.eta)
        if self.brackets is not None:
            wanted = set(self.brackets)
            unknown = wanted - {b.s for b in plan}
            if unknown:
                raise HyperbandError(f"no bracket s={sorted(unknown)} for R={self.max_resource}, "
                                     f"eta={self.eta}")
            plan = [b for b in plan if b.s in wanted]
        self.plan = plan
        self._rng = random.Random(self.seed)
        self._start_bracket()

    # -- plan arithmetic -------------------------------------------------------------

    def steps_for(self, r: float) -> int:
        return max(1, round(r * self.steps_per_unit))

    def demand_at(self, rung: int) -> int:
        if self.gang:
            return self.max_gpus_per_job
        return int(min(self.max_gpus_per_job, self.eta**rung))

    @property
    def done(self) -> bool:
        return self.bracket_index >= len(self.plan)

    def current_jobs(self) -> list[HyperbandJob]:
        """Jobs of the current rung (running or waiting for the rung to complete)."""
        return [j for j in self.jobs.values()
                if j.bracket == self.bracket_index and j.rung == self.rung_index
                and j.status in (JobStatus.RUNNING, JobStatus.RUNG_DONE)]

    def running_jobs(self) -> list[HyperbandJob]:
        return [j for j in self.current_jobs() if j.status is JobStatus.RUNNING]

    def _start_bracket(self) -> tuple[str, ...]:
        self.rung_index = 0
        if self.done:
            return ()
        bracket = self.plan[self.bracket_index]
        first = bracket.rungs[0]
        ids = []
        for k in range(first.n):
            job_id = f"{self.app_id}-s{bracket.s}-c{k}"
            self.jobs[job_id] = HyperbandJob(
                job_id, self.space.sample(self._rng), self.bracket_index, 0,
                self.steps_for(first.r),
            )
            ids.append(job_id)
        return tuple(ids)

    # -- progress ----------------------------------------------------------------------

    def report(
        self,
        job_id: str,
        steps_done: int,
        loss: float | None = None,
        serial_iter_time: float | None = None,
    ) -> RungOutcome | None:
        """Record a job's progress (e.g. from the profiler). Returns the outcome if this
        report completed the current rung."""
        job = self.jobs.get(job_id)
        if job is None:
            raise HyperbandError(f"unknown job {job_id!r}")
        if job.status in (JobStatus.STOPPED, JobStatus.FINISHED):
            return None  # late report from a job already decided upon
        if steps_done < 0:
            raise HyperbandError(f"job {job_id!r}: steps_done must be >= 0, got {steps_done}")
        job.steps_done = max(job.steps_done, steps_done)
        if loss is not None and math.isfinite(loss):
            job.loss = loss
        elif loss is not None:
            job.loss = math.inf  # diverged: ranks last
        if serial_iter_time is not None:
            if not (serial_iter_time > 0 and math.isfinite(serial_iter_time)):
                raise HyperbandError(f"job {job_id!r}: serial_iter_time must be > 0")
            job.serial_iter_time = serial_iter_time
        if self.objective.reached(job.loss) and not self.done:
            return self._end_at_target(job)
        if job.status is JobStatus.RUNNING and job.steps_done >= job.target_steps:
            job.status = JobStatus.RUNG_DONE
        if all(j.status is JobStatus.RUNG_DONE for j in self.current_jobs()):
            return self._complete_rung()
        return None

    def _end_at_target(self, job: HyperbandJob) -> RungOutcome:
        """``job`` reached the objective's target: it is the result; the search ends."""
        b, i = self.bracket_index, self.rung_index
        others = [j for j in self.jobs.values() if j is not job
                  and j.status in (JobStatus.RUNNING, JobStatus.RUNG_DONE)]
        for j in others:
            j.status = JobStatus.STOPPED
        job.status = JobStatus.FINISHED
        self.target_reached = job.id
        self.bracket_index = len(self.plan)
        return RungOutcome(b, i, (), tuple(j.id for j in others), (job.id,), ())

    def _rank(self, jobs: Sequence[HyperbandJob]) -> list[HyperbandJob]:
        """Best first by the objective (no value / not finite last; ties: job id)."""
        return sorted(jobs, key=lambda j: (self.objective.rank_key(j.loss), j.id))

    def _complete_rung(self) -> RungOutcome:
        bracket = self.plan[self.bracket_index]
        rung_jobs = self._rank(self.current_jobs())
        b, i = self.bracket_index, self.rung_index
        if i + 1 < len(bracket.rungs):
            nxt = bracket.rungs[i + 1]
            keep, drop = rung_jobs[: nxt.n], rung_jobs[nxt.n :]
            for j in drop:
                j.status = JobStatus.STOPPED
            for j in keep:
                j.rung = i + 1
                j.rung_start_steps = j.steps_done
                j.target_steps = self.steps_for(nxt.r)
                j.status = (JobStatus.RUNNING if j.steps_done < j.target_steps
                            else JobStatus.RUNG_DONE)
            self.rung_index = i + 1
            outcome = RungOutcome(b, i, tuple(j.id for j in keep), tuple(j.id for j in drop),
                                  (), ())
            if keep and all(j.status is JobStatus.RUNG_DONE for j in keep):
                self._complete_rung()  # degenerate: survivors already past the target
            return outcome
        for j in rung_jobs:
            j.status = JobStatus.FINISHED
        self.bracket_index += 1
        started = self._start_bracket()
        return RungOutcome(b, i, (), (), tuple(j.id for j in rung_jobs), started)

    def best(self) -> HyperbandJob | None:
        """The finished job with the best objective value so far."""
        done = [j for j in self.jobs.values()
                if j.status is JobStatus.FINISHED and j.loss is not None]
        return self._rank(done)[0] if done else None

    def top(self, n: int = 5) -> list[HyperbandJob]:
        """The ``n`` best trials with a value: finished ones first (they trained
        longest), then by objective value (a trial stopped early was judged on fewer
        steps, so it never outranks a finished one)."""
        valued = [j for j in self.jobs.values() if j.loss is not None]
        ranked = sorted(valued, key=lambda j: (j.status is not JobStatus.FINISHED,
                                               -j.steps_done,
                                               self.objective.rank_key(j.loss), j.id))
        return ranked[:n]

    # -- GPUs ----------------------------------------------------------------------------

    def iter_time(self, job: HyperbandJob) -> float:
        """A trial's serial iteration time: profiled, else the median of the rung's profiled
        trials, else the default."""
        if job.serial_iter_time is not None:
            return job.serial_iter_time
        known = [j.serial_iter_time for j in self.current_jobs() if j.serial_iter_time]
        return statistics.median(known) if known else self.default_iter_time

    # -- agent interface -------------------------------------------------------------------

    def job_states(self) -> list[JobState]:
        return [JobState(j.id, self.iter_time(j), j.steps_done, j.iters_left,
                         self.demand_at(j.rung))
                for j in sorted(self.current_jobs(), key=lambda j: j.id)]

    def future_rungs(self) -> list[tuple[int, int]]:
        """(jobs, iterations per job) of every rung not started yet, in order."""
        out: list[tuple[int, int]] = []
        if self.done:
            return out
        rungs = self.plan[self.bracket_index].rungs
        for i in range(self.rung_index + 1, len(rungs)):
            out.append((rungs[i].n, self.steps_for(rungs[i].r) - self.steps_for(rungs[i - 1].r)))
        for bracket in self.plan[self.bracket_index + 1 :]:
            prev = 0
            for rung in bracket.rungs:
                out.append((rung.n, self.steps_for(rung.r) - prev))
                prev = self.steps_for(rung.r)
        return [(n, it) for n, it in out if n >= 1 and it >= 1]

    def to_app_model(
        self, start_time: float, placement: PlacementProfile = DEFAULT
    ) -> AppModel:
        """The app as the agent's :class:`AppModel` (successive-halving kind)."""
        current = {j.id for j in self.current_jobs()}
        jobs = [
            Job(id=j.id, serial_iter_time=self.iter_time(j), iters_left=float(j.iters_left),
                max_demand=self.demand_at(j.rung),
                iters_total=float(j.target_steps - j.rung_start_steps))
            for j in sorted(self.current_jobs(), key=lambda j: j.id)
        ]
        work_done = sum(
            (j.rung_start_steps if j.id in current else j.steps_done) * self.iter_time(j)
            for j in self.jobs.values()
        )
        return AppModel(
            id=self.app_id, start_time=start_time, jobs=jobs,
            future_phases=[FuturePhase(n, float(it)) for n, it in self.future_rungs()],
            kind=AppKind.SUCCESSIVE_HALVING, placement=placement, work_done=work_done,
            done_phases=self.done_rungs(),
        )

    def done_rungs(self) -> tuple[PhaseShape, ...]:
        """The shape of every completed rung, in order (for the exact ideal time): the jobs
        that ran it, each for the rung's steps at its serial iteration time, capped at the
        rung's demand."""
        out: list[PhaseShape] = []
        for b, bracket in enumerate(self.plan[: self.bracket_index + 1]):
            last = len(bracket.rungs) if b < self.bracket_index else self.rung_index
            members = [j for j in self.jobs.values() if j.bracket == b]
            for i in range(last):
                prev = self.steps_for(bracket.rungs[i - 1].r) if i else 0
                steps = self.steps_for(bracket.rungs[i].r) - prev
                out.append(PhaseShape.of((steps * self.iter_time(j), self.demand_at(i))
                                         for j in members if j.rung >= i))
        return tuple(out)
