"""Cutting planes of the LP branch and cut: every cut is valid for every feasible choice
(checked by enumeration) and violated at the point it was separated from."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis.mechanism.solvers.base import Bundle, PackingProblem
from themis.mechanism.solvers.cuts import (
    Row,
    _solve_mod,
    clique_cuts,
    mod_k_cuts,
    odd_cycle_cuts,
    separate,
    zero_half_cuts,
)
from themis.mechanism.solvers.lpbb import _Relaxation

from ._instances import auction_problem, packing_problems


def _feasible_points(problem: PackingProblem, cols: list[tuple[int, int]]) -> list[np.ndarray]:
    """Every feasible 0/1 choice, as a vector over the LP's columns."""
    col_of = {c: k for k, c in enumerate(cols)}
    points = []
    options = [range(-1, len(b)) for b in problem.apps]
    for choice in itertools.product(*options):
        used, ok = 0, True
        for i, j in enumerate(choice):
            if j >= 0:
                m = problem.apps[i][j].mask
                if used & m:
                    ok = False
                    break
                used |= m
        if ok:
            x = np.zeros(len(cols))
            for i, j in enumerate(choice):
                if j >= 0:
                    x[col_of[(i, j)]] = 1.0
            points.append(x)
    return points


def _conflicts_by_enumeration(problem: PackingProblem, cols: list[tuple[int, int]]) -> np.ndarray:
    n = len(cols)
    out = np.zeros((n, n), dtype=bool)
    for a, (i, j) in enumerate(cols):
        for b, (k, m) in enumerate(cols):
            if a != b and (i == k or problem.apps[i][j].mask & problem.apps[k][m].mask):
                out[a, b] = True
    return out


def _assert_valid(cut: Row, points: list[np.ndarray]) -> None:
    for p in points:
        assert cut.activity(p) <= cut.rhs + 1e-9, (cut, p)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=packing_problems(max_gpus=7, max_apps=4))
def test_cuts_separated_from_lp_points_are_valid_and_violated(problem: PackingProblem) -> None:
    if problem.n_bundles == 0:
        return
    relax = _Relaxation(problem)
    assert (relax.conflict == _conflicts_by_enumeration(problem, relax.cols)).all()
    points = _feasible_points(problem, relax.cols)
    n = len(relax.cols)
    lo, hi = np.zeros(n), np.ones(n)
    x, _ = relax.lp(lo, hi)
    for _ in range(10):
        cuts = separate(x, relax.conflict, relax.rows, relax.activity)
        if not cuts:
            break
        for cut in cuts:
            assert cut.activity(x) > cut.rhs + 1e-7
            _assert_valid(cut, points)
        relax.add_cuts(cuts)
        x, _ = relax.lp(lo, hi)


def _ring(n: int) -> PackingProblem:
    """n apps on a ring of n GPUs, app k wanting GPUs k and k+1: the conflict graph is
    the n-cycle, so for odd n the LP point x = 1/2 violates only odd-cycle cuts."""
    return PackingProblem(n, tuple((Bundle((1 << k) | (1 << ((k + 1) % n)), 1.0),)
                                   for k in range(n)))


def test_an_odd_ring_is_cut_by_an_odd_cycle_not_by_a_clique() -> None:
    p = _ring(5)
    relax = _Relaxation(p)
    cols = relax.cols
    assert cols == [(k, 0) for k in range(5)]
    conflict = relax.conflict
    x = np.full(5, 0.5)
    assert clique_cuts(x, conflict) == []
    cuts = odd_cycle_cuts(x, conflict)
    assert len(cuts) == 1
    assert sorted(cuts[0].cols.tolist()) == [0, 1, 2, 3, 4] and cuts[0].rhs == 2
    _assert_valid(cuts[0], _feasible_points(p, cols))


def test_three_pairwise_conflicting_bundles_give_a_clique_cut() -> None:
    p = PackingProblem(3, ((Bundle(0b011, 1.0),), (Bundle(0b110, 1.0),), (Bundle(0b101, 1.0),)))
    cuts = clique_cuts(np.full(3, 0.5), _Relaxation(p).conflict)
    assert len(cuts) == 1 and cuts[0].cols.tolist() == [0, 1, 2] and cuts[0].rhs == 1


