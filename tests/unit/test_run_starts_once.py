"""A run starts once (docs/am.md, "Progress"): the YARN runner takes a job as started when
its first event file appears (a job without JSON events, docs/jobs.md), but a job with JSON
events may have that file before the runner has read its own ``start`` line: it opens its
event writer before its restore ends, or its ``start`` line is read late (the runner's
stdout thread starved on a loaded host, while its main loop already sees the file). The
job's own ``start`` then says what it restored; the AM's run, its reallocation record and
the core's job record must show that step, not the ``None`` of the runner's inference (the
e2e failure ``assert None == 117`` of a job moved at a lease end).

Real runner and job processes, the AM's report endpoint recorded, its reports fed to the
AM's :class:`YarnContainerLauncher` after a previous run of the job was stopped at a lease
end with its checkpoint at step 117."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import themis.am.launchers.yarn.runner as runner_mod
from themis.am.core import AmCore, JobLaunch, LaunchCode, LaunchEvent
from themis.am.launchers.yarn.launcher import YarnContainerLauncher
from themis.am.launchers.yarn.runner import Runner
from themis.testing.am_conformance import one_job_spec

from ._http import recording_am

STEP = 117
# a job with JSON events that resumes from its checkpoint at STEP. "writer-first": it opens
# its event file, restores (0.5 s), then prints ``start``; "start-first": it prints
# ``start``, then opens its event file at once (themis.jobs.train's order)
JOB = """
import json, sys, time
from pathlib import Path
order, logdir, step = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
def emit(event, **kw):
    print(json.dumps({"event": event, **kw, "time": time.time()}), flush=True)
def open_writer():
    logdir.mkdir(parents=True, exist_ok=True)
    (logdir / "events.out.tfevents.1.job").write_bytes(b"")
if order == "writer-first":
    open_writer()
    time.sleep(0.5)  # the restore
emit("start", step=step, restored_from=f"ckpt-{step:012d}")
if order == "start-first":
    open_writer()
time.sleep(1.0)
emit("exit", step=step, reason="max-steps")
"""


class _Shell:
    """The JVM shell's calls, answered in memory (what YARN did is set in ``events``)."""

    def __init__(self) -> None:
        self.asks = 0
        self.events: list[dict[str, Any]] = []

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int, priority: int) -> int:
        self.asks += 1
        return self.asks

    def launch(self, container: str, command: str, env_json: str) -> None:
        pass

    def release(self, container: str) -> None:
        pass

    def poll_events(self, timeout_ms: int) -> str:
        out, self.events = self.events, []
        return json.dumps(out)


def _held_at_start(logdir: Path, text: str) -> None:
    """At the job's ``start`` line: wait until the job's event file exists and the
    runner's main loop (every 0.1 s) has had a few looks at it."""
    if '"start"' in text:
        end = time.monotonic() + 10
        while not any(logdir.rglob("events.out.tfevents.*")) and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.4)


class _SlowStdout:
    """The runner's echo of the job's stdout to the container's log, held up at the job's
    ``start`` line (a write waiting on a loaded disk)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir

    def write(self, text: str) -> int:
        _held_at_start(self.logdir, text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.fixture
def am() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with recording_am() as served:
        yield served


def _moved_job(shell: _Shell, core: AmCore) -> YarnContainerLauncher:
    """A launcher whose job j0 ran in c_1 on nm2, was stopped at a lease end there with its
    checkpoint at STEP, and has a new run (2) in c_2 on nm3 (its events applied to
    ``core``)."""
    t = [1000.0]
    launcher = YarnContainerLauncher(shell, memory_mb=1024, vcores=1, clock=lambda: t[0],
                                     lock=threading.Lock(),
                                     command_for=lambda run: ("runner", {}))

    def poll() -> None:
        for e in launcher.poll():
            core.apply(e)

    launcher.launch(JobLaunch("j0", 360, node="nm2:8141", count=1))
    shell.events = [{"type": "allocated", "request_id": 1, "container": "c_1",
                     "node": "nm2:8141"}]
    poll()
    launcher.handle_report({"job_id": "j0", "run_id": 1, "container": "c_1", "events": [
        {"event": "start", "step": 0, "restored_from": None, "time": 1001.0}]})
    t[0] = 1030.0
    launcher.stop("j0", "lease on nm2:8141 ends", lease_expiry=1032.0)
    launcher.handle_report({"job_id": "j0", "run_id": 1, "container": "c_1", "events": [
        {"event": "checkpoint", "step": STEP, "reason": "signal 15", "seconds": 0.4},
        {"event": "exit", "step": STEP, "reason": "signal 15"}]})
    t[0] = 1033.0
    shell.events = [{"type": "completed", "container": "c_1", "exit_status": 0}]
    poll()
    launcher.launch(JobLaunch("j0", 360, node="nm3:8241", count=1))
    shell.events = [{"type": "allocated", "request_id": 2, "container": "c_2",
                     "node": "nm3:8241"}]
    poll()
    return launcher


@pytest.mark.parametrize(("order", "late"), [("writer-first", ""), ("start-first", "read"),
                                           ("start-first", "echo")])
def test_a_moved_job_s_own_start_gives_its_restored_step(
        order: str, late: str, am: tuple[str, list[dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``late``: the runner's stdout thread, at the job's ``start`` line, is held up
    before it reads the line (``read``: starved on a loaded host) or while it echoes it to
    the container's log (``echo``)."""
    url, reports = am
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTAINER_ID", "c_2")
    logdir = Path("tflogs")
    if late == "echo":
        monkeypatch.setattr(runner_mod.sys, "stdout", _SlowStdout(logdir))
    elif late == "read":
        parse = runner_mod.parse_event

        def read_late(line: str) -> dict[str, Any] | None:
            _held_at_start(logdir, line)
            return parse(line)

        monkeypatch.setattr(runner_mod, "parse_event", read_late)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    runner = Runner(url, "j0", 2, logdir,
                    [sys.executable, str(script), order, str(logdir), str(STEP)],
                    report_every=0.1)
    assert runner.run() == 0
    starts = [e for r in reports for e in r["events"] if e["event"] == "start"]
    assert starts[-1].get("restored_from"), starts  # the job's own start came last
    if late == "echo":  # the runner takes the job's start before it echoes the line
        assert len(starts) == 1, starts

    shell = _Shell()
    core = AmCore(one_job_spec(), "conf", clock=lambda: 0.0)
    launcher = _moved_job(shell, core)
    for r in reports:
        launcher.handle_report(r)
    shell.events = [{"type": "completed", "container": "c_2", "exit_status": 0}]
    for e in launcher.poll():
        core.apply(e)

    run = launcher.runs[-1]
    assert (run.run_id, run.restored_step, run.restored_from) == (2, STEP, f"ckpt-{STEP:012d}")
    job_start = next(float(e["time"]) for e in starts if e.get("restored_from"))
    assert run.t_started == job_start  # the job's start: its restore ended then
    # one move, restored at its checkpoint's step (without the fix: [(None, 117), (117, 117)]
    # or [(117, 117), (None, 117)])
    assert [(m.restored_step, m.checkpoint_step) for m in launcher.reallocations] \
        == [(STEP, STEP)]
    (move,) = launcher.reallocations
    assert (move.from_node, move.to_node) == ("nm2:8141", "nm3:8241")
    assert move.started == job_start
    rec = core.record("j0")
    assert rec.runs == 2 and rec.restored_steps == [STEP]


