"""Step budgets kept for programs that never read their step target (docs/jobs.md,
"Keras model.fit"): under ``themis standalone`` a Hyperband app whose job writes a step
every 50 ms forever (a run directory of its own, as Keras does) completes: the local
launcher stops each run a few seconds after its event files show the run's target
(``PAST_TARGET_GRACE_S``), and the trials are ranked by the values they wrote. The YARN
runner's side is tests/unit/test_job_contract_runner.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
JOB = """\
import itertools, os, time
from pathlib import Path
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
lr = float(os.environ["LR"])
logdir = Path(os.environ["THEMIS_LOGDIR"]) / "train"
logdir.mkdir(parents=True, exist_ok=True)
with open(logdir / f"events.out.tfevents.{time.time()}.job", "wb") as f:
    w = RecordWriter(f)
    for step in itertools.count(1):
        v = summary_pb2.Summary.Value(tag="batch_loss", simple_value=lr + 1.0 / step)
        w.write(event_pb2.Event(wall_time=time.time(), step=step,
                                summary=summary_pb2.Summary(value=[v])).SerializeToString())
        f.flush()
        time.sleep(0.05)
"""
SPEC = """\
name: endless
search_space:
  lr: {{type: double, min: 0.001, max: 0.1, scale: log}}
hyperband: {{max_resource: 2, eta: 2, brackets: [1], steps_per_unit: 40, seed: 3}}
objective: {{metric: batch_loss}}
job:
  command: LR={{lr}} {python} {job}
resources: {{gpus: 1}}
"""


def test_runs_that_never_read_their_target_are_stopped_there(tmp_path: Path) -> None:
    job = tmp_path / "endless.py"
    job.write_text(JOB)
    spec = tmp_path / "app.yaml"
    spec.write_text(SPEC.format(python=sys.executable, job=job))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "themis.cli", "standalone", "--out", str(out),
                        "--display", "lines", "--refresh-s", "30", "--machines", "1",
                        "--gpus-per-machine", "2", "--app", str(spec)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "reached its step target" in p.stdout, p.stdout[-3000:]
    report = json.loads((out / "report.json").read_text())
    app = report["apps"][0] if isinstance(report["apps"], list) else \
        next(iter(report["apps"].values()))
    assert app["state"] == "done"
    for job_id, j in app["jobs"].items():
        assert j["objective_source"] == "train/batch_loss", (job_id, j)
        assert j["steps_done"] >= j["target_steps"], (job_id, j)
        # stopped within the grace period (5 s at 20 steps/s) plus a few ticks
        assert j["steps_done"] <= j["target_steps"] + 160, (job_id, j)
