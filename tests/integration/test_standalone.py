"""``themis standalone`` end to end: the gRPC arbiter, two competing Hyperband apps and real
TensorFlow job processes on 4 emulated GPUs (2 machines x 2 GPUs), short leases.

Each app runs one Hyperband bracket (3 configurations of 30 steps, the best one continued
to 90 steps; 150 ms per step), so each app wants 3 GPUs at first and the two compete for
4; neither can finish before the first lease expiry (15 s), even on a fast machine. The test
checks, from report.json and the job files, that both apps complete, that GPUs change
hands at lease expiry, that job processes run only on GPUs leased to their app, and that
stopped/promoted jobs resume from their checkpoints with their step counts. A second test
interrupts a run with SIGINT (Ctrl-C) and checks the clean shutdown.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("tensorflow") is None:  # no import: TF takes seconds to load
    pytest.skip("needs TensorFlow (the 'train' extra)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

APP = """\
name: {name}
seed: {seed}
hyperband: {{max_resource: 3, eta: 3, brackets: [1], steps_per_unit: 30}}
search_space:
  learning_rate: {{type: double, min: 0.001, max: 0.05, scale: log}}
job: {{step_time_ms: 150, batch_size: 16, hidden_units: 16, num_layers: 1,
       checkpoint_every: 10, dataset: synthetic}}
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def _cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "themis.cli", "standalone", "--out", str(out),
            "--display", "lines", "--refresh-s", "10", *args]


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (orphan check)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().split()[2]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{d.name}: {cmdline}")
    return found


def _write_apps(tmp: Path) -> list[str]:
    args = []
    for name, seed in (("a", 1), ("b", 2)):
        path = tmp / f"{name}.yaml"
        path.write_text(APP.format(name=name, seed=seed))
        args += ["--app", str(path)]
    return args


def _leased(report: dict[str, Any], app: str, gpu: str, t: float, slack: float = 0.5) -> bool:
    return any(g["app"] == app and gpu in g["gpus"] and g["start"] - slack <= t <= g["expiry"]
               for r in report["rounds"] for g in r["grants"])


def test_two_apps_compete_for_four_gpus(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = _cmd(out, "--machines", "2", "--gpus-per-machine", "2", *_write_apps(tmp_path),
               "--lease-s", "15", "--bid-timeout-s", "1", "--timeout-s", "300")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=380)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "completed"
    assert (out / "report.png").stat().st_size > 10_000
    assert "rho" in proc.stdout and "a: DONE" in proc.stdout and "b: DONE" in proc.stdout

    # Both apps completed their whole Hyperband plan and found a best configuration.
    for name in ("a", "b"):
        app = report["apps"][name]
        assert app["completed"] and app["jct_s"] > 0, app["state"]
        assert app["steps_done"] == app["steps_planned"] == 3 * 30 + 60
        assert app["best"] is not None and app["best"]["loss"] is not None
        assert app["gpu_seconds_leased"] > 0 and app["gpu_seconds_jobs"] > 0
        finite = [r[1] for r in app["rho"] if r[1] is not None]
        assert finite and all(x > 0 for x in finite), "live rho from profiled iteration times"
        statuses = sorted(j["status"] for j in app["jobs"].values())
        assert statuses == ["finished", "stopped", "stopped"]
        # the profiler measured the jobs' serial iteration times: ~0.15 s per step on the
        # emulated GPU (150 ms sleep) plus the CPU's share of the step
        its = [j["serial_iter_time_s"] for j in app["jobs"].values() if j["serial_iter_time_s"]]
        assert len(its) == 3 and all(0.14 < x < 1.5 for x in its), its

    # GPUs moved between the apps at lease expiry (not only when an app finished).
    moves = [m for m in report["moves"] if m["at_lease_expiry"]]
    assert moves, report["rounds"]
    expiries = {g["expiry"] for r in report["rounds"] for g in r["grants"]}
    for m in moves:
        assert any(abs(m["t"] - e) < 1.0 for e in expiries), m
    assert {m["to"] for m in moves} <= {"a", "b"}

    # No two job processes (of any app) ever ran on one GPU at the same time.
    per_gpu: dict[str, list[tuple[float, float, str]]] = {}
    for app in report["apps"].values():
        for job_id, job in app["jobs"].items():
            for s in job["segments"]:
                for gpu in s["gpus"]:
                    per_gpu.setdefault(gpu, []).append((s["t_start"], s["t_end"], job_id))
    for gpu, spans in per_gpu.items():
        spans.sort()
        for (_, end, j1), (start, _, j2) in itertools.pairwise(spans):
            assert end <= start + 0.05, f"{gpu}: {j1} until {end}, {j2} from {start}"

    # Every job process ran on GPUs leased to its app when it started.
    for name, app in report["apps"].items():
        for job_id, job in app["jobs"].items():
            for s in job["segments"]:
                assert s["gpus"], (job_id, s)
                for gpu in s["gpus"]:
                    assert _leased(report, name, gpu, s["t_start"]), (name, job_id, s)

    # Checkpoints resumed: each resumed segment starts at the step its predecessor saved,
    # and the optimizer/step state came back (train.py restores model + optimizer + step).
    resumed = 0
    for app in report["apps"].values():
        for job_id, job in app["jobs"].items():
            prev_end = None
            for s in job["segments"]:
                if s["start_step"] is not None and prev_end is not None:
                    assert s["start_step"] == prev_end, (job_id, job["segments"])
                    assert s["restored_from"] == f"ckpt-{prev_end:012d}"
                    resumed += 1
                if s["end_step"] is not None:
                    prev_end = s["end_step"]
            assert job["steps_done"] == job["target_steps"], job_id
            assert job["checkpoints"][-1] == job["target_steps"], job_id
    assert resumed >= 2  # at least the two promoted jobs
    assert len(report["resumes"]) >= resumed

    # Binding: the GPU ids were exported to the job processes.
    seg_cmds = list(out.glob("apps/*/jobs/*/segment-*.cmd"))
    assert seg_cmds and all("--num-gpus" in p.read_text() for p in seg_cmds)
    assert not _processes_mentioning(str(out)), "orphan job processes"
    print(f"standalone run: {elapsed:.1f}s, {len(report['rounds'])} rounds, "
          f"{len(moves)} moves at expiry, {resumed} resumes")


def test_ctrl_c_stops_cleanly_and_keeps_checkpoints(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = _cmd(out, "--machines", "1", "--gpus-per-machine", "2", "--apps", "1",
               "--steps-per-unit", "400", "--step-time-ms", "50", "--lease-s", "30")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if list(out.glob("apps/*/jobs/*/checkpoints/ckpt-*")):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("no checkpoint within 120 s")
        jobs = [p.name for p in out.glob("apps/*/jobs/*") if p.is_dir()]
        assert _processes_mentioning(str(out)), "job processes should be running"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the driver
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, f"{proc.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert not _processes_mentioning(str(out)), "orphan job processes after Ctrl-C"
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted"
    app = report["apps"]["app-0"]
    assert not app["completed"]
    stopped = [s for j in app["jobs"].values() for s in j["segments"]
               if s["stopped_by"] == "shutdown" and s["end_step"]]
    assert stopped, app["jobs"]
    for s in stopped:
        assert s["exit_status"] == 0 and s["reason"] == "signal 15"
    # the SIGTERM checkpoint of every stopped job is on disk
    for job_id, job in app["jobs"].items():
        ends = [s["end_step"] for s in job["segments"] if s["end_step"]]
        if ends:
            assert job["checkpoints"] and job["checkpoints"][-1] == max(ends), job_id
    assert jobs
