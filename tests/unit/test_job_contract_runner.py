"""The YARN side of the job contract (docs/jobs.md) for a job that prints no JSON events:
the runner reports its start when its first event file appears (with the step of the
checkpoint it restored), its progress from the event files, and keeps its local checkpoint
directory in HDFS across runs (restored before the start, saved after the exit)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from themis.am.launchers.yarn.runner import Runner
from themis.hadoop.checkpoint_mirror import CheckpointMirror, checkpoint_steps
from themis.hadoop.webhdfs import WebHdfs

from ._fake_webhdfs import FakeWebHdfs
from ._http import recording_am

# a job without JSON events: it writes TensorBoard event files (steps 8..10, after the
# checkpoint of step 7 it finds) and a new checkpoint, then exits 0
JOB = """
import os, sys
from pathlib import Path
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
ckpt = Path(sys.argv[1]); logdir = Path(sys.argv[2])
assert (ckpt / "ckpt-7.index").exists(), "checkpoint not restored"
logdir.mkdir(parents=True, exist_ok=True)
with open(logdir / "events.out.tfevents.1.job", "wb") as f:
    w = RecordWriter(f)
    for step in (8, 9, 10):
        v = summary_pb2.Summary.Value(tag="eval_accuracy", simple_value=step / 10)
        w.write(event_pb2.Event(wall_time=1.7e9 + step, step=step,
                                summary=summary_pb2.Summary(value=[v])).SerializeToString())
(ckpt / "ckpt-10.index").write_bytes(b"ten")
(ckpt / "ckpt-7.index").unlink()
(ckpt / "checkpoint").write_text("model_checkpoint_path: 'ckpt-10'")
"""


@pytest.fixture
def fake() -> Iterator[FakeWebHdfs]:
    f = FakeWebHdfs()
    yield f
    f.close()


@pytest.fixture
def am() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An AM's /api/report that records the reports and never asks to stop."""
    with recording_am() as served:
        yield served


def test_checkpoint_store_mirrors_the_local_directory(fake: FakeWebHdfs, tmp_path: Path
                                                      ) -> None:
    fs = WebHdfs(fake.url)
    local = tmp_path / "run1"
    store = CheckpointMirror(fs, local, "/app/ckpt-dir/j0/")
    assert store.restore() == (0, 0)  # nothing in HDFS yet
    (local / "ckpt-5.index").write_bytes(b"five")
    (local / "sub").mkdir()
    (local / "sub" / "data").write_bytes(b"d")
    (local / "checkpoint").write_text("ckpt-5")
    assert store.save() == (3, 0)
    assert fake.placed[-1] == "/app/ckpt-dir/j0/checkpoint"  # the index is written last
    (local / "ckpt-5.index").unlink()
    (local / "ckpt-9.index").write_bytes(b"nine")
    assert store.save() == (1, 1)
    assert store.save() == (0, 0)  # nothing changed
    again = CheckpointMirror(fs, tmp_path / "run2", "/app/ckpt-dir/j0")
    assert again.restore() == (3, 11)  # files, bytes
    assert sorted(p.name for p in (tmp_path / "run2").iterdir()) == [
        "checkpoint", "ckpt-9.index", "sub"]
    assert checkpoint_steps(tmp_path / "run2") == [9]


def test_checkpoint_names_give_steps(tmp_path: Path) -> None:
    for name in ("ckpt-3", "ckpt-12.index", "ckpt-12.data-00000-of-00001", "ckpt-4.weights.h5",
                 "ckpt-x.index", "model-5.index", "ckpt-7.index.tmp"):
        (tmp_path / name).touch()
    assert checkpoint_steps(tmp_path) == [3, 4, 12]
    assert checkpoint_steps(tmp_path / "none") == []


def test_runner_reports_a_job_without_json_events(
        fake: FakeWebHdfs, am: tuple[str, list[dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, reports = am
    fs = WebHdfs(fake.url)
    fs.write("/app/ckpt-dir/j0/ckpt-7.index", b"seven")  # the previous run's checkpoint
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    ckpt, logdir = Path("checkpoints"), Path("tflogs")
    runner = Runner(url, "j0", 2, logdir, [sys.executable, str(script), str(ckpt), str(logdir)],
                    report_every=0.1, metric="eval_accuracy", checkpoint_dir=ckpt,
                    store=CheckpointMirror(fs, ckpt, "/app/ckpt-dir/j0"))
    assert runner.run() == 0
    events = [e for r in reports for e in r["events"]]
    kinds = [e["event"] for e in events]
    start = next(e for e in events if e["event"] == "start")
    assert start["step"] == 7 and start["from"] == "event files"
    assert kinds.index("checkpoint-restored") < kinds.index("start")
    assert kinds.index("checkpoint-saved") < kinds.index("runner-exit")
    saved = next(e for e in events if e["event"] == "checkpoint-saved")
    assert saved["written"] == 2 and saved["deleted"] == 1
    final = [r for r in reports if r.get("steps")][-1]
    assert final["steps"] == 10 and final["loss"] == pytest.approx(1.0)  # eval_accuracy
    assert final["serial_iter_time"] == pytest.approx(1.0)  # the events' wall times
    assert sorted(fake.files) == ["/app/ckpt-dir/j0/checkpoint", "/app/ckpt-dir/j0/ckpt-10.index"]


# a job that never reads its step target: it writes a step every 50 ms, in a run directory
# as Keras does, until it is told to stop (it dies of the SIGTERM)
ENDLESS = """
import itertools, sys, time
from pathlib import Path
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
logdir = Path(sys.argv[1]) / "train"
logdir.mkdir(parents=True, exist_ok=True)
with open(logdir / "events.out.tfevents.1.job", "wb") as f:
    w = RecordWriter(f)
    for step in itertools.count(1):
        v = summary_pb2.Summary.Value(tag="batch_loss", simple_value=1.0 / step)
        w.write(event_pb2.Event(wall_time=time.time(), step=step,
                                summary=summary_pb2.Summary(value=[v])).SerializeToString())
        f.flush()
        time.sleep(0.05)
"""


def test_runner_stops_a_job_that_passes_its_step_target(
        am: tuple[str, list[dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, reports = am
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THEMIS_MAX_STEPS", "20")
    monkeypatch.setattr("themis.am.launchers.yarn.runner.PAST_TARGET_GRACE_S", 1.0)
    script = tmp_path / "job.py"
    script.write_text(ENDLESS)
    logdir = Path("tflogs")
    runner = Runner(url, "j0", 1, logdir, [sys.executable, str(script), str(logdir)],
                    report_every=0.1, metric="train/batch_loss")
    t0 = time.monotonic()
    assert runner.run() == 0  # stopped at its target: the run reached it
    assert time.monotonic() - t0 < 30
    events = [e for r in reports for e in r["events"]]
    stop = next(e for e in events if e["event"] == "stop-requested")
    assert "reached its step target 20" in stop["reason"]
    exit_ = next(e for e in events if e["event"] == "exit")
    assert exit_["reason"] == "max-steps" and exit_["step"] >= 20
    # never more than the grace period's steps (1 s at 20 steps/s, plus report lag) past it
    assert exit_["step"] <= 20 + 40
    assert next(r for r in reports if r.get("steps", 0) >= 20)["loss"] is not None
