"""The profiler reads what the usual event writers produce, laid out as they lay it out:
Keras' ``model.fit`` (TensorBoard callback: runs ``train/`` and ``validation/``, ``epoch_*``
tags indexed by epoch, ``batch_*`` and ``evaluation_*_vs_iterations`` by step), PyTorch-style
writers (``tensorboardX``, the format ``torch.utils.tensorboard`` shares: a directory per run)
and flat files in the log directory (the bundled job, TF1/TF2 writers).

tests/unit/data/keras-fit/ was written by TensorFlow 2.21 / Keras 3.15: ``model.fit`` of a
small classifier, 3 epochs of 9 batches, ``validation_split=0.1``,
``TensorBoard(log_dir, update_freq="batch")``. The tensorboardX files are written here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from themis.profiler import Profiler

KERAS = Path(__file__).parent / "data" / "keras-fit"


def _values(logdir: Path, run: str, tag: str) -> list[tuple[int, float]]:
    """What TensorBoard's own reader finds for ``tag`` in ``run`` (the expected values)."""
    from tensorboard.util import tensor_util

    out = []
    for f in sorted((logdir / run).glob("events.out.tfevents.*")):
        for e in EventFileLoader(str(f)).Load():
            for v in e.summary.value:
                if v.tag == tag:
                    out.append((e.step, float(tensor_util.make_ndarray(v.tensor))))
    return out


def _profile(logdir: Path, metric: str) -> Profiler:
    prof = Profiler(metric=metric)
    prof.add_job("j", logdir)
    prof.poll()
    return prof


@pytest.fixture
def keras_logs(tmp_path: Path) -> Path:
    shutil.copytree(KERAS, tmp_path / "logs")
    return tmp_path / "logs"


@pytest.mark.parametrize(("metric", "source", "run", "tag"), [
    ("epoch_loss", "validation/epoch_loss", "validation", "epoch_loss"),  # bare: validation
    ("validation/epoch_accuracy", "validation/epoch_accuracy", "validation", "epoch_accuracy"),
    ("train/epoch_loss", "train/epoch_loss", "train", "epoch_loss"),
    ("batch_loss", "train/batch_loss", "train", "batch_loss"),  # only in train
    ("evaluation_loss_vs_iterations", "validation/evaluation_loss_vs_iterations",
     "validation", "evaluation_loss_vs_iterations"),
])
def test_keras_model_fit_objectives_resolve_to_their_run(
        keras_logs: Path, metric: str, source: str, run: str, tag: str) -> None:
    job = _profile(keras_logs, metric).job("j")
    assert job.objective_source() == source
    expected = _values(keras_logs, run, tag)
    assert job.objective_value() == pytest.approx(max(expected)[1])


def test_keras_epochs_are_not_steps(keras_logs: Path) -> None:
    job = _profile(keras_logs, "epoch_loss").job("j")
    batches = _values(keras_logs, "train", "batch_loss")
    assert job.steps_done == max(s for s, _ in batches) == 27  # 3 epochs x 9 batches
    assert job.serial_iter_time() is not None  # from the batch steps' wall times
    assert {"train/batch_loss", "validation/epoch_loss", "train/epoch_loss"} <= job.tags_seen


def test_an_objective_nobody_wrote_has_no_value_and_the_tags_say_what_was_written(
        keras_logs: Path) -> None:
    job = _profile(keras_logs, "val_loss").job("j")  # Keras' History name, not a tag
    assert job.objective_value() is None and job.objective_source() is None
    assert "validation/epoch_loss" in job.tags_seen


def test_tensorboardx_runs_as_pytorch_users_write_them(tmp_path: Path) -> None:
    from tensorboardX import SummaryWriter

    logdir = tmp_path / "logs"
    for run, scale in (("lr-0.1", 1.0), ("lr-0.01", 2.0)):
        with SummaryWriter(str(logdir / run)) as w:
            for step in range(1, 21):
                w.add_scalar("Loss/train", scale / step, step)
                if step % 5 == 0:
                    w.add_scalar("Loss/val", scale * 1.5 / step, step)
    job = _profile(logdir, "Loss/val").job("j")
    # a bare tag found in two runs, neither named like a validation run: the first by name
    assert job.objective_source() == "lr-0.01/Loss/val"
    assert job.objective_value() == pytest.approx(2.0 * 1.5 / 20)
    assert job.steps_done == 20
    job = _profile(logdir, "lr-0.1/Loss/val").job("j")
    assert job.objective_value() == pytest.approx(1.5 / 20)


def test_tensorboardx_default_objective_and_flat_files(tmp_path: Path) -> None:
    from tensorboardX import SummaryWriter

    with SummaryWriter(str(tmp_path)) as w:  # flat: straight into the log directory
        for step in range(1, 11):
            w.add_scalar("loss", 1.0 / step, step)
        w.add_scalar("eval_loss", 0.25, 10)
    job = _profile(tmp_path, "eval_loss").job("j")
    assert job.objective_source() == "eval_loss" and job.objective_value() == 0.25
    assert job.steps_done == 10


def test_runs_deeper_than_the_limit_are_not_read(tmp_path: Path) -> None:
    from tensorboardX import SummaryWriter

    deep = tmp_path.joinpath(*["d"] * 6)
    with SummaryWriter(str(deep)) as w:
        w.add_scalar("x", 1.0, 1)
    with SummaryWriter(str(tmp_path / "a" / "b")) as w:
        w.add_scalar("x", 2.0, 2)
    job = _profile(tmp_path, "x").job("j")
    assert job.objective_source() == "a/b/x" and job.steps_done == 2
