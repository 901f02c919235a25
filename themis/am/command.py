"""A job's command line and the job contract's environment (docs/jobs.md, the job
contract): the placeholders the AM fills in for every job run and their ``THEMIS_*``
environment variables; the bundled training job (``themis.jobs.train``): its arguments
(with their checks), their command-line flags and its command template; and
:func:`render_command`, a spec's job command with every placeholder filled in.

``job.command`` is a :class:`themis.safeinput.Template`: ``{name}`` placeholders only
(:data:`PLACEHOLDERS` and the search space's parameters), checked by
:mod:`themis.am.speccheck` with :func:`command_template`, rendered by
:func:`render_command`.

This module sits below the model (:class:`themis.am.spec.AppSpec` uses
:func:`bundled_command`), so :func:`render_command` takes what it reads of a spec as a
protocol, :class:`CommandSpec`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from themis.am.specparts import PsTasks
from themis.safeinput import Template

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


_BIG = 1e18  # any other number: |x| <= 1e18


# ------------------------------------------------------------- the bundled training job
DATASETS = ("digits", "synthetic")  # = themis.jobs.data.DATASETS (no numpy import here)
OPTIMIZERS = ("adam", "sgd", "rmsprop", "adagrad")


def is_int(v: Any) -> bool:
    """An integer of a spec (not a bool; ``|x| <= 1e18``)."""
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _BIG


def is_num(v: Any) -> bool:
    """A number of a spec (an int or float, not a bool; ``|x| <= 1e18``)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and abs(v) <= _BIG


def _rule(ok: Callable[[Any], bool], what: str) -> Callable[[Any], str | None]:
    return lambda v: None if ok(v) else what


#: Hyper-parameters of ``themis.jobs.train`` (search space or ``job.args``): name -> check.
HYPER_PARAMS: dict[str, Callable[[Any], str | None]] = {
    "learning_rate": _rule(lambda v: is_num(v) and v > 0, "must be a number > 0"),
    "batch_size": _rule(lambda v: is_int(v) and v >= 1, "must be an integer >= 1"),
    "hidden_units": _rule(lambda v: is_int(v) and v >= 1, "must be an integer >= 1"),
    "num_layers": _rule(lambda v: is_int(v) and v >= 0, "must be an integer >= 0"),
    "dropout": _rule(lambda v: is_num(v) and 0 <= v < 1, "must be a number in [0, 1)"),
    "optimizer": _rule(lambda v: v in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
    "momentum": _rule(lambda v: is_num(v) and v >= 0, "must be a number >= 0"),
}
#: Settings of the bundled job that are not searched over (``job.args`` only).
JOB_SETTINGS: dict[str, Callable[[Any], str | None]] = {
    "dataset": _rule(lambda v: v in DATASETS, f"must be one of {', '.join(DATASETS)}"),
    "checkpoint_every": _rule(lambda v: is_int(v) and v >= 1, "must be an integer >= 1"),
    "eval_every": _rule(lambda v: is_int(v) and v >= 1, "must be an integer >= 1"),
    "keep_checkpoints": _rule(lambda v: is_int(v) and v >= 1, "must be an integer >= 1"),
    "step_time_ms": _rule(lambda v: is_num(v) and v >= 0, "must be a number >= 0"),
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


# ------------------------------------------------------------- rendering a job's command
def command_template(spec_command: str, params: set[str]) -> Template:
    """The command as a restricted template (raises InputError naming the problem)."""
    return Template(spec_command, set(PLACEHOLDERS) | params, "job.command")


class CommandSpec(Protocol):
    """What :func:`render_command` reads of an app spec (an
    :class:`themis.am.spec.AppSpec`)."""

    @property
    def search_space(self) -> Mapping[str, Any]: ...

    @property
    def ps(self) -> PsTasks: ...

    def job_command(self) -> str: ...


def render_command(spec: CommandSpec, values: Mapping[str, Any], task: str = "worker") -> str:
    """The job command (``task`` "ps": the parameter servers' command) with every
    placeholder filled in (values are shell-quoted)."""
    command = spec.ps.command if task == "ps" and spec.ps.command else spec.job_command()
    template = command_template(command, set(spec.search_space))
    return template.render({k: shlex.quote(str(v)) for k, v in values.items()})
