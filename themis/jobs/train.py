"""A TensorFlow/Keras training job for Themis apps.

Trains a small multi-layer perceptron classifier (scikit-learn's bundled digits, or
generated data) with hyper-parameters from the command line, and:

* writes TensorFlow event files to ``--logdir`` (TF2 scalar summaries): ``loss`` and
  ``iteration_time`` (seconds of wall time of that step) every step, ``eval_loss`` and
  ``eval_accuracy`` every ``--eval-every`` steps, and, at the first step of every run
  segment, ``themis/num_gpus`` and ``themis/locality`` (the allocation the job was
  started on, used by the profiler to estimate placement slowdowns). The first step of a
  segment is not timed (it includes graph tracing);
* checkpoints model + optimizer (including Adam's iteration counter and slots) + global
  step every ``--checkpoint-every`` steps and at ``--max-steps`` to ``--checkpoint-uri``
  (local directory or HDFS through WebHDFS; see :mod:`themis.jobs.storage`), keeping the
  newest ``--keep-checkpoints``;
* resumes from the newest complete checkpoint on start (corrupt or partial ones are logged
  and skipped, never deleted; a store it cannot read is tried again for
  ``--restore-wait`` seconds, then the job fails rather than resume from an older one);
* on SIGTERM or SIGINT finishes the current step, checkpoints, and exits.

Exit status: 0 when ``--max-steps`` is reached or after a clean checkpoint on
SIGTERM/SIGINT; 3 when the checkpoint on termination failed; 2 on bad arguments; 1 on
any other error. One JSON object per line on stdout reports ``start``, ``first-step``,
``checkpoint`` and ``exit`` events (the step, the checkpoint name, the reason; ``time`` =
Unix time of the event). ``start`` carries ``timings``: Unix times of the process start,
of TensorFlow imported and of data + model ready (the restore ends at ``start``'s time).

Start-up is what a moved job pays before it trains again, so the job keeps it lean:
optional packages Keras imports eagerly when they are installed but the job never uses
(scikit-learn's wrappers with SciPy, matplotlib's plotting; about 1.5 s of CPU together)
are not imported (``--full-imports`` imports them), the digits are read from
scikit-learn's bundled file without importing scikit-learn, and, run as a program, the
job ends with ``os._exit`` after its final checkpoint and ``exit`` event (flushed): the
interpreter's teardown of TensorFlow takes seconds while the GPUs wait.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from themis.jobs.data import DATASETS, digits_csv


def _process_start_time() -> float:
    """Unix time this process started (Linux /proc), else now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # since boot
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


T_PROCESS = _process_start_time()
# Optional packages Keras imports at start when installed, unused by the job.
UNUSED_IMPORTS = ("sklearn", "matplotlib")

