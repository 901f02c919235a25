"""Checkpoint and restore time of the training job (themis.jobs.train's model).

Measures, over --runs repetitions, the wall time of one CheckpointManager.save (TF
checkpoint write + manifest + atomic publish + retention) and of one restore_latest
(fetch + SHA-256 verification + TF read) for the job's default model, on a local
directory and, if THEMIS_WEBHDFS_URL is set (e.g. http://127.0.0.1:9870), on WebHDFS.

    python bench/bench_checkpoint.py --runs 20 [--hidden-units 64 --num-layers 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from themis.jobs.checkpoints import CheckpointManager
from themis.jobs.data import batch_indices, load_dataset
from themis.jobs.storage import CheckpointStore, LocalDirStore, WebHdfsStore


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def bench(store: CheckpointStore, runs: int, hidden: int, layers: int) -> dict[str, float]:
    from themis.jobs.tfmodel import ModelConfig, Trainer

    data = load_dataset("digits")
    trainer = Trainer(ModelConfig(data.num_features, data.num_classes, hidden, layers))
    manager = CheckpointManager(store, keep=3)
    save_t, restore_t = [], []
    size = 0
    for i in range(runs):
        idx = batch_indices(len(data.x_train), 32, 0, i)
        trainer.train_step(data.x_train[idx], data.y_train[idx])
        t0 = time.perf_counter()
        manager.save(trainer.global_step, trainer.write)
        save_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = manager.restore_latest(trainer.read)
        restore_t.append(time.perf_counter() - t0)
        assert res is not None and res.step == trainer.global_step
    with tempfile.TemporaryDirectory() as d:
        trainer.write(Path(d))
        size = sum(p.stat().st_size for p in Path(d).iterdir())
    return {"save_median": statistics.median(save_t), "save_p95": _p95(save_t),
            "restore_median": statistics.median(restore_t), "restore_p95": _p95(restore_t),
            "bytes": float(size), "params": float(trainer.model.count_params())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="repetitions per store")
    p.add_argument("--hidden-units", type=int, default=64, help="model width")
    p.add_argument("--num-layers", type=int, default=2, help="model depth")
    args = p.parse_args()
    stores: list[tuple[str, CheckpointStore | None]] = []
    tmp = tempfile.TemporaryDirectory(prefix="bench-ckpt-")
    stores.append(("local", LocalDirStore(Path(tmp.name))))
    url = os.environ.get("THEMIS_WEBHDFS_URL")
    stores.append(("webhdfs", WebHdfsStore(url, f"/tmp/themis-bench-{uuid.uuid4().hex[:8]}")
                   if url else None))
    print(f"model: {args.num_layers} x {args.hidden_units} MLP, {args.runs} runs")
    for name, store in stores:
        if store is None:
            print(f"{name}: skipped (THEMIS_WEBHDFS_URL not set)")
            continue
        r = bench(store, args.runs, args.hidden_units, args.num_layers)
        print(f"{name}: params={int(r['params'])} checkpoint_bytes={int(r['bytes'])} "
              f"save median={r['save_median'] * 1000:.1f} ms p95={r['save_p95'] * 1000:.1f} ms "
              f"restore median={r['restore_median'] * 1000:.1f} ms "
              f"p95={r['restore_p95'] * 1000:.1f} ms")
    tmp.cleanup()


if __name__ == "__main__":
    main()
