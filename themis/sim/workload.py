"""Workload description: apps of jobs with phases (immutable input of a simulation).

An app is a list of jobs plus a list of *phases*; each phase names the jobs that run in it
and how many iterations each runs (paper section 4.3.2). A single-job app (Eq. 1) has one
phase with one job; a Workload-1 hyper-parameter group (section 6.1) has one phase with all
its jobs (their iteration counts are known ahead of time, as the paper's simulator assumes);
a successive-halving app (Eq. 2, Hyperband) has log2(n)+1 phases with halving job sets.

The converted-trace file format (gzip JSON, ``FORMAT``) is documented in docs/simulator.md;
reading one is bounded (:data:`MAX_WORKLOAD_BYTES` compressed and decompressed, strict JSON,
:data:`MAX_JOB_GPUS` GPUs per job, finite numbers) and every defect is one
:class:`SpecError` naming the file and the record.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themis.mechanism.placement import COMPUTE_INTENSIVE, NETWORK_INTENSIVE, PlacementProfile
from themis.safeinput import InputError, Limits, load_json, read_bytes, short
from themis.sim.errors import SpecError

FORMAT = "themis-sim-workload"
FORMAT_VERSION = 1
MAX_WORKLOAD_BYTES = 256 << 20  # the built-in 14-day workload is 70 kB of JSON
MAX_JOB_GPUS = 1024  # as a philly-gavel trace's scale_factor
MAX_ARRIVAL_S = 1e10
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
            if j.max_demand < 1 or not (j.tau > 0 and math.isfinite(j.tau)):
                raise SpecError(where, f"job {j.id!r}: max_demand >= 1 and a finite tau > 0 "
                                       "required")
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


def _typed(value: Any, kind: type | tuple[type, ...], what: str, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise SpecError(where, f"malformed app record: {what} {value!r:.60} is not "
                               f"{'a string' if kind is str else 'a number'}")
    return value


def app_from_doc(doc: Any, where: str) -> AppSpec:
    """An app record ``[id, arrival, model, placement, jobs, phases]`` (see app_to_doc)."""
    if not isinstance(doc, list) or len(doc) != 6:
        raise SpecError(where, "malformed app record: expected [id, arrival, model, "
                               "placement, jobs, phases]")
    aid, arrival, model, placement, jobs, phases = doc
    if not isinstance(jobs, list) or not all(isinstance(j, list) and len(j) == 4 for j in jobs):
        raise SpecError(where, "malformed app record: jobs must be a list of "
                               "[id, serial_iter_time, max_demand, tau]")
    if not isinstance(phases, list) or not all(
            isinstance(ph, list) and all(isinstance(e, list) and len(e) == 2 for e in ph)
            for ph in phases):
        raise SpecError(where, "malformed app record: phases must be lists of "
                               "[job index, iterations]")
    num = (int, float)
    if not 0 <= _typed(arrival, num, "arrival", where) <= MAX_ARRIVAL_S:
        raise SpecError(where, f"arrival={arrival!r} must be in [0, {MAX_ARRIVAL_S:.0e}]")
    for j in jobs:
        if not 1 <= _typed(j[2], int, "max_demand", where) <= MAX_JOB_GPUS:
            raise SpecError(where, f"job {j[0]!r:.60}: max_demand={j[2]} must be in "
                                   f"[1, {MAX_JOB_GPUS}]")
    try:
        return _app(aid, arrival, model, placement, jobs, phases, where)
    except SpecError as exc:
        if exc.where.startswith(where):
            raise
        raise SpecError(where, str(exc)) from None


def _app(aid: Any, arrival: Any, model: Any, placement: Any, jobs: list[Any],
         phases: list[Any], where: str) -> AppSpec:
    num = (int, float)
    return AppSpec(
        id=_typed(aid, str, "id", where),
        arrival=float(arrival),
        model=_typed(model, str, "model", where),
        placement=_typed(placement, str, "placement", where),
        jobs=tuple(JobSpec(_typed(j[0], str, "job id", where),
                           float(_typed(j[1], num, "serial_iter_time", where)), j[2],
                           float(_typed(j[3], num, "tau", where))) for j in jobs),
        phases=tuple(tuple((_typed(i, int, "job index", where),
                            float(_typed(it, num, "iterations", where))) for i, it in ph)
                     for ph in phases),
    )


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
    limits = Limits(max_bytes=MAX_WORKLOAD_BYTES, max_depth=16, max_nodes=0)
    try:
        raw = read_bytes(path, limits)
    except OSError as exc:
        raise SpecError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if path.suffix == ".gz":
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip, bounded (no zip bomb)
        try:
            raw = inflate.decompress(raw, MAX_WORKLOAD_BYTES + 1)
        except zlib.error as exc:
            raise SpecError(str(path), f"not a converted workload: bad gzip data ({exc})"
                            ) from None
    try:
        doc = load_json(raw, limits)
    except InputError as exc:
        raise SpecError(str(path), f"not a converted workload: "
                                   f"{exc.where + ': ' if exc.where else ''}{exc.problem}"
                        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecError(str(path), f"'format' must be {FORMAT!r}")
    if doc.get("version") != FORMAT_VERSION:
        raise SpecError(str(path), f"format version {short(doc.get('version'))} != "
                                   f"{FORMAT_VERSION}")
    apps, meta = doc.get("apps", []), doc.get("meta", {})
    if not isinstance(apps, list):
        raise SpecError(str(path), "'apps' must be a list of app records")
    if not isinstance(meta, dict):
        raise SpecError(str(path), "'meta' must be an object")
    specs = [app_from_doc(a, f"{path}: apps[{i}]") for i, a in enumerate(apps)]
    seen: set[str] = set()
    for i, a in enumerate(specs):
        if a.id in seen:
            raise SpecError(f"{path}: apps[{i}]", f"duplicate app id {short(a.id)}")
        seen.add(a.id)
    return Workload(specs, dict(meta))


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
