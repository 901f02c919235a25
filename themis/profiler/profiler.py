"""Per-job training progress from TensorFlow event logs (paper section 5).

A :class:`Profiler` follows the log directory of every job of an app and keeps, per job,
the steps done, the training and evaluation losses and the timed iterations together
with the allocation they ran on (``themis/num_gpus`` and ``themis/locality``, written by
:mod:`themis.jobs.train` at the start of every run segment; segments without them count
as one GPU, slot-local). From those it derives serial iteration times for the agent,
the objective values for Hyperband's early stopping (the tag named by the app's
:class:`~themis.am.objective.Objective`; by default ``eval_loss``, falling back to the
smoothed training ``loss``) and placement slowdowns (:mod:`.slowdown`).

Writers other than the bundled job: Keras' ``model.fit`` (TensorBoard callback) writes the
runs ``train/`` and ``validation/``, PyTorch's ``SummaryWriter`` (and ``tensorboardX``) a
directory per run. An objective names a tag qualified by its run (``validation/epoch_loss``)
or a bare one (``epoch_loss``), which resolves to the validation run where there is one,
else the top-level files, else the training run (:meth:`JobProfile.objective_source` says
which). Keras' ``epoch_*`` tags are indexed by epoch, not step: they count for the
objective, never for the steps done or the step times.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from themis.mechanism.placement import DEFAULT, PlacementProfile
from themis.mechanism.topology import Locality
from themis.profiler.events import LogDirTail, ScalarPoint
from themis.profiler.slowdown import IterSample, estimate_slowdowns

TAG_LOSS = "loss"
TAG_EVAL_LOSS = "eval_loss"
TAG_ITER_TIME = "iteration_time"
TAG_NUM_GPUS = "themis/num_gpus"
TAG_LOCALITY = "themis/locality"
#: Keras writes its per-epoch scalars as ``epoch_<metric>``, indexed by epoch
EPOCH_PREFIX = "epoch_"
#: runs of evaluations (their points come at an evaluation's end: no step times from them)
VALIDATION_RUNS = ("validation", "val", "eval", "evaluation", "test")
#: which run a bare objective tag resolves to, first found first ("" = top-level files)
RUN_PREFERENCE = (*VALIDATION_RUNS, "", "train")
MAX_TAGS_SEEN = 256


class ProfilerError(KeyError):
    """Unknown job id, or a job registered twice."""


@dataclass
class JobProfile:
    job_id: str
    steps_done: int = 0
    losses: list[tuple[int, float]] = field(default_factory=list)
    eval_losses: list[tuple[int, float]] = field(default_factory=list)
    iterations: list[IterSample] = field(default_factory=list)
    metric: str = TAG_EVAL_LOSS  # the objective's tag, bare or qualified by its run
    #: the objective's values per series (qualified tag -> (step or epoch, value))
    metric_series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    #: every qualified scalar tag read (at most MAX_TAGS_SEEN): what a job without the
    #: objective did write
    tags_seen: set[str] = field(default_factory=set)
    #: step times from the event files' wall times (jobs that write no ``iteration_time``)
    wall_steps: list[IterSample] = field(default_factory=list)
    _last_wall: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)
    _placement: dict[str, tuple[int, Locality]] = field(default_factory=dict, repr=False)

    def add(self, p: ScalarPoint) -> None:
        qualified = p.qualified_tag
        num_gpus, locality = self._placement.get(p.source, (1, Locality.SLOT))
        if len(self.tags_seen) < MAX_TAGS_SEEN:
            self.tags_seen.add(qualified)
        if not p.tag.startswith(EPOCH_PREFIX):  # epoch-indexed values are no steps
            self._step(p)
        if self.metric not in (TAG_LOSS, TAG_EVAL_LOSS) and self.metric in (qualified, p.tag):
            self.metric_series.setdefault(qualified, []).append((p.step, p.value))
        elif p.tag == TAG_LOSS:
            self.losses.append((p.step, p.value))
        elif p.tag == TAG_EVAL_LOSS:
            self.eval_losses.append((p.step, p.value))
        elif p.tag == TAG_ITER_TIME:
            self.iterations.append(IterSample(p.step, p.value, num_gpus, locality))
        elif p.tag == TAG_NUM_GPUS:
            self._placement[p.source] = (max(1, round(p.value)), locality)
        elif p.tag == TAG_LOCALITY:
            level = Locality(min(max(round(p.value), 0), int(Locality.CLUSTER)))
            self._placement[p.source] = (num_gpus, level)

    def _step(self, p: ScalarPoint) -> None:
        """Steps done, and step times from wall times (not from a validation run, whose
        points come at the end of evaluations)."""
        self.steps_done = max(self.steps_done, p.step)
        if p.run in VALIDATION_RUNS:
            return
        num_gpus, locality = self._placement.get(p.source, (1, Locality.SLOT))
        last = self._last_wall.get(p.source)
        if last is None or p.step > last[0]:
            if last is not None and p.wall_time > last[1]:
                self.wall_steps.append(IterSample(p.step, (p.wall_time - last[1])
                                                  / (p.step - last[0]), num_gpus, locality))
                del self.wall_steps[:-1000]
            self._last_wall[p.source] = (p.step, p.wall_time)

    def objective_source(self) -> str | None:
        """The series the objective's value comes from (``validation/epoch_loss``,
        ``eval_loss``, ``loss (smoothed)``); None while the job has written none."""
        if self.metric == TAG_EVAL_LOSS:
            return TAG_EVAL_LOSS if self.eval_losses else (
                f"{TAG_LOSS} (smoothed)" if self.losses else None)
        if self.metric == TAG_LOSS:
            return f"{TAG_LOSS} (smoothed)" if self.losses else None
        if self.metric in self.metric_series:  # qualified, or top-level
            return self.metric
        for run in RUN_PREFERENCE:
            key = f"{run}/{self.metric}" if run else self.metric
            if key in self.metric_series:
                return key
        return min(self.metric_series) if self.metric_series else None

    def latest_loss(self, window: int = 10) -> float | None:
        """The newest eval loss, else the mean of the last ``window`` training losses."""
        if self.eval_losses:
            return max(self.eval_losses)[1]
        if not self.losses:
            return None
        recent = sorted(self.losses)[-window:]
        return sum(v for _, v in recent) / len(recent)

    def objective_value(self) -> float | None:
        """The newest value of the objective's tag (by step); for ``eval_loss`` (the
        default) :meth:`latest_loss`, for ``loss`` the mean of the last ten."""
        if self.metric == TAG_EVAL_LOSS:
            return self.latest_loss()
        if self.metric == TAG_LOSS:
            recent = sorted(self.losses)[-10:]
            return sum(v for _, v in recent) / len(recent) if recent else None
        source = self.objective_source()
        return max(self.metric_series[source])[1] if source is not None else None

    def serial_iter_time(
        self, profile: PlacementProfile = DEFAULT, window: int = 200
    ) -> float | None:
        """Median over the last ``window`` timed steps of ``t * k / S(level)``; for a job
        that writes no ``iteration_time``, its steps timed by the event files' wall times."""
        recent = (self.iterations or self.wall_steps)[-window:]
        if not recent:
            return None
        return statistics.median(
            s.normalised / profile.slowdown(s.locality) for s in recent
        )


