"""Checking an app spec document (YAML/JSON already loaded), field by field: every
problem names its field (``hyperband.eta``) and what is wrong, all of them in one
:class:`SpecError`; the limits of the format (docs/am.md, "Limits"): a plan starts at most
:data:`MAX_CONFIGURATIONS` configurations, trains each to at most :data:`MAX_STEPS` steps;
resources and counts have the upper bounds of :data:`BOUNDS`.

:func:`check_spec` returns the checked fields of a :class:`themis.am.spec.AppSpec`, whose
:func:`themis.am.spec.parse_spec` builds the spec from them (the model sits above its
checks: ``AppSpec.from_json`` parses).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from themis.am.command import HYPER_PARAMS, JOB_SETTINGS, PLACEHOLDERS, command_template, is_num
from themis.am.hyperband import hyperband_brackets, plan_configurations
from themis.am.objective import parse_objective
from themis.am.searchspace import SearchSpace, SearchSpaceError
from themis.am.specparts import (
    AmResources,
    HyperbandSettings,
    PsTasks,
    Resources,
    TensorBoardSettings,
)
from themis.safeinput import InputError, Template, short

KINDS = ("hyperband", "single-job")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # matched with fullmatch
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
#: a YARN node label (Hadoop's NodeLabelUtil: a letter or digit, then letters, digits, - and
#: _, at most 255 characters)
_LABEL_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,254}")
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
#: upper bounds of the integer fields (lower bounds are in check_spec)
BOUNDS = {
    "resources.gpus": 64, "resources.memory_mb": 1 << 20, "resources.vcores": 1024,
    "am.memory_mb": 1 << 20, "am.vcores": 1024, "am.max_attempts": 10,
    "job.max_restarts": 1000, "max_parallel_jobs": MAX_CONFIGURATIONS,
    "hyperband.eta": MAX_ETA, "hyperband.steps_per_unit": MAX_STEPS,
    "hyperband.seed": (1 << 63) - 1, "max_steps": MAX_STEPS,
    "tasks.workers": 64, "tasks.ps.count": 64, "tasks.ps.memory_mb": 1 << 20,
    "tasks.ps.vcores": 1024, "tensorboard.memory_mb": 1 << 20, "tensorboard.vcores": 1024,
}
_TOP = {"name", "queue", "node_label", "kind", "search_space", "hyperband", "max_steps", "job",
        "resources", "tasks", "max_parallel_jobs", "am", "objective", "standalone", "tensorboard"}


class SpecError(ValueError):
    """An invalid spec; ``problems`` lists ``(field, problem)`` pairs, ``source`` names the
    file (or is empty)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "") -> None:
        self.problems = problems
        self.source = source
        where = f"invalid app spec {source}" if source else "invalid app spec"
        super().__init__(f"{where}:\n" + "\n".join(f"  {f}: {p}" for f, p in problems))


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



def _check_command(c: _Checker, cmd: str, params: set[str]) -> None:
    """No placeholder is required: each is also in the job's environment (CONTRACT_ENV)."""
    try:
        command_template(cmd, params)
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


def check_spec(raw: Any, source: str = "", default_name: str | None = None
               ) -> dict[str, Any]:
    """Check a loaded spec (dict): the fields of its :class:`themis.am.spec.AppSpec`; raise
    :class:`SpecError` naming every problem. ``default_name`` (standalone: the file name) is
    used when the spec has no name."""
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
    node_label = c.str_(raw, "node_label", "", "-") if "node_label" in raw else ""
    if node_label and not _LABEL_RE.fullmatch(node_label):
        c.bad("node_label", f"must be a YARN node label ({_LABEL_RE.pattern}), got "
                            f"{short(node_label)}")
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
    if not is_num(submit_at) or submit_at < 0:
        c.bad("standalone.submit_at_s", f"must be a number in [0, 1e18], got {short(submit_at)}")
        submit_at = 0.0
    if c.problems:
        raise SpecError(c.problems, source)
    return {"name": name, "kind": kind, "command": command, "search_space": space,
            "hyperband": hbs, "max_steps": max_steps, "env": env, "max_restarts": max_restarts,
            "resources": resources, "workers": workers, "ps": ps, "max_parallel_jobs": mpj,
            "am": amr, "queue": queue, "node_label": node_label, "args": args,
            "objective": objective, "docker_image": docker_image, "tensorboard": tensorboard,
            "submit_at_s": float(submit_at), "source": source or "<built-in>"}
