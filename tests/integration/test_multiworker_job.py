"""A real distributed TensorFlow job under the standalone launcher: the MultiWorkerMirrored
Keras example (``examples/jobs/keras_multiworker.py``, no Themis import) runs as 2 local
worker processes, each with the TF_CONFIG the launcher gives it; the whole group is stopped
with SIGTERM, the chief checkpoints, and the group resumes on other GPUs from that
checkpoint and runs to its target.

Runs TensorFlow in the job's subprocesses only; marked ``tensorflow`` so that it runs in a
pytest process of its own (``python3 -m pytest -m tensorflow tests/integration/...``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from themis.am.command import render_command
from themis.am.core import JobLaunch, LaunchCode, LaunchEvent
from themis.am.launchers.local.jobs import GpuRegistry, JobRunner, LocalProcessLauncher
from themis.am.spec import parse_spec
from themis.hadoop.checkpoint_mirror import checkpoint_steps
from themis.mechanism.topology import Gpu
from themis.profiler import Profiler

pytestmark = [pytest.mark.tensorflow, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "keras_multiworker.py"


def _wait(launcher: LocalProcessLauncher, want: LaunchCode, timeout: float = 300.0
          ) -> LaunchEvent:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in launcher.poll():
            if ev.code is want:
                return ev
            assert ev.code is not LaunchCode.FAILED, (ev, _tails(launcher))
        time.sleep(0.2)
    raise AssertionError(f"no {want} within {timeout}s: {_tails(launcher)}")


def _tails(launcher: LocalProcessLauncher) -> list[str]:
    runners = [launcher.runners["j0"], *launcher.tasks.get("j0", {}).values()]
    return [r.stderr_tail(len(r.segments) - 1, 1500) for r in runners if r.segments]


def test_two_worker_job_trains_stops_and_resumes_as_one_group(tmp_path: Path) -> None:
    spec = parse_spec({"name": "mw", "kind": "single-job", "max_steps": 40,
                       "tasks": {"workers": 2},
                       "job": {"command": f"{sys.executable} {EXAMPLE} --checkpoint-every "
                                          "1000"}})
    topo = {f"m0/{k}": Gpu(f"m0/{k}", "m0", "r0", f"s{k}") for k in range(4)}
    root = tmp_path / "jobs" / "j0"
    runner = JobRunner("j0", {}, {}, root, 0.0,
                       render=lambda steps, gpus: render_command(spec, {"max_steps": steps}))
    launcher = LocalProcessLauncher("mw", topo, GpuRegistry(), lambda job_id: runner)
    prof = Profiler(metric="eval_loss")
    prof.add_job("j0", runner.logdir)

    launcher.launch(JobLaunch("j0", 100_000, gpus=("m0/0", "m0/1"), workers=2))
    assert _wait(launcher, LaunchCode.STARTED).step == 0
    deadline = time.monotonic() + 300
    while prof.job("j0").steps_done < 5:  # both workers train (each step needs both)
        assert time.monotonic() < deadline, _tails(launcher)
        assert launcher.live() == {"j0"}, _tails(launcher)
        prof.poll()
        time.sleep(0.2)
    launcher.stop("j0", "lease")
    stopped = _wait(launcher, LaunchCode.STOPPED, timeout=240)
    assert stopped.status == 0, _tails(launcher)  # checkpointed and exited
    assert launcher.live() == set()
    steps = checkpoint_steps(runner.checkpoint_dir)  # the chief's checkpoint only
    assert steps, _tails(launcher)
    at = steps[-1]
    assert 5 <= at < 100_000
    # one cluster of two workers: each process trained with the other (TF_CONFIG)
    assert "worker 0: 2 replicas in sync" in (root / "segment-0.out").read_text()
    assert "worker 1: 2 replicas in sync" in (
        root / "tasks" / "worker-1" / "segment-0.out").read_text()

    launcher.launch(JobLaunch("j0", at + 20, gpus=("m0/2", "m0/3"), workers=2))
    assert _wait(launcher, LaunchCode.STARTED).step == at  # resumed from the checkpoint
    reached = _wait(launcher, LaunchCode.REACHED, timeout=420)
    assert reached.status == 0 and reached.step == at + 20
    assert checkpoint_steps(runner.checkpoint_dir)[-1] == at + 20
    prof.poll()
    assert prof.job("j0").steps_done == at + 20
    assert prof.job("j0").objective_value() is not None
