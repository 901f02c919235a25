"""Training data that needs no download: scikit-learn's bundled digits, or generated blobs."""

from __future__ import annotations

import gzip
import importlib.machinery
import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DATASETS = ("digits", "synthetic")


@dataclass(frozen=True, slots=True)
class Dataset:
    x_train: npt.NDArray[np.float32]
    y_train: npt.NDArray[np.int32]
    x_eval: npt.NDArray[np.float32]
    y_eval: npt.NDArray[np.int32]
    num_classes: int

    @property
    def num_features(self) -> int:
        return int(self.x_train.shape[1])


def _split(
    x: npt.NDArray[np.float32], y: npt.NDArray[np.int32], num_classes: int, seed: int
) -> Dataset:
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_eval = max(1, len(x) // 5)
    return Dataset(x[n_eval:], y[n_eval:], x[:n_eval], y[:n_eval], num_classes)


def digits_csv() -> str | None:
    """Path of scikit-learn's bundled ``digits.csv.gz``, found without importing
    scikit-learn (importing it costs about a second of CPU, with SciPy), or None."""
    spec = importlib.machinery.PathFinder.find_spec("sklearn")
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(base, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            return path
    return None


def load_digits_arrays() -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """(data, target) exactly as ``sklearn.datasets.load_digits(return_X_y=True)``: the
    same file, parsed the same way (last column = target)."""
    path = digits_csv()
    if path is None:
        from sklearn.datasets import load_digits

        data, target = load_digits(return_X_y=True)
        return np.asarray(data, dtype=np.float64), np.asarray(target, dtype=np.int64)
    with gzip.open(path, "rt") as f:
        raw = np.loadtxt(f, delimiter=",")
    return raw[:, :-1], raw[:, -1].astype(np.int64)


def load_dataset(name: str, seed: int = 0) -> Dataset:
    """``digits``: 1797 8x8 images, 10 classes (shipped with scikit-learn), scaled to
    [0, 1]. ``synthetic``: 4000 points in 32 dimensions drawn around 10 random centres."""
    if name == "digits":
        data, target = load_digits_arrays()
        x = (np.asarray(data, dtype=np.float32) / 16.0).astype(np.float32)
        y = np.asarray(target, dtype=np.int32)
        return _split(x, y, 10, seed)
    if name == "synthetic":
        rng = np.random.default_rng(seed)
        centres = rng.normal(0.0, 1.0, size=(10, 32))
        y = rng.integers(0, 10, size=4000).astype(np.int32)
        x = (centres[y] + rng.normal(0.0, 1.5, size=(4000, 32))).astype(np.float32)
        return _split(x, y, 10, seed)
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> npt.NDArray[np.int64]:
    """Indices of the mini-batch for ``step``: a pure function of (seed, step), so a job
    resumed from a checkpoint sees the same data stream as one that never stopped."""
    if n < 1 or batch_size < 1:
        raise ValueError(f"batch of {batch_size} from {n} examples is impossible")
    return np.random.default_rng([seed, step]).integers(0, n, size=batch_size)