def test_zero_half_cut_on_two_apps_sharing_a_machine_with_a_third() -> None:
    """Apps A and B each bid on GPUs {0,1}, {2,3} or {4..7} of one 8-GPU machine, app D
    on {0..3}; at x = (1/4, 1/4, 1/2) for A and B and 1/2 for D every row is tight and
    neither cliques nor odd cycles are violated, but half the sum of the app rows of A
    and B and of the rows of GPUs 0, 2 and 4 gives: the seven columns hold at most 2."""
    a, b, c, d = 0b11, 0b1100, 0b11110000, 0b1111
    p = PackingProblem(8, ((Bundle(a, 1.0), Bundle(b, 1.0), Bundle(c, 2.0)),
                           (Bundle(a, 1.0), Bundle(b, 1.0), Bundle(c, 2.0)),
                           (Bundle(d, 2.0),)))
    relax = _Relaxation(p)
    assert relax.cols == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]
    x = np.array([0.25, 0.25, 0.5, 0.25, 0.25, 0.5, 0.5])
    assert clique_cuts(x, relax.conflict) == []
    assert odd_cycle_cuts(x, relax.conflict) == []
    cuts = zero_half_cuts(x, relax.rows, len(x))
    assert len(cuts) == 1
    cut = cuts[0]
    assert cut.cols.tolist() == list(range(7)) and cut.coefs.tolist() == [1] * 7
    assert cut.rhs == 2 and cut.activity(x) == 2.5
    _assert_valid(cut, _feasible_points(p, relax.cols))


def test_count_cut_on_three_starving_apps_of_which_one_can_be_served() -> None:
    """Three starving apps each want two of three GPUs: the LP serves 1.5 of them; the
    count cut says at most floor(1.5) = 1, which every feasible choice satisfies."""
    p = PackingProblem(3, ((Bundle(0b011, 10.0),), (Bundle(0b110, 10.0),),
                           (Bundle(0b101, 10.0),)), starving=(0, 1, 2))
    relax = _Relaxation(p)
    n = len(relax.cols)
    x, _ = relax.lp(np.zeros(n), np.ones(n))
    assert x.sum() == 1.5
    cut = relax.count_cut(x, None, 0)
    assert cut is not None and cut.rhs == 1 and cut.cols.tolist() == [0, 1, 2]
    _assert_valid(cut, _feasible_points(p, relax.cols))
    # the count is not even looked at when x serves no more apps than the incumbent
    assert relax.count_cut(x, None, 2) is None
    # Apps 1 and 2 alone are served 1/2 + 1/2 = 1 time at x, and one can be: no cut
    assert relax.count_cut(x, 0, 0) is None


def test_count_cut_where_the_lp_serves_an_integral_number_too_many() -> None:
    """Two triangles of starving apps (each app wants two of its triangle's three GPUs):
    the LP serves 1.5 + 1.5 = 3 apps - an integer, so the LP's own maximum (3) cuts
    nothing - but only 2 can be served; the exact count says so."""
    tri = (0b011, 0b110, 0b101)
    apps = tuple((Bundle(m << shift, 10.0),) for shift in (0, 3) for m in tri)
    p = PackingProblem(6, apps, starving=tuple(range(6)))
    relax = _Relaxation(p)
    x = np.full(6, 0.5)
    assert relax.max_served(None) == 2
    cut = relax.count_cut(x, None, 0)
    assert cut is not None and cut.rhs == 2 and cut.cols.tolist() == list(range(6))
    _assert_valid(cut, _feasible_points(p, relax.cols))
    # without app 0, still 2 (one per triangle); the LP serves 2.5 there: cut to 2
    assert relax.max_served(0) == 2
    cut0 = relax.count_cut(x, 0, 0)
    assert cut0 is not None and cut0.rhs == 2 and cut0.cols.tolist() == [1, 2, 3, 4, 5]


def test_solve_mod_finds_a_solution_or_proves_there_is_none() -> None:
    system = np.array([[1, 2, 0], [0, 1, 1]])
    u = _solve_mod(system, np.array([1, 2]), 3)
    assert u is not None and ((system @ u - [1, 2]) % 3 == 0).all()
    assert _solve_mod(np.array([[1, 1], [2, 2]]), np.array([1, 1]), 3) is None  # 2 != 2*1
    u5 = _solve_mod(np.array([[3, 1]]), np.array([4]), 5)
    assert u5 is not None and (np.array([[3, 1]]) @ u5 - 4) % 5 == 0


