"""SIGKILL trials of job processes under ``themis standalone`` (shared by
``test_kill_trials.py`` and ``bench/bench_kill_trials.py``; issue 22's target "0 lost
checkpoints, 0 double grants over >= 20 kill/restart trials").

One trial: the standalone driver runs real bundled jobs (``themis.jobs.train``, tiny
model, a checkpoint every few steps); this process picks a job process that is training
(its segment's stdout has the ``first-step`` event), SIGKILLs it at a random moment in
(``min_delay_s``, ``max_delay_s``) after that event, waits until the process is gone and
then reads the job's checkpoint directory: every ``ckpt-*`` entry must verify against its
manifest (:func:`themis.jobs.checkpoints.verify_manifest`), and the newest one is the
*last complete checkpoint* of the kill. The AM core sees a failed run and relaunches the
job after its back-off (docs/am.md, "Failures"). From ``report.json`` at the end:

* **lost checkpoint**: the job's next segment that started (one stopped at its lease's
  expiry before its ``start`` event restores nothing) restored another step than the last
  complete checkpoint at the kill (or than 0 when there was none), skipped a checkpoint as corrupt, the job was
  never restarted, or any ``ckpt-*`` entry of the job fails verification (at the kill or
  at the end of the run);
* **double use**: two job processes' segments on one GPU overlap in time (the GPU
  registry's promise, docs/standalone.md "Jobs bound to leases");
* **double grant**: a GPU granted to an app while another app's lease on it runs (from
  the rounds' grants; an app that finished gave its leases back);
* **lost steps** of a kill: the newest step the killed segment is known to have reached
  (its event files, flushed every 0.5 s, its ``checkpoint`` events and the last complete
  checkpoint: a lower bound) minus the restored step; bounded by the checkpoint interval
  plus what a SIGKILL lands on.
* **kills during a checkpoint write**, by phase: ``local`` (the job was writing the
  checkpoint into its temporary directory: a ``themis-ckpt-*`` directory of the killed
  process is left in the run's ``TMPDIR``), ``upload`` (publishing it: a new ``.tmp-*``
  entry in the job's checkpoint directory), ``delete`` (retention was deleting an old
  one: a new ``.deleting-*`` entry).

Only job processes whose parent is the driver this module started are killed: the target
is opened as a pidfd and checked (parent, command line) through it before the signal, so
a pid reused by another process is never signalled.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

APP_SPEC = """\
name: {name}
search_space:
  learning_rate: {{type: double, min: 0.001, max: 0.05, scale: log}}
hyperband: {{max_resource: {r}, eta: 2, brackets: [{bracket}], steps_per_unit: {steps},
            seed: {seed}}}
job:
  args: {{step_time_ms: {step_ms}, batch_size: 32, hidden_units: 16, num_layers: 1,
         checkpoint_every: {every}, dataset: synthetic}}
  max_restarts: {restarts}
