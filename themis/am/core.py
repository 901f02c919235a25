"""The application-master core that standalone mode and the YARN AM share: Hyperband (with
the app's objective), the agent's bidder, and the job lifecycle - start, stop with a
checkpoint, resume, and the failure and retry policy - over a small :class:`Launcher`
interface with two implementations, local processes
(:class:`themis.am.launchers.local.jobs.LocalProcessLauncher`) and YARN containers through the JVM
shell (:class:`themis.am.launchers.yarn.launcher.YarnContainerLauncher`). Their conformance
suite is :mod:`themis.testing.am_conformance`.

Lifecycle of one job (a Hyperband trial):

* the AM picks GPUs for it (its own placement rules: GPU ids in standalone, a node in YARN)
  and calls :meth:`Launcher.launch`; the launcher reports :attr:`LaunchCode.STARTED` with
  the step the job resumed from (its newest checkpoint, 0 for a fresh start);
* progress (steps, the objective's value, serial iteration time) goes to
  :meth:`AmCore.progress`, which feeds Hyperband and completes rungs. While a run is live
  its steps count at most to one short of its rung's target: a rung is decided on a
  trial's values only once its run has ended (:meth:`AmCore.apply`), because a writer
  may show the target step before the value that belongs to it (Keras writes its
  ``evaluation_*_vs_iterations`` series before the epoch's ``epoch_loss``), and a rung
  ranked on the previous epoch's value would promote the wrong trial. A run that ends by
  itself at its target (:attr:`LaunchCode.REACHED`, also a program stopped after it ran
  past its target) counts its steps in full; after a run *stopped* (a lease end, a move)
  the job's steps stay capped, also in reports that arrive after its end, until a later
  run reaches the target: the stop may have come between the target step and its value
  (the epoch's end, where Keras also writes its backup), so a job stopped at or past its
  target runs once more from its checkpoint - and exits at once when the checkpoint
  already holds the target;
* when the app loses the GPUs (lease end) or Hyperband stops the trial, the AM calls
  :meth:`Launcher.stop`: the job checkpoints and exits (:attr:`LaunchCode.STOPPED`); the
  next launch, on whatever GPUs the app holds then, resumes from that checkpoint;
* any other exit that is not the job reaching its target is a failure
  (:attr:`LaunchCode.FAILED`): the job is launched again after ``backoff_s`` x its failure
  count, at most ``job.max_restarts`` times; after that the trial is ranked last (its
  value is +inf for the objective) and the search goes on without it. The app fails only
  when every trial failed.
* a new AM attempt (the AM crashed) restores :meth:`AmCore.to_state` and relaunches the
  trials Hyperband still runs; they resume from their checkpoints.

A distributed job (the spec's ``tasks``: :mod:`themis.am.taskgroup`) is gang-scheduled: it
runs on exactly ``workers x resources.gpus`` GPUs (:attr:`AmCore.gang`), the AM gives a
job either all of them or none (:meth:`AmCore.gpu_counts`), its bidder bids only for whole
groups (:func:`gang_bids`), and a launch (:meth:`AmCore.launch_for`) starts all of its
tasks; the launcher reports one event per job for the whole group.

The control loop both application masters run around this core, with the app's agent,
is :class:`themis.am.master.AppMasterBase`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from themis.am.appstate import hyperband_to_dict, restore_hyperband
from themis.am.hyperband import Hyperband, HyperbandJob, JobStatus, RungOutcome
from themis.am.objective import trial_json
from themis.am.packing import JobNeed, gpu_counts
from themis.am.taskgroup import TaskGroup
from themis.mechanism.bidder import ModelBidder, OfferInfo
from themis.mechanism.bids import BidTable
from themis.mechanism.fairness import FairnessContext, rho
from themis.mechanism.model import AppModel, ModelError
from themis.mechanism.placement import DEFAULT, PlacementProfile
from themis.mechanism.topology import Locality

MAX_TAGS = 50  # tags kept per job for the "no objective" messages

if TYPE_CHECKING:
    from themis.am.spec import AppSpec

STATE_FORMAT = "themis-am-core-v1"
#: JobRecord fields of the live run, not saved (a new AM attempt has no live run)
LIVE_FIELDS = frozenset({"live", "live_restored", "last_run_stopped"})


class LaunchCode(StrEnum):
    STARTED = "started"  # the job runs; ``step``: the step it resumed from
    REACHED = "reached"  # exited 0 at the run's step target (``step``)
    STOPPED = "stopped"  # exited after a stop request; its checkpoint is kept
    FAILED = "failed"  # any other exit (or the launch itself failed)


@dataclass(frozen=True, slots=True)
class LaunchEvent:
    job_id: str
    code: LaunchCode
    step: int | None = None  # STARTED: restored step; exits: last step known
    status: int | None = None  # exit status
    detail: str = ""
    #: STARTED: the live run's start told again, with the step it did resume from (YARN:
    #: the job's own ``start`` after its runner took it as started from its event files)
    restated: bool = False


@dataclass(frozen=True, slots=True)
class JobLaunch:
    """One run of a job: its step target and where it runs - the leased GPU ids
    (standalone), or a node and a GPU count (YARN asks the RM for a container there)."""

    job_id: str
    target_steps: int
    gpus: tuple[str, ...] = ()
    node: str = ""
    count: int = 0
    workers: int = 1  # a distributed job's task group (themis.am.taskgroup) ...
    ps: int = 0  # ... the GPUs are split evenly among the workers

    @property
    def n_gpus(self) -> int:
        return self.count or len(self.gpus)

    @property
    def group(self) -> TaskGroup:
        return TaskGroup(self.workers, self.ps)

    def worker_gpus(self, index: int) -> tuple[str, ...]:
        """The GPU ids of worker ``index`` (standalone)."""
        k = len(self.gpus) // self.workers
        return self.gpus[index * k:(index + 1) * k]


class Launcher(Protocol):
    """Starts and stops job runs for :class:`AmCore` (a run = a process or a container)."""

    def launch(self, run: JobLaunch) -> None:
        """Start ``run`` (asynchronously: STARTED comes from :meth:`poll`)."""

    def stop(self, job_id: str, reason: str) -> None:
        """Ask the job's live run to checkpoint and exit (STOPPED comes from poll)."""

    def poll(self) -> list[LaunchEvent]:
        """What happened to runs since the last poll."""

    def live(self) -> set[str]:
        """Jobs with a run that has not ended yet (including runs asked to stop)."""


