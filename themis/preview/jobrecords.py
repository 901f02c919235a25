"""Themis apps' own job records, so that the preview replays them with their real structure.

A Themis app's application master keeps its files in HDFS under
``/user/<owner>/.themis/<app id>/`` (docs/am.md): ``spec.json``, the app's spec (a job's
GPUs: :meth:`themis.am.spec.AppSpec.job_gpus`), and ``state.json``, the AM's durable state
(:meth:`themis.am.core.AmCore.to_state`; its ``hyperband`` part is
:func:`themis.am.appstate.hyperband_to_dict`): per job its bracket and rung, the steps at
the start of that rung and its target, the steps it reached, its serial iteration time as
the profiler measured it (seconds per step on one GPU) and its status.

From them a Themis app becomes a successive-halving app of the simulator (paper section
4.3.2, Eq. 2; :class:`themis.sim.workload.AppSpec`): one phase per rung of each bracket, in
order, holding every job that ran in that rung with the steps it ran there - the rung's
target less the previous rung's for a job that went past it, the steps it reached for a job
that ended in it (stopped early, or failed). A rung's target is read from the jobs that
ended in it (their ``target_steps``) or from the jobs promoted past it (their
``rung_start_steps``). A job without a measured iteration time gets the median of the app's
measured ones; when none was measured, the app's GPU-seconds spread over its steps (flag
``iter_time``). An app whose records cannot be read (absent, unreadable, malformed) is
replayed like any other app, from its resource-seconds, and the reason is counted.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from themis.client.cluster import APP_TYPE as THEMIS_APP_TYPE
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError
from themis.preview.history import HistoryApp

#: why an app's records were not used, in the order they are counted
OUTCOMES = ("read", "absent", "unreadable", "unusable")
#: the largest record file read (a state.json of 10,000 jobs is about 4 MB)
MAX_RECORD_BYTES = 64 << 20


class RecordsUnusable(ValueError):
    """Records that are there but cannot be replayed (the reason, one line)."""


@dataclass(frozen=True, slots=True)
class RecordedJob:
    id: str
    bracket: int
    rung: int
    rung_start_steps: int
    target_steps: int
    steps_done: int
    serial_iter_time: float | None  # seconds per step on one GPU; None: never measured


@dataclass(frozen=True, slots=True)
class AppRecords:
    """One Themis app's jobs as its AM recorded them, and the phases they ran in."""

    app_id: str
    job_gpus: int
    jobs: tuple[RecordedJob, ...]
    #: per phase (bracket, rung order): (index into ``jobs``, steps run in that phase)
    phases: tuple[tuple[tuple[int, float], ...], ...]
    #: seconds per step on one GPU, per job (measured, else as the module doc says)
    iter_times: tuple[float, ...]
    inferred: tuple[str, ...]  # "iter_time" when no job's iteration time was measured
    source: str

    @property
    def steps(self) -> float:
        return sum(it for phase in self.phases for _, it in phase)

    @property
    def gpu_seconds(self) -> float:
        """The work of the recorded steps (serial GPU-seconds, no restart pauses)."""
        return sum(it * self.iter_times[i] for phase in self.phases for i, it in phase)


class RecordSource(Protocol):
    """Where Themis apps' records are read: ``(spec.json, state.json)`` bytes of an app,
    ``None`` when the app left none; :class:`PermissionError` when they are not readable."""

    name: str

    def fetch(self, app: HistoryApp) -> tuple[bytes, bytes] | None: ...


class HdfsRecords:
    """The records in HDFS, over WebHDFS as the preview's user (SPNEGO with Kerberos): each
    in its owner's ``/user/<owner>/.themis/<app id>/``, readable by the owner and by HDFS
    superusers (run the preview as an admin to read every app's)."""

    def __init__(self, webhdfs_url: str, user: str, timeout_s: float = 60.0) -> None:
        self.name = webhdfs_url.rstrip("/")
        self.fs = WebHdfs(webhdfs_url, user=user, timeout=timeout_s)
        self.down: str | None = None  # why the NameNode cannot be reached: not tried again

    def fetch(self, app: HistoryApp) -> tuple[bytes, bytes] | None:
        if self.down is not None:
            raise PermissionError(self.down)
        d = f"/user/{app.user}/.themis/{app.id}"
        try:
            spec = self.fs.read_or_none(f"{d}/spec.json")
            state = self.fs.read_latest(f"{d}/state.json")
        except WebHdfsError as e:
            why = str(e).splitlines()[0][:300]
            if " unreachable: " in why:
                self.down = why
            raise PermissionError(why) from None
        if spec is None or state is None:
            return None
        return spec, state