resources: {{gpus: 2}}
"""


@dataclass
class Kill:
    app: str
    job: str
    segment: int
    pid: int
    t: float  # unix time of the SIGKILL
    last_complete: int | None  # newest ckpt-* step that verifies, after the process died
    corrupt: list[str]  # ckpt-* entries that fail verification after the kill
    partial: list[str]  # new .tmp-* uploads left behind (ignored by readers)
    deleting: list[str]  # new .deleting-* entries (retention was interrupted)
    local_tmp: list[str]  # themis-ckpt-* temporary directories present at the kill
    restored: int | None = None  # step the next segment started from
    skipped: list[str] = field(default_factory=list)
    lost_steps: int | None = None
    problem: str = ""  # why this trial lost a checkpoint ("" = fine)
    local_left: list[str] = field(default_factory=list)  # of local_tmp: left for good

    @property
    def phase(self) -> str:
        """The checkpoint write the kill landed in ("" = none)."""
        return ("upload" if self.partial else "delete" if self.deleting else
                "local" if self.local_left else "")


@dataclass
class RunResult:
    status: int
    kills: list[Kill]
    double_use: list[str]
    double_grants: list[str]
    corrupt_at_end: list[str]
    seconds: float
    out: Path
    load: list[float] = field(default_factory=list)  # 1-min load average, every ~5 s
    gpu_moves: int = 0  # GPUs granted to another app than their previous holder

    @property
    def lost(self) -> list[Kill]:
        return [k for k in self.kills if k.problem]


def summary(runs: list[RunResult]) -> dict[str, Any]:
    kills = [k for r in runs for k in r.kills]
    lost_steps = [k.lost_steps for k in kills if k.lost_steps is not None]
    load = [x for r in runs for x in r.load]
    phases = [k.phase for k in kills]
    return {
        "runs": len(runs),
        "trials": len(kills),
        "lost_checkpoints": sum(1 for k in kills if k.problem)
        + sum(len(r.corrupt_at_end) for r in runs),
        "double_grants": sum(len(r.double_grants) for r in runs),
        "double_gpu_use": sum(len(r.double_use) for r in runs),
        "gpu_moves_between_apps": sum(r.gpu_moves for r in runs),
        "kills_during_checkpoint_write": sum(1 for ph in phases if ph),
        "kills_by_write_phase": {ph: phases.count(ph) for ph in ("local", "upload", "delete")},
        "median_lost_steps": statistics.median(lost_steps) if lost_steps else None,
        "max_lost_steps": max(lost_steps) if lost_steps else None,
        "restored_steps": [k.restored for k in kills],
        "problems": [f"{k.app}/{k.job} seg {k.segment}: {k.problem}" for k in kills
                     if k.problem] + [p for r in runs for p in
                                      r.double_use + r.double_grants + r.corrupt_at_end],
        "driver_status": [r.status for r in runs],
        "seconds": [round(r.seconds, 1) for r in runs],
        "load_avg_1min": None if not load else {
            "mean": round(statistics.mean(load), 2), "max": round(max(load), 2)},
    }


def _verify_dir(ckpt_dir: Path) -> tuple[int | None, list[str], list[str]]:
    """(newest verified step, entries failing verification, names of the other entries)."""
    from themis.jobs.checkpoints import CheckpointError, parse_step, verify_manifest

    good: list[int] = []
    bad: list[str] = []
    other: list[str] = []
    if not ckpt_dir.is_dir():
        return None, bad, other
    for p in sorted(ckpt_dir.iterdir()):
        step = parse_step(p.name)
        if step is None:
            other.append(p.name)
            continue
        try:
            verify_manifest(p, step)
            good.append(step)
        except CheckpointError as e:
            bad.append(f"{ckpt_dir}/{p.name}: {e}")
    return (max(good) if good else None), bad, other


def _is_job_of(pid: int, ppid: int) -> bool:
    """``pid`` is a live ``themis.jobs.train`` process whose parent is ``ppid``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return (fields[0] not in ("Z", "X") and int(fields[1]) == ppid
            and b"themis.jobs.train" in cmdline.split(b"\0"))


def _children(ppid: int) -> list[int]:
    """Live bundled-job processes started by ``ppid`` (the driver)."""
    return [int(d.name) for d in Path("/proc").iterdir()
            if d.name.isdigit() and _is_job_of(int(d.name), ppid)]


def _local_tmp(tmpdir: Path) -> set[str]:
    """Checkpoints being written (or left by a killed writer) in the run's TMPDIR."""
    try:
        return {p.name for p in tmpdir.iterdir() if p.name.startswith("themis-ckpt-")}
    except OSError:
        return set()