LOG = logging.getLogger("themis.jobs.train")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHECKPOINT_FAILED = 3
LOCALITIES = ("slot", "machine", "rack", "cluster")  # = themis.mechanism.topology.Locality


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m themis.jobs.train",
        description=(
            "Train a small Keras MLP classifier with checkpoint/resume and TensorFlow event "
            "logs (a Themis hyper-parameter tuning job). Exit status: 0 on reaching "
            "--max-steps or after a clean checkpoint on SIGTERM/SIGINT, 3 if that "
            "checkpoint failed, 2 on bad arguments, 1 on other errors."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("job")
    g.add_argument("--job-id", default="job", help="job name, used in logs and event file names")
    g.add_argument("--logdir", type=Path, required=True,
                   help="directory for TensorFlow event files (one new file per run segment)")
    g.add_argument("--max-steps", type=_positive_int, default=1000,
                   help="stop (after a final checkpoint) when the global step reaches this")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of weight initialisation, data split and mini-batch sampling")
    g.add_argument("--dataset", choices=DATASETS, default="digits",
                   help="digits: scikit-learn's bundled 8x8 digits; synthetic: generated blobs")
    g.add_argument("--deterministic", action="store_true",
                   help="enable TensorFlow op determinism (bit-identical reruns)")
    h = p.add_argument_group("hyper-parameters")
    h.add_argument("--learning-rate", type=_positive_float, default=1e-3, help="step size")
    h.add_argument("--batch-size", type=_positive_int, default=32, help="mini-batch size")
    h.add_argument("--hidden-units", type=_positive_int, default=64, help="width of hidden layers")
    h.add_argument("--num-layers", type=int, default=2, help="number of hidden layers (>= 0)")
    h.add_argument("--dropout", type=float, default=0.0, help="dropout rate after hidden layers")
    h.add_argument("--optimizer", choices=("adam", "sgd", "rmsprop", "adagrad"), default="adam",
                   help="optimizer")
    h.add_argument("--momentum", type=float, default=0.0, help="momentum for sgd and rmsprop")
    c = p.add_argument_group("checkpoints")
    c.add_argument("--checkpoint-uri", default=None,
                   help="where checkpoints go: a local path, file:///path, webhdfs://host:port/"
                        "path or hdfs://host/path (WebHDFS at $THEMIS_WEBHDFS_URL or host:9870); "
                        "default: $THEMIS_CHECKPOINT_URI, else <logdir>/checkpoints")
    c.add_argument("--checkpoint-every", type=_positive_int, default=100,
                   help="checkpoint every this many steps")
    c.add_argument("--keep-checkpoints", type=_positive_int, default=3,
                   help="keep the newest N checkpoints, delete older ones")
    c.add_argument("--restore-wait", type=float, default=300.0,
                   help="seconds the start keeps trying a checkpoint store it cannot read "
                        "(HDFS down or restarting) before the job fails; an older checkpoint "
                        "is never restored instead (default: 300)")
    c.add_argument("--hdfs-user", default=None,
                   help="WebHDFS user (default: $HADOOP_USER_NAME, else the login name)")
    s = p.add_argument_group("logging and placement")
    s.add_argument("--eval-every", type=_positive_int, default=None,
                   help="log eval_loss/eval_accuracy every N steps (default: --checkpoint-every)")
    s.add_argument("--summary-flush-secs", type=_positive_float, default=1.0,
                   help="flush event files at least this often, for tailing readers")
    s.add_argument("--num-gpus", type=_positive_int, default=1,
                   help="GPUs in this job's current allocation (logged as themis/num_gpus)")
    s.add_argument("--locality", choices=LOCALITIES, default="slot",
                   help="locality level of the allocation (logged as themis/locality = index)")
    s.add_argument("--log-level", default="INFO", help="Python logging level (stderr)")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="extra sleep per step to emulate a bigger model (0 = none)")
    p.add_argument("--full-imports", action="store_true",
                   help="let Keras import scikit-learn and matplotlib (skipped by default: "
                        "unused, ~1.5 s of CPU at every start)")
    return p


@dataclass
class _StopFlag:
    signum: int | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.signum is None:
            LOG.info("received signal %d: will checkpoint after this step", signum)
        self.signum = signum


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields, "time": round(time.time(), 3)}), flush=True)


def _skip_unused_imports(dataset: str) -> None:
    """Make ``import sklearn`` / ``import matplotlib`` fail fast in this process (Keras
    treats both as optional). scikit-learn stays importable when the digits file cannot be
    found without it."""
    for name in UNUSED_IMPORTS:
        if name in sys.modules:
            continue
        if name == "sklearn" and dataset == "digits" and digits_csv() is None:
            continue
        sys.modules[name] = None  # type: ignore[assignment]


