"""Partial-allocation auction (paper section 3.3.1, Pseudocode 1 lines 5-12; Cole,
Gkatzelis and Goel, EC 2013).

1. Proportional-fair allocation: choose at most one bundle per app, bundles disjoint,
   maximising prod_i 1/rho_i(G_i), i.e. sum_i log(1/rho_i(G_i)) (line 6). We hand the
   solver gains g_i(b) = log(rho_i(empty) / rho_i(b)); since every app's empty-bundle term
   is a constant, maximising the gains maximises the product.
2. Hidden payment (lines 7-8): c_i = prod_{j!=i} 1/rho_j(G_pf) / prod_{j!=i} 1/rho_j(G^-i),
   in logs ``log c_i = (OPT - g_i(pf)) - OPT_{-i}`` with one extra solve without app i.
   An app whose proportional-fair bundle is empty has c_i = 1 exactly (removing it leaves
   the optimum unchanged), so only winners need the extra solve.
3. Indivisible GPUs (line 9, our rounding): app i keeps k_i = floor(e) + [U < e - floor(e)]
   of its n_i GPUs, e = c_i n_i, with U ~ Uniform[0,1) from the round's seeded RNG -
   randomized rounding, so the *expected* share kept is exactly c_i, which is what the
   truthfulness argument of Cole et al. needs (a deterministic floor would over-charge
   small bundles: a 1-GPU winner with c_i = 0.95 would lose its GPU). The kept GPUs are
   the best-placed subset of the bundle (fullest machine, then fullest slot). Withheld
   GPUs are leftover (line 10). An app that can use its GPUs only in containers of k GPUs
   on one node (YARN's container shape, ``unit``) is rounded in containers instead:
   e = c_i n_i / k, keeping k (floor(e) + [U < e - floor(e)]) GPUs, so that the expected
   share kept is still c_i and the container cut afterwards
   (:func:`themis.mechanism.round.run_round`) takes nothing more from it (rounding GPUs
   and then cutting to whole containers would keep less than c_i in expectation: a
   2-GPU bundle at c_i = 0.7 would keep its container with probability 0.4, not 0.7).
4. Payments only as exact as the allocation needs: k_i changes only where OPT_{-i}
   crosses one of n_i thresholds (:func:`rounding_thresholds`), and U is drawn before
   the solves, so each solve without a winner stops once OPT_{-i} is bracketed between
   two thresholds (:meth:`Solver.bracket_many`). The GPUs granted are exactly those of
   the exact c_i; the reported c_i is one giving the same k_i (``exact_payments`` for
   the exact value).

Starving apps (rho_current = +inf: no GPU, so they never finish) get a lexicographic
priority: each gain of such an app carries a constant M larger than any possible sum of
finite gains, so the optimum first maximises the number of starving apps served - the
standard treatment of zero valuations in Nash-welfare maximisation - and c_i follows the
same formula (it is ~0 for an app whose presence keeps a starving app unserved).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import filterfalse
from operator import attrgetter

from themis.mechanism.bids import BidTable
from themis.mechanism.errors import InvalidBid, InvalidOffer
from themis.mechanism.solvers.base import Bundle, PackingProblem, Solution, Solver
from themis.mechanism.solvers.components import split
from themis.mechanism.solvers.split import SplitSolver
from themis.mechanism.split import plan_split, restrict_problem
from themis.mechanism.topology import Gpu

_EPS = 1e-12
_ID = attrgetter("id")


@dataclass(frozen=True, slots=True)
class AuctionResult:
    allocation: dict[str, tuple[str, ...]]  # GPUs each bidder keeps (after the payment)
    proportional_fair: dict[str, tuple[str, ...]]
    kept_fraction: dict[str, float]  # c_i for every bidder
    leftover: tuple[str, ...]  # withheld + never-allocated GPUs, in offer order
    solver: str
    solve_ms: float
    objective: float  # sum of gains of the proportional-fair allocation


def validate_tables(offer_ids: Sequence[str], tables: Sequence[BidTable]) -> None:
    """Raise InvalidOffer / InvalidBid naming the first problem found."""
    offered = set(offer_ids)
    if len(offered) != len(offer_ids):
        dup = sorted({g for g in offer_ids if offer_ids.count(g) > 1})
        raise InvalidOffer(f"offer: duplicate GPU ids {dup}")
    # every id a str (the type check at C level; str subclasses take the slow path)
    if "" in offered or (set(map(type, offer_ids)) - {str}
                         and any(not isinstance(g, str) for g in offer_ids)):
        raise InvalidOffer("offer: GPU ids must be non-empty strings")
    seen_apps: set[str] = set()
    # bundles already found valid: menus repeat placements across apps (measured on the
    # 256-GPU x 50-app benchmark: ~270 distinct of ~700 bids)
    good: set[tuple[str, ...]] = set()
    for t in tables:
        if not isinstance(t.app_id, str) or not t.app_id:
            raise InvalidBid(str(t.app_id), "app id must be a non-empty string")
        if t.app_id in seen_apps:
            raise InvalidBid(t.app_id, "duplicate app in the auction")
        seen_apps.add(t.app_id)
        r0 = t.rho_current
        if not isinstance(r0, int | float) or math.isnan(r0) or r0 <= 0:
            raise InvalidBid(t.app_id, f"current rho {r0!r} must be a positive number")
        for k, bid in enumerate(t.bids):
            r = bid.rho
            if not isinstance(r, int | float) or not math.isfinite(r) or r <= 0:
                raise InvalidBid(t.app_id, f"rho {r!r} must be a finite positive number", k)
            if type(bid.gpus) is tuple and bid.gpus in good:
                continue
            if not bid.gpus:
                raise InvalidBid(t.app_id, "empty bundle (the empty bundle is rho_current)", k)
            gpus = set(bid.gpus)
            if len(gpus) != len(bid.gpus):
                raise InvalidBid(t.app_id, "a GPU appears twice in the bundle", k)
            if not gpus <= offered:
                g = next(g for g in bid.gpus if g not in offered)
                raise InvalidBid(t.app_id, f"GPU {g!r} is not in the offer", k)
            if type(bid.gpus) is tuple:
                good.add(bid.gpus)


def _gains(
    tables: Sequence[BidTable], index: dict[str, int]
) -> tuple[PackingProblem, list[list[int]]]:
    """The packing problem in gain form, and for each app the bid index of each bundle
    (bids that do not improve on the empty bundle are dropped: never worth GPUs)."""
    masks: dict[tuple[str, ...], int] = {}  # bundle -> its GPUs as a bitset (memo)
    finite_rhos = [b.rho for t in tables for b in t.bids]
    rho_ref = max(finite_rhos, default=1.0)
    # Finite part of each app's best gain bounds any sum of finite gains.
    finite_part: list[list[tuple[int, float]]] = []
    origin: list[list[int]] = []
    bound = 0.0
    for t in tables:
        rows = []
        kept: list[int] = []
        starving = math.isinf(t.rho_current)
        top = rho_ref if starving else t.rho_current
        for k, b in enumerate(t.bids):
            g = math.log(top / b.rho)
            if g > _EPS or starving:
                # the bundle's GPUs as a bitset: a sum of distinct bits (validated)
                key = b.gpus if type(b.gpus) is tuple else tuple(b.gpus)
                mask = masks.get(key)
                if mask is None:
                    mask = masks[key] = sum([1 << index[g] for g in key])
                rows.append((mask, g))
                kept.append(k)
        finite_part.append(rows)
        origin.append(kept)
        bound += max((g for _, g in rows), default=0.0)
    big_m = 1.0 + bound
    apps = []
    lexicographic: list[int] = []  # the starving apps (gains carry big_m)
    for i, (t, rows) in enumerate(zip(tables, finite_part, strict=True)):
        starving = math.isinf(t.rho_current)
        if starving:
            lexicographic.append(i)
        apps.append(tuple(Bundle(m, g + (big_m if starving else 0.0)) for m, g in rows))
    return PackingProblem(len(index), tuple(apps), tuple(lexicographic)), origin


def keep_order(gpus: Sequence[Gpu]) -> list[Gpu]:
    """GPUs of a bundle, best-placed subset first: fullest machine, then fullest slot."""
    machines: dict[str, dict[str, list[Gpu]]] = {}
    for g in gpus:
        machines.setdefault(g.machine, {}).setdefault(g.slot, []).append(g)
    ordered: list[Gpu] = []
    for slots in sorted(machines.values(), key=lambda s: (-sum(map(len, s.values())), min(s))):
        for slot in sorted(slots.values(), key=lambda s: (-len(s), s[0].slot)):
            ordered.extend(sorted(slot, key=lambda g: g.id))
    return ordered


def rounding_thresholds(base: float, n: int, u: float) -> list[float]:
    """The values of OPT^-i at which app i's kept GPU count changes (ascending).

    With base = OPT - g_i, c_i = exp(min(0, base - OPT^-i)) and the rounding of
    :func:`run_auction`, app i keeps floor(e) + [u < frac(e)] of its n GPUs, e = c_i n:
    k + 1 GPUs for e in (k + u, k + 1 + u]. So it keeps exactly as many GPUs as there are
    thresholds T_k = base - log((k + u) / n), k = 0..n-1, above OPT^-i (T_0 = +inf
    when u = 0)."""
    ratios = [(k + u) / n for k in range(n)]
    return sorted(base - math.log(r) if r > 0.0 else math.inf for r in ratios)


def rounding_step(n: int, unit: int) -> int:
    """GPUs per rounding step of a bundle of ``n`` GPUs for an app of containers of
    ``unit`` GPUs: ``unit``, or 1 for a bundle smaller than one container."""
    return unit if 1 < unit <= n else 1


def _solve_parts(
    problem: PackingProblem, solver: Solver, draws: Sequence[float] | None = None,
    units: Sequence[int] | None = None,
) -> tuple[list[int], float, dict[int, float]]:
    """Proportional-fair choice per app, its objective, and log c_i per winner i.

    Each independent part (:mod:`themis.mechanism.solvers.components`) is solved on its
    own and re-solved without each of its winners (a part of one app needs no solve: see
    the loop): removing app i changes only i's part,
    so with OPT_p the optimum of i's part and OPT_p^-i the optimum without i,
    log c_i = (OPT - g_i) - OPT^-i = (OPT_p - g_i) - OPT_p^-i (Pseudocode 1, line 8).

    With ``draws`` (app i's rounding draw u_i), each solve without a winner only
    brackets OPT_p^-i among the :func:`rounding_thresholds` (:meth:`Solver.bracket_many`;
    over the bundle's containers with ``units``, app i's container size):
    log c_i is then computed from a value in the same bracket as OPT_p^-i, which gives
    the winner exactly the GPUs the exact c_i would."""
    choice = [-1] * len(problem.apps)
    objective = 0.0
    log_kept: dict[int, float] = {}
    for part in split(problem):
        if len(part.apps) == 1:
            # An app alone in its part (a round's only bidder, or one whose bundles no
            # other bidder names): the part's optimum is its best bundle - the first of
            # the best gain, as an agent lists its best-placed bundles first (the branch
            # and bound breaks ties that way too) - and without it the part is empty
            # (OPT_p^-i = 0), so log c_i = (OPT_p - g_i) - 0 = 0: it keeps all of it.
            bundles = part.problem.apps[0]
            best = max(range(len(bundles)), key=lambda j: bundles[j].gain)
            objective += bundles[best].gain
            choice[part.apps[0]] = best
            log_kept[part.apps[0]] = 0.0
            continue
        pf = solver.solve(part.problem)
        objective += pf.objective
        winners = [k for k, c in enumerate(pf.choice) if c >= 0]
        own = [part.problem.apps[k][pf.choice[k]] for k in winners]
        without: list[Solution]
        if not winners:
            without = []
        elif draws is None:
            without = solver.solve_many(part.problem, winners)
        else:
            steps = [1 if units is None else
                     rounding_step(b.mask.bit_count(), units[part.apps[k]])
                     for k, b in zip(winners, own, strict=True)]
            without = solver.bracket_many(part.problem, winners, [
                rounding_thresholds(pf.objective - b.gain, b.mask.bit_count() // step,
                                    draws[part.apps[k]])
                for k, b, step in zip(winners, own, steps, strict=True)])
        for k, b, sol in zip(winners, own, without, strict=True):
            log_kept[part.apps[k]] = (pf.objective - b.gain) - sol.objective
        for k, c in enumerate(pf.choice):
            choice[part.apps[k]] = c
    return choice, objective, log_kept


def run_auction(
    offer: Sequence[Gpu],
    tables: Sequence[BidTable],
    solver: Solver,
    rng: random.Random,
    exact_payments: bool = False,
    unit: Mapping[str, int] | None = None,
) -> AuctionResult:
    """Pseudocode 1, AUCTION: proportional-fair allocation, hidden payments, leftover.

    ``rng`` shuffles the apps (ties), then draws each app's rounding number u_i, in app
    id order, before any solve. ``exact_payments``: compute every c_i exactly; by default
    each solve without a winner stops once it has settled how many GPUs the winner keeps
    (the allocation is the exact one; ``kept_fraction`` is then a c_i giving that same
    count - the exact c_i when the solve proved it, see :func:`rounding_thresholds`).

    A :class:`SplitSolver` splits a round above its policy's size into independent
    sub-auctions (:mod:`themis.mechanism.split`; ``rng`` then draws the partition after
    the u_i) and solves with its inner solver; below that size the auction is unchanged.
    ``unit`` (app -> GPUs per container, default 1): round such an app's kept GPUs in
    whole containers (module docstring, step 3)."""
    policy = None
    if isinstance(solver, SplitSolver):
        policy, solver = solver.policy, solver.inner
    offer_ids = list(map(_ID, offer))
    validate_tables(offer_ids, tables)
    # The solver breaks ties between equally good allocations by app order: shuffle it
    # (seeded) so that no app is favoured round after round for its id or arrival.
    tables = list(tables)
    rng.shuffle(tables)
    draw = {t.app_id: rng.random() for t in sorted(tables, key=lambda t: t.app_id)}
    index = dict(zip(offer_ids, range(len(offer_ids)), strict=True))
    problem, origin = _gains(tables, index)
    plan = None if policy is None else plan_split(offer, tables, policy, rng)
    if plan is not None:  # each bidder keeps its bundles inside its part
        problem, origin = restrict_problem(problem, origin, tables, index, plan)
    started = time.perf_counter()
    draws = None if exact_payments else [draw[t.app_id] for t in tables]
    units = [max(1, (unit or {}).get(t.app_id, 1)) for t in tables]
    choice, objective, log_kept = _solve_parts(problem, solver, draws, units)
    solve_ms = (time.perf_counter() - started) * 1e3

    proportional_fair: dict[str, tuple[str, ...]] = {}
    kept_fraction: dict[str, float] = {}
    allocation: dict[str, tuple[str, ...]] = {}
    for i, t in enumerate(tables):
        kept_fraction[t.app_id] = 1.0
        if choice[i] < 0:
            continue
        proportional_fair[t.app_id] = tuple(sorted(t.bids[origin[i][choice[i]]].gpus))
        kept_fraction[t.app_id] = min(1.0, max(0.0, math.exp(min(0.0, log_kept[i]))))
    for app in sorted(proportional_fair):
        bundle = [offer[index[g]] for g in proportional_fair[app]]
        c = kept_fraction[app]
        step = rounding_step(len(bundle), max(1, (unit or {}).get(app, 1)))
        exact = c * (len(bundle) // step)
        keep = math.floor(exact)
        if draw[app] < exact - keep:
            keep += 1
        kept = keep_order(bundle)[:keep * step]
        if kept:
            allocation[app] = tuple(sorted(g.id for g in kept))
    granted = {g for gs in allocation.values() for g in gs}
    leftover = tuple(filterfalse(granted.__contains__, offer_ids))
    return AuctionResult(
        allocation=allocation,
        proportional_fair=proportional_fair,
        kept_fraction=kept_fraction,
        leftover=leftover,
        solver=solver.name if plan is None else f"{solver.name} (split: {plan.n_parts} parts)",
        solve_ms=solve_ms,
        objective=objective,
    )
