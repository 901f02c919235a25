"""A plain Keras ``model.fit`` program (examples/jobs/keras_fit.py: Keras' TensorBoard and
BackupAndRestore callbacks, no Themis import) searched by Hyperband under ``themis
standalone`` with real TensorFlow processes (docs/jobs.md, "Keras model.fit").

* With the objective ``epoch_loss`` (Keras writes it in ``validation/``): every trial has a
  finite value read from the validation run, the rung promotes the trial its values rank
  best, no run trains past its step target by more than one epoch, and the promoted trial
  resumes from its backup instead of starting over.
* With ``val_loss`` (the name Keras' History uses, not a tag): the app fails, exit 1, with
  one message naming the tags the trials did write; no silent search.

About 45 s per run on the project's 2-core VM.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("needs TensorFlow (the 'train' extra)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "jobs" / "keras-fit-hyperband.yaml"
STEPS_PER_EPOCH = 29  # 1843 training examples / batch 64 (keras_fit.py)


def _run(tmp_path: Path, spec_text: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    spec = tmp_path / "app.yaml"
    spec.write_text(spec_text)
    out = tmp_path / "out"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "themis.cli", "standalone", "--out", str(out),
                        "--display", "lines", "--refresh-s", "30", "--machines", "1",
                        "--gpus-per-machine", "2", "--app", str(spec)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() \
        else None
    return p, report


def test_model_fit_trials_are_ranked_by_their_validation_epoch_loss(tmp_path: Path) -> None:
    p, report = _run(tmp_path, SPEC.read_text())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    app = report["apps"][0] if isinstance(report["apps"], list) else \
        next(iter(report["apps"].values()))
    jobs = app["jobs"]
    assert len(jobs) == 3
    for job_id, j in jobs.items():
        assert j["loss"] is not None and math.isfinite(j["loss"]), (job_id, j)
        assert j["objective_source"] == "validation/epoch_loss" and not j["missing_objective"]
        for s in j["segments"]:  # never more than one epoch past the run's target
            if s["end_step"] is not None:
                assert s["end_step"] <= s["target_steps"] + STEPS_PER_EPOCH, (job_id, s)
    promoted = [k for k, j in jobs.items() if j["rung"] == 1]
    assert len(promoted) == 1, jobs
    # the promoted trial's second run resumed from its backup: at epoch 3 of 6 (58 steps
    # are 2 epochs), not at epoch 1
    assert len(jobs[promoted[0]]["segments"]) >= 2
    out = (tmp_path / "out" / "apps" / "keras-fit" / "jobs" / promoted[0] / "segment-1.out")
    first = re.search(r"Epoch (\d+)/(\d+)", out.read_text())
    assert first and (first[1], first[2]) == ("3", "6"), out.read_text()[-2000:]
    assert app["best"]["job"] == promoted[0]
    # rung 0 promoted the best: the promoted trial's value after its first 58 steps (epoch
    # index 1, validation run) is below the final values of the trials it stopped. All read
    # exactly from the trials' own event files: the report rounds to 4 decimals, and two
    # trials can tie there.
    from themis.profiler import Profiler

    prof = Profiler(metric="epoch_loss")
    for k in jobs:
        prof.add_job(k, tmp_path / "out" / "apps" / "keras-fit" / "jobs" / k / "logs")
    prof.poll()
    at_rung0 = dict(prof.job(promoted[0]).metric_series["validation/epoch_loss"])[1]
    stopped = {k: prof.job(k).objective_value() for k in jobs if k != promoted[0]}
    for k, v in stopped.items():
        assert v is not None and abs(v - jobs[k]["loss"]) <= 5e-5 + 1e-9, (k, v, jobs[k])
    assert all(at_rung0 <= v for v in stopped.values() if v is not None), (at_rung0, stopped)


def test_a_search_whose_objective_no_trial_writes_fails_and_says_which_tags_exist(
        tmp_path: Path) -> None:
    p, report = _run(tmp_path, SPEC.read_text().replace("metric: epoch_loss",
                                                        "metric: val_loss"))
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    text = p.stdout + p.stderr
    assert "FAILED" in text and "no trial wrote the objective 'val_loss'" in text, text[-3000:]
    assert "validation/epoch_loss" in text
    app = report["apps"][0] if isinstance(report["apps"], list) else \
        next(iter(report["apps"].values()))
    assert app["state"] == "failed" and "val_loss" in app["error"]
    assert all(j["missing_objective"] for j in app["jobs"].values())


def test_model_fit_stopped_mid_epoch_resumes_from_its_backup(tmp_path: Path) -> None:
    """What docs/jobs.md says of ``BackupAndRestore`` (the example's, ``save_freq="epoch"``,
    ``delete_checkpoint=False``): a SIGTERM mid-epoch ends the program at once (no handler:
    nothing written, the backup of the last complete epoch kept); the next run resumes at
    that epoch, not at epoch 1; the backup stays when ``fit`` returns, and Keras' default
    (``delete_checkpoint=True``) deletes it then. About 40 s."""
    import signal
    import threading
    import time

    backup = tmp_path / "ckpt" / "backup"
    # batch 4: 461 steps per epoch (1843 examples), 2-4 s here: long enough to stop one in
    # its middle even when the pipe delivers the "Epoch 3/4" line late
    per_epoch = -(-1843 // 4)
    epochs, steps = 4, 4 * per_epoch
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
           "THEMIS_LOGDIR": str(tmp_path / "logs"), "THEMIS_MAX_STEPS": str(steps),
           "THEMIS_CHECKPOINT_DIR": str(tmp_path / "ckpt")}
    cmd = [sys.executable, str(REPO / "examples" / "jobs" / "keras_fit.py"),
           "--batch-size", "4"]
    epoch = re.compile(r"^Epoch (\d+)/(\d+)")

    # run 1: SIGTERM early in its third epoch
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    timer = threading.Timer(120.0, proc.kill)  # a hung run fails the test, not the suite
    timer.start()
    lines: list[str] = []
    began: dict[int, float] = {}
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            m = epoch.match(line)
            if m:
                began[int(m[1])] = time.monotonic()
            if 3 in began:
                time.sleep(min(0.2, (began[3] - began[2]) / 4))  # just into epoch 3
                t_term = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                break
        rest = proc.stdout.read()
        status = proc.wait(30)
        took = time.monotonic() - t_term
    finally:
        timer.cancel()
    text = "".join(lines) + rest
    assert 3 in began, text[-3000:]
    # died of the signal at once, in epoch 3: no epoch end printed after "Epoch 3/4"
    assert status == -signal.SIGTERM and took < 5, (status, took)
    after = text[text.index("Epoch 3/"):]
    assert "Epoch 4/" not in text and not re.search(r"^\d+/\d+ - ", after, re.M), text[-2000:]
    assert re.search(r"^\d+/\d+ - ", text[:text.index("Epoch 3/")], re.M)  # (the format)
    meta = json.loads((backup / "training_metadata.json").read_text())
    assert meta["epoch"] == 2, meta  # two complete epochs, nothing written at the SIGTERM

    # run 2: resumes at epoch 3 and keeps its backup when fit returns
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    started = [m[1] for m in (epoch.match(x) for x in p.stdout.splitlines()) if m]
    assert started == ["3", "4"], p.stdout[-3000:]
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == epochs

    # run 3: Keras' default deletes the backup when fit returns (after resuming from it)
    default = tmp_path / "keras_fit_default.py"
    default.write_text((REPO / "examples" / "jobs" / "keras_fit.py").read_text()
                       .replace("delete_checkpoint=False", "delete_checkpoint=True"))
    p = subprocess.run([sys.executable, str(default), "--batch-size", "4"],
                       env={**env, "THEMIS_MAX_STEPS": str(steps + per_epoch)},
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    started = [m[1] for m in (epoch.match(x) for x in p.stdout.splitlines()) if m]
    assert started == ["5"], p.stdout[-3000:]
    assert not backup.exists()
