"""The job contract (docs/jobs.md) with a job that imports nothing from Themis: the plain
Keras example runs under the standalone launcher from a command without placeholders, is
stopped with SIGTERM, checkpoints, resumes on other GPUs from that checkpoint, and its
objective tag is read from its event files.

Runs TensorFlow in the job's subprocesses only; marked ``tensorflow`` so that it runs in a
pytest process of its own (``python3 -m pytest -m tensorflow tests/integration/...``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from themis.am.command import render_command
from themis.am.core import JobLaunch, LaunchCode, LaunchEvent
from themis.am.launchers.local.jobs import GpuRegistry, JobRunner, LocalProcessLauncher
from themis.am.spec import parse_spec
from themis.mechanism.topology import Gpu
from themis.profiler import Profiler

pytestmark = [pytest.mark.tensorflow, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "keras_minimal.py"


def _wait(launcher: LocalProcessLauncher, want: LaunchCode, timeout: float = 180.0
          ) -> LaunchEvent:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in launcher.poll():
            if ev.code is want:
                return ev
            assert ev.code is not LaunchCode.FAILED, ev
        time.sleep(0.2)
    raise AssertionError(f"no {want} within {timeout}s")


def test_plain_keras_job_is_stopped_checkpointed_and_resumed(tmp_path: Path) -> None:
    spec = parse_spec({"name": "keras", "kind": "single-job", "max_steps": 60,
                       "job": {"command": f"python3 {EXAMPLE} --checkpoint-every 1000 "
                                          "--eval-every 5"}})
    topo = {f"m0/{k}": Gpu(f"m0/{k}", "m0", "r0", f"s{k}") for k in range(3)}
    root = tmp_path / "jobs" / "j0"
    runner = JobRunner("j0", {}, {}, root, 0.0,
                       render=lambda steps, gpus: render_command(spec, {"max_steps": steps}))
    launcher = LocalProcessLauncher("keras", topo, GpuRegistry(), lambda job_id: runner)
    prof = Profiler(metric="eval_accuracy")
    prof.add_job("j0", runner.logdir)

    launcher.launch(JobLaunch("j0", 60, gpus=("m0/0",)))
    assert _wait(launcher, LaunchCode.STARTED).step == 0
    deadline = time.monotonic() + 180
    while prof.job("j0").steps_done < 10:  # training (its event file has steps)
        assert time.monotonic() < deadline, runner.stderr_tail(0)
        assert runner.live, runner.stderr_tail(0)
        prof.poll()
        time.sleep(0.2)
    launcher.stop("j0", "lease")
    stopped = _wait(launcher, LaunchCode.STOPPED, timeout=60)
    assert stopped.status == 0, runner.stderr_tail(0)
    saved = runner.checkpoint_steps()
    assert saved and 10 <= saved[-1] < 60  # the SIGTERM checkpoint (no periodic one)

    launcher.launch(JobLaunch("j0", 60, gpus=("m0/1", "m0/2")))  # other GPUs
    assert _wait(launcher, LaunchCode.STARTED).step == saved[-1]
    reached = _wait(launcher, LaunchCode.REACHED)
    assert reached.step == 60
    out = (root / "segment-1.out").read_text()
    assert f"restored {runner.checkpoint_dir}/ckpt-{saved[-1]} at step {saved[-1]}" in out
    assert (root / "segment-1.cmd").read_text().startswith("bash -c")
    prof.poll()
    job = prof.job("j0")
    assert job.steps_done == 60
    value = job.objective_value()
    assert value is not None and 0.0 <= value <= 1.0
    assert job.serial_iter_time() is not None  # from the event files' wall times
    # the resumed run wrote no step twice before the checkpoint's step
    series = job.metric_series[str(job.objective_source())]
    assert min(s for s, _ in series if s > saved[-1]) > saved[-1]
