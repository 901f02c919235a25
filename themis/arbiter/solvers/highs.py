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

from themis.arbiter.solvers.base import (
    PackingProblem,
    Solution,
    Solver,
    SolverError,
    SolverUnavailable,
)

try:  # pragma: no cover - import guard
    import highspy

    _HAVE_HIGHS = True
    _IMPORT_ERROR = ""
except ImportError as _exc:  # pragma: no cover
    _HAVE_HIGHS = False
    _IMPORT_ERROR = str(_exc)


class PackingLp:
    """The packing problem as a HiGHS LP (x in [0, 1]): a column per (app, bundle) with its
    gain, a row per app (at most one bundle) and a row per GPU named by bundles of two or
    more apps (one app's bundles already exclude each other through its app row). Shared
    by the MILP back-end (which marks the columns integer) and the LP branch and bound."""

    def __init__(self, problem: PackingProblem) -> None:
        cols = [(i, j) for i, bundles in enumerate(problem.apps) for j in range(len(bundles))]
        n_apps = len(problem.apps)
        app_of = np.fromiter((i for i, _ in cols), dtype=np.int64, count=len(cols))
        col_k, gpu_k = np.nonzero(mask_matrix([problem.apps[i][j].mask for i, j in cols],
                                              problem.n_gpus))
        # GPUs named by bundles of two or more apps get a row, in GPU order after the
        # app rows; the rows of each column: its app row, then its shared GPUs in order
        named = np.zeros((n_apps, problem.n_gpus), dtype=bool)
        named[app_of[col_k], gpu_k] = True
        shared = named.sum(axis=0) > 1
        gpu_row = n_apps + np.cumsum(shared) - 1
        keep = shared[gpu_k]
        entry_col = np.concatenate([np.arange(len(cols)), col_k[keep]])
        entry_row = np.concatenate([app_of, gpu_row[gpu_k[keep]]])
        order = np.lexsort((entry_row, entry_col))
        index = entry_row[order]
        starts = np.zeros(len(cols) + 1, dtype=np.int64)
        np.cumsum(np.bincount(entry_col, minlength=len(cols)), out=starts[1:])
        self.cols = cols
        self.n_rows = n_apps + int(shared.sum())
        self.gain = np.array([problem.apps[i][j].gain for i, j in cols], dtype=np.float64)
        self.starts = starts.astype(np.int32)  # column starts, n + 1 entries
        self.index = index.astype(np.int32)  # row of each non-zero (all ones)
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
        h = highspy.Highs()  # type: ignore[no-untyped-call]
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", threads)
        if integer:
            h.setOptionValue("mip_rel_gap", 0.0)
            h.setOptionValue("mip_abs_gap", 1e-9)
        h.passModel(self.lp)
        return h


def mask_matrix(masks: Sequence[int], n_gpus: int) -> np.ndarray:
    """Bundle masks (Python int bitsets) as a boolean matrix, one row per mask: entry
    [k, g] is bit g of masks[k]."""
    width = max(1, (n_gpus + 7) // 8)
    raw = b"".join(m.to_bytes(width, "little") for m in masks)
    packed = np.frombuffer(raw, dtype=np.uint8).reshape(len(masks), width)
    out: np.ndarray = np.unpackbits(packed, axis=1, count=n_gpus, bitorder="little")
    return out.astype(bool)


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

    def _build(self, problem: PackingProblem) -> tuple[object, list[tuple[int, int]]]:
        model = PackingLp(problem)
        return model.highs(self.threads, integer=True), model.cols

    def _run(self, h: object, cols: list[tuple[int, int]], problem: PackingProblem) -> Solution:
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
        return Solution(tuple(choice), total)

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
        out = []
        for e in excluded:
            idx = app_cols.get(e, []) if e is not None else []
            arr = np.array(idx, dtype=np.int32)
            if idx:
                h.changeColsBounds(len(idx), arr, np.zeros(len(idx)), np.zeros(len(idx)))  # type: ignore[attr-defined]
            try:
                out.append(self._run(h, cols, problem))
            finally:
                if idx:
                    h.changeColsBounds(len(idx), arr, np.zeros(len(idx)), np.ones(len(idx)))  # type: ignore[attr-defined]
        return out
