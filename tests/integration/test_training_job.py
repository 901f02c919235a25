"""The real TensorFlow training job: kill/resume, SIGTERM, corrupt checkpoints.

Each test runs ``python -m themis.jobs.train`` as a subprocess (about 5 s of TensorFlow
start-up each) and inspects its checkpoints with TensorFlow's checkpoint reader.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("the 'train' extra (TensorFlow) is not installed", allow_module_level=True)
# Reads checkpoints with TensorFlow in the pytest process: scripts/test.sh runs these tests
# in a pytest process of their own (TensorFlow and OR-Tools cannot share a process; see
# tests/conftest.py). TensorFlow is imported when a test runs, not at collection.
pytestmark = pytest.mark.tensorflow

REPO = Path(__file__).resolve().parents[2]
COMMON = ["--deterministic", "--batch-size", "16", "--hidden-units", "32",
          "--checkpoint-every", "50", "--seed", "7", "--log-level", "WARNING"]


def _cmd(logdir: Path, ckpt: Path, max_steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "themis.jobs.train", "--logdir", str(logdir),
            "--checkpoint-uri", str(ckpt), "--max-steps", str(max_steps), *COMMON, *extra]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def _run(cmd: list[str]) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode not in (0, 3):
        raise AssertionError(f"job failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode, events


def _start(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


def _wait_for_checkpoint(proc: subprocess.Popen[str], min_step: int) -> list[dict[str, Any]]:
    """Read the job's JSON events until a checkpoint at >= min_step is reported."""
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"job exited early: {proc.wait()} {proc.stderr.read()[-2000:]}"
                                 if proc.stderr else "job exited early")
        ev = json.loads(line)
        seen.append(ev)
        if ev["event"] == "checkpoint" and ev["step"] >= min_step:
            return seen
    raise AssertionError("no checkpoint in time")


def _ckpt_vars(ckpt_root: Path, step: int) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt_root / f"ckpt-{step:012d}" / "ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith("_CHECKPOINTABLE") and "OBJECT_GRAPH" not in name}


def _find(vars_: dict[str, np.ndarray], *parts: str) -> str:
    names = [n for n in vars_ if all(p in n for p in parts)]
    assert names, f"no checkpoint variable with {parts} among {sorted(vars_)}"
    return sorted(names)[0]


def _steps(ckpt_root: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in ckpt_root.iterdir()
                  if p.name.startswith("ckpt-"))


def test_help_lists_every_option() -> None:
    out = subprocess.run([sys.executable, "-m", "themis.jobs.train", "--help"],
                         capture_output=True, text=True, env=_env(), check=True).stdout
    for opt in ("--learning-rate", "--batch-size", "--hidden-units", "--num-layers",
                "--optimizer", "--checkpoint-uri", "--checkpoint-every", "--keep-checkpoints",
                "--max-steps", "--logdir", "SIGTERM"):
        assert opt in out


