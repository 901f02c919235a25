"""The app spec a user submits: a hyper-parameter group (Hyperband over a search space) or a
single job (Submarine ``job run`` style). Parsed from YAML/JSON, validated *before* anything
is submitted; every problem names its field (``hyperband.eta``) and what is wrong.

Format (docs/am.md)::

    name: digits-hb                  # app name in YARN
    queue: default
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
    max_steps: 500                   # single-job only
    job:
      command: >-                    # placeholders: see PLACEHOLDERS and the parameter names
        python -m themis.jobs.train --job-id {job_id} --logdir {logdir}
        --max-steps {max_steps} --checkpoint-uri {checkpoint_uri}
        --learning-rate {learning_rate} --hidden-units {hidden_units} --optimizer {optimizer}
      env: {KEY: value}
      max_restarts: 3                # failed runs of one job before the app fails
    resources:                       # per worker (one job = one worker container)
      gpus: 1
      memory_mb: 1024
      vcores: 1
    max_parallel_jobs: 4             # optional cap on concurrently running jobs
    am: {memory_mb: 768, vcores: 1, max_attempts: 2}

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
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from themis.docfile import DocumentError, read_document
from themis.safeinput import InputError, Limits, Template, load_json, short
from themis.submarine_am.hyperband import (
    Hyperband,
    HyperbandError,
    hyperband_brackets,
    plan_configurations,
)
from themis.submarine_am.searchspace import Categorical, SearchSpace, SearchSpaceError

KINDS = ("hyperband", "single-job")
#: placeholders the AM fills in for every job run
PLACEHOLDERS = ("job_id", "app_id", "logdir", "max_steps", "checkpoint_uri", "num_gpus", "seed")
#: placeholders a command must use (resume and rung targets depend on them)
REQUIRED = ("max_steps", "checkpoint_uri")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # matched with fullmatch
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
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
}
_TOP = {"name", "queue", "kind", "search_space", "hyperband", "max_steps", "job", "resources",
        "max_parallel_jobs", "am"}


class SpecError(ValueError):
    """An invalid spec; ``problems`` lists ``(field, problem)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("invalid app spec:\n" + "\n".join(f"  {f}: {p}" for f, p in problems))


@dataclass(frozen=True, slots=True)
class Resources:
    gpus: int = 1
    memory_mb: int = 1024
    vcores: int = 1


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
    command: str
    search_space: dict[str, dict[str, Any]] = field(default_factory=dict)
    hyperband: HyperbandSettings = HyperbandSettings()
    max_steps: int = 0  # single-job
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 3
    resources: Resources = Resources()
    max_parallel_jobs: int = 0  # 0 = no cap
    am: AmResources = AmResources()
    queue: str = "default"

    def to_dict(self) -> dict[str, Any]:
        """The spec in its input format (``parse_spec(spec.to_dict()) == spec``)."""
        d: dict[str, Any] = {
            "name": self.name, "queue": self.queue, "kind": self.kind,
            "job": {"command": self.command, "env": dict(self.env),
                    "max_restarts": self.max_restarts},
            "resources": asdict(self.resources), "am": asdict(self.am),
            "max_parallel_jobs": self.max_parallel_jobs,
        }
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

    def make_hyperband(self, app_id: str) -> Hyperband:
        """The app's Hyperband plan (a single job is a one-bracket, one-rung plan)."""
        if self.kind == "single-job":
            return Hyperband(SearchSpace([Categorical("_", ("",))]), max_resource=1.0, eta=2,
                             steps_per_unit=self.max_steps, app_id=app_id,
                             max_gpus_per_job=self.resources.gpus)
        hb = self.hyperband
        return Hyperband(SearchSpace.from_dict(self.search_space), max_resource=hb.max_resource,
                         eta=hb.eta, steps_per_unit=hb.steps_per_unit, seed=hb.seed,
                         app_id=app_id, max_gpus_per_job=self.resources.gpus,
                         brackets=hb.brackets)

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

    def max_gpus(self) -> int:
        return max(1, self.max_concurrent_jobs() * self.resources.gpus)


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
    try:
        names = _template(cmd, params).names
    except InputError as e:
        c.bad("job.command", e.problem)
        return
    for r in REQUIRED:
        if r not in names:
            c.bad("job.command", f"must use {{{r}}} (jobs are stopped, moved and resumed)")


def parse_spec(raw: Any) -> AppSpec:
    """Validate a loaded spec (dict); raise :class:`SpecError` naming every problem."""
    c = _Checker()
    if not isinstance(raw, Mapping):
        raise SpecError([("(top level)", f"must be a mapping, got {type(raw).__name__}")])
    for k in raw:
        if k not in _TOP:
            c.bad(short(k, 40) if not isinstance(k, str) else k[:64],
                  f"unknown field (known: {', '.join(sorted(_TOP))})")
    name = c.str_(raw, "name", "", None)
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

    job = c.section(raw, "job", {"command", "env", "max_restarts"})
    if "job" not in raw:
        c.bad("job", "is required (job.command)")
    command = c.str_(job, "command", "job.", None) if "job" in raw else ""
    if command:
        _check_command(c, command, set(space) if kind == "hyperband" else set())
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

    res = c.section(raw, "resources", {"gpus", "memory_mb", "vcores"})
    resources = Resources(c.int_(res, "gpus", "resources.", 1, 1, 64),
                          c.int_(res, "memory_mb", "resources.", 1024, 128),
                          c.int_(res, "vcores", "resources.", 1, 1))
    am = c.section(raw, "am", {"memory_mb", "vcores", "max_attempts"})
    amr = AmResources(c.int_(am, "memory_mb", "am.", 768, 256),
                      c.int_(am, "vcores", "am.", 1, 1),
                      c.int_(am, "max_attempts", "am.", 2, 1, 10))
    mpj = c.int_(raw, "max_parallel_jobs", "", 0, 0)
    if c.problems:
        raise SpecError(c.problems)
    spec = AppSpec(name=name, kind=kind, command=command, search_space=space, hyperband=hbs,
                   max_steps=max_steps, env=env, max_restarts=max_restarts, resources=resources,
                   max_parallel_jobs=mpj, am=amr, queue=queue)
    try:
        spec.make_hyperband("check")
    except (HyperbandError, SearchSpaceError) as e:
        raise SpecError([("hyperband", str(e))]) from None
    return spec


def load_spec(path: str | Path) -> AppSpec:
    """Read a YAML (or JSON) spec file and validate it."""
    try:
        raw = read_document(path)
    except DocumentError as exc:
        raise SpecError([("(file)", str(exc))]) from None
    return parse_spec(raw)


def render_command(spec: AppSpec, values: Mapping[str, Any]) -> str:
    """The job command with every placeholder filled in (values are shell-quoted)."""
    template = _template(spec.command, set(spec.search_space))
    return template.render({k: shlex.quote(str(v)) for k, v in values.items()})