def _segment_file(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/fd/1"))
    except OSError:
        return None


def _first_step_time(seg_out: Path) -> float | None:
    try:
        text = seg_out.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if '"first-step"' in line:
            try:
                return float(json.loads(line)["time"])
            except (ValueError, KeyError):
                return None
    return None


def _logged_step_before(logdir: Path, t: float) -> int | None:
    from themis.profiler.events import LogDirTail

    steps = [p.step for p in LogDirTail(logdir).poll()
             if p.tag == "loss" and p.wall_time <= t]
    return max(steps) if steps else None


def run_once(out: Path, kills: int, *, seed: int = 0, apps: int = 1, gpus: int = 2,
             steps_per_unit: int = 300, step_ms: float = 30.0, checkpoint_every: int = 10,
             max_resource: int = 2, lease_s: float = 60.0, min_delay_s: float = 0.2,
             max_delay_s: float = 4.0, timeout_s: float = 600.0) -> RunResult:
    """One standalone run with ``kills`` SIGKILLs of training job processes."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    specs = []
    for i in range(apps):
        p = out / f"kt-{i}.yaml"
        p.write_text(APP_SPEC.format(
            name=f"kt-{i}", r=max_resource, bracket=1 if max_resource > 1 else 0,
            steps=steps_per_unit, seed=seed * 100 + i, step_ms=step_ms,
            every=checkpoint_every, restarts=kills + 2))
        specs += ["--app", str(p)]
    run_dir = out / "run"
    tmpdir = out / "tmp"  # the jobs' temporary checkpoint directories land here
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmpdir),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "themis.cli", "standalone", "--out", str(run_dir),
           "--display", "lines", "--refresh-s", "30", "--no-plot",
           "--machines", "1", "--gpus-per-machine", str(gpus), "--lease-s", str(lease_s),
           "--timeout-s", str(timeout_s), *specs]
    t_start = time.time()
    with open(out / "driver.log", "wb") as log:
        driver = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL)
        planned: dict[int, float] = {}  # pid -> kill time
        done: list[Kill] = []
        seen: dict[Path, set[str]] = {}  # checkpoint dir -> non-checkpoint entries seen
        load: list[float] = []
        next_load = 0.0
        try:
            while driver.poll() is None:
                if time.monotonic() >= next_load:
                    load.append(os.getloadavg()[0])
                    next_load = time.monotonic() + 5.0
                for pid in _children(driver.pid):
                    if pid in planned or len(planned) >= kills:
                        continue
                    seg = _segment_file(pid)
                    first = _first_step_time(seg) if seg else None
                    if first is not None:
                        planned[pid] = first + rng.uniform(min_delay_s, max_delay_s)
                now = time.time()
                for pid, at in list(planned.items()):
                    if at is not None and now >= at:
                        planned[pid] = float("inf")  # keeps the count; never again
                        k = _kill(pid, driver.pid, tmpdir, seen)
                        if k is not None:
                            done.append(k)
                        else:
                            del planned[pid]  # it exited on its own first: plan another
                time.sleep(0.05)
        finally:
            if driver.poll() is None:  # interrupted (or an exception here): stop the run
                jobs = _children(driver.pid)
                driver.send_signal(signal.SIGINT)
                try:
                    driver.wait(90)
                except subprocess.TimeoutExpired:
                    driver.kill()
                    driver.wait()
                    for pid in jobs:  # only the driver's own job processes
                        _signal_job(pid, driver.pid)
    r = _check(out, run_dir, driver.returncode, done, time.time() - t_start, tmpdir)
    r.load = load
    return r


def _signal_job(pid: int, ppid: int) -> int | None:
    """SIGKILL ``pid`` if it is a job process of ``ppid``; the open pidfd (or None)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if not _is_job_of(pid, ppid):  # checked after the open: the fd is this process
        os.close(fd)
        return None
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        os.close(fd)
        return None
    return fd


def _kill(pid: int, ppid: int, tmpdir: Path, seen: dict[Path, set[str]]) -> Kill | None:
    seg = _segment_file(pid)
    if seg is None or not seg.name.startswith("segment-"):
        return None
    fd = _signal_job(pid, ppid)
    if fd is None:
        return None
    t = time.time()
    try:
        select.select([fd], [], [], 30.0)  # readable once the process has terminated
    finally:
        os.close(fd)
    local = _local_tmp(tmpdir)
    job_root = seg.parent
    ckpts = job_root / "checkpoints"
    last, bad, other = _verify_dir(ckpts)
    new = [n for n in other if n not in seen.get(ckpts, set())]
    seen[ckpts] = set(other)
    index = int(seg.stem.split("-")[1])
    return Kill(app=job_root.parent.parent.name, job=job_root.name, segment=index, pid=pid,
                t=t, last_complete=last, corrupt=bad,
                partial=[n for n in new if n.startswith(".tmp-")],
                deleting=[n for n in new if n.startswith(".deleting-")],
                local_tmp=sorted(local))


def _check(out: Path, run_dir: Path, status: int, kills: list[Kill], seconds: float,
           tmpdir: Path) -> RunResult:
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except (OSError, ValueError) as e:
        tail = (out / "driver.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"no report.json from the driver (status {status}): {e}\n{tail}"
                           ) from e
    left = _local_tmp(tmpdir)  # a live writer's temporary directory is gone by now
    claimed: set[str] = set()
    for k in kills:
        k.local_left = sorted(set(k.local_tmp) & left - claimed)
        claimed |= set(k.local_left)
    for k in kills:
        job = report["apps"][k.app]["jobs"][k.job]
        # the next segment that got as far as restoring (one stopped at its lease's expiry
        # while importing TensorFlow, before its "start" event, restored and wrote nothing)
        nxt = [s for s in job["segments"]
               if s["index"] > k.segment and s["start_step"] is not None][:1]
        if k.corrupt:
            k.problem = f"checkpoints fail verification after the kill: {k.corrupt}"
        if not nxt:
            k.problem = k.problem or "the job was not restarted (no later segment started)"
            continue
        k.restored = int(nxt[0]["start_step"])
        start_ev = [e for e in _events(run_dir / "apps" / k.app / "jobs" / k.job
                                       / f"segment-{nxt[0]['index']}.out")
                    if e.get("event") == "start"]
        k.skipped = list(start_ev[0].get("skipped", [])) if start_ev else []
        expected = k.last_complete or 0
        if k.restored != expected:
            k.problem = k.problem or (f"resumed from step {k.restored}, last complete "
                                      f"checkpoint at the kill: {expected}")
        elif k.skipped:
            k.problem = k.problem or f"restore skipped {k.skipped}"
        job_root = run_dir / "apps" / k.app / "jobs" / k.job
        logged = _logged_step_before(job_root / "logs", k.t)
        saved = [int(e["step"]) for e in _events(job_root / f"segment-{k.segment}.out")
                 if e.get("event") == "checkpoint"]
        k.lost_steps = max(logged or 0, max(saved, default=0), expected) - k.restored
    corrupt_end: list[str] = []
    for app in report["apps"]:
        for job_dir in sorted((run_dir / "apps" / app / "jobs").iterdir()):
            corrupt_end += _verify_dir(job_dir / "checkpoints")[1]
    return RunResult(status, kills, _double_use(report), _double_grants(report), corrupt_end,
                     seconds, out, gpu_moves=len(report.get("moves", [])))


def _events(path: Path) -> list[dict[str, Any]]:
    from themis.am.launchers.local.jobs import segment_events

    return segment_events(path)


def _double_use(report: dict[str, Any]) -> list[str]:
    """Overlapping segments of two different jobs on one GPU."""
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for app, a in report["apps"].items():
        for job, j in a["jobs"].items():
            for s in j["segments"]:
                end = s["t_end"] if s["t_end"] is not None else float("inf")
                for g in s["gpus"]:
                    spans.setdefault(g, []).append((s["t_start"], end, f"{app}/{job}"))
    bad = []
    for g, ss in spans.items():
        ss.sort()
        for i, (s1, e1, w1) in enumerate(ss):
            for s0, e0, w0 in ss[:i]:  # every earlier start, not only the previous one
                if s1 < e0 and w0 != w1:
                    bad.append(f"GPU {g}: {w0} [{s0}, {e0}] and {w1} [{s1}, {e1}] overlap")
    return bad


def _double_grants(report: dict[str, Any], eps: float = 0.05) -> list[str]:
    """A grant of GPU g to app B at t while app A's earlier grant of g runs past t."""
    done = {app: a.get("completion_s") for app, a in report["apps"].items()}
    last: dict[str, tuple[str, float, float]] = {}  # gpu -> (app, start, expiry)
    bad = []
    for r in sorted(report["rounds"], key=lambda r: r["t"]):
        for g in r["grants"]:
            for gpu in g["gpus"]:
                prev = last.get(gpu)
                if prev is not None and prev[0] != g["app"]:
                    ended = done.get(prev[0])
                    until = min(prev[2], ended if ended is not None else prev[2])
                    if g["start"] < until - eps:
                        bad.append(f"GPU {gpu}: granted to {g['app']} at {g['start']} while "
                                   f"{prev[0]}'s lease runs until {prev[2]}")
                last[gpu] = (g["app"], g["start"], g["expiry"])
    return bad
