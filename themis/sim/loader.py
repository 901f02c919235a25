"""Load a workload from a path: a converted workload (``*.json``/``*.json.gz``), or a
philly-gavel trace (a directory of ``*.trace`` files or one file), converted on the fly;
``builtin`` names the committed converted trace."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from themis.sim.errors import SpecError
from themis.sim.hyperband import workload2
from themis.sim.philly import convert
from themis.sim.workload import Workload, is_workload_file, load_workload

BUILTIN = "philly-seed0-14d.json.gz"


def builtin_path() -> Path:
    return Path(str(resources.files("themis.data").joinpath(BUILTIN)))


def load_any(path: str, workload: int = 1, seed: int = 0, days: float = 14.0) -> Workload:
    p = builtin_path() if path == "builtin" else Path(path)
    if not p.exists():
        raise SpecError(path, "trace not found")
    w = load_workload(p) if is_workload_file(p) else convert(p, days=days)
    if workload == 2:
        w = workload2(w, seed=seed)
    elif workload != 1:
        raise SpecError(path, f"workload must be 1 or 2, got {workload}")
    return w