@dataclass
class JobRecord:
    """What the core keeps per job besides Hyperband's own state."""

    runs: int = 0
    failures: int = 0
    last_exit: int | None = None
    restored_steps: list[int] = field(default_factory=list)
    not_before: float = 0.0  # no relaunch before (back-off after a failure)
    gave_up: bool = False  # failed more than max_restarts times: ranked last
    #: the series the objective's value came from (``validation/epoch_loss``; the
    #: profiler's ``objective_source``), "" while none
    objective_source: str = ""
    #: the scalar tags the job's event files held while they had no objective value
    tags: list[str] = field(default_factory=list)
    #: a rung ended for this job without any value of the objective: it ranked last
    missing_objective: bool = False
    #: a run of the job has started and not ended (its steps are capped, module doc)
    live: bool = False
    #: that run resumed from a checkpoint (its step is the last of ``restored_steps``)
    live_restored: bool = False
    #: the most steps reported for the job, uncapped (the past-target stop reads it)
    seen_steps: int = 0
    #: its last run was stopped (not ended by itself): steps stay capped until a run of
    #: the job reaches the target (module doc)
    last_run_stopped: bool = False


class LiveBidder(ModelBidder):
    """The agent's :class:`ModelBidder` (its app model refreshed by the AM every tick), plus
    the app's live rho for status and reports: Eq. 1/2 of the current model with the GPUs
    held now (same code as the bids). With ``gang`` > 0 (distributed jobs of ``gang`` GPUs
    each) it bids only for bundles that leave the app a multiple of ``gang`` GPUs: GPUs
    short of a whole task group would idle (:func:`gang_bids`)."""

    def __init__(self, model: AppModel, clock: Callable[[], float],
                 max_gpus: int | None = None, gang: int = 0) -> None:
        super().__init__(model, clock)
        self._max = max_gpus
        self.gang = gang
        self.cluster_gpus = 0
        self.active_apps = 1

    def max_gpus(self) -> int:
        return self._max if self._max is not None else super().max_gpus()

    def set_cluster_gpus(self, n: int) -> None:
        super().set_cluster_gpus(n)
        self.cluster_gpus = n

    def bid(self, offer: OfferInfo) -> BidTable:
        self.active_apps = max(1, offer.active_apps)
        self.cluster_gpus = offer.cluster_gpus or self.cluster_gpus
        return gang_bids(super().bid(offer), len(offer.held), self.gang)

    @property
    def n_avg(self) -> float:
        return self._n_avg.value

    def live_rho(self, held: int, locality: Locality, cluster: int = 0) -> float | None:
        """rho with ``held`` GPUs at ``locality`` (None before the cluster size is known)."""
        with self._lock:
            app, n_avg, cg = self.app, self._n_avg.value, self._cluster_gpus or cluster
        if cg < 1:
            return None
        try:
            return rho(app, held, locality, FairnessContext(self.clock(), cg, n_avg, self.ideal))
        except ModelError:
            return None


