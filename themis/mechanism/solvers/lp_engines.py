"""LP engines of the LP branch and cut (:mod:`themis.mechanism.solvers.lpbb`): the
relaxation ``max gain.x, A x <= b, lo <= x <= hi`` of one packing problem, re-solved
after cut rows are added and column bounds change.

* :class:`NativeEngine`: the compiled warm-started bounded dual simplex of
  ``_simplex.c`` (dense kernel of the basic columns, Harris ratio test with bound
  flipping). Measured on the simulator's auctions and at 256 GPUs x 50 apps
  (bench/RESULTS.md, "Design choices, measured"): a warm re-solve ~9x (simulator sizes) and ~3x
  (256 x 50) faster than HiGHS; at the simulator's sizes nearly all of HiGHS' time is its
  fixed cost per run (~0.16 ms even when nothing changed).
* :class:`HighsEngine`: HiGHS' dual simplex through highspy (always installed).

Neither is trusted for pruning: lpbb recomputes a weak-duality bound from the returned
row duals (any duals >= 0 give a valid bound), so a wrong answer can only weaken a bound
or an incumbent, never make a result wrong. :func:`make_engine` prefers the native
engine when the extension was built (``pip install`` compiles it; a machine without a C
compiler gets HiGHS) and hands over to HiGHS, with the rows added so far, the first time
the native engine reports trouble (iteration limit, a drifting kernel).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from themis.mechanism.solvers.base import SolverUnavailable
from themis.mechanism.solvers.highs import PackingLp

try:  # pragma: no cover - depends on the build
    from themis.mechanism.solvers import _simplex  # type: ignore[attr-defined]

    NATIVE_AVAILABLE = True
except ImportError:  # pragma: no cover
    _simplex = None
    NATIVE_AVAILABLE = False

# lpbb's certified bound from row duals, compiled (None without the extension; lpbb then
# uses its numpy reference): weak_duality_bound(y, objective, starts, index, cut_rows,
# cut_cols, cut_coefs, rhs, lo, hi[, reduced_out]) -> float, see _simplex.c
weak_duality_bound: Any = None if _simplex is None else _simplex.weak_duality_bound

ENGINES = ("auto", "native", "highs")
_NATIVE_STATUS = {1: "iteration limit", 2: "numerical trouble", 3: "infeasible"}
_CUT_OFF = 4  # the native solve stopped at its cutoff


@dataclass(frozen=True, slots=True)
class LpPoint:
    """An optimal LP solution: column values, row activities A x and row duals (of the
    maximisation; not clipped, the caller clips them to >= 0). ``cut_off``: the solve
    stopped before the optimum, at a dual-feasible basis whose objective is at most the
    cutoff asked for (x is then not a feasible point; the duals still bound the LP)."""

    x: np.ndarray
    activity: np.ndarray
    dual: np.ndarray
    cut_off: bool = False


class LpEngine(ABC):
    """One packing LP, re-solved many times."""

    name: str

    @abstractmethod
    def add_row(self, cols: np.ndarray, coefs: np.ndarray, rhs: float) -> None:
        """Add the row ``coefs . x[cols] <= rhs`` (kept for every later solve)."""

    @abstractmethod
    def set_gain(self, gain: np.ndarray) -> None:
        """Replace the objective (every entry >= 0)."""

    @abstractmethod
    def solve(self, lo: np.ndarray, hi: np.ndarray, cutoff: float | None = None) -> LpPoint:
        """Solve with column bounds ``lo <= x <= hi``; raise SolverUnavailable when the
        engine cannot. With a ``cutoff``, an engine may stop as soon as its dual bound is
        at most the cutoff (``LpPoint.cut_off``) - the caller only needs to know that the
        LP cannot beat it."""

    def save_basis(self) -> None:  # noqa: B027 - optional: engines without it ignore it
        """Remember the current (optimal) basis for :meth:`restore_basis`."""

    def restore_basis(self) -> bool:
        """Start the next solve from the basis saved last (rows added since have basic
        slacks); False when there is none (never saved, or the objective changed since)
        or the engine cannot, and the next solve starts where the last one ended."""
        return False

    def snapshot(self) -> bytes | None:
        """The current (optimal) basis as a value for :meth:`restore`, or None when the
        engine cannot (lpbb keeps one per branch-and-bound node left to explore)."""
        return None

    def restore(self, snap: bytes) -> None:  # noqa: B027 - optional, as snapshot
        """Start the next solve from a :meth:`snapshot` of this LP (rows added since have
        basic slacks; the objective must be the same); an engine without snapshots
        ignores it."""


class HighsEngine(LpEngine):
    name = "highs"

    def __init__(self, model: PackingLp) -> None:
        import highspy

        self.h: Any = model.highs()
        # A 0/1 matrix (cuts: small integers) needs no scaling, and a warm re-solve no
        # presolve: both off made the auction's re-solves ~30% faster (bench/RESULTS.md).
        self.h.setOptionValue("presolve", "off")
        self.h.setOptionValue("simplex_scale_strategy", 0)
        self._optimal = highspy.HighsModelStatus.kOptimal
        self._inf = highspy.kHighsInf
        self._all = np.arange(len(model.cols), dtype=np.int32)
        self.restarts = 0  # re-solves from scratch after a stalled warm start

    def add_row(self, cols: np.ndarray, coefs: np.ndarray, rhs: float) -> None:
        self.h.addRow(-self._inf, float(rhs), len(cols), cols, coefs.astype(np.float64))

    def set_gain(self, gain: np.ndarray) -> None:
        self.h.changeColsCost(len(gain), self._all, gain)

    def solve(self, lo: np.ndarray, hi: np.ndarray, cutoff: float | None = None) -> LpPoint:
        h = self.h
        h.changeColsBounds(len(lo), self._all, lo, hi)
        h.run()
        status = h.getModelStatus()
        if status != self._optimal:
            self.restarts += 1
            # The warm start can stall after cuts were added (status "Unknown", seen on
            # the symmetric bench_rounds instances): solve once more from scratch.
            h.clearSolver()
            h.run()
            status = h.getModelStatus()
        if status != self._optimal:
            raise SolverUnavailable(f"lpbb: LP status {h.modelStatusToString(status)}")
        sol = h.getSolution()
        return LpPoint(np.asarray(sol.col_value, dtype=np.float64),
                       np.asarray(sol.row_value, dtype=np.float64),
                       np.asarray(sol.row_dual, dtype=np.float64))


class NativeEngine(LpEngine):
    name = "native"

    def __init__(self, model: PackingLp) -> None:
        if _simplex is None:
            raise SolverUnavailable("the native LP engine was not built (no C compiler when "
                                    "the package was installed)")
        self.lp = _simplex.Lp(model.n_rows, model.starts.astype(np.int32),
                              model.index.astype(np.int32), np.ones(len(model.index)),
                              np.ascontiguousarray(model.gain, dtype=np.float64))
        self.n = len(model.cols)

    def add_row(self, cols: np.ndarray, coefs: np.ndarray, rhs: float) -> None:
        self.lp.add_row(np.ascontiguousarray(cols, dtype=np.int32),
                        np.ascontiguousarray(coefs, dtype=np.float64), float(rhs))

    def set_gain(self, gain: np.ndarray) -> None:
        self.lp.set_gain(np.ascontiguousarray(gain, dtype=np.float64))

    def solve(self, lo: np.ndarray, hi: np.ndarray, cutoff: float | None = None) -> LpPoint:
        m = self.lp.num_row
        x, activity, dual = np.empty(self.n), np.empty(m), np.empty(m)
        status = self.lp.solve(np.ascontiguousarray(lo, dtype=np.float64),
                               np.ascontiguousarray(hi, dtype=np.float64), x, activity, dual,
                               -math.inf if cutoff is None else float(cutoff))
        if status not in (0, _CUT_OFF):
            raise SolverUnavailable(f"lpbb: native LP {_NATIVE_STATUS.get(status, status)}")
        return LpPoint(x, activity, dual, status == _CUT_OFF)

    def save_basis(self) -> None:
        self.lp.save_basis()

    def snapshot(self) -> bytes | None:
        snap: bytes = self.lp.snapshot()
        return snap

    def restore(self, snap: bytes) -> None:
        self.lp.restore(snap)

    def restore_basis(self) -> bool:
        return bool(self.lp.restore_basis())


class FallbackEngine(LpEngine):
    """The native engine, replaced by HiGHS (with every row added so far and the current
    objective) the first time it fails."""

    def __init__(self, model: PackingLp) -> None:
        self.model = model
        self.engine: LpEngine = NativeEngine(model)
        self.rows: list[tuple[np.ndarray, np.ndarray, float]] = []
        self.gain = model.gain
        self.fell_back = False

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.engine.name

    def add_row(self, cols: np.ndarray, coefs: np.ndarray, rhs: float) -> None:
        self.rows.append((cols, coefs, rhs))
        self.engine.add_row(cols, coefs, rhs)

    def set_gain(self, gain: np.ndarray) -> None:
        self.gain = gain
        self.engine.set_gain(gain)

    def save_basis(self) -> None:
        self.engine.save_basis()

    def restore_basis(self) -> bool:
        return self.engine.restore_basis()

    def snapshot(self) -> bytes | None:
        return self.engine.snapshot()

    def restore(self, snap: bytes) -> None:
        # once the LP moved to HiGHS, its restore (the base class's) ignores the snapshot
        self.engine.restore(snap)

    def solve(self, lo: np.ndarray, hi: np.ndarray, cutoff: float | None = None) -> LpPoint:
        try:
            return self.engine.solve(lo, hi, cutoff)
        except SolverUnavailable:
            if self.fell_back:
                raise
        self.fell_back = True
        highs = HighsEngine(self.model)
        for cols, coefs, rhs in self.rows:
            highs.add_row(cols, coefs, rhs)
        if self.gain is not self.model.gain:
            highs.set_gain(self.gain)
        self.engine = highs
        return highs.solve(lo, hi)


def make_engine(model: PackingLp, engine: str = "auto") -> LpEngine:
    """``auto``: the native engine with HiGHS as its fallback when the extension is
    built, else HiGHS; ``native`` or ``highs``: that engine alone (tests, benchmarks)."""
    if engine == "auto":
        return FallbackEngine(model) if NATIVE_AVAILABLE else HighsEngine(model)
    if engine == "native":
        return NativeEngine(model)
    if engine == "highs":
        return HighsEngine(model)
    raise ValueError(f"unknown LP engine {engine!r}; valid: {', '.join(ENGINES)}")