def test_the_runner_s_inference_after_the_job_s_own_start_changes_nothing() -> None:
    """The other order at the AM (the runner's inferred start queued after the job's own):
    the job's own start stays the run's."""
    shell = _Shell()
    launcher = _moved_job(shell, AmCore(one_job_spec(), "conf", clock=lambda: 0.0))
    launcher.handle_report({"job_id": "j0", "run_id": 2, "container": "c_2", "events": [
        {"event": "start", "step": STEP, "restored_from": f"ckpt-{STEP:012d}",
         "time": 1040.0},
        {"event": "start", "step": 0, "restored_from": None, "from": "event files",
         "time": 1040.2}]})
    run = launcher.runs[-1]
    assert (run.restored_step, run.t_started) == (STEP, 1040.0)
    (move,) = launcher.reallocations
    assert move.restored_step == STEP and move.started == 1040.0
    started = [e for e in launcher.poll() if e.code is LaunchCode.STARTED]
    assert started == [LaunchEvent("j0", LaunchCode.STARTED, STEP)]


def test_a_restated_start_is_one_run_whose_restored_step_is_the_restated_one() -> None:
    """The core: a restated STARTED is the live run's start told again."""
    core = AmCore(one_job_spec(), "conf", clock=lambda: 0.0)
    core.apply(LaunchEvent("j0", LaunchCode.STARTED, 7))
    core.apply(LaunchEvent("j0", LaunchCode.STARTED, STEP, restated=True))
    rec = core.record("j0")
    assert rec.runs == 1 and rec.restored_steps == [STEP] and rec.live
    core.apply(LaunchEvent("j0", LaunchCode.STOPPED, STEP + 5))
    core.apply(LaunchEvent("j0", LaunchCode.STARTED, None))
    core.apply(LaunchEvent("j0", LaunchCode.STARTED, STEP + 5, restated=True))
    assert rec.runs == 2 and rec.restored_steps == [STEP, STEP + 5]
    assert "live_restored" not in json.dumps(core.to_state())


def test_a_start_restated_after_the_run_ended_corrects_its_records_only() -> None:
    """The job's own start read with the runner's last report, after YARN said the
    container completed: the run and its reallocation record are corrected; the core, which
    took the run as ended, gets no start after its end."""
    shell = _Shell()
    launcher = _moved_job(shell, AmCore(one_job_spec(), "conf", clock=lambda: 0.0))
    launcher.handle_report({"job_id": "j0", "run_id": 2, "container": "c_2", "events": [
        {"event": "start", "step": 0, "restored_from": None, "from": "event files",
         "time": 1040.2}]})
    shell.events = [{"type": "completed", "container": "c_2", "exit_status": 0}]
    codes = [e.code for e in launcher.poll()]
    launcher.handle_report({"job_id": "j0", "run_id": 2, "container": "c_2", "events": [
        {"event": "start", "step": STEP, "restored_from": f"ckpt-{STEP:012d}",
         "time": 1040.0}]})
    assert codes + [e.code for e in launcher.poll()] == [LaunchCode.STARTED,
                                                          LaunchCode.REACHED]
    assert launcher.runs[-1].restored_step == STEP
    assert [(m.restored_step, m.started) for m in launcher.reallocations] == [(STEP, 1040.0)]
