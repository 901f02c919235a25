"""Hyper-parameter app specs for standalone mode (YAML or JSON), with validation.

A spec declares one app: a Hyperband search over the training job's hyper-parameters::

    name: lr-search            # app id (default: the file name without extension)
    seed: 1                    # sampling seed (default 0)
    submit_at_s: 0             # seconds after start-up when the app arrives (default 0)
    hyperband:
      max_resource: 3          # R: resource units of the longest-trained configuration
      eta: 3                   # halving rate
      brackets: [1]            # brackets s to run (default: [1] with the default R and
                               # eta, else all of them, s_max first)
      steps_per_unit: 30       # training steps per resource unit
      max_gpus_per_job: 1      # GPUs a job may use (rung i: min(this, eta^i))
    search_space:              # sampled hyper-parameters (see SearchSpace.from_dict)
      learning_rate: {type: double, min: 0.0005, max: 0.05, scale: log}
      hidden_units: {type: int, min: 16, max: 64}
    job:                       # fixed arguments of every job of the app
      step_time_ms: 100        # emulated GPU work per step on one GPU (see docs)
      batch_size: 32
      checkpoint_every: 20

Every error is a :class:`SpecError` whose message names the file and the field. Limits
(docs/standalone.md): the file is read by :func:`themis.docfile.read_document` (1 MiB,
nesting depth 32, 100,000 values with YAML aliases expanded, |numbers| <= 1e18, duplicate
keys refused); the plan starts at most ``MAX_CONFIGURATIONS`` configurations and trains
each to at most ``MAX_STEPS`` steps (the bounds of :mod:`themis.submarine_am.spec`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themis.docfile import DocumentError, read_document
from themis.safeinput import short
from themis.submarine_am.hyperband import HyperbandError, hyperband_brackets, plan_configurations
from themis.submarine_am.searchspace import (
    Categorical,
    Double,
    Int,
    SearchSpace,
    SearchSpaceError,
    Value,
)

DATASETS = ("digits", "synthetic")  # = themis.jobs.data.DATASETS (no numpy import here)
OPTIMIZERS = ("adam", "sgd", "rmsprop", "adagrad")
_APP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # matched with fullmatch
#: bounds of a plan and of numbers (shared with the Submarine AM's spec)
MAX_CONFIGURATIONS = 10_000
MAX_STEPS = 1_000_000_000
MAX_RESOURCE = 1_000_000
MAX_ETA = 1_000
MAX_GPUS_PER_JOB = 64
_BIG = 1e18  # any other number: |x| <= 1e18


class SpecError(ValueError):
    """An app spec or a standalone option is invalid (names the source and the field)."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _BIG


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and abs(v) <= _BIG


def _check_lr(v: Any) -> str | None:
    return None if _is_num(v) and v > 0 else "must be a number > 0"


def _check_pos_int(v: Any) -> str | None:
    return None if _is_int(v) and v >= 1 else "must be an integer >= 1"


def _check_nonneg_int(v: Any) -> str | None:
    return None if _is_int(v) and v >= 0 else "must be an integer >= 0"


def _check_dropout(v: Any) -> str | None:
    return None if _is_num(v) and 0 <= v < 1 else "must be a number in [0, 1)"


def _check_nonneg(v: Any) -> str | None:
    return None if _is_num(v) and v >= 0 else "must be a number >= 0"


def _check_optimizer(v: Any) -> str | None:
    return None if v in OPTIMIZERS else f"must be one of {', '.join(OPTIMIZERS)}"


def _check_dataset(v: Any) -> str | None:
    return None if v in DATASETS else f"must be one of {', '.join(DATASETS)}"


