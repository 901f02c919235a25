"""The LP engines of lpbb: the native dual simplex agrees with HiGHS through sequences of
bound changes, added rows and objective changes; its duals certify its optimum; bad
input is refused; the fallback engine hands over to HiGHS with the rows kept."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.solvers.base import PackingProblem, SolverUnavailable
from themis.mechanism.solvers.highs import PackingLp
from themis.mechanism.solvers.lp_engines import (
    NATIVE_AVAILABLE,
    FallbackEngine,
    HighsEngine,
    LpPoint,
    NativeEngine,
    make_engine,
)

from ._instances import auction_problem, packing_problems

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native engine not built "
                                "(test_solver_conformance fails for that)")


def _dense(model: PackingLp, rows: list[tuple[np.ndarray, np.ndarray, float]]) -> np.ndarray:
    n = len(model.cols)
    a = np.zeros((model.n_rows + len(rows), n))
    for c in range(n):
        a[model.index[model.starts[c]:model.starts[c + 1]], c] = 1.0
    for r, (cols, coefs, _) in enumerate(rows):
        a[model.n_rows + r, cols] = coefs
    return a


def _check_point(point: LpPoint, a: np.ndarray, rhs: np.ndarray, gain: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray) -> float:
    """Feasible, activities right, and the duals certify the objective; returns it."""
    x = point.x
    assert np.all(x >= lo - 1e-9) and np.all(x <= hi + 1e-9)
    assert np.allclose(point.activity, a @ x, atol=1e-9)
    assert np.all(a @ x <= rhs + 1e-9)
    y = np.maximum(0.0, point.dual)
    d = gain - a.T @ y
    bound = float(y @ rhs + np.where(d > 0, d * hi, d * lo).sum())
    value = float(gain @ x)
    assert bound == pytest.approx(value, rel=1e-9, abs=1e-9)
    return value


def _replay(problem: PackingProblem, seed: int, steps: int = 30) -> None:
    """Random bound changes, cut-like rows and objective swaps on both engines, and on the
    native one saved bases restored (with rows added and bounds changed since)."""
    rng = random.Random(seed)
    model = PackingLp(problem)
    n = len(model.cols)
    native, highs = NativeEngine(model), HighsEngine(model)
    rows: list[tuple[np.ndarray, np.ndarray, float]] = []
    lo, hi = np.zeros(n), np.ones(n)
    gain = model.gain
    assert native.restore_basis() is False  # none saved
    saved = False  # a basis saved since the last objective change
    snaps: list[bytes] = []  # snapshots taken since the last objective change
    for _ in range(steps):
        if rng.random() < 0.3:
            assert native.restore_basis() is saved
        elif snaps and rng.random() < 0.3:
            native.restore(rng.choice(snaps))
        r = rng.random()
        if r < 0.35:
            c = rng.randrange(n)
            hi[c] = 1.0 - hi[c]
            lo[c] = 0.0
        elif r < 0.45:
            lo[:], hi[:] = 0.0, 1.0
        elif r < 0.55 and hi.sum() > 0:
            c = rng.choice(np.nonzero(hi)[0].tolist())  # take a column: x_c = 1
            lo[:] = 0.0
            lo[c] = 1.0
        elif r < 0.8:
            cols = np.array(sorted(rng.sample(range(n), min(n, rng.randint(2, 10)))),
                            dtype=np.int32)
            coefs = np.array([float(rng.choice([1, 1, 2])) for _ in cols])
            # rhs >= every coefficient: any single column still fits (the taken one)
            rhs = float(max(coefs) + rng.randint(0, 2))
            rows.append((cols, coefs, rhs))
            native.add_row(cols, coefs, rhs)
            highs.add_row(cols, coefs, rhs)
        elif r < 0.88:
            gain = rng.choice([model.gain, np.array([rng.random() for _ in range(n)])])
            native.set_gain(gain)
            highs.set_gain(gain)
            saved = False  # set_gain drops the saved basis
            snaps.clear()  # ... and a snapshot is of a basis for the old objective
        a = _dense(model, rows)
        rhs = np.array([1.0] * model.n_rows + [r for _, _, r in rows])
        want = _check_point(highs.solve(lo, hi), a, rhs, gain, lo, hi)
        got = _check_point(native.solve(lo, hi), a, rhs, gain, lo, hi)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
        if rng.random() < 0.3:
            native.save_basis()
            saved = True
        if rng.random() < 0.3:
            snap = native.snapshot()
            assert snap is not None
            snaps.append(snap)


@settings(max_examples=60, deadline=None)
@given(problem=packing_problems(), seed=st.integers(0, 10**6))
def test_native_matches_highs_on_small_problems(problem: PackingProblem, seed: int) -> None:
    if problem.n_bundles == 0:
        return
    _replay(problem, seed)


@pytest.mark.parametrize(("size", "seed"), [((64, 10), 0), ((64, 10), 1), ((256, 50), 0),
                                            ((256, 50), 5)])
def test_native_matches_highs_on_auction_sized_problems(size: tuple[int, int],
                                                        seed: int) -> None:
    _replay(auction_problem(*size, seed), seed, steps=25)


def test_a_restored_snapshot_is_the_optimal_basis_again() -> None:
    model = PackingLp(auction_problem(256, 50, 1))
    n = len(model.cols)
    engine = NativeEngine(model)
    lo, hi = np.zeros(n), np.ones(n)
    first = engine.solve(lo, hi)
    snap = engine.snapshot()
    assert snap is not None
    hi2 = hi.copy()
    hi2[np.argsort(-first.x)[:5]] = 0.0  # a different optimum, reached by pivots
    engine.solve(lo, hi2)
    assert engine.lp.iterations > 0
    # a row added since, which the snapshot's point satisfies (columns at 0 there)
    zeros = np.flatnonzero(first.x <= 0.0)[:3].astype(np.int32)
    engine.add_row(zeros, np.ones(len(zeros)), 1.0)
    engine.restore(snap)
    again = engine.solve(lo, hi)
    assert engine.lp.iterations == 0  # the snapshot's basis is optimal again at once
    assert float(model.gain @ again.x) == pytest.approx(float(model.gain @ first.x), rel=1e-12)
    with pytest.raises(ValueError, match="not a snapshot"):
        engine.restore(snap[:-8])
    with pytest.raises(ValueError, match="not a snapshot"):
        engine.restore(b"\x00" * 3)


def test_bad_input_is_refused_with_a_message() -> None:
    model = PackingLp(auction_problem(64, 10, 0))
    n = len(model.cols)
    engine = NativeEngine(model)
    with pytest.raises(ValueError, match="out of range"):
        engine.add_row(np.array([n], dtype=np.int32), np.array([1.0]), 1.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        engine.solve(np.ones(n), np.zeros(n))
    with pytest.raises(ValueError, match="expected"):
        engine.solve(np.zeros(n - 1), np.ones(n - 1))
    with pytest.raises(ValueError, match=">= 0"):
        engine.set_gain(-np.ones(n))
    # still usable afterwards
    assert engine.solve(np.zeros(n), np.ones(n)).x.shape == (n,)


def test_fallback_hands_over_to_highs_with_the_rows_added(monkeypatch: pytest.MonkeyPatch) -> None:
    model = PackingLp(auction_problem(64, 10, 1))
    n = len(model.cols)
    engine = make_engine(model)
    assert isinstance(engine, FallbackEngine) and engine.name == "native"
    cols = np.arange(min(n, 6), dtype=np.int32)
    engine.add_row(cols, np.ones(len(cols)), 1.0)
    lo, hi = np.zeros(n), np.ones(n)
    before = float(model.gain @ engine.solve(lo, hi).x)

    def broken(self: NativeEngine, lo: np.ndarray, hi: np.ndarray,
               cutoff: float | None = None) -> LpPoint:
        raise SolverUnavailable("lpbb: native LP numerical trouble")

    monkeypatch.setattr(NativeEngine, "solve", broken)
    after = engine.solve(lo, hi)
    assert engine.name == "highs"
    assert float(model.gain @ after.x) == pytest.approx(before, rel=1e-9)
    assert after.activity.shape == (model.n_rows + 1,)  # the cut came along


def _structure_inputs(problem: PackingProblem) -> tuple[list[int], np.ndarray, int, int]:
    masks = [b.mask for bundles in problem.apps for b in bundles]
    app_of = np.repeat(np.arange(len(problem.apps), dtype=np.int32),
                       [len(bundles) for bundles in problem.apps])
    return masks, app_of, len(problem.apps), problem.n_gpus


def _same_structure(problem: PackingProblem) -> None:
    from themis.mechanism.solvers import highs

    assert highs._simplex is not None, "themis.mechanism.solvers._simplex was not built"
    got = highs.packing_structure(*_structure_inputs(problem))
    want = highs.packing_structure_py(*_structure_inputs(problem))
    assert got[2] == want[2]
    for g, w in zip(got[:2] + got[3:], want[:2] + want[3:], strict=True):
        assert g.dtype == w.dtype == np.int32
        assert g.tolist() == w.tolist()


@settings(max_examples=200, deadline=None)
@given(problem=packing_problems(max_gpus=20, max_apps=6))
def test_compiled_packing_structure_matches_the_numpy_reference(problem: PackingProblem) -> None:
    _same_structure(problem)


@pytest.mark.parametrize(("size", "seed"), [((64, 10), 0), ((256, 50), 5), ((1024, 200), 1)])
def test_compiled_packing_structure_matches_on_auction_sized_problems(
        size: tuple[int, int], seed: int) -> None:
    _same_structure(auction_problem(*size, seed))


def test_a_gpu_row_implied_by_another_is_left_out() -> None:
    from themis.mechanism.solvers.base import Bundle

    # app 0: GPUs 0-3; app 1: GPUs 0-3 or 0-1. GPU 1's row equals GPU 0's (the first is
    # kept); GPUs 2 and 3 are named only where GPU 0 is: their rows are implied
    problem = PackingProblem(4, ((Bundle(0b1111, 1.0),),
                                 (Bundle(0b1111, 1.0), Bundle(0b0011, 0.5))))
    model = PackingLp(problem)
    assert model.n_rows == 3
    rows = [model.members[a:b].tolist()
            for a, b in zip(model.row_starts[:-1], model.row_starts[1:], strict=True)]
    assert rows == [[0], [1, 2], [0, 1, 2]]


@settings(max_examples=150, deadline=None)
@given(problem=packing_problems(max_gpus=20, max_apps=6))
def test_the_rows_kept_still_separate_every_conflicting_pair(problem: PackingProblem) -> None:
    """Leaving implied rows out keeps the polytope: two columns of different apps whose
    bundles share a GPU still share a row."""
    model = PackingLp(problem)
    rows_of: list[set[int]] = [set() for _ in model.cols]
    for r, (a, b) in enumerate(zip(model.row_starts[:-1], model.row_starts[1:], strict=True)):
        for c in model.members[a:b].tolist():
            rows_of[c].add(r)
    for c, (i, _) in enumerate(model.cols):
        for d, (k, _) in enumerate(model.cols):
            if d > c and i != k and model.masks[c] & model.masks[d]:
                assert rows_of[c] & rows_of[d], (c, d)


def test_compiled_packing_structure_refuses_bad_input() -> None:
    from themis.mechanism.solvers import highs

    if highs._simplex is None:
        pytest.skip("themis.mechanism.solvers._simplex was not built")
    with pytest.raises(ValueError, match="non-decreasing"):
        highs.packing_structure([1, 2], np.array([1, 0], dtype=np.int32), 2, 4)
    with pytest.raises(ValueError, match="non-decreasing"):
        highs.packing_structure([1], np.array([3], dtype=np.int32), 2, 4)
    with pytest.raises(ValueError, match=">= n_gpus"):
        highs.packing_structure([1 << 5], np.array([0], dtype=np.int32), 1, 4)
    with pytest.raises(ValueError, match="wrong dtype"):
        highs.packing_structure([1], np.array([0], dtype=np.int64), 1, 4)
