"""The training job's data: the digits are read from scikit-learn's bundled file without
importing scikit-learn (a moved job pays every import again), and are exactly its data."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from themis.jobs.data import digits_csv, load_dataset, load_digits_arrays


def test_digits_are_exactly_scikit_learns() -> None:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    assert digits_csv() is not None
    data, target = load_digits_arrays()
    ref_data, ref_target = sklearn_datasets.load_digits(return_X_y=True)
    assert np.array_equal(data, ref_data) and np.array_equal(target, ref_target)
    ds = load_dataset("digits", seed=3)
    assert ds.num_features == 64 and ds.num_classes == 10
    assert len(ds.x_train) + len(ds.x_eval) == 1797


def test_loading_the_digits_does_not_import_scikit_learn() -> None:
    pytest.importorskip("sklearn")
    code = ("import sys; from themis.jobs.data import load_dataset; load_dataset('digits'); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
