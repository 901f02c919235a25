"""Converter from the philly-gavel trace format to the simulator's workload (Workload 1,
section 6.1: "a two week snapshot ... hyper-parameter exploration jobs").

Input: a directory of ``<vc>.trace`` files (or one file), 7 tab-separated fields per line
(job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time,
scale_factor), and ``simulation_throughputs.json`` (searched next to the files and in the
parent directory).

* Duration: a job of type T asking for k GPUs runs total_steps at the ``v100`` "null"
  throughput thr(T, k) steps/s. We set serial_iter_time = k / thr(T, k) (GPU-seconds per
  step at its own scale) and max_demand = k, so with k GPUs and no slowdown it lasts
  total_steps / thr(T, k) as in the trace; when (T, k) is missing we use thr(T, 1) and
  linear scaling.
* Apps (grouping rule): within one VC file, in arrival order, jobs of the same model
  family (job type without the batch size) whose arrival is within ``window_s`` of
  the group's first job form one hyper-parameter-exploration app, at most 100 jobs
  (Fig. 8b's range); batch sizes differ between jobs of one app, like tuned
  hyper-parameters. ``window_s`` <= 0: every job is an app of its own.
* Snapshot (off by default): jobs arriving in the first ``days`` days (0 = all); the
  paper "scale[s] down the trace": jobs longer than ``max_job_hours`` on their own GPUs
  are shortened to it (their steps scaled down; 0 = keep), which bounds the simulated
  span. The meta data records every conversion applied.
* Placement class per :data:`themis.sim.models.TRACE_CLASSES`.
* Each job's convergence scale tau is drawn (seeded by job identity) in
  [0.05, 0.5] x its steps.

Input is bounded (docs/simulator.md, its opening section): each ``.trace`` file at most
:data:`MAX_TRACE_BYTES` of UTF-8 text, total_steps in [1, :data:`MAX_STEPS`], arrival_time
in [0, :data:`MAX_ARRIVAL_S`], scale_factor in [1, 1024]; the throughputs file is strict
JSON (no NaN, no duplicate keys) of at most :data:`MAX_THROUGHPUT_BYTES`, each throughput a
positive finite number. Anything else is one :class:`SpecError` naming the file and line
(or the entry).
"""

from __future__ import annotations

import ast
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from themis.safeinput import InputError, Limits, load_json, read_bytes, short
from themis.sim.errors import SpecError
from themis.sim.models import TRACE_CLASSES, trace_class, trace_family
from themis.sim.workload import AppSpec, JobSpec, Workload, single_phase_app

CONVERTER_VERSION = 1
GPU_TYPE = "v100"
MAX_TRACE_BYTES = 64 << 20  # per .trace file (the largest philly-gavel file is 0.4 MB)
MAX_THROUGHPUT_BYTES = 64 << 20  # simulation_throughputs.json is 1.2 MB
MAX_STEPS = 10**12
MAX_ARRIVAL_S = 1e10  # seconds since the trace's start (317 years)
MAX_KEY = 1000  # characters of a throughput key such as "('ResNet-18 (batch size 16)', 1)"


@dataclass(frozen=True, slots=True)
class TraceJob:
    vc: str
    line: int
    job_type: str
    steps: int
    arrival: float
    gpus: int
    path: str = ""  # the file, for errors


def parse_line(text: str, where: str) -> tuple[str, int, float, int]:
    fields = text.rstrip("\n").split("\t")
    if len(fields) != 7:
        raise SpecError(where, f"expected 7 tab-separated fields, got {len(fields)}")
    job_type = fields[0].strip()
    if not job_type:
        raise SpecError(where, "field 1 (job_type) is empty")
    try:
        steps = int(fields[4])
    except ValueError:
        raise SpecError(where, f"field 5 (total_steps) {fields[4]!r} is not an integer") from None
    try:
        arrival = float(fields[5])
    except ValueError:
        raise SpecError(where, f"field 6 (arrival_time) {fields[5]!r} is not a number") from None
    try:
        gpus = int(fields[6])
    except ValueError:
        raise SpecError(where, f"field 7 (scale_factor) {fields[6]!r} is not an integer") from None
    if not 1 <= steps <= MAX_STEPS:
        raise SpecError(where, f"field 5 (total_steps) {fields[4]!r} must be in "
                               f"[1, {MAX_STEPS:.0e}]")
    if not 0 <= arrival <= MAX_ARRIVAL_S:  # also refuses NaN
        raise SpecError(where, f"field 6 (arrival_time) {fields[5]!r} must be in "
                               f"[0, {MAX_ARRIVAL_S:.0e}] seconds")
    if not 1 <= gpus <= 1024:
        raise SpecError(where, f"field 7 (scale_factor) {fields[6]!r} must be in [1, 1024]")
    if trace_family(job_type) not in TRACE_CLASSES:
        raise SpecError(
            where,
            f"unknown job type {job_type!r} (known families: {', '.join(sorted(TRACE_CLASSES))})",
        )
    return job_type, steps, arrival, gpus


def read_trace_files(path: Path) -> list[TraceJob]:
    files = sorted(path.glob("*.trace")) if path.is_dir() else [path]
    if not files:
        raise SpecError(str(path), "no *.trace file")
    jobs: list[TraceJob] = []
    for f in files:
        for n, line in enumerate(_read_text(f), 1):
            if not line.strip():
                continue
            jt, steps, arrival, gpus = parse_line(line, f"{f}:{n}")
            jobs.append(TraceJob(f.stem, n, jt, steps, arrival, gpus, str(f)))
    if not jobs:
        raise SpecError(str(path), "the trace has no job")
    return jobs


