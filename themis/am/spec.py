"""The one app spec format of ``themis submit``, ``themis submit --dry-run`` and
``themis standalone``: a hyper-parameter group (Hyperband over a search space) or a single
job (Submarine ``job run`` style). Parsed from YAML/JSON, validated *before* anything is
submitted or started; every problem names its field (``hyperband.eta``) and what is wrong,
all of them in one :class:`SpecError`.

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
    am: {memory_mb: 768, vcores: 1, max_attempts: 2}    # YARN only
    standalone:                      # standalone only (ignored by themis submit)
      submit_at_s: 0                 # seconds after start-up when the app arrives

The older standalone format (top-level ``seed`` and ``submit_at_s``, the job's arguments
directly under ``job``, ``hyperband.max_gpus_per_job``) is converted by
:mod:`themis.am.launchers.local.spec` with a deprecation message.

Limits (docs/am.md, "Limits"): the file is read by :func:`themis.docfile.read_document`
(1 MiB, nesting depth 32, 100,000 values with YAML aliases expanded, |numbers| <= 1e18,
duplicate keys refused); a plan starts at most :data:`MAX_CONFIGURATIONS` configurations,
trains each to at most :data:`MAX_STEPS` steps; resources and counts have the upper bounds
of :data:`BOUNDS`. ``job.command`` is a :class:`themis.safeinput.Template`: ``{name}``
placeholders only, checked here, rendered by :func:`render_command`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from themis.am.hyperband import (
    Hyperband,
    HyperbandError,
    hyperband_brackets,
    plan_configurations,
)
from themis.am.objective import Objective, parse_objective
from themis.am.searchspace import Categorical, SearchSpace, SearchSpaceError
from themis.am.taskgroup import TaskGroup
from themis.docfile import DocumentError, read_document
from themis.safeinput import InputError, Limits, Template, load_json, short

KINDS = ("hyperband", "single-job")
#: placeholders the AM fills in for every job run (docs/jobs.md, the job contract)
PLACEHOLDERS = ("job_id", "app_id", "logdir", "max_steps", "checkpoint_uri", "checkpoint_dir",
                "num_gpus", "seed")
#: the environment variable of each placeholder, set for every job run as well, so that a
#: command without placeholders (a Submarine ``--worker_launch_cmd``) can follow the
#: contract: ``THEMIS_MAX_STEPS``, ``THEMIS_CHECKPOINT_DIR``, ...
CONTRACT_ENV = {k: f"THEMIS_{k.upper()}" for k in PLACEHOLDERS}


def contract_env(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``THEMIS_*`` variables of a job run from its placeholder values."""
    return {CONTRACT_ENV[k]: str(v) for k, v in values.items() if k in CONTRACT_ENV}

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # matched with fullmatch
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
#: a Docker image reference: [registry[:port]/]name[:tag][@digest] (fullmatch)
_IMAGE_RE = re.compile(r"[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]*)*"
                       r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?")
_PARAM_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: most configurations (jobs) one Hyperband plan may start, over its chosen brackets
MAX_CONFIGURATIONS = 10_000
#: most training steps of one job (max_resource x steps_per_unit, or max_steps)
MAX_STEPS = 1_000_000_000
#: largest max_resource (R) and eta
MAX_RESOURCE = 1_000_000
MAX_ETA = 1_000
#: upper bounds of the integer fields (lower bounds are in parse_spec)
BOUNDS = {
    "resources.gpus": 64, "resources.memory_mb": 1 << 20, "resources.vcores": 1024,
    "am.memory_mb": 1 << 20, "am.vcores": 1024, "am.max_attempts": 10,
    "job.max_restarts": 1000, "max_parallel_jobs": MAX_CONFIGURATIONS,
    "hyperband.eta": MAX_ETA, "hyperband.steps_per_unit": MAX_STEPS,
    "hyperband.seed": (1 << 63) - 1, "max_steps": MAX_STEPS,
    "tasks.workers": 64, "tasks.ps.count": 64, "tasks.ps.memory_mb": 1 << 20,
    "tasks.ps.vcores": 1024, "tensorboard.memory_mb": 1 << 20, "tensorboard.vcores": 1024,
}
_TOP = {"name", "queue", "kind", "search_space", "hyperband", "max_steps", "job", "resources",
        "tasks", "max_parallel_jobs", "am", "objective", "standalone", "tensorboard"}
_BIG = 1e18  # any other number: |x| <= 1e18


class SpecError(ValueError):
    """An invalid spec; ``problems`` lists ``(field, problem)`` pairs, ``source`` names the
    file (or is empty)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "") -> None:
        self.problems = problems
        self.source = source
        where = f"invalid app spec {source}" if source else "invalid app spec"
        super().__init__(f"{where}:\n" + "\n".join(f"  {f}: {p}" for f, p in problems))


# ------------------------------------------------------------- the bundled training job
DATASETS = ("digits", "synthetic")  # = themis.jobs.data.DATASETS (no numpy import here)
OPTIMIZERS = ("adam", "sgd", "rmsprop", "adagrad")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _BIG


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and abs(v) <= _BIG


def _rule(ok: Callable[[Any], bool], what: str) -> Callable[[Any], str | None]:
    return lambda v: None if ok(v) else what


#: Hyper-parameters of ``themis.jobs.train`` (search space or ``job.args``): name -> check.
HYPER_PARAMS: dict[str, Callable[[Any], str | None]] = {
    "learning_rate": _rule(lambda v: _is_num(v) and v > 0, "must be a number > 0"),
    "batch_size": _rule(lambda v: _is_int(v) and v >= 1, "must be an integer >= 1"),
    "hidden_units": _rule(lambda v: _is_int(v) and v >= 1, "must be an integer >= 1"),
    "num_layers": _rule(lambda v: _is_int(v) and v >= 0, "must be an integer >= 0"),
    "dropout": _rule(lambda v: _is_num(v) and 0 <= v < 1, "must be a number in [0, 1)"),
    "optimizer": _rule(lambda v: v in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
    "momentum": _rule(lambda v: _is_num(v) and v >= 0, "must be a number >= 0"),
}
#: Settings of the bundled job that are not searched over (``job.args`` only).
JOB_SETTINGS: dict[str, Callable[[Any], str | None]] = {
    "dataset": _rule(lambda v: v in DATASETS, f"must be one of {', '.join(DATASETS)}"),
    "checkpoint_every": _rule(lambda v: _is_int(v) and v >= 1, "must be an integer >= 1"),
    "eval_every": _rule(lambda v: _is_int(v) and v >= 1, "must be an integer >= 1"),
    "keep_checkpoints": _rule(lambda v: _is_int(v) and v >= 1, "must be an integer >= 1"),
    "step_time_ms": _rule(lambda v: _is_num(v) and v >= 0, "must be a number >= 0"),
}
#: the bundled job's command line flag of each argument (``step_time_ms`` is emulated GPU
#: work: ``--step-sleep-ms``; standalone scales it by the placement, docs/standalone.md)
BUNDLED_FLAGS = {k: f"--{k.replace('_', '-')}" for k in (*HYPER_PARAMS, *JOB_SETTINGS)
                 if k != "step_time_ms"}


def bundled_command(args: Mapping[str, Any], params: set[str]) -> str:
    """The command template of the bundled training job (``themis.jobs.train``) with
    fixed ``args`` and the searched ``params`` as placeholders."""
    parts = ["python3 -m themis.jobs.train --job-id {job_id} --logdir {logdir}",
             "--max-steps {max_steps} --checkpoint-uri {checkpoint_uri} --num-gpus {num_gpus}"]
    if "step_time_ms" in args:
        parts.append(f"--step-sleep-ms {args['step_time_ms']}")
    for k in sorted(args):
        if k in BUNDLED_FLAGS:
            parts.append(f"{BUNDLED_FLAGS[k]} {shlex.quote(str(args[k]))}")
    parts += [f"{BUNDLED_FLAGS[k]} {{{k}}}" for k in sorted(params)]
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Resources:
    gpus: int = 1
    memory_mb: int = 1024
    vcores: int = 1


@dataclass(frozen=True, slots=True)
class PsTasks:
    """The parameter servers of a distributed job (``tasks.ps``)."""

    count: int = 0
    memory_mb: int = 1024
    vcores: int = 1
    command: str = ""  # "" = job.command
    docker_image: str = ""  # YARN's Docker runtime ("" = job.docker_image)


@dataclass(frozen=True, slots=True)
class TensorBoardSettings:
    """``tensorboard``: a TensorBoard container for the app (YARN only; Submarine's
    ``--tensorboard``), serving the jobs' event files kept in HDFS."""

    memory_mb: int = 1024
    vcores: int = 1
    docker_image: str = ""  # YARN's Docker runtime ("" = the NodeManager's environment)


@dataclass(frozen=True, slots=True)
class AmResources:
    memory_mb: int = 768
    vcores: int = 1
    max_attempts: int = 2


@dataclass(frozen=True, slots=True)
class HyperbandSettings:
    max_resource: float = 9.0
    eta: int = 3
    steps_per_unit: int = 10
    brackets: tuple[int, ...] | None = None
    seed: int = 0


@dataclass(frozen=True)
class AppSpec:
    name: str
    kind: str
    command: str  # job.command; "" for the bundled job (``args``)
    search_space: dict[str, dict[str, Any]] = field(default_factory=dict)
    hyperband: HyperbandSettings = HyperbandSettings()
    max_steps: int = 0  # single-job
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 3
    resources: Resources = Resources()
    workers: int = 1  # tasks.workers
    ps: PsTasks = PsTasks()  # tasks.ps
    max_parallel_jobs: int = 0  # 0 = no cap
    am: AmResources = AmResources()
    queue: str = "default"
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


class _Checker:
    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def bad(self, where: str, why: str) -> None:
        self.problems.append((where, why))

    def int_(self, d: Mapping[str, Any], key: str, where: str, default: int | None, lo: int,
             hi: int | None = None) -> int:
        hi = BOUNDS.get(f"{where}{key}", hi)
        v = d.get(key, default)
        if v is None:
            self.bad(f"{where}{key}", "is required")
            return lo
        if isinstance(v, bool) or not isinstance(v, int):
            self.bad(f"{where}{key}", f"must be an integer, got {short(v)}")
            return lo
        if v < lo or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            self.bad(f"{where}{key}", f"must be {rng}, got {v}")
            return lo
        return v

    def str_(self, d: Mapping[str, Any], key: str, where: str, default: str | None) -> str:
        v = d.get(key, default)
        if v is None:
            self.bad(f"{where}{key}", "is required")
            return ""
        if not isinstance(v, str) or not v.strip():
            self.bad(f"{where}{key}", f"must be a non-empty string, got {short(v)}")
            return ""
        return v

    def section(self, d: Mapping[str, Any], key: str, allowed: set[str]) -> Mapping[str, Any]:
        v = d.get(key)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            self.bad(key, f"must be a mapping, got {type(v).__name__}")
            return {}
        for k in v:
            if k not in allowed:
                self.bad(f"{key}.{k[:64] if isinstance(k, str) else short(k, 40)}",
                         f"unknown field (known: {', '.join(sorted(allowed))})")
        return v


def _check_space(c: _Checker, raw: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, Mapping) or not raw:
        c.bad("search_space", "a hyperband app needs a mapping with at least one parameter")
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, p in raw.items():
        where = f"search_space.{short(name, 40) if not isinstance(name, str) else name[:64]}"
        if not isinstance(name, str) or not _PARAM_RE.fullmatch(name):
            c.bad(where, "parameter names must be ASCII identifiers of at most 64 characters "
                         "(used as {placeholders})")
            continue
        if name in PLACEHOLDERS:
            c.bad(where, f"{name!r} is reserved for the AM's own placeholder")
            continue
        if not isinstance(p, Mapping):
            c.bad(where, f"must be a mapping with a type, got {short(p)}")
            continue
        kind = p.get("type")
        if kind not in ("double", "int", "categorical"):
            c.bad(f"{where}.type", f"must be double, int or categorical, got {short(kind)}")
            continue
        allowed = {"type", "values"} if kind == "categorical" else {"type", "min", "max", "scale"}
        for k in p:
            if k not in allowed:
                c.bad(f"{where}.{k[:64] if isinstance(k, str) else short(k, 40)}",
                      f"unknown field for a {kind} parameter")
        if kind == "categorical":
            vals = p.get("values")
            if not isinstance(vals, list) or not vals:
                c.bad(f"{where}.values", "must be a non-empty list")
                continue
            if any(not isinstance(v, str | int | float) or isinstance(v, bool)
                   or (not isinstance(v, str) and not abs(v) <= 1e18) for v in vals):
                c.bad(f"{where}.values", "values must be strings or finite numbers "
                                         "(|x| <= 1e18)")
                continue
        else:
            ok = True
            for k in ("min", "max"):
                v = p.get(k)
                if isinstance(v, bool) or not isinstance(v, int | float) or not abs(v) <= 1e18:
                    c.bad(f"{where}.{k}", f"must be a finite number (|x| <= 1e18), got "
                                          f"{short(v)}")
                    ok = False
                elif kind == "int" and not isinstance(v, int):
                    c.bad(f"{where}.{k}", f"must be an integer for an int parameter, got "
                                          f"{short(v)}")
                    ok = False
            scale = p.get("scale", "linear")
            if scale not in ("linear", "log"):
                c.bad(f"{where}.scale", f"must be 'linear' or 'log', got {short(scale)}")
                ok = False
            if not ok:
                continue
            if p["min"] > p["max"]:
                c.bad(where, f"min {p['min']} > max {p['max']}")
                continue
            if scale == "log" and p["min"] <= 0:
                c.bad(f"{where}.min", f"log scale needs min > 0, got {p['min']}")
                continue
        out[name] = dict(p)
    if out and len(out) == len(raw):
        try:
            SearchSpace.from_dict(out)
        except SearchSpaceError as e:
            c.bad("search_space", str(e))
    return out


def _template(spec_command: str, params: set[str]) -> Template:
    """The command as a restricted template (raises InputError naming the problem)."""
    return Template(spec_command, set(PLACEHOLDERS) | params, "job.command")


def _check_command(c: _Checker, cmd: str, params: set[str]) -> None:
    """No placeholder is required: each is also in the job's environment (CONTRACT_ENV)."""
    try:
        _template(cmd, params)
    except InputError as e:
        c.bad("job.command", e.problem)


def _check_args(c: _Checker, raw: Any, space: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, Any]:
    """``job.args`` and, for the bundled job, the search space's parameters."""
    args: dict[str, Any] = {}
    if not isinstance(raw, Mapping):
        c.bad("job.args", f"must be a mapping of the bundled job's arguments, got {short(raw)}")
        raw = {}
    rules = {**HYPER_PARAMS, **JOB_SETTINGS}
    for k, v in raw.items():
        check = rules.get(k) if isinstance(k, str) else None
        if check is None:
            c.bad(f"job.args.{k[:64] if isinstance(k, str) else short(k, 40)}",
                  f"unknown setting (allowed: {', '.join(sorted(rules))})")
        elif (problem := check(v)) is not None:
            c.bad(f"job.args.{k}", f"{problem}, got {short(v)}")
        elif k in space:
            c.bad(f"job.args.{k}", "is also in search_space (give it in one place)")
        else:
            args[k] = v
    for name, p in space.items():
        check = HYPER_PARAMS.get(name)
        if check is None:
            c.bad(f"search_space.{name}", "not a hyper-parameter of the bundled training job "
                  f"(allowed: {', '.join(sorted(HYPER_PARAMS))}; or give job.command)")
            continue
        if p.get("type") == "double" and name in ("batch_size", "hidden_units", "num_layers"):
            c.bad(f"search_space.{name}", "must be of type int or categorical")
            continue
        samples = p.get("values", []) if p.get("type") == "categorical" else \
            [p.get("min"), p.get("max")]
        for v in samples:
            if (problem := check(v)) is not None:
                c.bad(f"search_space.{name}", f"value {short(v)} {problem}")
                break
    return args


def _check_tasks(c: _Checker, raw: Mapping[str, Any], command: str, params: set[str]
                 ) -> tuple[int, PsTasks]:
    """``tasks``: the workers and parameter servers of a distributed job."""
    tasks = c.section(raw, "tasks", {"workers", "ps"})
    workers = c.int_(tasks, "workers", "tasks.", 1, 1)
    ps_raw = tasks.get("ps")
    ps = PsTasks()
    if ps_raw is not None:
        if not isinstance(ps_raw, Mapping):
            c.bad("tasks.ps", f"must be a mapping, got {type(ps_raw).__name__}")
        else:
            for k in ps_raw:
                if k not in ("count", "memory_mb", "vcores", "command", "docker_image"):
                    c.bad(f"tasks.ps.{k[:64] if isinstance(k, str) else short(k, 40)}",
                          "unknown field (known: command, count, docker_image, memory_mb, "
                          "vcores)")
            ps_cmd = c.str_(ps_raw, "command", "tasks.ps.", "-") if "command" in ps_raw else ""
            if ps_cmd:
                try:
                    Template(ps_cmd, set(PLACEHOLDERS) | params, "tasks.ps.command")
                except InputError as e:
                    c.bad("tasks.ps.command", e.problem)
            ps = PsTasks(c.int_(ps_raw, "count", "tasks.ps.", None, 1),
                         c.int_(ps_raw, "memory_mb", "tasks.ps.", 1024, 128),
                         c.int_(ps_raw, "vcores", "tasks.ps.", 1, 1), ps_cmd,
                         _image(c, ps_raw, "tasks.ps."))
    if (workers > 1 or ps.count) and not command:
        c.bad("tasks", "a distributed job needs job.command (a program that reads "
                       "TF_CONFIG); the bundled job (job.args) trains on one worker")
    return workers, ps


def _image(c: _Checker, d: Mapping[str, Any], where: str) -> str:
    """``docker_image`` of ``d`` ("" when absent), checked as an image reference."""
    if "docker_image" not in d:
        return ""
    image = c.str_(d, "docker_image", where, "")
    if image and (len(image) > 255 or not _IMAGE_RE.fullmatch(image)):
        c.bad(f"{where}docker_image", f"not a Docker image reference "
                                      f"([registry/]name[:tag][@sha256:digest]), got "
                                      f"{short(image)}")
        return ""
    return image


def _tensorboard(c: _Checker, raw: Any) -> TensorBoardSettings | None:
    """``tensorboard``: false/absent (none), true (the defaults) or a mapping."""
    if raw is None or raw is False:
        return None
    if raw is True:
        return TensorBoardSettings()
    if not isinstance(raw, Mapping):
        c.bad("tensorboard", f"must be true, false or a mapping (memory_mb, vcores, "
                             f"docker_image), got {short(raw)}")
        return None
    t = c.section({"tensorboard": raw}, "tensorboard", {"memory_mb", "vcores", "docker_image"})
    return TensorBoardSettings(c.int_(t, "memory_mb", "tensorboard.", 1024, 128),
                               c.int_(t, "vcores", "tensorboard.", 1, 1),
                               _image(c, t, "tensorboard."))


def parse_spec(raw: Any, source: str = "", default_name: str | None = None) -> AppSpec:
    """Validate a loaded spec (dict); raise :class:`SpecError` naming every problem.
    ``default_name`` (standalone: the file name) is used when the spec has no name."""
    c = _Checker()
    if raw is None or raw == {}:
        raise SpecError([("(top level)", "is empty")], source)
    if not isinstance(raw, Mapping):
        raise SpecError([("(top level)", f"must be a mapping, got {type(raw).__name__}")],
                        source)
    for k in raw:
        if k not in _TOP:
            c.bad(short(k, 40) if not isinstance(k, str) else k[:64],
                  f"unknown field (known: {', '.join(sorted(_TOP))})")
    name = c.str_(raw, "name", "", default_name)
    if name and not _NAME_RE.fullmatch(name):
        c.bad("name", f"must match {_NAME_RE.pattern} (letters, digits, . _ -), got "
                      f"{short(name)}")
    queue = c.str_(raw, "queue", "", "default")
    if queue and not _QUEUE_RE.fullmatch(queue):
        c.bad("queue", f"must match {_QUEUE_RE.pattern}, got {short(queue)}")
    kind = raw.get("kind", "hyperband")
    if kind not in KINDS:
        c.bad("kind", f"must be one of {', '.join(KINDS)}, got {short(kind)}")
        kind = "hyperband"

    space: dict[str, dict[str, Any]] = {}
    hbs = HyperbandSettings()
    max_steps = 0
    if kind == "hyperband":
        space = _check_space(c, raw.get("search_space"))
        h = c.section(raw, "hyperband", {"max_resource", "eta", "steps_per_unit", "brackets",
                                         "seed"})
        r = h.get("max_resource", 9)
        if (isinstance(r, bool) or not isinstance(r, int | float)
                or not 1 <= r <= MAX_RESOURCE):
            c.bad("hyperband.max_resource", f"must be a number in [1, {MAX_RESOURCE}], got "
                                            f"{short(r)}")
            r = 1
        eta = c.int_(h, "eta", "hyperband.", 3, 2)
        spu = c.int_(h, "steps_per_unit", "hyperband.", 10, 1)
        seed = c.int_(h, "seed", "hyperband.", 0, 0)
        if r * spu > MAX_STEPS:
            c.bad("hyperband.steps_per_unit", f"max_resource x steps_per_unit = {r * spu:g} "
                                              f"steps exceeds the limit of {MAX_STEPS}")
        brackets = h.get("brackets")
        bt: tuple[int, ...] | None = None
        if brackets is not None:
            if (not isinstance(brackets, list) or not brackets
                    or any(isinstance(b, bool) or not isinstance(b, int) for b in brackets)):
                c.bad("hyperband.brackets", f"must be a non-empty list of integers, got "
                                            f"{short(brackets)}")
            else:
                bt = tuple(brackets)
                valid = {b.s for b in hyperband_brackets(float(r), eta)} if eta >= 2 else set()
                unknown = sorted(set(bt) - valid)
                if unknown:
                    c.bad("hyperband.brackets", f"no bracket s={short(unknown)} for "
                                                f"max_resource={r}, eta={eta} (valid: "
                                                f"{sorted(valid)})")
                    bt = None
        n_conf = plan_configurations(float(r), eta, bt) if eta >= 2 else 0
        if n_conf > MAX_CONFIGURATIONS:
            c.bad("hyperband", f"the plan (max_resource={r}, eta={eta}"
                               f"{f', brackets={list(bt)}' if bt else ''}) starts {n_conf} "
                               f"configurations, more than the limit of {MAX_CONFIGURATIONS} "
                               "(lower max_resource, raise eta or choose brackets)")
        hbs = HyperbandSettings(float(r), eta, spu, bt, seed)
        if "max_steps" in raw:
            c.bad("max_steps", "only for kind single-job (hyperband sets rung targets)")
    else:
        for k in ("search_space", "hyperband"):
            if k in raw:
                c.bad(k, "only for kind hyperband")
        max_steps = c.int_(raw, "max_steps", "", None, 1)

    job = c.section(raw, "job", {"command", "args", "env", "max_restarts", "docker_image"})
    if "job" not in raw:
        c.bad("job", "is required (job.command, or job.args for the bundled training job)")
    command, args = "", {}
    if "command" in job and "args" in job:
        c.bad("job", "give either command (your program) or args (the bundled job), not both")
    elif "command" in job or ("job" in raw and "args" not in job):
        command = c.str_(job, "command", "job.", None)
        if command:
            _check_command(c, command, set(space) if kind == "hyperband" else set())
    else:
        args = _check_args(c, job.get("args"), space)
    env_raw = job.get("env", {})
    env: dict[str, str] = {}
    if not isinstance(env_raw, Mapping):
        c.bad("job.env", f"must be a mapping of names to values, got {short(env_raw)}")
    else:
        for k, v in env_raw.items():
            if not isinstance(k, str) or not _ENV_RE.fullmatch(k):
                c.bad(f"job.env.{short(k, 40) if not isinstance(k, str) else k[:64]}",
                      "not a valid environment variable name")
            elif not isinstance(v, str | int | float):  # (bool is an int: "True")
                c.bad(f"job.env.{k}", f"must be a string or number, got {short(v)}")
            elif "\0" in str(v):
                c.bad(f"job.env.{k}", "must not contain a NUL character")
            else:
                env[k] = str(v)
    max_restarts = c.int_(job, "max_restarts", "job.", 3, 0)
    docker_image = _image(c, job, "job.")

    res = c.section(raw, "resources", {"gpus", "memory_mb", "vcores"})
    resources = Resources(c.int_(res, "gpus", "resources.", 1, 1, 64),
                          c.int_(res, "memory_mb", "resources.", 1024, 128),
                          c.int_(res, "vcores", "resources.", 1, 1))
    workers, ps = _check_tasks(c, raw, command, set(space) if kind == "hyperband" else set())
    if workers * resources.gpus > BOUNDS["resources.gpus"]:
        c.bad("tasks.workers", f"{workers} workers x resources.gpus {resources.gpus} = "
                               f"{workers * resources.gpus} GPUs per job, more than "
                               f"{BOUNDS['resources.gpus']}")
    am = c.section(raw, "am", {"memory_mb", "vcores", "max_attempts"})
    amr = AmResources(c.int_(am, "memory_mb", "am.", 768, 256),
                      c.int_(am, "vcores", "am.", 1, 1),
                      c.int_(am, "max_attempts", "am.", 2, 1, 10))
    mpj = c.int_(raw, "max_parallel_jobs", "", 0, 0)
    objective = parse_objective(raw.get("objective"), c.bad)
    tensorboard = _tensorboard(c, raw.get("tensorboard"))
    sa = c.section(raw, "standalone", {"submit_at_s"})
    submit_at = sa.get("submit_at_s", 0.0)
    if not _is_num(submit_at) or submit_at < 0:
        c.bad("standalone.submit_at_s", f"must be a number in [0, 1e18], got {short(submit_at)}")
        submit_at = 0.0
    if c.problems:
        raise SpecError(c.problems, source)
    spec = AppSpec(name=name, kind=kind, command=command, search_space=space, hyperband=hbs,
                   max_steps=max_steps, env=env, max_restarts=max_restarts, resources=resources,
                   workers=workers, ps=ps,
                   max_parallel_jobs=mpj, am=amr, queue=queue, args=args, objective=objective,
                   docker_image=docker_image, tensorboard=tensorboard,
                   submit_at_s=float(submit_at), source=source or "<built-in>")
    try:
        spec.make_hyperband("check")
    except (HyperbandError, SearchSpaceError) as e:
        raise SpecError([("hyperband", str(e))], source) from None
    return spec


#: the older standalone format's fields (docs/standalone.md, "Older spec format")
_OLD_TOP = ("seed", "submit_at_s")
_JOB_KEYS = {"command", "args", "env", "max_restarts", "docker_image"}
#: where a converted field was in the older standalone format (for messages)
_OLD_PATHS = (("hyperband.seed", "seed"), ("standalone.submit_at_s", "submit_at_s"),
              ("resources.gpus", "hyperband.max_gpus_per_job"), ("job.args", "job"))


def is_old_standalone(doc: Any) -> bool:
    """Whether ``doc`` is in the older standalone format: top-level ``seed`` or
    ``submit_at_s``, ``hyperband.max_gpus_per_job``, no ``job`` section, or a ``job``
    section holding the bundled job's arguments directly."""
    if not isinstance(doc, Mapping) or not doc:
        return False
    hb, job = doc.get("hyperband"), doc.get("job")
    return (any(k in doc for k in _OLD_TOP) or "job" not in doc
            or (isinstance(hb, Mapping) and "max_gpus_per_job" in hb)
            or (isinstance(job, Mapping) and bool(set(job) - _JOB_KEYS)))


def convert_standalone(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The older standalone format in the one format, with that format's defaults made
    explicit (bracket s=1 of R=3, eta=3 when neither is given; 30 steps per unit)."""
    new = {k: v for k, v in doc.items() if k not in (*_OLD_TOP, "hyperband", "job")}
    hb = doc.get("hyperband", {})
    if isinstance(hb, Mapping):
        hb = dict(hb)
        new["resources"] = {"gpus": hb.pop("max_gpus_per_job", 1)}
        if "max_resource" not in hb and "eta" not in hb:
            hb.setdefault("brackets", [1])
        hb = {"max_resource": 3, "eta": 3, **hb}
        hb.setdefault("steps_per_unit", 30)
        if "seed" in doc:
            hb["seed"] = doc["seed"]
    new["hyperband"] = hb
    new["job"] = {"args": {} if doc.get("job") is None else doc["job"]}
    if "submit_at_s" in doc:
        new["standalone"] = {"submit_at_s": doc["submit_at_s"]}
    return new


def _old_path(field_: str) -> str:
    for new, old in _OLD_PATHS:
        if field_ == new or field_.startswith(new + "."):
            return old + field_[len(new):]
    return field_


def load_spec(path: str | Path, default_name: str | None = None,
              warn: Callable[[str], None] | None = None) -> AppSpec:
    """Read a YAML (or JSON) spec file and validate it. A file in the older standalone
    format is converted, with a deprecation message to ``warn`` (default: stderr) that
    names the one-line conversion command; its problems name the fields as written."""
    source = repr(str(path))
    try:
        raw = read_document(path)
    except DocumentError as exc:
        raise SpecError([("(file)", exc.problem)], source) from None
    if not is_old_standalone(raw):
        return parse_spec(raw, source, default_name)
    (warn or _stderr)(f"themis: {path}: the older standalone spec format is deprecated; "
                      f"convert it with: themis submit --dry-run {shlex.quote(str(path))} "
                      "> NEW.json (docs/am.md, \"Spec format\")")
    try:
        return parse_spec(convert_standalone(raw), source, default_name or Path(path).stem)
    except SpecError as exc:
        raise SpecError([(_old_path(f), p) for f, p in exc.problems], source) from None


def _stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr)


def render_command(spec: AppSpec, values: Mapping[str, Any], task: str = "worker") -> str:
    """The job command (``task`` "ps": the parameter servers' command) with every
    placeholder filled in (values are shell-quoted)."""
    command = spec.ps.command if task == "ps" and spec.ps.command else spec.job_command()
    template = _template(command, set(spec.search_space))
    return template.render({k: shlex.quote(str(v)) for k, v in values.items()})