def gang_bids(table: BidTable, held: int, gang: int) -> BidTable:
    """``table`` without the bids after which the app would hold a number of GPUs that is
    not a multiple of ``gang`` (0 or 1: ``table`` unchanged)."""
    if gang <= 1:
        return table
    return replace(table, bids=tuple(b for b in table.bids
                                     if (held + len(b.gpus)) % gang == 0))


def gang_counts(jobs: Sequence[JobNeed], num_gpus: int, gang: int) -> dict[str, int]:
    """GPUs per job for jobs that each run on exactly ``gang`` GPUs: the jobs with the most
    work left get ``gang`` each while whole groups fit; the others get none (they wait; a
    job is never started on part of its workers' GPUs)."""
    order = sorted(jobs, key=lambda j: (-j.work_left, j.job_id))
    return {j.job_id: gang for j in order[: num_gpus // gang]}


class AmCore:
    """Hyperband + the job lifecycle policy of one app (see the module docstring)."""

    def __init__(self, spec: AppSpec, app_id: str, *, clock: Callable[[], float],
                 default_iter_time: float = 1.0, backoff_s: float = 2.0,
                 on_outcome: Callable[[RungOutcome], None] | None = None,
                 whole_jobs: bool = False) -> None:
        """``whole_jobs``: every job runs on exactly ``spec.job_gpus()`` GPUs whatever its
        rung (the YARN AM: one container of that size per job, docs/am.md "Known limits"),
        so the app model says so and the bidder bids for whole jobs (:attr:`gang`)."""
        self.spec = spec
        self.app_id = app_id
        self.clock = clock
        self.backoff_s = backoff_s
        self.default_iter_time = default_iter_time
        self.whole_jobs = whole_jobs
        self.hb: Hyperband = self._hyperband()
        self.jobs: dict[str, JobRecord] = {}
        self.on_outcome = on_outcome or (lambda outcome: None)
        #: lines for the AM's log that no launcher event carries (:meth:`take_notes`)
        self.notes: list[str] = []

    def _hyperband(self) -> Hyperband:
        """The spec's Hyperband; with :attr:`whole_jobs`, every job's demand (the app
        model's, :meth:`Hyperband.demand_at`) is the GPUs it runs on, not eta^rung."""
        hb = self.spec.make_hyperband(self.app_id, self.default_iter_time)
        if self.whole_jobs:
            hb.gang = True
        return hb

    def record(self, job_id: str) -> JobRecord:
        return self.jobs.setdefault(job_id, JobRecord())

    # ---------------------------------------------------------------- lifecycle
    def apply(self, ev: LaunchEvent) -> str:
        """Apply a launcher event; returns a line for the AM's log ("" for none)."""
        rec = self.record(ev.job_id)
        job = self.hb.jobs.get(ev.job_id)
        if ev.code is LaunchCode.STARTED:
            if ev.restated:  # the same run, resumed from the restated step
                if rec.live_restored and rec.restored_steps:
                    rec.restored_steps.pop()
            else:
                rec.runs += 1
                rec.live = True
            rec.live_restored = bool(ev.step)
            if ev.step:
                rec.restored_steps.append(ev.step)
            return ""
        rec.live = False  # the run ended: its last values are final, its steps count
        # ... unless it was stopped, perhaps after its target step and before that step's
        # value (module docstring): capped until a run reaches the target
        rec.last_run_stopped = ev.code is LaunchCode.STOPPED
        if job is not None and job.status is JobStatus.RUNNING:
            # (REACHED's ``step`` is the run's own target: the job may have been promoted
            # meanwhile, and a stopped run may have written steps up to its target)
            self.progress(ev.job_id, max(rec.seen_steps, ev.step or 0))
        if ev.code in (LaunchCode.REACHED, LaunchCode.STOPPED):
            return ""
        rec.failures += 1
        rec.last_exit = ev.status
        rec.not_before = self.clock() + self.backoff_s * rec.failures
        if rec.failures <= self.spec.max_restarts or rec.gave_up:
            return (f"{ev.job_id} failed ({ev.detail or f'exit {ev.status}'}); retry "
                    f"{rec.failures}/{self.spec.max_restarts}")
        rec.gave_up = True
        self._rank_given_up_last()
        return (f"{ev.job_id} failed {rec.failures} times (last: "
                f"{ev.detail or f'exit {ev.status}'}); ranked last")

    def _rank_given_up_last(self) -> None:
        """Report every given-up trial Hyperband still runs at its target with +inf, so
        that rungs complete without it (repeated: a rung may promote one again)."""
        while True:
            stuck = [j for j in self.hb.running_jobs() if self.record(j.id).gave_up]
            if not stuck:
                return
            for j in stuck:
                self.progress(j.id, j.target_steps, math.inf)

    def progress(self, job_id: str, steps: int, value: float | None = None,
                 iter_time: float | None = None, *, source: str | None = None,
                 tags: Sequence[str] = ()) -> RungOutcome | None:
        """A job's steps, objective value and serial iteration time -> Hyperband;
        ``source``: which series the value came from, ``tags``: what the job's event files
        hold while they have no value (both from the profiler)."""
        rec = self.record(job_id)
        if source:
            rec.objective_source = source
        if tags and not source:
            rec.tags = sorted(tags)[:MAX_TAGS]
        rec.seen_steps = max(rec.seen_steps, steps)
        job = self.hb.jobs.get(job_id)
        capped = rec.live or rec.last_run_stopped
        if capped and not rec.gave_up and job is not None and steps >= job.target_steps:
            steps = job.target_steps - 1  # decided when the run ends (module docstring)
        outcome = self.hb.report(job_id, steps, value, iter_time)
        if outcome is not None:
            self._flag_missing_objective(outcome)
            self.on_outcome(outcome)
            self._rank_given_up_last()
        return outcome

    def _flag_missing_objective(self, outcome: RungOutcome) -> None:
        """No silent search: a trial that ends a rung without a value of the objective is
        ranked last, and the AM's log and status say so, with the tags it did write."""
        metric = self.spec.objective.metric
        for job_id in (*outcome.promoted, *outcome.stopped, *outcome.finished):
            job, rec = self.hb.jobs.get(job_id), self.record(job_id)
            if job is None or job.loss is not None or rec.gave_up or rec.missing_objective:
                continue
            rec.missing_objective = True
            seen = ", ".join(rec.tags[:20]) or "no scalar at all"
            self.notes.append(
                f"{job_id}: no value of the objective {metric!r} in its event files after "
                f"{job.steps_done} steps: ranked last (its event files hold: {seen})")

    def take_notes(self) -> list[str]:
        out, self.notes = self.notes, []
        return out

    @property
    def objective_never_seen(self) -> bool:
        """The search ended and no trial ever had a value of the objective: it ranked
        nothing. The app fails (docs/am.md, "Objective") unless the spec's objective is
        ``optional``; an app of one trial (``job run``) has nothing to rank."""
        jobs = self.hb.jobs.values()
        return (not self.spec.objective.optional and self.done and len(self.hb.jobs) > 1
                and all(j.loss is None for j in jobs))

    def objective_failure(self) -> str:
        """Why the app failed when :attr:`objective_never_seen` (one line)."""
        tags = sorted({t for r in self.jobs.values() for t in r.tags})
        seen = ", ".join(tags[:20]) + (" ..." if len(tags) > 20 else "") or "none"
        return (f"no trial wrote the objective {self.spec.objective.metric!r} to its event "
                f"files, so the search ranked nothing (scalar tags written: {seen}); set "
                "objective.metric to one of them (run/tag or tag), or objective.optional: true")

    @property
    def gang(self) -> int:
        """GPUs of every job when jobs are distributed (task groups) or the AM runs every
        job on its full size (:attr:`whole_jobs`), else 0."""
        return self.spec.job_gpus() if self.spec.gang or self.whole_jobs else 0

    def gpu_counts(self, jobs: Sequence[JobNeed], num_gpus: int,
                   have: Mapping[str, int] | None = None) -> dict[str, int]:
        """How many of ``num_gpus`` GPUs each job runs on: whole task groups for
        distributed jobs (:func:`gang_counts`: a group's size never changes), else
        :func:`~.packing.gpu_counts` (``have``: what running jobs keep)."""
        if self.gang:
            return gang_counts(jobs, num_gpus, self.gang)
        return gpu_counts(jobs, num_gpus, have)

    def launch_for(self, job_id: str, gpus: tuple[str, ...] = (), node: str = "",
                   count: int = 0) -> JobLaunch:
        """The :class:`JobLaunch` of a run of ``job_id`` on ``gpus`` (or ``count`` GPUs on
        ``node``), with the spec's task group; ValueError for a distributed job given
        other than its gang's GPU count."""
        n = count or len(gpus)
        if self.gang and n != self.gang:
            raise ValueError(f"{job_id}: a job of {self.spec.workers} workers x "
                             f"{self.spec.resources.gpus} GPUs runs on {self.gang} GPUs, "
                             f"not {n}")
        return JobLaunch(job_id, self.hb.jobs[job_id].target_steps, gpus, node, count,
                         self.spec.workers, self.spec.ps.count)

    def remaining_work(self, job: HyperbandJob) -> float:
        """Serial seconds the trial still needs for its current rung (iterations left x its
        serial iteration time, estimated from the app's other trials until profiled)."""
        return job.iters_left * self.hb.iter_time(job)

    def by_remaining_work(self, jobs: Iterable[HyperbandJob]) -> list[HyperbandJob]:
        """The one job order of both application masters: the trial with the most serial
        work left first (it bounds the rung's finish time, paper section 5), ties by id."""
        return sorted(jobs, key=lambda j: (-self.remaining_work(j), j.id))

    def runnable(self) -> list[HyperbandJob]:
        """Trials Hyperband runs now that may be launched (not given up, not backing off)."""
        now = self.clock()
        return [j for j in self.hb.running_jobs()
                if not self.record(j.id).gave_up and now >= self.record(j.id).not_before]

    @property
    def failed(self) -> bool:
        """Every trial failed past its restarts (nothing left to rank), or the search ended
        without any value of its objective (:attr:`objective_never_seen`)."""
        return (bool(self.hb.jobs) and all(self.record(j).gave_up for j in self.hb.jobs)) \
            or self.objective_never_seen

    @property
    def done(self) -> bool:
        return bool(self.hb.done)

    # ---------------------------------------------------------------- status, state
    def model(self, start_time: float, profile: PlacementProfile = DEFAULT) -> AppModel:
        return self.hb.to_app_model(start_time, profile)

    def progress_fraction(self) -> float:
        jobs = self.hb.jobs.values()
        total = sum(j.target_steps for j in jobs) or 1
        return min(1.0, sum(min(j.steps_done, j.target_steps) for j in jobs) / total)

    def placeholders(self, job_id: str, **paths: Any) -> dict[str, Any]:
        """A run's placeholder values but ``max_steps``, ``num_gpus`` and the ``paths``
        (logdir, checkpoint_uri, checkpoint_dir) the AM passes."""
        config = self.hb.jobs[job_id].config
        return {**{k: v for k, v in config.items() if k != "_"}, "job_id": job_id,
                "app_id": self.app_id, "seed": self.spec.seed, **paths}

    def top(self, n: int = 5) -> list[dict[str, Any]]:
        return [trial_json(j, self.spec.objective) for j in self.hb.top(n)]

    def best_json(self) -> dict[str, Any] | None:
        best = self.hb.best()
        return None if best is None else {"id": best.id, "loss": best.loss,
                                          "config": best.config}

    def best_line(self) -> str:
        """``best <trial> <metric> <value>`` ("" while no trial has finished)."""
        best = self.hb.best()
        if best is None or best.loss is None:
            return ""
        return f"best {best.id} {self.spec.objective.metric} {best.loss:.4f}"

    def to_state(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "hyperband": hyperband_to_dict(self.hb),
                "jobs": {k: {f: x for f, x in asdict(v).items() if f not in LIVE_FIELDS}
                         for k, v in self.jobs.items()}}  # (a new attempt has no live run)

    def restore(self, d: dict[str, Any]) -> None:
        """Resume from :meth:`to_state` (a new AM attempt); ValueError if unusable."""
        try:
            if d.get("format") != STATE_FORMAT:
                raise ValueError(f"format {d.get('format')!r}")
            hb = self._hyperband()
            restore_hyperband(hb, d["hyperband"])
            jobs = {k: JobRecord(**v) for k, v in d.get("jobs", {}).items()}
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"saved state unusable: {e}") from None
        self.hb, self.jobs = hb, jobs
        for rec in self.jobs.values():
            rec.not_before = 0.0  # clock of the previous attempt
