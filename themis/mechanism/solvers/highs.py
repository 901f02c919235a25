"""HiGHS back-end (open source, always installed via ``highspy``).

The set-packing MILP: binary x_ib per (app, bundle); sum_b x_ib <= 1 per app; for every
GPU shared by bundles of two or more apps, sum of x over bundles holding it <= 1;
maximise sum gain_ib x_ib. The model is built once and re-solved N+1 times by fixing the
excluded app's columns to zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from themis.compiled import fell_back
from themis.mechanism.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverError,
    SolverUnavailable,
)
from themis.stdio import stdout_to_stderr

try:  # pragma: no cover - import guard
    import highspy

    _HAVE_HIGHS = True
    _IMPORT_ERROR = ""
except ImportError as _exc:  # pragma: no cover
    _HAVE_HIGHS = False
    _IMPORT_ERROR = str(_exc)

try:  # the compiled LP parts (optional, see setup.py)
    from themis.mechanism.solvers import _simplex  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - built without a C compiler
    _simplex = None


class PackingLp:
    """The packing problem as a HiGHS LP (x in [0, 1]): a column per (app, bundle) with its
    gain, a row per app (at most one bundle) and a row per GPU named by bundles of two or
    more apps (one app's bundles already exclude each other through its app row) unless
    another GPU's row implies it (:func:`packing_structure`). Shared by the MILP back-end
    (which marks the columns integer) and the LP branch and bound."""

    def __init__(self, problem: PackingProblem) -> None:
        apps = problem.apps
        cols = [(i, j) for i, bundles in enumerate(apps) for j in range(len(bundles))]
        self.sizes = [len(bundles) for bundles in apps]  # columns per app, in column order
        self.masks = [b.mask for bundles in apps for b in bundles]  # per column
        starts, index, n_rows, row_starts, members = packing_structure(
            self.masks, np.repeat(np.arange(len(apps), dtype=np.int32), self.sizes),
            len(apps), problem.n_gpus)
        self.cols = cols
        self.n_rows = n_rows
        self.gain = np.array([b.gain for bundles in apps for b in bundles], dtype=np.float64)
        self.starts = starts  # column starts, n + 1 entries (int32)
        self.index = index  # row of each non-zero (all ones; int32)
        self.row_starts = row_starts  # the rows: starts (n_rows + 1) ...
        self.members = members  # ... and their columns, ascending (int32)
        self._lp: Any = None

    @property
    def lp(self) -> Any:
        """The model as a ``highspy.HighsLp``, built on first use (the native LP engine
        of lpbb reads the arrays above and never needs it)."""
        if self._lp is None:
            n, m = len(self.cols), self.n_rows
            lp = highspy.HighsLp()
            lp.num_col_ = n
            lp.num_row_ = m
            lp.col_cost_ = self.gain
            lp.col_lower_ = np.zeros(n)
            lp.col_upper_ = np.ones(n)
            lp.row_lower_ = np.full(m, -highspy.kHighsInf)
            lp.row_upper_ = np.ones(m)
            lp.sense_ = highspy.ObjSense.kMaximize
            lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
            lp.a_matrix_.start_ = self.starts
            lp.a_matrix_.index_ = self.index
            lp.a_matrix_.value_ = np.ones(len(self.index))
            self._lp = lp
        return self._lp

    def highs(self, threads: int = 1, integer: bool = False) -> Any:
        """A quiet HiGHS instance holding this model (as a MILP with ``integer``)."""
        if integer:
            self.lp.integrality_ = [highspy.HighsVarType.kInteger] * len(self.cols)
        with stdout_to_stderr():  # a banner, if any, to stderr (new_highs)
            h = new_highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", threads)
        if integer:
            h.setOptionValue("mip_rel_gap", 0.0)
            h.setOptionValue("mip_abs_gap", 1e-9)
        h.passModel(self.lp)
        return h


def new_highs() -> Any:
    """A HiGHS instance that has printed nothing. highspy's ``Highs`` (the class of its
    modelling layer) registers its callbacks when created, and highspy 1.16 writes HiGHS'
    banner to stdout right then, before any option such as ``output_flag`` can be set;
    the core class it extends, which holds every method used here, prints nothing until
    run, by when ``output_flag`` is off. ``Highs`` where the core class is not exported."""
    core = getattr(highspy, "_Highs", None) or highspy.Highs
    return core()


def packing_structure(
    masks: Sequence[int], app_of: np.ndarray, n_apps: int, n_gpus: int
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """The packing LP's sparse structure from the columns' GPU masks and apps (``app_of``,
    int32, non-decreasing): (column starts, row of each entry, number of rows, row starts,
    each row's columns ascending), all int32. Rows: one per app, then one per GPU named by
    bundles of two or more apps (one app's bundles already exclude each other through its
    app row), in GPU order, but for the GPUs whose row another implies (every column
    naming GPU g names GPU h too: g's row is left out, of equal rows the first is kept;
    256 x 50 benchmark: ~265 -> ~150 rows); a column's entries are its app row, then its
    shared GPUs' rows in GPU order. Compiled (``_simplex.packing_structure``) when the
    extension was built, else :func:`packing_structure_py`."""
    if _simplex is None:
        fell_back("themis.mechanism.solvers._simplex")  # one warning per process
        return packing_structure_py(masks, app_of, n_apps, n_gpus)
    width = max(1, (n_gpus + 7) // 8)
    raw = b"".join([m.to_bytes(width, "little") for m in masks])
    got = _simplex.packing_structure(raw, width, app_of, n_apps, n_gpus)
    starts, index, n_rows, row_starts, members = got
    return (np.frombuffer(starts, dtype=np.int32), np.frombuffer(index, dtype=np.int32),
            int(n_rows), np.frombuffer(row_starts, dtype=np.int32),
            np.frombuffer(members, dtype=np.int32))


def packing_structure_py(
    masks: Sequence[int], app_of: np.ndarray, n_apps: int, n_gpus: int
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """:func:`packing_structure` with numpy (the reference of the compiled version)."""
    n = len(masks)
    app_of = app_of.astype(np.int64)
    matrix = mask_matrix(masks, n_gpus)
    col_k, gpu_k = np.nonzero(matrix)
    named = np.zeros((n_apps, n_gpus), dtype=bool)
    named[app_of[col_k], gpu_k] = True
    shared = named.sum(axis=0) > 1
    # implied rows: columns(g) within columns(h) (co[g, h] == size[g]), strictly or equal
    # with h < g
    co = matrix.T.astype(np.int64) @ matrix.astype(np.int64)
    size = np.diag(co)
    within = (co == size[:, None]) & ~np.eye(n_gpus, dtype=bool)
    lower = np.tril(np.ones((n_gpus, n_gpus), dtype=bool), -1)  # [g, h]: h < g
    implied = (within & (~within.T | lower)).any(axis=1)
    shared &= ~implied
    gpu_row = n_apps + np.cumsum(shared) - 1
    keep = shared[gpu_k]
    entry_col = np.concatenate([np.arange(n), col_k[keep]])
    entry_row = np.concatenate([app_of, gpu_row[gpu_k[keep]]])
    order = np.lexsort((entry_row, entry_col))
    index = entry_row[order]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(entry_col, minlength=n), out=starts[1:])
    n_rows = n_apps + int(shared.sum())
    col_of = np.repeat(np.arange(n), np.diff(starts))
    by_row = np.argsort(index, kind="stable")
    row_starts = np.searchsorted(index[by_row], np.arange(n_rows + 1))
    return (starts.astype(np.int32), index.astype(np.int32), n_rows,
            row_starts.astype(np.int32), col_of[by_row].astype(np.int32))


def mask_matrix(masks: Sequence[int], n_gpus: int) -> np.ndarray:
    """Bundle masks (Python int bitsets) as a boolean matrix, one row per mask: entry
    [k, g] is bit g of masks[k]."""
    width = max(1, (n_gpus + 7) // 8)
    raw = b"".join(m.to_bytes(width, "little") for m in masks)
    packed = np.frombuffer(raw, dtype=np.uint8).reshape(len(masks), width)
    out: np.ndarray = np.unpackbits(packed, axis=1, count=n_gpus, bitorder="little")
    return out.astype(bool)


def _mip_start(h: Any, cols: Sequence[tuple[int, int]], choice: Sequence[int],
               excluded: int) -> None:
    """Give HiGHS the optimum without app ``excluded`` as a feasible start: a lower bound
    from the outset (measured on the 256-GPU x 50-app auction that lpbb hands to the
    MILP: its solves without a winner ~40% faster, bench/RESULTS.md, "Design choices, measured")."""
    _set_start(h, [1.0 if i != excluded and choice[i] == j else 0.0 for i, j in cols])


def _set_start(h: Any, values: list[float]) -> None:
    """Make ``values`` (one per column, feasible) HiGHS' MIP start."""
    start = highspy.HighsSolution()
    start.col_value = values
    start.value_valid = True
    h.setSolution(start)


# HiGHS stops at mip_abs_gap = 1e-9 (PackingLp.highs); the rest is rounding
_BOUND_SLACK = 1e-9


def _short_of(objective: float, bound: float) -> bool:
    """Whether a maximum's ``objective`` falls short of its proven (dual) ``bound``."""
    return objective < bound - _BOUND_SLACK - 1e-9 * max(1.0, abs(bound))


def require_highs() -> None:
    """Raise SolverUnavailable when highspy cannot be imported."""
    if not _HAVE_HIGHS:
        raise SolverUnavailable(f"highspy cannot be imported: {_IMPORT_ERROR}")


class HighsSolver(Solver):
    name = "highs"

    def __init__(self, threads: int = 1) -> None:
        require_highs()
        self.threads = threads
        # the last problem's model, re-used by the same auction's next solves
        self._last: tuple[PackingProblem, object, list[tuple[int, int]],
                          dict[int, list[int]]] | None = None
        # and its optimum, once solved here: the MIP start of its solves without a winner
        self._best: Solution | None = None

    def _build(self, problem: PackingProblem) -> tuple[object, list[tuple[int, int]]]:
        model = PackingLp(problem)
        return model.highs(self.threads, integer=True), model.cols

    def _run(self, h: object, cols: list[tuple[int, int]], problem: PackingProblem) -> Solution:
        """Solve the model as it stands and return its optimum, checked against HiGHS' own
        dual bound: a returned solution worth less than the bound is not the optimum HiGHS
        proved. highspy 1.16 returns one after a MIP start (ours, or the last solution,
        which a re-used model keeps as its start while it stays feasible) that presolve
        maps to a better point of the reduced model: it reports that point's value but
        hands back the start itself, unchanged (``HighsMipSolverData::checkAddSolution``). That
        solve is repeated without presolve (nothing is mapped), from the same start."""
        sol, bound = self._optimum(h, cols, problem)
        if _short_of(sol.objective, bound):
            presolve = h.getOptionValue("presolve")[1]  # type: ignore[attr-defined]
            h.setOptionValue("presolve", "off")  # type: ignore[attr-defined]
            try:
                _set_start(h, [1.0 if sol.choice[i] == j else 0.0 for i, j in cols])
                sol, bound = self._optimum(h, cols, problem)
            finally:
                h.setOptionValue("presolve", presolve)  # type: ignore[attr-defined]
            if _short_of(sol.objective, bound):
                raise SolverError(f"highs: the solution returned is worth {sol.objective!r}, "
                                  f"less than its proven bound {bound!r}")
        return sol

    def _optimum(self, h: object, cols: list[tuple[int, int]],
                 problem: PackingProblem) -> tuple[Solution, float]:
        """Run HiGHS; the solution it returns and its dual bound."""
        h.run()  # type: ignore[attr-defined]
        status = h.getModelStatus()  # type: ignore[attr-defined]
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(f"highs: model status {h.modelStatusToString(status)}")  # type: ignore[attr-defined]
        x = h.getSolution().col_value  # type: ignore[attr-defined]
        choice = [-1] * len(problem.apps)
        total = 0.0
        for (i, j), v in zip(cols, x, strict=True):
            if v > 0.5:
                choice[i] = j
                total += problem.apps[i][j].gain
        return Solution(tuple(choice), total), float(h.getInfo().mip_dual_bound)  # type: ignore[attr-defined]

    def solve(self, problem: PackingProblem, excluded: int | None = None) -> Solution:
        return self.solve_many(problem, [excluded])[0]

    def solve_many(
        self, problem: PackingProblem, excluded: Sequence[int | None]
    ) -> list[Solution]:
        if problem.n_bundles == 0:
            return [Solution((-1,) * len(problem.apps), 0.0) for _ in excluded]
        if self._last is not None and self._last[0] is problem:
            _, h, cols, app_cols = self._last  # the same auction's next solves
        else:
            h, cols = self._build(problem)
            app_cols = {}
            for c, (i, _) in enumerate(cols):
                app_cols.setdefault(i, []).append(c)
            self._last = (problem, h, cols, app_cols)
            self._best = None
        out = []
        for e in excluded:
            idx = app_cols.get(e, []) if e is not None else []
            arr = np.array(idx, dtype=np.int32)
            if idx:
                h.changeColsBounds(len(idx), arr, np.zeros(len(idx)), np.zeros(len(idx)))  # type: ignore[attr-defined]
            if e is not None and self._best is not None:
                _mip_start(h, cols, self._best.choice, e)
            try:
                out.append(self._run(h, cols, problem))
                if e is None:
                    self._best = out[-1]
            finally:
                if idx:
                    h.changeColsBounds(len(idx), arr, np.zeros(len(idx)), np.ones(len(idx)))  # type: ignore[attr-defined]
        return out
