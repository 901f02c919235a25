"""The one app spec format of ``themis submit``, ``themis submit --dry-run`` and
``themis standalone``: a hyper-parameter group (Hyperband over a search space) or a single
job (Submarine ``job run`` style). Parsed from YAML/JSON, validated *before* anything is
submitted or started; every problem names its field (``hyperband.eta``) and what is wrong,
all of them in one :class:`~themis.am.speccheck.SpecError`.

Format (docs/am.md)::

    name: digits-hb                  # app name (standalone: defaults to the file name)
    kind: hyperband                  # or single-job
    search_space:                    # hyperband only; at least one parameter
      learning_rate: {type: double, min: 1.0e-4, max: 1.0e-1, scale: log}
      hidden_units:  {type: int, min: 16, max: 128, scale: log}
      optimizer:     {type: categorical, values: [adam, sgd]}
    hyperband:                       # hyperband only
      max_resource: 9                # R (resource units per configuration)
      eta: 3
      steps_per_unit: 20             # training steps per resource unit
      brackets: [1]                  # optional: which s to run (default all)
      seed: 0
    objective:                       # themis.am.objective (default: minimize eval_loss)
      metric: eval_accuracy          # any TensorFlow scalar tag the jobs write
      goal: maximize
      target: 0.97                   # optional: ends the search when a trial reaches it
    max_steps: 500                   # single-job only
    job:                             # either command (any program) or args (bundled job)
      command: >-                    # placeholders: see PLACEHOLDERS and the parameter names
        python -m themis.jobs.train --job-id {job_id} --logdir {logdir}
        --max-steps {max_steps} --checkpoint-uri {checkpoint_uri}
        --learning-rate {learning_rate} --hidden-units {hidden_units} --optimizer {optimizer}
      args: {batch_size: 32}         # instead of command: themis.jobs.train's fixed arguments
      env: {KEY: value}
      max_restarts: 3                # failed runs of one job before the app fails
    resources:                       # per job (YARN: one worker container)
      gpus: 1                        # standalone: a job's GPUs grow to this by rung
      memory_mb: 1024                # YARN only
      vcores: 1                      # YARN only
    tasks:                           # optional: a distributed TensorFlow job (job.command)
      workers: 2                     # workers, each with `resources` (default 1)
      ps:                            # parameter servers (default none; no GPU)
        count: 1
        memory_mb: 1024              # YARN only
        vcores: 1                    # YARN only
        command: ...                 # their own command (default: job.command)
    max_parallel_jobs: 4             # optional cap on concurrently running jobs
    queue: default                   # YARN only
    node_label: gpu                  # YARN only: the node-label partition (default: the
                                     # queue's default-node-label-expression)
    am: {memory_mb: 768, vcores: 1, max_attempts: 2}    # YARN only
    standalone:                      # standalone only (ignored by themis submit)
      submit_at_s: 0                 # seconds after start-up when the app arrives

The older standalone format (top-level ``seed`` and ``submit_at_s``, the job's arguments
directly under ``job``, ``hyperband.max_gpus_per_job``) is converted by
:mod:`themis.am.legacy` with a deprecation message (:func:`themis.am.specfile.load_spec`).

Limits (docs/am.md, "Limits"): the file is read by :func:`themis.docfile.read_document`
(1 MiB, nesting depth 32, 100,000 values with YAML aliases expanded, |numbers| <= 1e18,
duplicate keys refused); a plan starts at most
:data:`~themis.am.speccheck.MAX_CONFIGURATIONS` configurations, trains each to at most
:data:`~themis.am.speccheck.MAX_STEPS` steps; resources and counts have the upper bounds
of :data:`~themis.am.speccheck.BOUNDS`. ``job.command`` is a
:class:`themis.safeinput.Template`: ``{name}`` placeholders only, checked by
:mod:`themis.am.speccheck`, rendered by :func:`themis.am.command.render_command`.

This module is the model: :class:`AppSpec` (its parts: :mod:`themis.am.specparts`) and
:func:`parse_spec`, which builds one from a loaded document that
:func:`themis.am.speccheck.check_spec` has checked (``AppSpec.from_json`` parses, so the
model sits above its checks). Spec files are read by :mod:`themis.am.specfile`; the job
command and the job contract's environment are :mod:`themis.am.command`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from themis.am.command import bundled_command
from themis.am.hyperband import Hyperband, HyperbandError, hyperband_brackets
from themis.am.objective import Objective
from themis.am.searchspace import Categorical, SearchSpace, SearchSpaceError
from themis.am.speccheck import SpecError, check_spec
from themis.am.specparts import (
    AmResources,
    HyperbandSettings,
    PsTasks,
    Resources,
    TensorBoardSettings,
)
from themis.am.taskgroup import TaskGroup
from themis.safeinput import InputError, Limits, load_json


@dataclass(frozen=True)
class AppSpec:
    name: str
    kind: str
    command: str  # job.command; "" for the bundled job (``args``)
    search_space: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (the parts are frozen dataclasses: one shared default each, RUF009 cannot see it)
    hyperband: HyperbandSettings = HyperbandSettings()  # noqa: RUF009
    max_steps: int = 0  # single-job
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 3
    resources: Resources = Resources()  # noqa: RUF009
    workers: int = 1  # tasks.workers
    ps: PsTasks = PsTasks()  # tasks.ps  # noqa: RUF009
    max_parallel_jobs: int = 0  # 0 = no cap
    am: AmResources = AmResources()  # noqa: RUF009
    queue: str = "default"
    #: the YARN node label (partition) the app's containers run in; "" for the queue's
    #: ``default-node-label-expression`` (docs/yarn.md, "Partitions (node labels)")
    node_label: str = ""
    args: dict[str, Any] = field(default_factory=dict)  # job.args (the bundled job)
    docker_image: str = ""  # job.docker_image: YARN's Docker runtime (YARN only)
    tensorboard: TensorBoardSettings | None = None  # YARN only
    objective: Objective = field(default_factory=Objective)
    submit_at_s: float = 0.0  # standalone.submit_at_s
    source: str = field(default="<built-in>", compare=False)  # the file, for messages

    def to_dict(self) -> dict[str, Any]:
        """The spec in its input format (``parse_spec(spec.to_dict()) == spec``)."""
        job: dict[str, Any] = ({"command": self.command} if self.command
                               else {"args": dict(self.args)})
        d: dict[str, Any] = {
            "name": self.name, "queue": self.queue, "kind": self.kind,
            "job": {**job, "env": dict(self.env), "max_restarts": self.max_restarts,
                    **({"docker_image": self.docker_image} if self.docker_image else {})},
            "resources": asdict(self.resources), "am": asdict(self.am),
            "max_parallel_jobs": self.max_parallel_jobs,
            "objective": self.objective.to_dict(),
        }
        if self.node_label:
            d["node_label"] = self.node_label
        if self.submit_at_s:
            d["standalone"] = {"submit_at_s": self.submit_at_s}
        if self.tensorboard is not None:
            d["tensorboard"] = {k: v for k, v in asdict(self.tensorboard).items()
                                if v or k != "docker_image"}
        if self.task_group.distributed:
            d["tasks"] = {"workers": self.workers}
            if self.ps.count:
                ps = {k: v for k, v in asdict(self.ps).items()
                      if v or k not in ("command", "docker_image")}
                d["tasks"]["ps"] = ps
        if self.kind == "hyperband":
            hb = asdict(self.hyperband)
            if hb["brackets"] is None:
                del hb["brackets"]
            else:
                hb["brackets"] = list(hb["brackets"])
            d["hyperband"] = hb
            d["search_space"] = {k: dict(v) for k, v in self.search_space.items()}
        else:
            d["max_steps"] = self.max_steps
        return d

    def to_json(self) -> str:
        import json

        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AppSpec:
        try:
            raw = load_json(text.encode("utf-8", "surrogatepass"), Limits())
        except InputError as exc:
            raise SpecError([("(json)", str(exc))]) from None
        return parse_spec(raw)

    def make_hyperband(self, app_id: str, default_iter_time: float = 1.0) -> Hyperband:
        """The app's Hyperband plan (a single job is a one-bracket, one-rung plan)."""
        if self.kind == "single-job":
            return Hyperband(SearchSpace([Categorical("_", ("",))]), max_resource=1.0, eta=2,
                             steps_per_unit=self.max_steps, app_id=app_id,
                             max_gpus_per_job=self.job_gpus(), gang=self.gang,
                             objective=self.objective, default_iter_time=default_iter_time)
        hb = self.hyperband
        return Hyperband(SearchSpace.from_dict(self.search_space), max_resource=hb.max_resource,
                         eta=hb.eta, steps_per_unit=hb.steps_per_unit, seed=hb.seed,
                         app_id=app_id, max_gpus_per_job=self.job_gpus(), gang=self.gang,
                         brackets=hb.brackets, objective=self.objective,
                         default_iter_time=default_iter_time)

    @property
    def task_group(self) -> TaskGroup:
        return TaskGroup(self.workers, self.ps.count)

    @property
    def gang(self) -> bool:
        """Whether a job runs on exactly :meth:`job_gpus` GPUs (a distributed job: every
        worker has its GPUs or none runs), not on a count that grows by rung."""
        return self.task_group.distributed

    def job_gpus(self) -> int:
        """GPUs of one job: a distributed job's gang, else the most a job may grow to."""
        return self.task_group.gpus(self.resources.gpus)

    def job_command(self) -> str:
        """The command template of every job: ``job.command``, or the bundled job's."""
        return self.command or bundled_command(self.args, set(self.search_space))

    def space(self) -> SearchSpace:
        return SearchSpace.from_dict(self.search_space)

    @property
    def seed(self) -> int:
        return self.hyperband.seed

    @property
    def step_time_ms(self) -> float:
        """Emulated GPU work per step of the bundled job on one GPU (standalone)."""
        return float(self.args.get("step_time_ms", 100.0))

    def planned_steps(self) -> int:
        """Training steps of the whole plan (sum over every job's final step)."""
        if self.kind == "single-job":
            return self.max_steps
        hb = self.hyperband
        total = 0
        for b in hyperband_brackets(hb.max_resource, hb.eta):
            if hb.brackets is not None and b.s not in hb.brackets:
                continue
            prev = 0
            for rung in b.rungs:
                steps = max(1, round(rung.r * hb.steps_per_unit))
                total += rung.n * (steps - prev)
                prev = steps
        return total

    def max_concurrent_jobs(self) -> int:
        """Most jobs that can run at once over the plan (first rung of the widest bracket)."""
        if self.kind == "single-job":
            n = 1
        else:
            plan = hyperband_brackets(self.hyperband.max_resource, self.hyperband.eta)
            if self.hyperband.brackets is not None:
                plan = [b for b in plan if b.s in set(self.hyperband.brackets)]
            n = max((b.rungs[0].n for b in plan), default=1)
        return min(n, self.max_parallel_jobs) if self.max_parallel_jobs else n

    def docker_image_of(self, task: str = "worker") -> str:
        """The Docker image a task runs in ("" = the NodeManager's own environment)."""
        return (self.ps.docker_image or self.docker_image) if task == "ps" \
            else self.docker_image

    @property
    def uses_docker(self) -> bool:
        return bool(self.docker_image or (self.ps.count and self.ps.docker_image)
                    or (self.tensorboard and self.tensorboard.docker_image))

    def max_gpus(self) -> int:
        return max(1, self.max_concurrent_jobs() * self.job_gpus())


def parse_spec(raw: Any, source: str = "", default_name: str | None = None) -> AppSpec:
    """Validate a loaded spec (dict); raise :class:`SpecError` naming every problem.
    ``default_name`` (standalone: the file name) is used when the spec has no name."""
    spec = AppSpec(**check_spec(raw, source, default_name))
    try:
        spec.make_hyperband("check")
    except (HyperbandError, SearchSpaceError) as e:
        raise SpecError([("hyperband", str(e))], source) from None
    return spec