#: Hyper-parameters of ``themis.jobs.train`` (search space or fixed): name -> validator.
HYPER_PARAMS: dict[str, Callable[[Any], str | None]] = {
    "learning_rate": _check_lr,
    "batch_size": _check_pos_int,
    "hidden_units": _check_pos_int,
    "num_layers": _check_nonneg_int,
    "dropout": _check_dropout,
    "optimizer": _check_optimizer,
    "momentum": _check_nonneg,
}
#: Job settings that are not searched over.
JOB_SETTINGS: dict[str, Callable[[Any], str | None]] = {
    "dataset": _check_dataset,
    "checkpoint_every": _check_pos_int,
    "eval_every": _check_pos_int,
    "keep_checkpoints": _check_pos_int,
    "step_time_ms": _check_nonneg,
}
_TOP_KEYS = ("name", "seed", "submit_at_s", "hyperband", "search_space", "job")
_HB_KEYS = ("max_resource", "eta", "brackets", "steps_per_unit", "max_gpus_per_job")


@dataclass(frozen=True, slots=True)
class HyperbandSpec:
    max_resource: float = 3.0
    eta: int = 3
    brackets: tuple[int, ...] | None = (1,)
    steps_per_unit: int = 30
    max_gpus_per_job: int = 1


@dataclass(frozen=True, slots=True)
class AppSpec:
    name: str
    search_space: Mapping[str, Mapping[str, Any]]
    hyperband: HyperbandSpec = HyperbandSpec()
    job: Mapping[str, Value] = field(default_factory=dict)
    seed: int = 0
    submit_at_s: float = 0.0
    source: str = "<built-in>"

    def space(self) -> SearchSpace:
        return SearchSpace.from_dict(self.search_space)

    @property
    def step_time_ms(self) -> float:
        return float(self.job.get("step_time_ms", 100.0))

    def planned_steps(self) -> int:
        """Training steps of the whole Hyperband plan (sum over every job's final step)."""
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


DEFAULT_SPACE: dict[str, dict[str, Any]] = {
    "learning_rate": {"type": "double", "min": 5e-4, "max": 5e-2, "scale": "log"},
    "hidden_units": {"type": "int", "min": 16, "max": 64},
}


#: Built-in apps (``themis standalone --apps N``), sized so that the default run shows the
#: mechanism on a 2-core machine (docs/standalone.md, "The default run"): one Hyperband
#: bracket of R=2, eta=2 (two configurations, the better one continued to twice the steps
#: on 2 GPUs), 200 steps per unit of 200 ms each, a new app every 15 s.
DEFAULT_MAX_RESOURCE = 2.0
DEFAULT_ETA = 2
DEFAULT_STEPS_PER_UNIT = 200
DEFAULT_STEP_TIME_MS = 200.0
DEFAULT_MAX_GPUS_PER_JOB = 2
DEFAULT_STAGGER_S = 15.0


