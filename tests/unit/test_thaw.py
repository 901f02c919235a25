"""A job whose host thaws after a freeze long enough for YARN to take it for lost is killed
by its runner at once (themis.am.launchers.yarn.thaw; docs/am.md, "Faults"), and the AM
counts that run as stopped, not failed. The freeze is real: SIGSTOP of the runner process
and the job's process group, SIGCONT after."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from themis.am.core import JobLaunch, LaunchCode
from themis.am.launchers.yarn.launcher import YarnContainerLauncher
from themis.am.launchers.yarn.thaw import ThawWatch, fence_after

from .test_stop_escalation import _am

ROOT = Path(__file__).resolve().parents[2]

# a step every 20 ms, each with its wall time, into the file named by argv[1]
STEPPER = """
import itertools, os, sys, time
with open(sys.argv[1], "w") as f:
    f.write(f"pid {os.getpid()}\\n"); f.flush()
    for step in itertools.count(1):
        f.write(f"{step} {time.time()}\\n"); f.flush()
        time.sleep(0.02)
"""


def test_fence_is_the_liveness_expiry_less_two_heartbeats_and_at_least_half_of_it(
        caplog: pytest.LogCaptureFixture) -> None:
    def conf(values: dict[str, str]) -> Any:
        return lambda key, default: values.get(key, default)

    assert fence_after(conf({})) == 598.0  # YARN's defaults: 600 s, 1 s heartbeats
    assert fence_after(conf({"yarn.nm.liveness-monitor.expiry-interval-ms": "15000"})) == 13.0
    assert fence_after(conf({"yarn.nm.liveness-monitor.expiry-interval-ms": "4000",
                             "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms":
                                 "1500"})) == 2.0
    assert fence_after(conf({"yarn.nm.liveness-monitor.expiry-interval-ms": "ten"})) == 598.0
    assert "is not a positive number of milliseconds" in caplog.text


def test_watch_fires_only_on_a_sleep_that_ended_after_s_late() -> None:
    watch = ThawWatch(5.0, lambda late: None, period_s=0.1)
    assert watch.late(100.0, 100.1) is None
    assert watch.late(100.0, 104.0) is None
    assert watch.late(100.0, 105.2) == pytest.approx(5.1)
    assert ThawWatch(0.0, lambda late: None).late(100.0, 1e6) is None  # off


def _steps(path: Path) -> tuple[int, list[tuple[int, float]]]:
    lines = path.read_text().splitlines()
    pid = int(lines[0].split()[1])
    return pid, [(int(a), float(b)) for a, b in (ln.split() for ln in lines[1:] if ln.strip())]


@pytest.mark.parametrize("frozen_s, killed", [(2.5, True), (0.5, False)])
def test_a_runner_kills_its_job_when_its_host_thaws_after_the_fence(
        frozen_s: float, killed: bool, tmp_path: Path) -> None:
    server, reports = _am(None)
    out = tmp_path / "steps"
    job = tmp_path / "job.py"
    job.write_text(STEPPER)
    runner = subprocess.Popen(
        [sys.executable, "-m", "themis.am.launchers.yarn.runner",
         "--am", f"http://127.0.0.1:{server.server_address[1]}", "--job-id", "j0",
         "--report-every", "0.1", "--fence-after", "1.5", "--start-slots", "0",
         "--", sys.executable, str(job), str(out)],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.time() + 30
        while (not out.exists() or len(out.read_text().splitlines()) < 10) \
                and time.time() < deadline:
            time.sleep(0.05)
        job_pid, _ = _steps(out)
        os.kill(runner.pid, signal.SIGSTOP)  # the host freezes: every process at once
        os.killpg(job_pid, signal.SIGSTOP)
        time.sleep(frozen_s)
        os.killpg(job_pid, signal.SIGCONT)
        os.kill(runner.pid, signal.SIGCONT)
        thawed = time.time()
        try:
            rc = runner.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        _, steps = _steps(out)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        with contextlib.suppress(ProcessLookupError, UnboundLocalError):
            os.killpg(job_pid, signal.SIGKILL)
        stderr = runner.stderr.read() if runner.stderr else ""
        server.shutdown()
        server.server_close()
    events = [e for r in reports for e in r["events"]]
    kinds = [e["event"] for e in events]
    if killed:
        assert rc == 256 - signal.SIGKILL, stderr[-2000:]  # the job's -9, as sys.exit gives it
        assert "stop-thawed" in kinds, kinds
        after = [t for _s, t in steps if t > thawed]
        # the thawed job ran again for at most about the watch's period
        assert not after or max(after) - thawed < 0.5, (after, thawed)
        assert "killed at the thaw" in stderr
    else:
        assert rc is None, "a freeze shorter than the fence killed the job"
        assert "stop-thawed" not in kinds
        assert steps[-1][1] > thawed  # it went on


class _Shell:
    def __init__(self) -> None:
        self.asks: list[int] = []
        self.events: list[dict[str, Any]] = []

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int, priority: int) -> int:
        self.asks.append(len(self.asks) + 1)
        return self.asks[-1]

    def launch(self, container: str, command: str, env_json: str) -> None:
        pass

    def poll_events(self, timeout_ms: int) -> str:
        out, self.events = self.events, []
        return json.dumps(out)


@pytest.mark.parametrize("thawed", [True, False])
def test_am_counts_a_run_killed_at_a_thaw_as_stopped(thawed: bool) -> None:
    shell = _Shell()
    launcher = YarnContainerLauncher(shell, memory_mb=1024, vcores=1, clock=time.time,
                                     lock=threading.Lock(),
                                     command_for=lambda run: ("runner", {}))
    launcher.launch(JobLaunch("j0", 100, node="nm1:8041", count=1))
    shell.events = [{"type": "allocated", "request_id": 1, "container": "c_1",
                     "node": "nm1:8041"}]
    launcher.poll()
    events = [{"event": "stop-thawed", "frozen_s": 20.0, "reason": "frozen"}] if thawed \
        else []
    launcher.handle_report({"job_id": "j0", "run_id": 1, "container": "c_1", "events": events})
    shell.events = [{"type": "completed", "container": "c_1", "exit_status": 137,
                     "diagnostics": ""}]
    codes = [e.code for e in launcher.poll() if e.job_id == "j0"]
    assert codes[-1] is (LaunchCode.STOPPED if thawed else LaunchCode.FAILED), codes