class Profiler:
    """Follows the event logs of an app's jobs; ``metric`` is the objective's tag."""

    def __init__(self, min_samples: int = 5, metric: str = TAG_EVAL_LOSS) -> None:
        self.min_samples = min_samples
        self.metric = metric
        self._tails: dict[str, LogDirTail] = {}
        self._jobs: dict[str, JobProfile] = {}

    def add_job(self, job_id: str, logdir: Path) -> None:
        if job_id in self._tails:
            raise ProfilerError(f"job {job_id!r} is already profiled")
        self._tails[job_id] = LogDirTail(Path(logdir))
        self._jobs[job_id] = JobProfile(job_id, metric=self.metric)

    def remove_job(self, job_id: str) -> None:
        self._tails.pop(job_id, None)

    def job(self, job_id: str) -> JobProfile:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise ProfilerError(f"job {job_id!r} is not profiled") from None

    @property
    def jobs(self) -> Mapping[str, JobProfile]:
        return self._jobs

    def poll(self) -> dict[str, list[ScalarPoint]]:
        """Read what every followed job wrote since the last poll; returns it per job."""
        new: dict[str, list[ScalarPoint]] = {}
        for job_id, tail in self._tails.items():
            points = tail.poll()
            prof = self._jobs[job_id]
            for p in points:
                prof.add(p)
            if points:
                new[job_id] = points
        return new

    def slowdowns(self, base: PlacementProfile = DEFAULT) -> dict[Locality, float]:
        """Observed S per level (levels without enough samples are absent)."""
        return estimate_slowdowns(
            {j: p.iterations for j, p in self._jobs.items()}, self.min_samples, base
        )

    def placement_profile(self, base: PlacementProfile = DEFAULT) -> PlacementProfile:
        """``base`` with observed slowdowns substituted (clamped >= 1, monotone)."""
        return base.with_observed(self.slowdowns(base))
