"""Branching-variable choice of the LP branch and cut (:mod:`themis.mechanism.solvers.lpbb`).

Pseudo-costs (Benichou et al., Math. Programming 1, 1971; Achterberg, Koch and Martin,
Operations Research Letters 33, 2005): for each column, the average drop of the node's LP
bound per unit of change when the column is branched down (x_c = 0, a change of x_c) or
up (x_c = 1, a change of 1 - x_c), observed on the children's first LPs. A fractional
column scores the product of its expected drops down and up; the highest is branched on.
An auction's solves without each winner are one problem with one app's columns fixed to
0 each time, so the costs are learnt across them (they live with the problem's
relaxation). A column not yet observed in a direction is credited with its gain times
the average cost per unit of gain observed so far in that direction (so that, like
:func:`first_choice`, the columns worth much come first; the plain average, which ranks
unobserved columns by x alone, did worse: 10.25 s against 9.91 s over the benchmark's
seeds 0-299), and before any observation the choice is :func:`first_choice`.

Measured on the 256-GPU x 50-app benchmark's seeds 0-99 (bench/RESULTS.md, "Design
choices, measured"):
the solves without a winner that branch took 3,056 nodes instead of 5,219, the optima
580 instead of 716 (seed 5's now within `lpbb`'s budget, where HiGHS' MILP had taken
it over); over seeds 0-299 the auctions took 9.9 s instead of 11.0 s."""

from __future__ import annotations

import numpy as np

_EPS = 1e-6  # floor of an expected drop in the product score (a 0 would hide the other)


class PseudoCosts:
    """Per-column pseudo-costs of one problem (``n`` columns)."""

    def __init__(self, n: int) -> None:
        self.total = np.zeros((2, n))  # [down, up]: summed drop per unit
        self.count = np.zeros((2, n), dtype=np.int64)
        self.all_total = [0.0, 0.0]  # ... per unit of gain, over every column (the
        # estimate of the columns not yet observed)
        self.all_count = [0, 0]

    @property
    def observations(self) -> int:
        """Observations so far, both directions."""
        return self.all_count[0] + self.all_count[1]

    def observe(self, column: int, up: bool, change: float, drop: float,
                gain: float = 1.0) -> None:
        """A child of ``column``'s branching (up: x_c = 1) whose LP bound lies ``drop``
        below its parent's, for a change of ``change`` in x_c (x_c or 1 - x_c);
        ``gain`` is the column's objective coefficient."""
        if change <= 0.0:
            return
        k = 1 if up else 0
        unit = max(0.0, drop) / change
        self.total[k, column] += unit
        self.count[k, column] += 1
        self.all_total[k] += unit / gain if gain > 0 else 0.0
        self.all_count[k] += 1

    def choose(self, frac: np.ndarray, x: np.ndarray, gain: np.ndarray) -> int:
        """The fractional column (of ``frac``, indices into ``x`` and ``gain``) to branch
        on: the highest product of expected drops (ties: the first)."""
        if self.observations == 0:
            return first_choice(frac, x, gain)
        xf = x[frac]
        score = np.ones(len(frac))
        for k, change in ((0, xf), (1, 1.0 - xf)):
            cnt = self.count[k, frac]
            mean = self.all_total[k] / self.all_count[k] if self.all_count[k] else 0.0
            cost = np.where(cnt > 0, self.total[k, frac] / np.maximum(cnt, 1),
                            mean * gain[frac])
            score *= np.maximum(cost * change, _EPS)
        return int(frac[np.argmax(score)])


def first_choice(frac: np.ndarray, x: np.ndarray, gain: np.ndarray) -> int:
    """Before any observation: the largest min(x, 1 - x) * gain (fractional and worth much;
    measured on the 256-GPU x 50-app instances: 3x fewer nodes than the column closest to
    0.5, bench/RESULTS.md, "Design choices, measured")."""
    return int(frac[np.argmax(np.minimum(x[frac], 1.0 - x[frac]) * gain[frac])])