def test_a_point_in_thirds_gets_a_mod_three_cut() -> None:
    """Six apps over six GPUs whose LP optimum is in thirds: the {0, 1/3, 2/3}-cut from
    the tight rows is violated by 1/3 there and holds for every feasible choice."""
    p = PackingProblem(6, ((Bundle(0b101011, 1.0), Bundle(0b000111, 1.0)),
                           (Bundle(0b110110, 1.0),),
                           (Bundle(0b101000, 1.0), Bundle(0b011000, 1.0)),
                           (Bundle(0b001111, 1.0),), (Bundle(0b100010, 1.0),),
                           (Bundle(0b000011, 1.0), Bundle(0b010100, 1.0))))
    relax = _Relaxation(p)
    t = 1.0 / 3.0
    x = np.array([0, t, 0, 2 * t, t, 0, t, t, 2 * t])
    assert all(row.activity(x) <= row.rhs + 1e-9 for row in relax.rows)
    assert zero_half_cuts(x, relax.rows, len(x)) == []
    cuts = mod_k_cuts(x, relax.rows, len(x), 3)
    assert len(cuts) == 1
    assert cuts[0].activity(x) - cuts[0].rhs == pytest.approx(1.0 / 3.0)
    _assert_valid(cuts[0], _feasible_points(p, relax.cols))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=packing_problems(max_gpus=7, max_apps=5), k=st.sampled_from([3, 5, 7]))
def test_mod_k_cuts_are_valid_and_violated(problem: PackingProblem, k: int) -> None:
    """mod-k cuts separated from the LP points of a cutting loop (other families' cuts
    added too, so the cut rows with coefficients > 1 take part) are valid and violated."""
    if problem.n_bundles == 0:
        return
    relax = _Relaxation(problem)
    points = _feasible_points(problem, relax.cols)
    n = len(relax.cols)
    lo, hi = np.zeros(n), np.ones(n)
    x, _ = relax.lp(lo, hi)
    for _ in range(6):
        cuts = mod_k_cuts(x, relax.rows, n, k, relax.activity)
        for cut in cuts:
            assert cut.activity(x) > cut.rhs + 1e-7
            _assert_valid(cut, points)
        cuts += separate(x, relax.conflict, relax.rows, relax.activity)
        if not cuts:
            break
        relax.add_cuts(cuts)
        x, _ = relax.lp(lo, hi)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=packing_problems(max_gpus=7, max_apps=4), data=st.data())
def test_lpbb_is_exact_with_starving_apps_and_count_cuts(problem: PackingProblem,
                                                         data: st.DataObject) -> None:
    """The auction's lexicographic bonus on starving apps (a large constant added to
    their gains) with count cuts: the optimum, with and without each app, is brute
    force's, and every count cut is valid."""
    from themis.mechanism.solvers.bruteforce import BruteForceSolver
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    starving = tuple(sorted(data.draw(st.sets(st.integers(0, len(problem.apps) - 1)))))
    bonus = 1.0 + sum(max((b.gain for b in bs), default=0.0) for bs in problem.apps)
    apps = tuple(tuple(Bundle(b.mask, b.gain + (bonus if i in starving else 0.0)) for b in bs)
                 for i, bs in enumerate(problem.apps))
    p = PackingProblem(problem.n_gpus, apps, starving)
    solver = LpBranchAndBound()
    excluded = [None, *range(len(apps))]
    for e, sol in zip(excluded, solver.solve_many(p, excluded), strict=True):
        assert abs(sol.objective - BruteForceSolver().solve(p, e).objective) <= 1e-9 * bonus
    if p.n_bundles:
        relax = solver._last[1] if solver._last is not None else None
        assert relax is not None
        points = _feasible_points(p, relax.cols)
        for cut in relax.rows[relax.n_base_rows:]:
            _assert_valid(cut, points)


