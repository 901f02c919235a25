"""From a cluster's history to a simulator trace: which apps are kept, what each one's GPU
demand and work are, and the :class:`~themis.sim.workload.Workload` the simulator replays.

Read, not inferred (per app): arrival (``startedTime``, made relative to the first kept
app), GPU work (``resourceSecondsMap`` ``yarn.io/gpu``: GPU-seconds held), observed JCT
(``finishedTime - startedTime``), name, user, queue, type, state.

Inferred (flagged per app in :attr:`StockApp.inferred`):

* ``gpus``: the app's GPU demand, ``round(gpu_seconds / runtime)`` rounded half up, at
  least 1, with runtime the observed JCT (``--runtime-from elapsed``, the default) or
  ``finishedTime - launchTime`` (``launch``: leaves out the wait for the AM container).
  YARN keeps no record of how many GPUs a finished app held at a time; an app that waited
  for GPUs after it started is under-estimated (its GPU-seconds spread over a longer
  runtime). Capped at the replayed cluster's size (flag ``gpus_capped``).
* the structure: each app becomes one app with one job whose demand is ``gpus`` and whose
  work is its GPU-seconds (one "iteration" = one GPU-second), so alone on ``gpus`` GPUs it
  runs ``gpu_seconds / gpus`` seconds; it is compute-intensive (no placement slowdown within
  a rack, 5 % across racks; themis.mechanism.placement). Several jobs of one app, phases
  and early stopping are not visible in YARN's history - except for Themis apps whose
  job records were read (:mod:`themis.preview.jobrecords`, :func:`with_records`): those
  are replayed with their jobs, each job's GPUs and steps, and their Hyperband phases.

Left out, and counted per reason (:data:`REASONS`): apps in a state not asked for, apps not
finished, apps that started outside the window, apps without GPU-seconds (no ``yarn.io/gpu``
entry, or 0), apps with GPU-seconds but no runtime (started and finished in the same ms).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from themis.preview.history import HistoryApp, PreviewError
from themis.preview.jobrecords import AppRecords
from themis.sim.workload import AppSpec, JobSpec, Workload, single_phase_app

#: reasons an app is left out, in the order they are checked
REASONS = ("state", "not_finished", "outside_window", "no_gpu", "no_runtime")
RUNTIME_FROM = ("elapsed", "launch")
#: the placement class of every replayed app (themis.sim.workload.PLACEMENT_CLASSES)
PLACEMENT = "compute"


@dataclass(frozen=True, slots=True)
class Window:
    """Apps whose ``startedTime`` is in ``[since_ms, until_ms)`` (None: unbounded)."""

    since_ms: int | None = None
    until_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.since_ms is not None and self.until_ms is not None
                and self.until_ms <= self.since_ms):
            raise PreviewError("--since/--until", "the window is empty: --until is not "
                                                  "after --since")

    def __contains__(self, t_ms: int) -> bool:
        return ((self.since_ms is None or t_ms >= self.since_ms)
                and (self.until_ms is None or t_ms < self.until_ms))


@dataclass(frozen=True, slots=True)
class StockApp:
    """One app of the history, as replayed."""

    app: HistoryApp
    arrival_s: float  # seconds after the first kept app's startedTime
    gpu_seconds: float  # read
    gpus: int  # inferred demand (a job's GPUs, read, with job records)
    inferred: tuple[str, ...]  # fields inferred rather than read (see the module doc)
    records: AppRecords | None = None  # a Themis app's job records, when read

    @property
    def observed_jct_s(self) -> float:
        return self.app.observed_jct_s

    @property
    def alone_s(self) -> float:
        """Its run time alone on ``gpus`` GPUs in the replay (no restart pause)."""
        return self.gpu_seconds / self.gpus


@dataclass(slots=True)
class Selection:
    apps: list[StockApp]
    read: int  # apps in the response
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> count
    t0_ms: int = 0  # startedTime of the first kept app


def half_up(x: float) -> int:
    return math.floor(x + 0.5)


def infer_gpus(gpu_seconds: float, runtime_s: float) -> int:
    """The GPU demand of an app that held ``gpu_seconds`` over ``runtime_s``: the average
    number of GPUs it held, rounded half up, at least 1."""
    if runtime_s <= 0:
        raise ValueError("runtime_s must be > 0")
    return max(1, half_up(gpu_seconds / runtime_s))


def select(apps: Sequence[HistoryApp], *, states: Iterable[str] = ("FINISHED", "FAILED",
           "KILLED"), window: Window | None = None, cluster_gpus: int | None = None,
           runtime_from: str = "elapsed") -> Selection:
    """The apps to replay (see the module doc); ``cluster_gpus`` caps the demand."""
    if runtime_from not in RUNTIME_FROM:
        raise PreviewError("--runtime-from", f"{runtime_from!r} is not one of "
                                             f"{', '.join(RUNTIME_FROM)}")
    wanted = {s.strip().upper() for s in states if s.strip()}
    window = window or Window()
    left = dict.fromkeys(REASONS, 0)
    kept: list[tuple[HistoryApp, int, tuple[str, ...]]] = []
    for a in apps:
        if wanted and a.state.upper() not in wanted:
            left["state"] += 1
        elif not a.finished:
            left["not_finished"] += 1
        elif a.started_ms not in window:
            left["outside_window"] += 1
        elif not a.gpu_seconds:
            left["no_gpu"] += 1
        else:
            start = a.launch_ms if runtime_from == "launch" and a.launch_ms > 0 else \
                a.started_ms
            runtime_s = (a.finished_ms - start) / 1000.0
            if runtime_s <= 0:
                left["no_runtime"] += 1
                continue
            gpus = infer_gpus(a.gpu_seconds, runtime_s)
            flags: tuple[str, ...] = ("gpus",)
            if cluster_gpus is not None and gpus > cluster_gpus:
                gpus = cluster_gpus
                flags = (*flags, "gpus_capped")
            kept.append((a, gpus, flags))
    t0 = min((a.started_ms for a, _, _ in kept), default=0)
    out = [StockApp(a, (a.started_ms - t0) / 1000.0, float(a.gpu_seconds or 0.0), g, f)
           for a, g, f in kept]
    out.sort(key=lambda s: (s.arrival_s, s.app.id))
    return Selection(out, len(apps), left, t0)


def with_records(selection: Selection, records: Mapping[str, AppRecords],
                 cluster_gpus: int | None = None) -> Selection:
    """``selection`` with the job records of the apps that have them: their demand is a
    job's GPUs (read; capped at ``cluster_gpus``, flag ``gpus_capped``), and ``iter_time``
    is flagged when the records measured none."""
    apps = []
    for s in selection.apps:
        r = records.get(s.app.id)
        if r is None:
            apps.append(s)
            continue
        gpus, flags = r.job_gpus, r.inferred
        if cluster_gpus is not None and gpus > cluster_gpus:
            gpus, flags = cluster_gpus, (*flags, "gpus_capped")
        apps.append(replace(s, gpus=gpus, inferred=flags, records=r))
    return replace(selection, apps=apps)


def to_workload(selection: Selection) -> Workload:
    """One simulator app per app: a Themis app with job records has its jobs and phases
    (:mod:`themis.preview.jobrecords`); any other app one job, demand ``gpus``,
    ``gpu_seconds`` iterations of one GPU-second each (see the module doc)."""
    specs = []
    seen: set[str] = set()
    for s in selection.apps:
        if s.app.id in seen:
            raise PreviewError(f"app {s.app.number} ({s.app.id[:80]})",
                               "the same app id appears twice in the response")
        seen.add(s.app.id)
        model = s.app.app_type or "stock"
        if s.records is not None:
            r = s.records
            jobs = tuple(JobSpec(j.id, serial_iter_time=r.iter_times[i], max_demand=s.gpus)
                         for i, j in enumerate(r.jobs))
            specs.append(AppSpec(s.app.id, s.arrival_s, jobs, r.phases, PLACEMENT, model))
            continue
        job = JobSpec(s.app.id, serial_iter_time=1.0, max_demand=s.gpus)
        specs.append(single_phase_app(s.app.id, s.arrival_s, [(job, s.gpu_seconds)],
                                      PLACEMENT, model=model))
    return Workload(specs, {"converter": "themis-preview", "apps": len(specs)})


def describe_window(window: Window) -> dict[str, int | None]:
    return {"since_ms": window.since_ms, "until_ms": window.until_ms}