def run(args: argparse.Namespace) -> int:
    # Heavy imports happen here so that --help stays fast.
    if not args.full_imports:
        _skip_unused_imports(args.dataset)
    import tensorflow as tf

    t_imported = time.time()

    from themis.jobs.checkpoints import CheckpointManager, RestoreResult
    from themis.jobs.data import batch_indices, load_dataset
    from themis.jobs.storage import open_store
    from themis.jobs.tfmodel import ModelConfig, Trainer

    stop = _StopFlag()
    signal.signal(signal.SIGTERM, stop.handler)
    signal.signal(signal.SIGINT, stop.handler)

    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    data = load_dataset(args.dataset, args.seed)
    trainer = Trainer(ModelConfig(
        num_features=data.num_features, num_classes=data.num_classes,
        hidden_units=args.hidden_units, num_layers=args.num_layers, dropout=args.dropout,
        optimizer=args.optimizer, learning_rate=args.learning_rate, momentum=args.momentum,
        seed=args.seed,
    ))
    uri = args.checkpoint_uri or os.environ.get("THEMIS_CHECKPOINT_URI") \
        or str(args.logdir / "checkpoints")
    manager = CheckpointManager(open_store(uri, args.hdfs_user), keep=args.keep_checkpoints)
    t_ready = time.time()

    def restore(directory: Path, step: int) -> None:
        try:
            trainer.read(directory, step)
        except Exception:
            trainer.reset()
            raise

    restored: RestoreResult | None = manager.restore_latest(restore, args.restore_wait)
    start = trainer.global_step
    _emit("start", job_id=args.job_id, step=start,
          restored_from=restored.name if restored else None,
          skipped=list(restored.skipped) if restored else [],
          optimizer_iterations=int(trainer.optimizer.iterations.numpy()),
          checkpoint_uri=uri,
          timings={"process": round(T_PROCESS, 3), "imported": round(t_imported, 3),
                   "ready": round(t_ready, 3)})
    last_saved = start if restored else -1

    def save(reason: str) -> None:
        nonlocal last_saved
        step = trainer.global_step
        if step == last_saved:
            return
        t0 = time.perf_counter()
        name = manager.save(step, trainer.write)
        last_saved = step
        _emit("checkpoint", step=step, name=name, reason=reason,
              seconds=round(time.perf_counter() - t0, 4))

    eval_every = args.eval_every or args.checkpoint_every
    writer = tf.summary.create_file_writer(
        str(args.logdir), flush_millis=int(args.summary_flush_secs * 1000),
        filename_suffix=f".{args.job_id}",
    )
    reason = "max-steps"
    with writer.as_default():
        first = True
        while trainer.global_step < args.max_steps:
            if stop.signum is not None:
                reason = f"signal {stop.signum}"
                break
            step = trainer.global_step
            idx = batch_indices(len(data.x_train), args.batch_size, args.seed, step)
            t0 = time.perf_counter()
            loss = trainer.train_step(data.x_train[idx], data.y_train[idx])
            if args.step_sleep_ms > 0:
                time.sleep(args.step_sleep_ms / 1000.0)
            elapsed = time.perf_counter() - t0
            step += 1
            tf.summary.scalar("loss", loss, step=step)
            if first:
                tf.summary.scalar("themis/num_gpus", float(args.num_gpus), step=step)
                tf.summary.scalar("themis/locality", float(LOCALITIES.index(args.locality)),
                                  step=step)
                _emit("first-step", step=step, seconds=round(elapsed, 4))
                first = False
            else:
                tf.summary.scalar("iteration_time", elapsed, step=step)
            if step % eval_every == 0 or step == args.max_steps:
                eval_loss, eval_acc = trainer.evaluate(data.x_eval, data.y_eval)
                tf.summary.scalar("eval_loss", eval_loss, step=step)
                tf.summary.scalar("eval_accuracy", eval_acc, step=step)
            if step % args.checkpoint_every == 0:
                writer.flush()
                save("periodic")
        writer.flush()
    try:
        save(reason)
    except Exception as e:
        LOG.error("checkpoint at step %d failed: %s", trainer.global_step, e)
        writer.close()
        _emit("exit", step=trainer.global_step, reason=reason, status=EXIT_CHECKPOINT_FAILED)
        return EXIT_CHECKPOINT_FAILED
    writer.close()
    _emit("exit", step=trainer.global_step, reason=reason, status=EXIT_OK)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.num_layers < 0:
        build_parser().error("--num-layers must be >= 0")
    if not args.restore_wait >= 0:
        build_parser().error("--restore-wait must be >= 0 seconds")
    if not 0.0 <= args.dropout < 1.0:
        build_parser().error("--dropout must be in [0, 1)")
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        return run(args)
    except Exception as e:
        LOG.error("training job %s failed: %s", args.job_id, e, exc_info=True)
        return EXIT_ERROR


def _exit_now(status: int) -> None:
    """End the process without the interpreter's teardown (TensorFlow's takes seconds):
    everything the job produces is written and flushed by then."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit_now(main())