def default_app(index: int, *, max_resource: float = DEFAULT_MAX_RESOURCE,
                eta: int = DEFAULT_ETA, steps_per_unit: int = DEFAULT_STEPS_PER_UNIT,
                step_time_ms: float = DEFAULT_STEP_TIME_MS,
                max_gpus_per_job: int = DEFAULT_MAX_GPUS_PER_JOB,
                stagger_s: float = DEFAULT_STAGGER_S) -> AppSpec:
    """The built-in app ``app-<index>`` used by ``--apps N``: one Hyperband bracket, s = 1
    (for R = 2, eta = 2: two configurations, then the better one trained to twice the steps
    on up to ``max_gpus_per_job`` GPUs; for R = 3, eta = 3: three, then the best to 3x),
    submitted ``index * stagger_s`` seconds after start-up."""
    s_max = len(hyperband_brackets(max_resource, eta)) - 1
    spec = AppSpec(
        name=f"app-{index}",
        search_space=DEFAULT_SPACE,
        hyperband=HyperbandSpec(max_resource, eta, (min(1, s_max),), steps_per_unit,
                                max_gpus_per_job),
        job={"step_time_ms": step_time_ms, "batch_size": 32, "num_layers": 1,
             "checkpoint_every": max(1, steps_per_unit // 4)},
        seed=index,
        submit_at_s=index * stagger_s,
    )
    validate(spec)
    return spec


def _key(k: Any) -> str:
    """A mapping key as a field name in a message (strings cut to 64 characters)."""
    return k[:64] if isinstance(k, str) else short(k)


def _err(src: str, where: str, msg: str) -> SpecError:
    return SpecError(f"app spec {src}: {where} {msg}")


def _check_values(src: str, section: str, values: Mapping[str, Any],
                  allowed: Mapping[str, Callable[[Any], str | None]]) -> None:
    for key, value in values.items():
        check = allowed.get(key) if isinstance(key, str) else None
        if check is None:
            raise _err(src, f"{section}.{_key(key)}:",
                       f"unknown setting (allowed: {', '.join(sorted(allowed))})")
        problem = check(value)
        if problem:
            raise _err(src, f"{section}.{key}={short(value)}", problem)


def validate(spec: AppSpec) -> None:
    src = spec.source
    if not isinstance(spec.name, str) or not _APP_ID.fullmatch(spec.name):
        raise _err(src, f"name={short(spec.name)}", "must be 1-64 letters, digits, '.', '_' "
                   "or '-' starting with a letter or digit")
    if not _is_num(spec.submit_at_s) or spec.submit_at_s < 0:
        raise _err(src, f"submit_at_s={short(spec.submit_at_s)}",
                   "must be a number in [0, 1e18]")
    if not _is_int(spec.seed):
        raise _err(src, f"seed={short(spec.seed)}", "must be an integer (|x| <= 1e18)")
    hb = spec.hyperband
    if not _is_num(hb.max_resource) or not 1 <= hb.max_resource <= MAX_RESOURCE:
        raise _err(src, f"hyperband.max_resource={short(hb.max_resource)}",
                   f"must be a number in [1, {MAX_RESOURCE}]")
    for name, low, high in (("eta", 2, MAX_ETA), ("steps_per_unit", 1, MAX_STEPS),
                            ("max_gpus_per_job", 1, MAX_GPUS_PER_JOB)):
        v = getattr(hb, name)
        if not _is_int(v) or not low <= v <= high:
            raise _err(src, f"hyperband.{name}={short(v)}", f"must be an integer in "
                                                            f"[{low}, {high}]")
    if hb.max_resource * hb.steps_per_unit > MAX_STEPS:
        raise _err(src, "hyperband.steps_per_unit:", f"max_resource x steps_per_unit = "
                   f"{hb.max_resource * hb.steps_per_unit:g} steps exceeds the limit of "
                   f"{MAX_STEPS}")
    plan = {b.s for b in hyperband_brackets(hb.max_resource, hb.eta)}
    if hb.brackets is not None:
        if not hb.brackets or not all(_is_int(s) for s in hb.brackets):
            raise _err(src, f"hyperband.brackets={short(list(hb.brackets))}",
                       "must be a non-empty list of integers")
        unknown = sorted(set(hb.brackets) - plan)
        if unknown:
            raise _err(src, f"hyperband.brackets={short(list(hb.brackets))}",
                       f"has no bracket s={short(unknown)} for max_resource={hb.max_resource} "
                       f"and eta={hb.eta} (valid: {sorted(plan)})")
    n_conf = plan_configurations(hb.max_resource, hb.eta, hb.brackets)
    if n_conf > MAX_CONFIGURATIONS:
        raise _err(src, "hyperband:", f"the plan (max_resource={hb.max_resource}, eta={hb.eta}"
                   f"{f', brackets={list(hb.brackets)}' if hb.brackets else ''}) starts "
                   f"{n_conf} configurations, more than the limit of {MAX_CONFIGURATIONS} "
                   "(lower max_resource, raise eta or choose brackets)")
    if not isinstance(spec.search_space, Mapping) or not spec.search_space:
        raise _err(src, "search_space", "must be a non-empty mapping of hyper-parameters")
    try:
        space = SearchSpace.from_dict(spec.search_space)
    except (SearchSpaceError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise _err(src, "search_space:", str(exc)) from exc
    for p in space.params:
        check = HYPER_PARAMS.get(p.name)
        if check is None:
            raise _err(src, f"search_space.{p.name}:",
                       f"not a hyper-parameter of the training job (allowed: "
                       f"{', '.join(sorted(HYPER_PARAMS))})")
        if isinstance(p, Double) and p.name in ("batch_size", "hidden_units", "num_layers"):
            raise _err(src, f"search_space.{p.name}:", "must be of type int or categorical")
        if isinstance(p, Categorical):
            samples: tuple[Any, ...] = p.choices
        elif isinstance(p, Double | Int):
            samples = (p.low, p.high)
        for v in samples:
            problem = check(v)
            if problem:
                raise _err(src, f"search_space.{p.name}: value {short(v)}", problem)
    if not isinstance(spec.job, Mapping):
        raise _err(src, "job", "must be a mapping")
    _check_values(src, "job", spec.job, {**HYPER_PARAMS, **JOB_SETTINGS})
    both = sorted(set(spec.job) & set(spec.search_space), key=repr)
    if both:
        raise _err(src, f"job.{both[0]}:", "is also in search_space (give it in one place)")


def _mapping(src: str, where: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _err(src, where, f"must be a mapping, got {type(value).__name__}")
    return value


def app_from_dict(data: Any, *, source: str, default_name: str) -> AppSpec:
    top = _mapping(source, "the document", data)
    if not top:
        raise _err(source, "the document", "is empty")
    unknown = sorted(set(top) - set(_TOP_KEYS), key=repr)
    if unknown:
        raise _err(source, f"field {short(unknown[0])}:",
                   f"unknown (allowed: {', '.join(_TOP_KEYS)})")
    hbd = _mapping(source, "hyperband", top.get("hyperband"))
    unknown = sorted(set(hbd) - set(_HB_KEYS), key=repr)
    if unknown:
        raise _err(source, f"hyperband.{_key(unknown[0])}:",
                   f"unknown setting (allowed: {', '.join(_HB_KEYS)})")
    base = HyperbandSpec()
    plan_given = "max_resource" in hbd or "eta" in hbd  # default: bracket 1 of R=3, eta=3
    brackets = hbd.get("brackets", None if plan_given else base.brackets)
    if brackets is not None and not isinstance(brackets, list | tuple):
        raise _err(source, f"hyperband.brackets={short(brackets)}",
                   "must be a list of integers")
    hb = HyperbandSpec(
        max_resource=hbd.get("max_resource", base.max_resource),
        eta=hbd.get("eta", base.eta),
        brackets=tuple(brackets) if brackets is not None else None,
        steps_per_unit=hbd.get("steps_per_unit", base.steps_per_unit),
        max_gpus_per_job=hbd.get("max_gpus_per_job", base.max_gpus_per_job),
    )
    if "search_space" not in top:
        raise _err(source, "field 'search_space':", "missing")
    space = top["search_space"]
    if isinstance(space, Mapping):
        for name, p in space.items():
            if not isinstance(p, Mapping):
                raise _err(source, f"search_space.{_key(name)}:",
                           "must be a mapping like {type: double, min: ..., max: ...}")
    name = top.get("name", default_name)
    spec = AppSpec(
        name=str(name) if isinstance(name, str | int) else repr(name),
        search_space=space,
        hyperband=hb,
        job=_mapping(source, "job", top.get("job")),
        seed=top.get("seed", 0),
        submit_at_s=top.get("submit_at_s", 0.0),
        source=source,
    )
    validate(spec)
    return spec


def load_app_spec(path: str | Path) -> AppSpec:
    """Read and validate one app spec (``.json`` as JSON, anything else as YAML)."""
    p = Path(path)
    src = repr(str(p))
    try:
        data = read_document(p)
    except DocumentError as exc:
        raise SpecError(f"app spec {src}: {exc.problem}") from exc
    try:
        return app_from_dict(data, source=src, default_name=p.stem)
    except HyperbandError as exc:
        raise SpecError(f"app spec {src}: hyperband: {exc}") from exc