def test_rows_line_up_with_the_lp_rows_when_an_app_has_no_bundle() -> None:
    """rows[r] is LP row r (the {0, 1/2}-cuts read tight rows from the LP's row values
    by index): an app without bundles keeps its (empty) row."""
    p = PackingProblem(2, ((), (Bundle(0b01, 1.0), Bundle(0b11, 2.0)), (Bundle(0b10, 1.0),)))
    relax = _Relaxation(p)
    assert len(relax.rows) == relax.n_base_rows
    assert relax.rows[0].cols.tolist() == []
    assert relax.rows[1].cols.tolist() == [0, 1] and relax.rows[2].cols.tolist() == [2]
    n = len(relax.cols)
    x, _ = relax.lp(np.zeros(n), np.ones(n))
    for r, row in enumerate(relax.rows):
        assert row.activity(x) == pytest.approx(relax.activity[r])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_compiled_zero_half_core_matches_the_python_reference(data: st.DataObject) -> None:
    from themis.mechanism.solvers import cuts

    assert cuts._separation is not None, "themis.mechanism.solvers._separation was not built"
    n_rows = data.draw(st.integers(1, 30))
    k = data.draw(st.integers(0, 140))
    density = data.draw(st.floats(0.0, 0.3))
    seed = data.draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    parity = rng.random((n_rows, k + 1)) < density
    parity[:, k] = rng.random(n_rows) < 0.5
    useful = rng.random(n_rows) < 0.6
    want = cuts.combinations_py(parity, useful)
    assert cuts._combinations(parity, useful) == want
    for combo in want:  # and each is what it claims: even support, odd rhs
        total = np.bitwise_xor.reduce(parity[combo], axis=0)
        assert not total[:k].any() and total[k]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_compiled_clique_separation_matches_the_python_reference(data: st.DataObject) -> None:
    from themis.mechanism.solvers import cuts

    assert cuts._separation is not None, "themis.mechanism.solvers._separation was not built"
    n = data.draw(st.integers(1, 90))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    conflict = rng.random((n, n)) < data.draw(st.floats(0.0, 0.6))
    conflict |= conflict.T
    np.fill_diagonal(conflict, False)
    x = rng.random(n) * (rng.random(n) < 0.6)
    x[rng.random(n) < 0.1] = 1.0
    x[rng.random(n) < 0.1] = 0.5  # ties
    limit = data.draw(st.integers(1, 60))
    want = cuts.clique_cuts_py(x, conflict, limit)
    got = cuts.clique_cuts(x, conflict, limit)
    assert [r.cols.tolist() for r in got] == [r.cols.tolist() for r in want]
    assert all(r.rhs == 1 and r.activity(x) > 1 + cuts.TOL for r in got)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_compiled_conflict_matrix_matches_the_python_reference(data: st.DataObject) -> None:
    from themis.mechanism.solvers import cuts

    assert cuts._separation is not None, "themis.mechanism.solvers._separation was not built"
    n = data.draw(st.integers(0, 80))
    m = data.draw(st.integers(1, 40))
    nnz = data.draw(st.integers(0, 300)) if n else 0
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    row_of = rng.integers(0, m, nnz)
    col_of = rng.integers(0, max(n, 1), nnz)
    want = cuts.conflict_matrix_py(n, row_of, col_of)
    got = cuts.conflict_matrix(n, row_of, col_of)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_compiled_conflict_matrix_refuses_entries_out_of_range() -> None:
    from themis.mechanism.solvers import cuts

    with pytest.raises(ValueError, match="out of range"):
        cuts.conflict_matrix(3, np.array([0, 1]), np.array([0, 3]))
    with pytest.raises(ValueError, match="out of range"):
        cuts.conflict_matrix(3, np.array([-1]), np.array([0]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=packing_problems(max_gpus=9, max_apps=5), seed=st.integers(0, 2**31))
def test_compiled_certified_bound_matches_the_numpy_reference(problem: PackingProblem,
                                                              seed: int) -> None:
    """The compiled weak-duality bound equals lpbb's numpy one (to rounding) for any
    duals >= 0, bounds and cut rows - not only the LP's own duals; so do the reduced
    gains it leaves for reduced-cost fixing."""
    from themis.mechanism.solvers.lp_engines import weak_duality_bound

    assert weak_duality_bound is not None, "themis.mechanism.solvers._simplex was not built"
    if problem.n_bundles == 0:
        return
    rng = np.random.default_rng(seed)
    relax = _Relaxation(problem)
    n = len(relax.cols)
    for _ in range(3):
        cols = np.sort(rng.choice(n, size=min(n, int(rng.integers(1, 5))), replace=False))
        relax.add_cuts([Row(cols.astype(np.int32), rng.integers(1, 3, len(cols)), 2)])
    relax.lp(np.zeros(n), np.ones(n))
    m = len(relax.rhs)
    for _ in range(5):
        relax._dual = rng.random(m) * (rng.random(m) < 0.7)
        lo = (rng.random(n) < 0.2).astype(np.float64)
        hi = np.maximum(lo, (rng.random(n) < 0.8).astype(np.float64))
        objective = rng.random(n) * 3
        want_d, got_d = np.full(n, np.nan), np.full(n, np.nan)
        want = relax._certified_py(objective, lo, hi, want_d)
        got = relax._certified(objective, lo, hi, got_d)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(got_d, want_d, rtol=1e-12, atol=1e-12)
        y = relax._dual  # and they are the reduced gains: objective - A^T y
        a = np.zeros((m, n))
        for r, row in enumerate(relax.rows):
            a[r, row.cols] = row.coefs
        np.testing.assert_allclose(got_d, objective - a.T @ y, rtol=1e-12, atol=1e-12)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_compiled_solve_mod_matches_the_python_reference(data: st.DataObject) -> None:
    from themis.mechanism.solvers import cuts

    assert cuts._separation is not None, "themis.mechanism.solvers._separation was not built"
    k = data.draw(st.sampled_from([2, 3, 5, 7]))
    n_eq, n_var = data.draw(st.integers(1, 12)), data.draw(st.integers(0, 14))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    system = rng.integers(-3 * k, 3 * k, (n_eq, n_var)) * (rng.random((n_eq, n_var)) < 0.5)
    target = rng.integers(-k, k, n_eq)
    want = cuts._solve_mod_py(system, target, k)
    got = cuts._solve_mod(system, target, k)
    if want is None:
        assert got is None
    else:
        assert got is not None and got.tolist() == want.tolist()
        assert not ((system @ got - target) % k).any()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=packing_problems(max_gpus=9, max_apps=6), seed=st.integers(0, 2**31))
