"""Workload description: apps of jobs with phases (immutable input of a simulation).

An app is a list of jobs plus a list of *phases*; each phase names the jobs that run in it
and how many iterations each runs (paper section 4.3.2). A single-job app (Eq. 1) has one
phase with one job; a Workload-1 hyper-parameter group (section 6.1) has one phase with all
its jobs (their iteration counts are known ahead of time, as the paper's simulator assumes);
a successive-halving app (Eq. 2, Hyperband) has log2(n)+1 phases with halving job sets.

The converted-trace file format (gzip JSON, ``FORMAT``) is documented in docs/simulator.md.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themis.agent.placement import COMPUTE_INTENSIVE, NETWORK_INTENSIVE, PlacementProfile
from themis.sim.errors import SpecError

FORMAT = "themis-sim-workload"
FORMAT_VERSION = 1
PLACEMENT_CLASSES: dict[str, PlacementProfile] = {
    "compute": COMPUTE_INTENSIVE,
    "network": NETWORK_INTENSIVE,
}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A training job. ``tau`` is its convergence scale in iterations: the simulated loss
    is 1/sqrt(1 + done/tau) (used by SLAQ, Hermes and successive halving)."""

    id: str
    serial_iter_time: float  # seconds per iteration on one GPU, no slowdown
    max_demand: int
    tau: float = 1000.0


@dataclass(frozen=True, slots=True)
class AppSpec:
    id: str
    arrival: float
    jobs: tuple[JobSpec, ...]
    phases: tuple[tuple[tuple[int, float], ...], ...]  # per phase: (job index, iterations)
    placement: str = "compute"  # key of PLACEMENT_CLASSES
    model: str = ""

    def __post_init__(self) -> None:
        where = f"app {self.id!r}"
        if not self.jobs or not self.phases:
            raise SpecError(where, "needs at least one job and one phase")
        if not math.isfinite(self.arrival) or self.arrival < 0:
            raise SpecError(where, f"arrival={self.arrival!r} must be a finite number >= 0")
        if self.placement not in PLACEMENT_CLASSES:
            known = sorted(PLACEMENT_CLASSES)
            raise SpecError(where, f"placement {self.placement!r} not in {known}")
        for j in self.jobs:
            if not (j.serial_iter_time > 0 and math.isfinite(j.serial_iter_time)):
                raise SpecError(where, f"job {j.id!r}: serial_iter_time must be > 0")
            if j.max_demand < 1 or j.tau <= 0:
                raise SpecError(where, f"job {j.id!r}: max_demand >= 1 and tau > 0 required")
        for p, phase in enumerate(self.phases):
            if not phase:
                raise SpecError(where, f"phase {p} is empty")
            for idx, iters in phase:
                if not 0 <= idx < len(self.jobs) or not (iters > 0 and math.isfinite(iters)):
                    raise SpecError(where, f"phase {p}: bad entry ({idx}, {iters})")

    @property
    def profile(self) -> PlacementProfile:
        return PLACEMENT_CLASSES[self.placement]

    @property
    def total_work(self) -> float:
        """Serial GPU-seconds of the whole plan (B of Eq. 2)."""
        return sum(it * self.jobs[i].serial_iter_time for ph in self.phases for i, it in ph)

    @property
    def kind(self) -> str:
        if len(self.phases) > 1:
            return "successive-halving"
        return "single-job" if len(self.phases[0]) == 1 else "multi-job"


@dataclass(slots=True)
class Workload:
    apps: list[AppSpec]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [a.id for a in self.apps]
        if len(set(ids)) != len(ids):
            raise SpecError("workload", "duplicate app ids")
        self.apps.sort(key=lambda a: (a.arrival, a.id))

    def head(self, n: int) -> Workload:
        return Workload(self.apps[:n], dict(self.meta))


def app_to_doc(a: AppSpec) -> list[Any]:
    jobs = [[j.id, round(j.serial_iter_time, 6), j.max_demand, round(j.tau, 3)] for j in a.jobs]
    phases = [[[i, round(it, 3)] for i, it in ph] for ph in a.phases]
    return [a.id, round(a.arrival, 3), a.model, a.placement, jobs, phases]


def app_from_doc(doc: Any, where: str) -> AppSpec:
    try:
        aid, arrival, model, placement, jobs, phases = doc
        return AppSpec(
            id=str(aid),
            arrival=float(arrival),
            model=str(model),
            placement=str(placement),
            jobs=tuple(JobSpec(str(j[0]), float(j[1]), int(j[2]), float(j[3])) for j in jobs),
            phases=tuple(tuple((int(i), float(it)) for i, it in ph) for ph in phases),
        )
    except SpecError:
        raise
    except (TypeError, ValueError, IndexError) as exc:
        raise SpecError(where, f"malformed app record: {exc}") from exc


def save_workload(w: Workload, path: Path) -> None:
    doc = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "meta": w.meta,
        "apps": [app_to_doc(a) for a in w.apps],
    }
    data = json.dumps(doc, separators=(",", ":")).encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)


def is_workload_file(path: Path) -> bool:
    return path.is_file() and (path.name.endswith(".json.gz") or path.suffix == ".json")


def load_workload(path: Path) -> Workload:
    raw = path.read_bytes()
    try:
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise SpecError(str(path), f"not a converted workload: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecError(str(path), f"'format' must be {FORMAT!r}")
    if doc.get("version") != FORMAT_VERSION:
        raise SpecError(str(path), f"format version {doc.get('version')!r} != {FORMAT_VERSION}")
    apps = [app_from_doc(a, f"{path}: apps[{i}]") for i, a in enumerate(doc.get("apps", []))]
    return Workload(apps, dict(doc.get("meta", {})))


def single_phase_app(
    app_id: str,
    arrival: float,
    jobs: Sequence[tuple[JobSpec, float]],
    placement: str,
    model: str = "",
) -> AppSpec:
    """An app whose jobs all run in one phase (``(job, iterations)`` pairs)."""
    return AppSpec(
        app_id,
        arrival,
        tuple(j for j, _ in jobs),
        (tuple((i, it) for i, (_, it) in enumerate(jobs)),),
        placement,
        model,
    )


def loss_rank_key(iters_done: float, tau: float, index: int) -> tuple[float, int]:
    """Sort key: lower simulated loss 1/sqrt(1 + i/tau) first (ties by job index)."""
    return (1.0 / math.sqrt(1.0 + iters_done / tau), index)
