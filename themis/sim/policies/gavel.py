"""Gavel's finish-time fairness (Narayanan et al., OSDI 2020, section 4.2 "Finish Time
Fairness" and section 5 "Scheduling Mechanism"), at app granularity.

**Policy (the optimisation).** Gavel picks time shares X (fraction of time each job runs
on its GPUs) that minimise max_m rho_m(X), with

    rho_m(X) = (t_m + T_m(X)) / (t_iso_m + T_m(X_iso))

t_m the time since the job arrived, T_m(X) its remaining time at throughput(X), X_iso an
isolated 1/N share of the cluster (N = active jobs) and t_iso_m the time the progress made
so far would have taken in that isolated share (accumulated at every solve: progress /
isolated throughput at the previous solve) - ``FinishTimeFairnessPolicyWithPerf``. Here the
entity is the app (the Themis paper's baselines are app-level, section 6.1) and its share
is g_m, the average number of GPUs over the round, 0 <= g_m <= demand (Gavel's x <= 1),
sum_m g_m <= R_C (the whole cluster, as in Gavel). T_m(g) is the app's remaining plan on g
GPUs (:func:`plan_time`: the work-conserving phase time of :mod:`themis.mechanism.fairness`,
with g fractional and S = 1, as Gavel's throughputs ignore placement); X_iso = R_C / N GPUs.
For a single-job app this is Gavel's expression exactly (throughput linear in the share).

T_m is convex and decreasing in g, so "min max rho" is solved exactly by water-filling
on the common level t (bisection on t; each app's least share reaching rho <= t is
inverted in closed form - T is A/g + C between kinks, :func:`ftf_shares`); Gavel hands
the same convex program to cvxpy/ECOS. The min-max optimum is not unique when an app's
rho cannot drop below the optimum even with its whole demand; we return the
lexicographic (water-filling) optimum of that set: such apps get their whole demand, the
others are equalised at the lowest feasible level. With one GPU type the LP's capacity
constraint is a single sum, so no LP solver is needed.

**Mechanism (realising fractional shares on whole GPUs).** As Gavel's round-based
scheduler: the shares are recomputed only when the set of jobs changed (here: an app
arrived, finished, or one of its jobs or phases ended) *and* at least ``reset_s``
(Gavel's ``minimum_time_between_allocation_resets``, 1920 s) passed since the last
recomputation; at that reset each app's received time restarts from half a round's
credit and its deficit (share x elapsed - received) accumulates. Each round apps are
served in decreasing priority = share / time received since the reset (Gavel:
allocation / fraction of time run), ties by deficit, then share, then arrival; an app not
in the current shares (arrived since the reset) has priority 0 and only gets GPUs left
over. A served app takes all the GPUs it can use (Gavel runs a job on its full scale
factor), so fractional shares become time-slicing across rounds.

One deliberate difference: Gavel's scheduler skips jobs that are not in the current
allocation (``_schedule_jobs_on_workers``), so GPUs idle while a job that arrived since the
last reset waits up to ``reset_s`` for the next solve. Every policy here is
work-conserving (the conformance suite checks it), so such apps get the GPUs nobody with a
share can use; ``idle_until_reset=True`` restores Gavel's behaviour (used only to compare
with Gavel's own simulator, docs/simulator.md).

**Mapping to the simulator.** A Gavel round is a lease here: GPUs change hands only when
their lease expires (every baseline's framework), received time is the app's held
GPU-seconds and half a round's credit is ``lease_s / 2`` x its demand. A re-served app
gets back the GPUs whose lease it just lost (Gavel's lease extension), the rest first fit
(:mod:`themis.sim.policies.place`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from themis.mechanism.fairness import RemainingTime
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.place import place
from themis.sim.state import AppState

#: Gavel's default ``minimum_time_between_allocation_resets`` (scheduler.py), seconds.
RESET_S = 1920.0

#: What :meth:`RemainingTime.parts` returns: (current phase's total work, (cap, largest
#: work of that cap) pairs, per future phase (total work, one job's work, cap)).
Parts = tuple[float, tuple[tuple[int, float], ...], tuple[tuple[float, float, int], ...]]
Floats = npt.NDArray[np.float64]


def plan_time(parts: Parts, g: float) -> float:
    """Remaining time of an app's plan on ``g`` (possibly fractional) GPUs, S = 1: the
    expression of :class:`RemainingTime` (bit for bit at integer g)."""
    total, longest, future = parts
    cur = 0.0
    if total > 0:
        if g <= 0:
            return math.inf
        cur = total / g
        for cap, work in longest:
            cur = max(cur, work / min(cap, g))
    rest = 0.0
    for phase_total, work, cap in future:
        if phase_total > 0:
            if g <= 0:
                return math.inf
            rest += max(phase_total / g, work / min(cap, g))
    return cur + rest


def has_work(parts: Parts) -> bool:
    return parts[0] > 0 or any(phase_total > 0 for phase_total, _, _ in parts[2])


def kinks(parts: Parts, demand: float) -> list[float]:
    """Points in (0, demand] between which ``plan_time`` is exactly A / g + C: the job caps
    and the shares where a phase's total-work bound meets a job's cap bound; ends at
    ``demand``. Below the first one, T = A / g."""
    total, longest, future = parts
    pts = {float(demand)}
    for cap, work in longest:
        pts.add(float(cap))
        if work > 0:
            pts.add(total * cap / work)
    for phase_total, work, cap in future:
        pts.add(float(cap))
        if work > 0:
            pts.add(phase_total * cap / work)
    return sorted(p for p in pts if 0 < p <= demand)


@dataclass(frozen=True, slots=True)
class FtfApp:
    """One app's inputs to the FTF program: its plan, t_m, the isolated time
    t_iso_m + T_m(X_iso), and its demand (the share's upper bound)."""

    parts: Parts
    elapsed: float
    isolated: float
    demand: float


def ftf_shares(apps: Sequence[FtfApp], capacity: float) -> tuple[list[float], float]:
    """Shares g (GPUs) minimising max rho = (elapsed + T(g)) / isolated subject to
    0 <= g <= demand and sum g <= capacity; the lexicographic optimum (see module doc).
    Returns (shares, the equalised level t; -inf when every app gets its demand)."""
    n = len(apps)
    if n == 0:
        return [], -math.inf
    demand = np.array([a.demand for a in apps], dtype=np.float64)
    if float(demand.sum()) <= capacity:
        return demand.tolist(), -math.inf
    ks: list[float] = []
    ts: list[float] = []
    starts: list[int] = []
    for a in apps:
        starts.append(len(ks))
        for k in kinks(a.parts, a.demand):
            ks.append(k)
            ts.append(plan_time(a.parts, k))
    kk = np.array(ks, dtype=np.float64)
    tk = np.array(ts, dtype=np.float64)
    first = np.array(starts, dtype=np.intp)
    count = np.diff(np.append(first, len(ks)))
    owner = np.repeat(np.arange(n), count)
    last = first + count - 1
    elapsed = np.array([a.elapsed for a in apps], dtype=np.float64)
    isolated = np.array([a.isolated for a in apps], dtype=np.float64)

    def least(t: float) -> Floats:
        """Per app the least share with rho <= t, or its demand when none reaches t."""
        budget = t * isolated - elapsed  # T(g) must not exceed this
        limit = budget + 1e-10 * np.abs(budget)  # a flat T at the level is feasible
        above = tk > limit[owner]
        i = np.add.reduceat(above.astype(np.intp), first)  # T above budget: a prefix
        out = demand.copy()
        ok = i < count
        j = np.minimum(first + i, last)
        jp = np.maximum(j - 1, first)
        head = ok & (i == 0)  # T = A / g below the first kink
        with np.errstate(divide="ignore", invalid="ignore"):
            g0 = kk[j] * tk[j] / budget
            a_ = (tk[jp] - tk[j]) / (1.0 / kk[jp] - 1.0 / kk[j])
            c_ = tk[jp] - a_ / kk[jp]
            g1 = np.clip(a_ / (budget - c_), kk[jp], kk[j])
        out = np.where(head, np.minimum(g0, kk[j]), np.where(ok, g1, out))
        return np.asarray(out, dtype=np.float64)

    # S(t) = sum of least(t) is non-increasing; at hi every app needs at most
    # min(demand, capacity / n), so S(hi) <= capacity.
    fair = np.minimum(demand, capacity / n)
    hi = max(
        (a.elapsed + plan_time(a.parts, float(f))) / a.isolated
        for a, f in zip(apps, fair, strict=True)
    )
    lo = 0.0
    best = least(hi)
    for _ in range(200):
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
        mid = 0.5 * (lo + hi)
        s = least(mid)
        if float(s.sum()) <= capacity * (1 + 1e-12):
            hi, best = mid, s
        else:
            lo = mid
    return best.tolist(), hi


@dataclass(slots=True)
class _Book:
    """Gavel's per-job bookkeeping, per app."""

    share: float = 0.0  # GPUs, from the last solve
    fraction: float = 0.0  # share / demand at the solve: Gavel's x (tie-break)
    base: float = 0.0  # the app's gpu_time at the last reset
    credit: float = 0.0  # half a round at its demand (Gavel's time_per_iteration / 2)
    deficit: float = 0.0  # sum over resets of share x interval - received
    cum_iso: float = 0.0  # t_iso: progress so far at the isolated share's speed
    iso_g: float = 0.0  # isolated share (GPUs) at the last solve
    iso_t: float = math.nan  # T(iso_g) at the last solve


class GavelFtfPolicy(Policy):
    name = "gavel"

    def __init__(self, reset_s: float = RESET_S, idle_until_reset: bool = False) -> None:
        if not reset_s >= 0:
            raise ValueError(f"reset_s={reset_s!r} must be >= 0")
        self.reset_s = reset_s
        self.idle_until_reset = idle_until_reset
        self.books: dict[str, _Book] = {}
        self.last_reset: float | None = None
        self.signature: frozenset[tuple[str, int, int]] = frozenset()
        self.level = -math.inf  # the equalised rho of the last solve
        self.solves = 0

    def allocate(self, ctx: RoundContext) -> Allocation:
        sig = frozenset((a.spec.id, a.phase, a.open_jobs) for a in ctx.apps)
        # (Gavel's simulator also resets when nothing runs, so that no job waits forever)
        due = self.last_reset is None or ctx.now - self.last_reset >= self.reset_s
        if self.idle_until_reset and not ctx.previous and not any(a.held for a in ctx.apps):
            due = True
        if self.last_reset is None or (sig != self.signature and due):
            self._reset(ctx)
            self.signature = sig

        def key(app: AppState) -> tuple[float, ...]:
            b = self.books.get(app.spec.id)
            if b is None:  # arrived since the last reset: not in the shares
                return (0.0, 0.0, 0.0, -app.spec.arrival)
            received = app.gpu_time - b.base + b.credit
            prio = b.share / received if b.share > 0 else 0.0
            return (prio, b.deficit, b.fraction, -app.spec.arrival)

        order = sorted(
            (
                a
                for a in ctx.apps
                if a.room() > 0 and not (self.idle_until_reset and a.spec.id not in self.books)
            ),
            key=lambda a: (*(-x for x in key(a)), a.spec.id),
        )
        left = len(ctx.free)
        counts: dict[str, int] = {}
        for app in order:
            if left == 0:
                break
            k = min(app.room(), left)
            counts[app.spec.id] = k
            left -= k
        return place(ctx, counts)

    def _reset(self, ctx: RoundContext) -> None:
        now = ctx.now
        since = 0.0 if self.last_reset is None else now - self.last_reset
        active = {a.spec.id: a for a in ctx.apps}
        for app_id in [k for k in self.books if k not in active]:
            del self.books[app_id]
        inputs: list[FtfApp] = []
        ids: list[str] = []
        capacity = float(len(ctx.topology))
        plans: dict[str, Parts] = {}
        for app in ctx.apps:
            parts: Parts = RemainingTime(app.model()).parts
            if app.demand_now() > 0 and has_work(parts):
                plans[app.spec.id] = parts
        n = max(1, len(plans))
        iso_g = capacity / n
        for app in ctx.apps:
            b = self.books.setdefault(app.spec.id, _Book(base=app.gpu_time))
            b.deficit += b.share * since - (app.gpu_time - b.base)
            b.base = app.gpu_time
            b.credit = ctx.lease_s / 2 * max(1, app.demand_now())
            b.share = b.fraction = 0.0
            parts_ = plans.get(app.spec.id)
            if parts_ is None:
                continue
            if not math.isnan(b.iso_t):  # progress since the last solve, at its speed
                b.cum_iso += max(0.0, b.iso_t - plan_time(parts_, b.iso_g))
            b.iso_g = iso_g
            b.iso_t = plan_time(parts_, iso_g)
            inputs.append(
                FtfApp(
                    parts_,
                    max(0.0, now - app.spec.arrival),
                    b.cum_iso + b.iso_t,
                    float(app.demand_now()),
                )
            )
            ids.append(app.spec.id)
        shares, self.level = ftf_shares(inputs, capacity)
        for app_id, g, inp in zip(ids, shares, inputs, strict=True):
            self.books[app_id].share = g
            self.books[app_id].fraction = g / inp.demand
        self.last_reset = now
        self.solves += 1