def test_compiled_zero_half_separation_matches_the_python_reference(problem: PackingProblem,
                                                                    seed: int) -> None:
    """Same cuts, same order, at LP points of random problems with cut rows of both
    integer widths (int32 and int64 columns) among the rows."""
    from themis.mechanism.solvers import cuts

    assert cuts._separation is not None, "themis.mechanism.solvers._separation was not built"
    if problem.n_bundles == 0:
        return
    rng = np.random.default_rng(seed)
    relax = _Relaxation(problem)
    n = len(relax.cols)
    for _ in range(int(rng.integers(0, 4))):
        cols = np.sort(rng.choice(n, size=min(n, int(rng.integers(1, 5))), replace=False))
        dtype = np.int32 if rng.random() < 0.5 else np.int64
        relax.add_cuts([Row(cols.astype(dtype), rng.integers(1, 3, len(cols)), 2)])
    for _ in range(3):
        relax.engine.set_gain(rng.random(n) * 2)
        lo = np.zeros(n)
        hi = (rng.random(n) < 0.9).astype(np.float64)
        x = relax._run(lo, hi)
        for free_below in ((0.0, 0.1, 0.25), (0.3,)):
            want = cuts.zero_half_cuts_py(x, relax.rows, n, relax.activity, free_below)
            got = cuts.zero_half_cuts(x, relax.rows, n, relax.activity, free_below,
                                      rhs=relax.rhs)
            assert [(r.cols.tolist(), r.coefs.tolist(), r.rhs) for r in got] == \
                [(r.cols.tolist(), r.coefs.tolist(), r.rhs) for r in want]


@pytest.mark.parametrize(("size", "seed"), [((64, 10), s) for s in range(6)] +
                         [((128, 20), s) for s in range(3)])
def test_lpbb_solves_without_each_winner_match_highs_on_auction_instances(
        size: tuple[int, int], seed: int) -> None:
    """On contested offers (fractional roots, so reduced-cost fixing and the restored
    root basis come into play) lpbb's optimum and its solves without each winner have
    HiGHS' MILP values."""
    from themis.mechanism.solvers.highs import HighsSolver
    from themis.mechanism.solvers.lpbb import LpBranchAndBound

    problem = auction_problem(*size, seed=seed)
    solver = LpBranchAndBound()
    best = solver.solve(problem)
    winners = [i for i, c in enumerate(best.choice) if c >= 0]
    got = [best, *solver.solve_many(problem, winners)]
    highs = HighsSolver()
    for e, sol in zip([None, *winners], got, strict=True):
        want = highs.solve(problem, e).objective
        assert sol.objective == pytest.approx(want, rel=1e-9, abs=1e-9), e