def _read_text(f: Path) -> list[str]:
    """The lines of a ``.trace`` file (bounded, UTF-8; errors name the file and line)."""
    try:
        data = read_bytes(f, Limits(max_bytes=MAX_TRACE_BYTES))
    except OSError as exc:
        raise SpecError(str(f), f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_TRACE_BYTES:
        raise SpecError(str(f), f"larger than the limit of {MAX_TRACE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{f}:{line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x})"
                        ) from None
    return text.split("\n")


def find_throughputs(path: Path) -> Path:
    base = path if path.is_dir() else path.parent
    for d in (base, base.parent, base.parent.parent):
        cand = d / "simulation_throughputs.json"
        if cand.is_file():
            return cand
    raise SpecError(str(path), "simulation_throughputs.json not found next to the trace or above")


def load_throughputs(path: Path) -> dict[tuple[str, int], float]:
    limits = Limits(max_bytes=MAX_THROUGHPUT_BYTES, max_depth=16, max_nodes=0)
    try:
        doc: Any = load_json(read_bytes(path, limits), limits)
    except OSError as exc:
        raise SpecError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except InputError as exc:
        raise SpecError(str(path), f"{exc.where + ': ' if exc.where else ''}{exc.problem}"
                        ) from None
    table = doc.get(GPU_TYPE) if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise SpecError(str(path), f"{GPU_TYPE!r}: expected an object of throughputs")
    out: dict[tuple[str, int], float] = {}
    for key, val in table.items():
        where = f"{GPU_TYPE}[{short(key)}]"
        if len(key) > MAX_KEY:
            raise SpecError(str(path), f"{where}: a key longer than {MAX_KEY} characters")
        try:
            jt, k = ast.literal_eval(key)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            jt = k = None
        if not isinstance(jt, str) or isinstance(k, bool) or not isinstance(k, int):
            raise SpecError(str(path), f"{where}: the key must read ('<job type>', <GPUs>)")
        thr = val.get("null") if isinstance(val, dict) else None
        if isinstance(thr, bool) or not isinstance(thr, int | float) or not thr > 0:
            raise SpecError(str(path), f"{where}.null: the throughput must be a number > 0 "
                                       "(steps per second)")
        out[(jt, k)] = float(thr)
    return out


def serial_iter_time(thr: dict[tuple[str, int], float], job: TraceJob) -> float:
    if (job.job_type, job.gpus) in thr:
        return job.gpus / thr[(job.job_type, job.gpus)]
    if (job.job_type, 1) in thr:
        return 1.0 / thr[(job.job_type, 1)]
    raise SpecError(f"{job.path or job.vc + '.trace'}:{job.line}",
                    f"no {GPU_TYPE} throughput for {job.job_type!r}")


def group_apps(jobs: list[TraceJob], window_s: float, max_jobs: int = 100) -> list[list[TraceJob]]:
    by_vc: dict[str, list[TraceJob]] = {}
    for j in jobs:
        by_vc.setdefault(j.vc, []).append(j)
    groups: list[list[TraceJob]] = []
    for vc in sorted(by_vc):
        open_: dict[str, list[TraceJob]] = {}  # model family -> its open group
        for j in sorted(by_vc[vc], key=lambda j: (j.arrival, j.line)):
            if window_s <= 0:
                groups.append([j])
                continue
            fam = trace_family(j.job_type)
            cur = open_.get(fam)
            if cur and j.arrival - cur[0].arrival <= window_s and len(cur) < max_jobs:
                cur.append(j)
                continue
            if cur:
                groups.append(cur)
            open_[fam] = [j]
        groups.extend(open_.values())
    return sorted(groups, key=lambda g: (g[0].arrival, g[0].vc, g[0].line))


def convert(
    path: Path,
    days: float = 0.0,
    window_s: float = 86400.0,
    throughputs: Path | None = None,
    max_job_hours: float = 0.0,
) -> Workload:
    jobs = read_trace_files(path)
    thr = load_throughputs(throughputs or find_throughputs(path))
    t0 = min(j.arrival for j in jobs)
    if days > 0:
        jobs = [j for j in jobs if j.arrival - t0 < days * 86400]
    apps: list[AppSpec] = []
    capped = 0
    for g in group_apps(jobs, window_s):
        first = g[0]
        app_id = f"{first.vc}-{first.line}"
        specs = []
        for j in g:
            rng = random.Random(zlib.crc32(f"{j.vc}:{j.line}".encode()))
            serial = serial_iter_time(thr, j)
            steps = float(j.steps)
            if max_job_hours > 0 and steps > max_job_hours * 3600 * j.gpus / serial:
                steps = max_job_hours * 3600 * j.gpus / serial
                capped += 1
            specs.append(
                (JobSpec(f"{j.vc}-{j.line}", serial, j.gpus, steps * rng.uniform(0.05, 0.5)), steps)
            )
        apps.append(
            single_phase_app(
                app_id,
                first.arrival - t0,
                specs,
                trace_class(first.job_type),
                trace_family(first.job_type),
            )
        )
    meta = {
        "converter": "philly-gavel",
        "converter_version": CONVERTER_VERSION,
        "source": str(path),
        "days": days,
        "window_s": window_s,
        "jobs": len(jobs),
        "max_job_hours": max_job_hours,
        "jobs_capped": capped,
    }
    return Workload(apps, meta)
