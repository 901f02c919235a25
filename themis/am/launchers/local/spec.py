"""App specs for standalone mode: the one format of :mod:`themis.am.spec` (the
same files ``themis submit`` takes; ``standalone.submit_at_s`` is standalone's own field),
the built-in apps of ``--apps N``, and the older standalone format, still read with a
deprecation message.

Standalone runs every job on the machine: ``job.args`` (the bundled training job,
``themis.jobs.train``, with its GPU work emulated per placement, docs/standalone.md) or
``job.command`` (any program; its placeholders are filled with local paths). ``queue``,
``am`` and ``resources.memory_mb``/``vcores`` are YARN's and are not used here;
``job.docker_image`` / ``tasks.ps.docker_image`` (YARN's Docker runtime) are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from themis.am.command import HYPER_PARAMS, JOB_SETTINGS
from themis.am.hyperband import hyperband_brackets
from themis.am.spec import AppSpec, parse_spec
from themis.am.speccheck import MAX_CONFIGURATIONS, MAX_STEPS, SpecError
from themis.am.specfile import load_spec

__all__ = ["HYPER_PARAMS", "JOB_SETTINGS", "MAX_CONFIGURATIONS", "MAX_STEPS", "AppSpec",
           "SpecError", "default_app", "load_app_spec"]

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
    submitted ``index * stagger_s`` seconds after start-up. Built through the parser, so it
    is validated like a file."""
    s_max = len(hyperband_brackets(max_resource, eta)) - 1
    return parse_spec({
        "name": f"app-{index}",
        "search_space": DEFAULT_SPACE,
        "hyperband": {"max_resource": max_resource, "eta": eta, "brackets": [min(1, s_max)],
                      "steps_per_unit": steps_per_unit, "seed": index},
        "job": {"args": {"step_time_ms": step_time_ms, "batch_size": 32, "num_layers": 1,
                         "checkpoint_every": max(1, steps_per_unit // 4)}},
        "resources": {"gpus": max_gpus_per_job},
        "standalone": {"submit_at_s": index * stagger_s},
    })


def load_app_spec(path: str | Path) -> AppSpec:
    """Read and validate one app spec (``.json`` as JSON, anything else as YAML); the name
    defaults to the file name without its extension."""
    spec = load_spec(path, default_name=Path(path).stem)
    images = [f for f, v in (("job.docker_image", spec.docker_image),
                             ("tasks.ps.docker_image", spec.ps.docker_image)) if v]
    if images:  # YARN's Docker runtime; standalone jobs are local processes
        raise SpecError([(f, "is YARN's (its Docker runtime); standalone runs every job as "
                             "a local process: remove it, or run the app with themis submit")
                         for f in images], str(path))
    return spec