class DirRecords:
    """Saved copies: ``DIR/<app id>/spec.json`` and ``state.json``, e.g. from
    ``hdfs dfs -get '/user/*/.themis/application_*' DIR``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = str(root)

    def fetch(self, app: HistoryApp) -> tuple[bytes, bytes] | None:
        d = self.root / app.id
        spec, state = d / "spec.json", d / "state.json"
        if not spec.is_file() or not (state.is_file() or state.with_suffix(".json.tmp")
                                       .is_file()):
            return None
        if not state.is_file():
            state = state.with_suffix(".json.tmp")  # an interrupted atomic write
        try:
            if max(spec.stat().st_size, state.stat().st_size) > MAX_RECORD_BYTES:
                raise PermissionError(f"{d}: a record is larger than {MAX_RECORD_BYTES} bytes")
            return spec.read_bytes(), state.read_bytes()
        except OSError as e:
            raise PermissionError(f"{d}: {e.strerror or e}") from None


def _int(d: Mapping[str, Any], key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise RecordsUnusable(f"{where}: {key!r} is not a count: {v!r}"[:300])
    return v


def _jobs(state: Any) -> list[RecordedJob]:
    if not isinstance(state, dict) or not isinstance(state.get("hyperband"), dict):
        raise RecordsUnusable("state.json has no 'hyperband' object")
    raw = state["hyperband"].get("jobs")
    if not isinstance(raw, list):
        raise RecordsUnusable("state.json: 'hyperband.jobs' is not a list")
    out = []
    for n, j in enumerate(raw, 1):
        where = f"state.json: job {n}"
        if not isinstance(j, dict) or not isinstance(j.get("id"), str):
            raise RecordsUnusable(f"{where} has no id")
        t = j.get("serial_iter_time")
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)
                              or not 0 < t < 1e7):
            raise RecordsUnusable(f"{where} ({j['id'][:80]}): serial_iter_time {t!r}"[:300])
        out.append(RecordedJob(j["id"], _int(j, "bracket", where), _int(j, "rung", where),
                               _int(j, "rung_start_steps", where),
                               _int(j, "target_steps", where), _int(j, "steps_done", where),
                               float(t) if t is not None else None))
    return out


def _phases(jobs: Sequence[RecordedJob]) -> list[tuple[tuple[int, float], ...]]:
    """Per (bracket, rung), in order: the jobs that ran there and their steps there."""
    target: dict[tuple[int, int], int] = {}
    for j in jobs:
        target.setdefault((j.bracket, j.rung), j.target_steps)
        if j.rung > 0:
            target.setdefault((j.bracket, j.rung - 1), j.rung_start_steps)
    runs: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for i, j in enumerate(jobs):
        start = 0
        for r in range(j.rung + 1):
            if r < j.rung:
                if (j.bracket, r) not in target:
                    raise RecordsUnusable(f"job {j.id[:80]}: the target of rung {r} of bracket "
                                          f"{j.bracket} is not recorded")
                end = target[(j.bracket, r)]
            else:
                start = j.rung_start_steps if j.rung > 0 else start
                end = j.steps_done
            if end > start:
                runs.setdefault((j.bracket, r), []).append((i, float(end - start)))
            start = max(start, end)
    return [tuple(runs[k]) for k in sorted(runs)]


def parse_records(app: HistoryApp, spec_raw: bytes, state_raw: bytes,
                  source: str) -> AppRecords:
    """The app's records; :class:`RecordsUnusable` naming what is wrong."""
    from themis.am.spec import AppSpec

    try:
        spec = AppSpec.from_json(spec_raw.decode("utf-8"))
        state = json.loads(state_raw)
    except ValueError as e:  # (UnicodeDecodeError and the spec's SpecError are ValueErrors)
        raise RecordsUnusable(f"spec.json or state.json is malformed: {e}"[:300]) from None
    jobs = _jobs(state)
    phases = _phases(jobs)
    if not phases:
        raise RecordsUnusable("no job ran a step")
    measured = [j.serial_iter_time for j in jobs if j.serial_iter_time is not None]
    inferred: tuple[str, ...] = ()
    if measured:
        fallback = statistics.median(measured)
    else:
        steps = sum(it for phase in phases for _, it in phase)
        if not app.gpu_seconds:
            raise RecordsUnusable("no iteration time was measured and the app has no "
                                  "GPU-seconds to spread over its steps")
        fallback = app.gpu_seconds / steps
        inferred = ("iter_time",)
    times = tuple(j.serial_iter_time if j.serial_iter_time is not None else fallback
                  for j in jobs)
    return AppRecords(app.id, spec.job_gpus(), tuple(jobs), tuple(phases), times, inferred,
                      source)


@dataclass(slots=True)
class RecordsRead:
    """The records found per app id, and how each Themis app fared (:data:`OUTCOMES`)."""

    by_app: dict[str, AppRecords]
    outcomes: dict[str, int]
    problems: dict[str, str]  # app id -> why its records were not used (not "absent")


def read_records(apps: Sequence[HistoryApp], source: RecordSource | None) -> RecordsRead:
    """The records of the Themis apps among ``apps`` (none when ``source`` is None)."""
    out = RecordsRead({}, dict.fromkeys(OUTCOMES, 0), {})
    if source is None:
        return out
    for app in apps:
        if app.app_type.upper() != THEMIS_APP_TYPE:
            continue
        try:
            raw = source.fetch(app)
            if raw is None:
                out.outcomes["absent"] += 1
                continue
            out.by_app[app.id] = parse_records(app, raw[0], raw[1], source.name)
            out.outcomes["read"] += 1
        except PermissionError as e:
            out.outcomes["unreadable"] += 1
            out.problems[app.id] = str(e)
        except RecordsUnusable as e:
            out.outcomes["unusable"] += 1
            out.problems[app.id] = str(e)
    return out
