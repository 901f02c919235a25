"""Cutting planes for the set-packing relaxation of the proportional-fair problem.

Every column is an (app, bundle) pair; two columns *conflict* when they belong to the same
app or their bundles share a GPU, and a feasible choice is an independent set of the
conflict graph. Classic families of valid inequalities for set packing tighten the
LP relaxation (x in [0, 1]) where the auction's menus make it fractional - interchangeable
placements of equally good bundles produce half-integral points that no branching on a
single column repairs quickly:

* **Clique** inequalities (Padberg, Math. Programming 5, 1973): the columns of a clique
  of the conflict graph sum to at most 1. Separated greedily from each fractional column,
  extended to a maximal clique.
* **Odd-cycle** inequalities (Padberg 1973): the columns of an odd cycle C of the
  conflict graph sum to at most (|C| - 1) / 2. Separated exactly over the fractional
  support with the bipartite double cover and shortest paths under edge weights
  1 - x_u - x_v (Groetschel, Lovasz and Schrijver, Geometric Algorithms and Combinatorial
  Optimization, 1988, section 9.1).
* **{0, 1/2}-Chvatal-Gomory** cuts (Caprara and Fischetti, Math. Programming 74, 1996):
  half the sum of an odd-weight set S of tight rows, rounded down. When every column of
  the fractional support has an even coefficient in that sum, the cut is violated by 1/2;
  S is found by Gaussian elimination over GF(2) (one cut per connected part of the
  support).
* **mod-k Chvatal-Gomory** cuts (Caprara, Fischetti and Letchford, Math. Programming
  87, 2000), k = 3, 5, 7: multipliers u in {0, ..., k-1} on tight rows, the cut
  ``sum(floor(u.A / k) x) <= floor(u.b / k)``; with u.A divisible by k on the fractional
  support and u.b not, it is violated by (u.b mod k) / k. They remove the points in
  thirds and fifths that the other families leave (measured: the symmetric 20-bidder
  rounds of bench_rounds then close at the root; on the hardest 256-GPU x 50-app
  instance, seed 5, the root gap falls from 1.5 to 0.02 without closing). Found by
  elimination over GF(k), only when the other families find nothing.

Every cut is valid for every integer point of the problem (they are implied by the rows
and the integrality of x), so cuts found for one solve stay valid for the auction's other
solves of the same problem (fixing columns to 0 only removes integer points).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from themis.compiled import fell_back

try:  # pragma: no cover - depends on the build
    from themis.mechanism.solvers import _separation  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _separation = None

MOD_K = (3, 5, 7)  # the mod-k cut families tried (in order) when the others find nothing
_EDGE_FLOOR = 1e-12  # odd-cycle separation: added to every edge weight (see there)
TOL = 1e-6  # an x this close to 0 or 1 counts as integral; violations below it are ignored


@dataclass(frozen=True, slots=True)
class Row:
    """A packing row ``sum(coefs * x[cols]) <= rhs`` with integer coefficients."""

    cols: np.ndarray  # int32 column indices
    coefs: np.ndarray  # int64 coefficients (>= 1)
    rhs: int

    def activity(self, x: np.ndarray) -> float:
        return float(np.dot(self.coefs, x[self.cols]))


def conflict_matrix(n_cols: int, row_of: np.ndarray, col_of: np.ndarray) -> np.ndarray:
    """Boolean matrix: ``C[a, b]`` iff columns a != b conflict, from the LP's non-zeros
    (``row_of[k]``, ``col_of[k]``): two columns conflict iff they share a row - the app
    row (same app) or the row of a GPU that bundles of two apps name (a GPU named by one
    app only links columns that its app row links already). Compiled
    (``_separation.conflict_fill``, ~10x faster at the simulator's sizes) when the
    extension was built; :func:`conflict_matrix_py` is the reference."""
    if _separation is None:
        fell_back("themis.mechanism.solvers._separation")  # one warning per process
        return conflict_matrix_py(n_cols, row_of, col_of)
    conflict = np.zeros((n_cols, n_cols), dtype=bool)
    _separation.conflict_fill(conflict.view(np.uint8),
                              np.ascontiguousarray(row_of, dtype=np.int32),
                              np.ascontiguousarray(col_of, dtype=np.int32))
    return conflict


def conflict_matrix_py(n_cols: int, row_of: np.ndarray, col_of: np.ndarray) -> np.ndarray:
    """:func:`conflict_matrix` with numpy (the reference of the compiled version)."""
    conflict = np.zeros((n_cols, n_cols), dtype=bool)
    if len(row_of):
        # every ordered pair of non-zeros in one row, without a Python loop: the entries
        # sorted by row, and entry k paired with each entry of its row in turn
        order = np.argsort(row_of, kind="stable")
        cols = col_of[order]
        size = np.bincount(row_of[order])
        first = np.cumsum(size) - size  # first sorted entry of each row
        per_entry = np.repeat(size, size)  # size of the row of each sorted entry
        left = np.repeat(cols, per_entry)
        step = np.arange(len(left)) - np.repeat(np.cumsum(per_entry) - per_entry, per_entry)
        right = cols[np.repeat(np.repeat(first, size), per_entry) + step]
        conflict[left, right] = True
    np.fill_diagonal(conflict, False)
    return conflict


def _fractional(x: np.ndarray) -> np.ndarray:
    return np.nonzero((x > TOL) & (x < 1.0 - TOL))[0]


def clique_cuts(x: np.ndarray, conflict: np.ndarray, limit: int = 50) -> list[Row]:
    """Violated clique inequalities: from each fractional column (largest x first) not yet
    in a cut, a clique of support columns grown greedily by largest x, then extended to a
    maximal clique with columns at 0 (a stronger cut for the next LPs). Compiled
    (``_separation.cliques``) when the extension was built; :func:`clique_cuts_py` is
    the reference."""
    if _separation is None:
        return clique_cuts_py(x, conflict, limit)
    found = _separation.cliques(np.ascontiguousarray(x, dtype=np.float64),
                                np.ascontiguousarray(conflict).view(np.uint8), limit, TOL)
    return [Row(np.array(cols, dtype=np.int32), np.ones(len(cols), dtype=np.int64), 1)
            for cols in found]


def clique_cuts_py(x: np.ndarray, conflict: np.ndarray, limit: int = 50) -> list[Row]:
    """:func:`clique_cuts` in Python (the reference of the compiled version)."""
    frac = _fractional(x)
    support = np.nonzero(x > TOL)[0]
    sub = conflict[np.ix_(support, support)]
    xs = x[support]
    local = {int(c): k for k, c in enumerate(support)}
    cuts: list[Row] = []
    covered: set[int] = set()
    for s in frac[np.argsort(-x[frac], kind="stable")]:
        if int(s) in covered:
            continue
        clique = [local[int(s)]]
        cand = sub[clique[0]].copy()
        while cand.any():
            idx = np.nonzero(cand)[0]
            k = int(idx[np.argmax(xs[idx])])
            clique.append(k)
            cand &= sub[k]
        members = support[clique]
        if float(xs[clique].sum()) <= 1.0 + TOL:
            continue
        covered.update(members.tolist())
        # extend with columns at 0 adjacent to every member, greedily (most conflicts
        # among themselves first)
        rest = np.nonzero(conflict[members].all(axis=0))[0]
        rest = rest[x[rest] <= TOL]
        if len(rest):
            inner = conflict[np.ix_(rest, rest)]
            order = np.argsort(-inner.sum(axis=1), kind="stable")
            keep = np.ones(len(rest), dtype=bool)
            chosen: list[int] = []
            for k in order.tolist():
                if keep[k]:
                    chosen.append(k)
                    keep &= inner[k]
            members = np.concatenate([members, rest[chosen]])
        cols = np.sort(members).astype(np.int32)
        cuts.append(Row(cols, np.ones(len(cols), dtype=np.int64), 1))
        if len(cuts) >= limit:
            break
    return cuts


def odd_cycle_cuts(x: np.ndarray, conflict: np.ndarray, limit: int = 20,
                   max_sources: int = 40) -> list[Row]:
    """Violated odd-cycle inequalities over the fractional support (GLS separation): a
    shortest odd closed walk in the double cover, with edge weights 1 - x_u - x_v, through
    each of the ``max_sources`` support columns closest to 1/2 (not yet on a cut's
    cycle); a walk of weight < 1 holds a violated simple odd cycle. One Dijkstra call
    (SciPy's, compiled) from all the sources at once."""
    sup = _fractional(x)
    if len(sup) < 3:
        return []
    n = len(sup)
    xs = x[sup]
    a, b = np.nonzero(np.triu(conflict[np.ix_(sup, sup)], 1))
    # a zero weight would read as "no edge" in a sparse matrix: a tiny floor keeps it
    w = np.maximum(0.0, 1.0 - xs[a] - xs[b]) + _EDGE_FLOOR
    # double cover: vertex v (even side) and n + v (odd side); every edge changes sides
    rows = np.concatenate([a, a + n, b, b + n])
    cols = np.concatenate([b + n, b, a + n, a])
    cover = csr_matrix((np.tile(w, 4), (rows, cols)), shape=(2 * n, 2 * n))
    sources = np.argsort(np.abs(xs - 0.5), kind="stable")[:max_sources]
    dist, pred = dijkstra(cover, directed=True, indices=sources, return_predecessors=True,
                          limit=1.0 - TOL)
    cuts: list[Row] = []
    seen: set[tuple[int, ...]] = set()
    covered: set[int] = set()
    for k, s in enumerate(sources.tolist()):
        if s in covered or not dist[k, s + n] < 1.0 - TOL:
            continue  # on a cycle cut already, or no odd closed walk of weight < 1
        walk = []
        node = s + n
        while node != s:
            walk.append(node % n)
            node = int(pred[k, node])
        walk = _simple_odd_cycle(walk)
        key = tuple(sorted(int(sup[v]) for v in walk))
        if key in seen:
            continue
        seen.add(key)
        covered.update(walk)
        rhs = (len(key) - 1) // 2
        if float(x[list(key)].sum()) > rhs + TOL:
            cuts.append(Row(np.array(key, dtype=np.int32), np.ones(len(key), dtype=np.int64),
                            rhs))
            if len(cuts) >= limit:
                break
    return cuts


def _simple_odd_cycle(walk: list[int]) -> list[int]:
    """A simple odd cycle inside an odd closed walk: split the walk at a repeated vertex
    into two closed walks, keep the odd one, repeat. Its weight is at most the walk's
    (weights are >= 0), so it is violated whenever the walk is."""
    while True:
        first: dict[int, int] = {}
        for j, v in enumerate(walk):
            i = first.setdefault(v, j)
            if i != j:
                inner = walk[i:j]
                walk = inner if len(inner) % 2 == 1 else walk[:i] + walk[j:]
                break
        else:
            return walk


def zero_half_cuts(x: np.ndarray, rows: Sequence[Row], n_cols: int,
                   activity: np.ndarray | None = None,
                   free_below: Sequence[float] = (0.0, 0.1, 0.25),
                   rhs: np.ndarray | None = None) -> list[Row]:
    """{0, 1/2}-cuts: an odd-rhs set S of tight rows gives
    ``sum(floor(alpha / 2) x) <= floor(rhs_S / 2)`` with alpha the sum of S's rows. At x
    it is violated by (1 - sum of x_c over the columns with an odd alpha_c) / 2, so S is
    sought (GF(2) elimination) with even coefficients on every column with x above a
    threshold - 0 first (violated by 1/2), then the larger ``free_below`` values (columns
    with small x may stay odd). ``activity``: the rows' values at x, when known; ``rhs``:
    the rows' right-hand sides as floats, when at hand. Compiled
    (``_separation.zero_half_cuts``) when the extension was built and ``activity`` is
    given; :func:`zero_half_cuts_py` is the reference (same cuts, same order)."""
    if _separation is None or activity is None or len(x) != n_cols:
        return zero_half_cuts_py(x, rows, n_cols, activity, free_below)
    if rhs is None:
        rhs = np.fromiter((row.rhs for row in rows), dtype=np.float64, count=len(rows))
    found = _separation.zero_half_cuts(
        np.ascontiguousarray(x, dtype=np.float64), rows,
        np.ascontiguousarray(rhs[: len(rows)], dtype=np.float64),
        np.ascontiguousarray(activity, dtype=np.float64), tuple(free_below), TOL)
    return [Row(np.array(cols, dtype=np.int32), np.array(coefs, dtype=np.int64), int(b))
            for cols, coefs, b in found]


def zero_half_cuts_py(x: np.ndarray, rows: Sequence[Row], n_cols: int,
                      activity: np.ndarray | None = None,
                      free_below: Sequence[float] = (0.0, 0.1, 0.25)) -> list[Row]:
    """:func:`zero_half_cuts` in Python and numpy."""
    got = _tight_entries(x, rows, activity)
    if got is None:
        return []
    tight, owner, cols, coefs, rhs, with_frac = got
    # the tight rows' odd coefficients, as (tight row, column) pairs
    odd = (coefs & 1).astype(bool)
    owner, cols = owner[odd], cols[odd]
    odd_rhs = (rhs & 1).astype(bool)
    for threshold in free_below:
        cuts = _zero_half_at(x, rows, tight, owner, cols, odd_rhs, n_cols,
                             max(threshold, TOL), with_frac)
        if cuts:
            return cuts
    return []


def _zero_half_at(x: np.ndarray, rows: Sequence[Row], tight: np.ndarray, owner: np.ndarray,
                  cols: np.ndarray, odd_rhs: np.ndarray, n_cols: int,
                  threshold: float, with_frac: np.ndarray) -> list[Row]:
    support = np.nonzero(x > threshold)[0]
    k = len(support)
    pos = np.full(n_cols, -1, dtype=np.int64)
    pos[support] = np.arange(k)
    keep = pos[cols] >= 0
    # mod-2 matrix: tight rows x (support columns + the parity of the rhs)
    parity = np.zeros((len(tight), k + 1), dtype=bool)
    parity[owner[keep], pos[cols[keep]]] = True
    parity[:, k] = odd_rhs
    cuts: list[Row] = []
    for combo in _combinations(parity, with_frac):
        cut = _chvatal_gomory(x, rows, [(int(tight[t]), 1) for t in combo], 2, n_cols)
        if cut is not None:
            cuts.append(cut)
    return cuts


def combinations_py(parity: np.ndarray, useful: np.ndarray) -> list[list[int]]:
    """The GF(2) core of the {0, 1/2}-cuts in Python (the reference of ``_separation.c``): for
    each part of the rows (linked through shared support columns, ``parity[:, :k]``)
    holding a ``useful`` row, the rows (positions) whose mod-2 sum is exactly
    (0, ..., 0, 1) - even on the support, odd rhs - or nothing for that part."""
    k = parity.shape[1] - 1
    labels = _linked(parity[:, :k])
    packed = np.packbits(parity, axis=1, bitorder="little")
    groups: dict[int, list[tuple[int, int]]] = {}
    for t in np.nonzero(parity.any(axis=1))[0].tolist():
        mask = int.from_bytes(packed[t].tobytes(), "little")
        groups.setdefault(int(labels[t]), []).append((mask, t))
    wanted = set(labels[useful].tolist())
    out = []
    for label, group in groups.items():
        if label in wanted:
            combo = _combination(group, 1 << k)
            if combo is not None:
                out.append(combo)
    return out


def _combinations(parity: np.ndarray, useful: np.ndarray) -> list[list[int]]:
    """:func:`combinations_py`, compiled when the extension was built (same rows, same
    order)."""
    if _separation is None:
        return combinations_py(parity, useful)
    result: list[list[int]] = _separation.zero_half_combinations(
        np.ascontiguousarray(parity).view(np.uint8), np.ascontiguousarray(useful).view(np.uint8))
    return result


def _chvatal_gomory(x: np.ndarray, rows: Sequence[Row], multipliers: Sequence[tuple[int, int]],
                    k: int, n_cols: int) -> Row | None:
    """The cut ``sum(floor(u.A / k) x) <= floor(u.b / k)`` for the multipliers
    (row index, u_r) - valid for every integer point - if it is violated at x, else None."""
    alpha = np.zeros(n_cols, dtype=np.int64)
    total = 0
    for r, mult in multipliers:
        np.add.at(alpha, rows[r].cols, mult * rows[r].coefs)
        total += mult * rows[r].rhs
    coef = alpha // k
    nz = np.nonzero(coef)[0]
    cut = Row(nz.astype(np.int32), coef[nz], total // k)
    return cut if cut.activity(x) > cut.rhs + TOL else None


def _tight_entries(x: np.ndarray, rows: Sequence[Row], activity: np.ndarray | None
                   ) -> tuple[np.ndarray, ...] | None:
    """The rows tight at x (``activity``: the rows' values at x, when known) as
    (tight row indices, then per non-zero: its tight row's position and its column and
    coefficient, then the tight rows' rhs and whether each has a fractional column), or
    None when no row is tight."""
    if activity is None:
        activity = np.array([row.activity(x) for row in rows])
    rhs_all = np.fromiter((row.rhs for row in rows), dtype=np.int64, count=len(rows))
    tight = np.nonzero(rhs_all - activity[: len(rows)] <= TOL)[0]
    if len(tight) == 0:
        return None
    lengths = [len(rows[r].cols) for r in tight.tolist()]
    owner = np.repeat(np.arange(len(tight)), lengths)
    cols = np.concatenate([rows[r].cols for r in tight.tolist()]).astype(np.int64)
    coefs = np.concatenate([rows[r].coefs for r in tight.tolist()]).astype(np.int64)
    with_frac = _rows_with_fractional(x, owner, cols, len(tight))
    return tight, owner, cols, coefs, rhs_all[tight], with_frac


def _rows_with_fractional(x: np.ndarray, owner: np.ndarray, cols: np.ndarray,
                          n_rows: int) -> np.ndarray:
    """Which rows (non-zeros ``owner[k]``, ``cols[k]``) have a fractional column at x. A
    Chvatal-Gomory cut from a set of rows none of which has one is not violated (x is
    integral on every column it names), so such parts of the support are skipped."""
    frac = (x > TOL) & (x < 1.0 - TOL)
    return np.bincount(owner, weights=frac[cols], minlength=n_rows) > 0


def _linked(incidence: np.ndarray) -> np.ndarray:
    """Component label of each row of a boolean (rows x columns) matrix, rows being linked
    when they share a column (label propagation through the columns; on these small
    matrices faster than SciPy's connected components, whose set-up alone costs ~0.2 ms:
    measured)."""
    n = incidence.shape[0]
    labels = np.arange(n)
    if incidence.shape[1] == 0:
        return labels
    big = n + 1
    while True:
        col_min = np.where(incidence, labels[:, None], big).min(axis=0)
        new = np.minimum(labels, np.where(incidence, col_min[None, :], big).min(axis=1))
        if np.array_equal(new, labels):
            return labels
        labels = new


def _combination(group: list[tuple[int, int]], target: int) -> list[int] | None:
    """Row indices whose mod-2 sum is exactly ``target`` (GF(2) elimination), or None."""
    basis: dict[int, tuple[int, int]] = {}  # pivot bit -> (reduced row, rows combined)
    for k, (m, _) in enumerate(group):
        combo = 1 << k
        while m:
            top = m.bit_length() - 1
            if top not in basis:
                basis[top] = (m, combo)
                break
            bm, bc = basis[top]
            m ^= bm
            combo ^= bc
    t, combo = target, 0
    while t:
        top = t.bit_length() - 1
        if top not in basis:
            return None
        bm, bc = basis[top]
        t ^= bm
        combo ^= bc
    return [group[k][1] for k in range(len(group)) if combo >> k & 1]


def mod_k_cuts(x: np.ndarray, rows: Sequence[Row], n_cols: int, k: int = 3,
               activity: np.ndarray | None = None,
               free_below: Sequence[float] = (0.0, 0.1, 0.25)) -> list[Row]:
    """mod-k cuts for a prime k: multipliers u in {0, ..., k - 1} on the tight rows with
    u.A = 0 (mod k) on every column with x above a threshold (0 first, then the larger
    ``free_below`` values) and u.b != 0 (mod k), one cut per connected part of the
    support; the cut is ``sum(floor(u.A / k) x) <= floor(u.b / k)``, violated by
    (u.b mod k) / k when the threshold is 0."""
    got = _tight_entries(x, rows, activity)
    if got is None:
        return []
    tight, owner, cols, coefs, rhs, with_frac = got
    coefs, rhs = coefs % k, rhs % k
    for threshold in free_below:
        support = np.nonzero(x > max(threshold, TOL))[0]
        pos = np.full(n_cols, -1, dtype=np.int64)
        pos[support] = np.arange(len(support))
        keep = (pos[cols] >= 0) & (coefs > 0)
        a = np.zeros((len(tight), len(support)), dtype=np.int64)
        a[owner[keep], pos[cols[keep]]] = coefs[keep]
        labels = _linked(a > 0)
        cuts: list[Row] = []
        # parts with a row whose rhs is not divisible by k and a fractional column
        parts = np.intersect1d(labels[rhs > 0], labels[with_frac])
        for label in parts.tolist():
            members = np.nonzero(labels == label)[0]
            # unknowns u (one per member row): a^T u = 0 on the support, rhs.u = 1
            system = np.vstack([a[members].T, rhs[members][None, :]])
            target = np.zeros(len(system), dtype=np.int64)
            target[-1] = 1
            u = _solve_mod(system, target, k)
            if u is None:
                continue
            multipliers = [(r, mult) for mult, r in
                           zip(u.tolist(), tight[members].tolist(), strict=True) if mult]
            cut = _chvatal_gomory(x, rows, multipliers, k, n_cols)
            if cut is not None:
                cuts.append(cut)
        if cuts:
            return cuts
    return []


def _solve_mod(system: np.ndarray, target: np.ndarray, k: int) -> np.ndarray | None:
    """A solution u in {0, ..., k - 1}^n of ``system @ u = target (mod k)``, k prime
    (Gauss-Jordan elimination; free unknowns 0), or None when there is none. Compiled
    (``_separation.solve_mod``) when the extension was built; :func:`_solve_mod_py` is
    the reference (same solution)."""
    if _separation is None:
        return _solve_mod_py(system, target, k)
    u = _separation.solve_mod(np.ascontiguousarray(system, dtype=np.int64),
                              np.ascontiguousarray(target, dtype=np.int64), k)
    return None if u is None else np.array(u, dtype=np.int64)


def _solve_mod_py(system: np.ndarray, target: np.ndarray, k: int) -> np.ndarray | None:
    """:func:`_solve_mod` with numpy."""
    aug = np.concatenate([system % k, (target % k)[:, None]], axis=1)
    n_eq, n_var = system.shape
    pivots: list[int] = []
    r = 0
    for c in range(n_var):
        if r == n_eq:
            break
        below = np.nonzero(aug[r:, c])[0]
        if len(below) == 0:
            continue
        pick = r + int(below[0])
        if pick != r:
            aug[[r, pick]] = aug[[pick, r]]
        aug[r] = (aug[r] * pow(int(aug[r, c]), k - 2, k)) % k  # Fermat: the inverse
        others = np.nonzero(aug[:, c])[0]
        others = others[others != r]
        if len(others):
            aug[others] = (aug[others] - np.outer(aug[others, c], aug[r])) % k
        pivots.append(c)
        r += 1
    if np.any(aug[r:, -1]):
        return None
    u = np.zeros(n_var, dtype=np.int64)
    u[pivots] = aug[: len(pivots), -1]
    return u


def separate(x: np.ndarray, conflict: np.ndarray, rows: Sequence[Row],
             activity: np.ndarray | None = None,
             mod_k: Sequence[int] = MOD_K, rhs: np.ndarray | None = None) -> list[Row]:
    """Violated cuts at x: cliques and {0, 1/2}-cuts over ``rows`` (the LP's rows with the
    cuts so far; ``activity``: their values at x, when known); odd cycles when those find
    none; mod-k cuts (``mod_k``, in order) when nothing else is found. Measured on the
    256-GPU x 50-app instances, the symmetric bench_rounds instances and the simulator's
    hardest auctions, this beat both "all families always" (odd-cycle separation is the
    costliest) and "cheapest family first" (more rounds). ``rhs``: the rows' right-hand
    sides as floats, when at hand (lpbb keeps them)."""
    if len(_fractional(x)) == 0:
        return []
    cuts = [*clique_cuts(x, conflict), *zero_half_cuts(x, rows, len(x), activity, rhs=rhs)]
    cuts = cuts or odd_cycle_cuts(x, conflict)
    for k in mod_k:
        cuts = cuts or mod_k_cuts(x, rows, len(x), k, activity)
    return cuts
