"""The objective of a hyper-parameter search, as Katib and Optuna users write it: the
metric (any TensorFlow scalar tag the jobs write), the goal (``minimize`` or ``maximize``)
and an optional target value that ends the search as soon as one trial reaches it.

Hyperband (:mod:`themis.am.hyperband`) ranks the trials of a rung by
:meth:`Objective.rank_key`; the profiler (:class:`themis.profiler.Profiler`) reads the
metric's values from the jobs' event files. A trial without a value, or with a value that is
not finite (a diverged loss, NaN accuracy), ranks last whatever the goal.

Spec section (both spec formats, docs/am.md "Objective")::

    objective:
      metric: eval_accuracy    # default eval_loss (falls back to the smoothed training loss)
      goal: maximize           # default minimize
      target: 0.97             # optional: stop the search when a trial reaches it
      optional: false          # default: an app whose trials never write the metric fails

The metric is a scalar tag as the jobs' event files name it, bare (``epoch_loss``) or
qualified by the writer's run (``validation/epoch_loss``: Keras' ``model.fit`` writes the
runs ``train`` and ``validation``); a bare tag found in several runs is the validation
run's (:mod:`themis.profiler.profiler`). A trial that ends a rung without any value is
flagged in the AM's log and status; a search in which no trial wrote it fails, naming the
tags the trials did write, unless ``optional`` is true.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from themis.safeinput import short

GOALS = ("minimize", "maximize")
DEFAULT_METRIC = "eval_loss"
#: a TensorFlow summary tag: letters, digits and ``_ . - /`` (TensorFlow's own rule)
_TAG_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,255}")
_FIELDS = ("metric", "goal", "target", "optional")


@dataclass(frozen=True, slots=True)
class Objective:
    metric: str = DEFAULT_METRIC
    goal: str = "minimize"
    target: float | None = None
    optional: bool = False  # a search whose trials never write the metric still succeeds

    @property
    def maximize(self) -> bool:
        return self.goal == "maximize"

    def rank_key(self, value: float | None) -> float:
        """Sort key: smaller is better; no value or a non-finite one ranks last."""
        if value is None or not math.isfinite(value):
            return math.inf
        return -value if self.maximize else value

    def reached(self, value: float | None) -> bool:
        """Whether ``value`` meets the target (never without a target)."""
        if self.target is None or value is None or not math.isfinite(value):
            return False
        return value >= self.target if self.maximize else value <= self.target

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"metric": self.metric, "goal": self.goal}
        if self.target is not None:
            d["target"] = self.target
        if self.optional:
            d["optional"] = True
        return d


def parse_objective(raw: Any, bad: Callable[[str, str], None]) -> Objective:
    """The ``objective`` section; every problem goes to ``bad(field, problem)``."""
    if raw is None:
        return Objective()
    if not isinstance(raw, Mapping):
        bad("objective", f"must be a mapping like {{metric: eval_loss, goal: minimize}}, "
                         f"got {short(raw)}")
        return Objective()
    for k in raw:
        if k not in _FIELDS:
            bad(f"objective.{k[:64] if isinstance(k, str) else short(k, 40)}",
                f"unknown field (known: {', '.join(_FIELDS)})")
    metric = raw.get("metric", DEFAULT_METRIC)
    if not isinstance(metric, str) or not _TAG_RE.fullmatch(metric):
        bad("objective.metric", "must be a TensorFlow scalar tag (letters, digits, _ . - /; "
                                f"at most 256 characters), got {short(metric)}")
        metric = DEFAULT_METRIC
    goal = raw.get("goal", "minimize")
    if goal not in GOALS:
        bad("objective.goal", f"must be minimize or maximize, got {short(goal)}")
        goal = "minimize"
    target = raw.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, int | float)
                               or not abs(target) <= 1e18):
        bad("objective.target", f"must be a finite number (|x| <= 1e18), got {short(target)}")
        target = None
    optional = raw.get("optional", False)
    if not isinstance(optional, bool):
        bad("objective.optional", f"must be true or false, got {short(optional)}")
        optional = False
    return Objective(metric, goal, None if target is None else float(target), optional)


def trial_json(job: Any, objective: Objective) -> dict[str, Any]:
    """One trial (a :class:`~themis.am.hyperband.HyperbandJob`) as reports and
    status show it: id, objective value, steps, status and hyper-parameters."""
    value = job.loss
    return {"id": job.id, "value": value if value is None or math.isfinite(value) else None,
            "metric": objective.metric, "steps": job.steps_done, "status": job.status.value,
            "config": {k: v for k, v in job.config.items() if k != "_"}}


def objective_of(d: Mapping[str, Any] | None) -> Objective:
    """An :class:`Objective` from its :meth:`Objective.to_dict` form (trusted input)."""
    if not d:
        return Objective()
    problems: list[tuple[str, str]] = []
    obj = parse_objective(d, lambda f, p: problems.append((f, p)))
    if problems:
        raise ValueError("; ".join(f"{f}: {p}" for f, p in problems))
    return obj