def test_sigkill_resume_preserves_step_and_adam_state(tmp_path: Path) -> None:
    # Reference: one uninterrupted run to 150 steps.
    ref_ckpt = tmp_path / "ref-ckpt"
    rc, _ = _run(_cmd(tmp_path / "ref-logs", ref_ckpt, 150, "--keep-checkpoints", "5"))
    assert rc == 0 and _steps(ref_ckpt) == [50, 100, 150]

    # Same job, SIGKILLed after its step-100 checkpoint, then restarted.
    ckpt = tmp_path / "ckpt"
    cmd = _cmd(tmp_path / "logs", ckpt, 150, "--keep-checkpoints", "5", "--step-sleep-ms", "20")
    proc = _start(cmd)
    _wait_for_checkpoint(proc, 100)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    killed_at = _steps(ckpt)[-1]
    assert 100 <= killed_at < 150
    saved = _ckpt_vars(ckpt, killed_at)

    rc, events = _run(cmd)
    start = events[0]
    assert rc == 0 and start["event"] == "start"
    assert start["step"] == killed_at
    assert start["restored_from"] == f"ckpt-{killed_at:012d}"
    # Adam's iteration counter came back with the checkpoint, not from zero.
    assert start["optimizer_iterations"] == killed_at
    assert int(saved[_find(saved, "optimizer", "iteration")]) == killed_at
    # start-up timings: process start <= TensorFlow imported <= ready <= restored (start)
    t = start["timings"]
    assert t["process"] <= t["imported"] <= t["ready"] <= start["time"]
    assert [e["event"] for e in events[:2]] == ["start", "first-step"]
    assert isinstance(events[-1].pop("time"), float)  # every event is timestamped
    assert events[-1] == {"event": "exit", "step": 150, "reason": "max-steps", "status": 0}

    # The resumed run ends bit-identical to the uninterrupted one: model weights AND the
    # Adam slots (first and second moments) match. Losing the optimizer state on resume
    # would change all of them.
    final, ref = _ckpt_vars(ckpt, 150), _ckpt_vars(ref_ckpt, 150)
    assert final.keys() == ref.keys()
    slot = "optimizer/_variables/2/.ATTRIBUTES/VARIABLE_VALUE"  # first Adam moment
    assert slot in final
    assert np.abs(final[slot]).sum() > 0
    for name in final:
        np.testing.assert_allclose(final[name], ref[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_sigterm_checkpoints_then_exits_zero(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    cmd = _cmd(tmp_path / "logs", ckpt, 100000, "--step-sleep-ms", "10")
    proc = _start(cmd)
    events = _wait_for_checkpoint(proc, 50)
    time.sleep(0.5)  # ~40 more steps, so the signal checkpoint is a new one
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    events += [json.loads(line) for line in out.splitlines()]
    last_ckpt = [e for e in events if e["event"] == "checkpoint"][-1]
    assert last_ckpt["reason"] == f"signal {int(signal.SIGTERM)}"
    stopped_at = last_ckpt["step"]
    assert stopped_at > 50  # the signal checkpoint is a new one, after the periodic one
    assert events[-1]["event"] == "exit" and events[-1]["step"] == stopped_at
    saved = _ckpt_vars(ckpt, stopped_at)
    assert int(saved[_find(saved, "optimizer", "iteration")]) == stopped_at
    assert int(saved[_find(saved, "step")]) == stopped_at

    rc, resumed = _run(_cmd(tmp_path / "logs", ckpt, stopped_at + 10))
    assert rc == 0
    assert resumed[0]["step"] == stopped_at and resumed[0]["optimizer_iterations"] == stopped_at
    assert resumed[-1]["step"] == stopped_at + 10
    after = _ckpt_vars(ckpt, stopped_at + 10)
    assert int(after[_find(after, "optimizer", "iteration")]) == stopped_at + 10


def test_corrupt_newest_checkpoint_is_skipped_not_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "ckpt"
    rc, _ = _run(_cmd(tmp_path / "logs", ckpt, 100))
    assert rc == 0 and _steps(ckpt) == [50, 100]
    data = next((ckpt / "ckpt-000000000100").glob("ckpt.data-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # flip one byte: same size, different content
    data.write_bytes(bytes(raw))
    # A leftover of an interrupted upload must be ignored as well.
    (ckpt / ".tmp-ckpt-000000000150-deadbeef").mkdir()

    proc = subprocess.run(_cmd(tmp_path / "logs", ckpt, 120), capture_output=True, text=True,
                          env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    start = json.loads(proc.stdout.splitlines()[0])
    assert start["step"] == 50 and start["skipped"] == ["ckpt-000000000100"]
    assert "SHA-256" in proc.stderr and "ignoring incomplete upload" in proc.stderr
    names = sorted(p.name for p in ckpt.iterdir())
    # The corrupt step-100 entry was moved aside (not deleted) when step 100 was reached
    # again; the temp entry is still there.
    assert any(n.startswith("corrupt-ckpt-000000000100-") for n in names)
    assert ".tmp-ckpt-000000000150-deadbeef" in names
    assert _steps(ckpt) == [50, 100, 120]
