"""Load a workload from a path: a converted workload (``*.json``/``*.json.gz``), or a
philly-gavel trace (a directory of ``*.trace`` files or one file), converted on the fly;
``builtin`` names the committed converted trace.

Every conversion is explicit (:class:`TraceOptions` for a trace, ``workload`` 2 for the
successive-halving transform of any input) and recorded in the workload's meta data under
``"conversions"`` (:func:`load_any`), which ``themis sim`` copies into its summary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from themis.sim.errors import SpecError
from themis.sim.hyperband import workload2
from themis.sim.philly import convert
from themis.sim.workload import Workload, is_workload_file, load_workload

BUILTIN = "philly-seed0-14d.json.gz"


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """How a philly-gavel trace becomes apps (themis.sim.philly): jobs of one model family
    arriving within ``group_window_hours`` of the group's first job form one app (0: one
    app per job); only the first ``days`` days are kept (0: all); jobs longer than
    ``max_job_hours`` on their own GPUs are shortened to it (0: none)."""

    group_window_hours: float = 24.0
    days: float = 0.0
    max_job_hours: float = 0.0

    def __post_init__(self) -> None:
        for name in ("group_window_hours", "days", "max_job_hours"):
            v = getattr(self, name)
            if not v >= 0:
                raise SpecError("trace options", f"{name}={v!r} must be a number >= 0")


def builtin_path() -> Path:
    return Path(str(resources.files("themis.data").joinpath(BUILTIN)))


def load_any(
    path: str, workload: int = 1, seed: int = 0, trace: TraceOptions | None = None
) -> Workload:
    """The workload at ``path`` (see module doc). ``trace`` applies to philly-gavel input
    only: for a converted workload, which records its own conversion, it must be None."""
    p = builtin_path() if path == "builtin" else Path(path)
    if not p.exists():
        raise SpecError(path, "trace not found")
    if workload not in (1, 2):
        raise SpecError(path, f"workload must be 1 or 2, got {workload}")
    conversions: dict[str, Any]
    if is_workload_file(p):
        if trace is not None:
            raise SpecError(
                path,
                "a converted workload: the trace conversions (group window, days, job cap) "
                f"were applied when it was made ({_recorded(load_workload(p))}); they apply "
                "to philly-gavel .trace input only",
            )
        w = load_workload(p)
        conversions = {"input": "builtin" if path == "builtin" else "converted workload",
                       "recorded": _recorded(w)}
    else:
        opts = trace or TraceOptions()
        w = convert(p, days=opts.days, window_s=opts.group_window_hours * 3600,
                    max_job_hours=opts.max_job_hours)
        conversions = {"input": "philly-gavel trace", **asdict(opts),
                       "jobs": w.meta.get("jobs"), "jobs_capped": w.meta.get("jobs_capped")}
    if workload == 2:
        w = workload2(w, seed=seed)
    conversions["workload"] = workload
    conversions["successive_halving"] = (
        {"demand_mult": w.meta.get("demand_mult"), "seed": seed} if workload == 2 else None
    )
    conversions["apps"] = len(w.apps)
    w.meta["conversions"] = conversions
    return w


def _recorded(w: Workload) -> dict[str, Any]:
    """The conversion a converted workload records in its meta data."""
    keys = ("converter", "days", "window_s", "max_job_hours", "jobs", "workload", "demand_mult")
    return {k: w.meta[k] for k in keys if k in w.meta}
