"""Themis in the simulator: the agents' real bid code and the arbiter's real round code
(sections 3.3.2 and 4.2.2; design brief section 2 - only the driver differs from YARN).

rho_current of each app = rho at its current allocation (the GPUs it still holds after the
expired leases returned) with N_avg from the ContentionTracker; the arbiter keeps the
(1-f) worst apps as bidders, each bidder's agent runs ``make_bid_table`` on the offer, and
``run_round`` runs the partial-allocation auction and hands the leftover to non-bidders.
Each app's model is built once per phase and brought up to date in place as its jobs
progress; its remaining time per GPU count is recomputed only after they did
(:attr:`AppState.stamp`) and its plan (the exact T_id's) once per phase; T_id, which
moves with N_avg, is evaluated once per round for rho, the filter key and the bid table.

GPUs the leftover step cannot place (no non-bidder has room) go to bidders that still
have room inside ``run_round`` (work conservation, section 3.3.2), as in YARN and
standalone mode.

``starvation`` (:class:`~themis.mechanism.fairness.Starvation`) selects how the filter
orders apps holding no GPU: ``served-now`` ranks them by
:func:`~themis.mechanism.fairness.served_now_rho` above every app holding GPUs (the policy
``themis-served-now``); the default ``ranked`` ranks each that has held GPUs before among
all apps by it, and newcomers above them all (the policy ``themis``); ``inf``, the
paper's reading, lets them tie at rho = +inf and draws among them (``themis-inf``;
docs/mechanism.md, "Starvation").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from themis.mechanism.bids import BidTable, OfferIndex, make_bid_table
from themis.mechanism.fairness import (
    DEFAULT_STARVATION,
    FairnessContext,
    IdealTime,
    PlanTime,
    RemainingTime,
    Starvation,
    best_locality,
    ideal_time,
    parse_starvation,
    rho,
    served_now_rho,
)
from themis.mechanism.model import AppModel
from themis.mechanism.placement import PlacementProfile
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB, run_round
from themis.mechanism.solvers import DEFAULT_SOLVER, Solver, make_solver
from themis.mechanism.topology import Gpu, Locality, Topology, locality_of
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.state import AppState


@dataclass(slots=True)
class _View:
    """An app's agent-side model and the parts of rho that depend on it alone (its
    remaining time per GPU count, its plan for the exact T_id), kept while the app's
    :attr:`AppState.stamp` holds: an app that did not progress reports the same model.
    Within a phase the model is updated in place, and the plan is kept when it does not
    depend on progress."""

    app: AppState
    stamp: int
    phase: int
    model: AppModel
    remaining: RemainingTime
    plan: PlanTime | None  # for IdealTime.EXACT only


class ThemisPolicy(Policy):
    name = "themis"

    def __init__(
        self,
        fairness_knob: float = DEFAULT_FAIRNESS_KNOB,
        solver: Solver | str = DEFAULT_SOLVER,
        errors: Mapping[str, float] | None = None,
        reported_profiles: Mapping[str, PlacementProfile] | None = None,
        starvation: Starvation | str = DEFAULT_STARVATION,
    ) -> None:
        self.fairness_knob = fairness_knob
        self.starvation = parse_starvation(starvation)
        self._places: dict[int, Locality] = {}  # GPU count -> best locality (served-now)
        self._topology: Topology | None = None
        self.solver = make_solver(solver) if isinstance(solver, str) else solver
        self.errors = dict(errors or {})  # app id -> relative estimate error (Fig. 17)
        self.reported = dict(reported_profiles or {})  # app id -> lying profile (Fig. 18)
        self.bid_ms: list[float] = []
        self.auction_ms: list[float] = []
        self._views: dict[str, _View] = {}

    def _model(self, app: AppState) -> AppModel:
        return app.model(self.errors.get(app.spec.id, 0.0), self.reported.get(app.spec.id))

    def _view(self, app: AppState, ideal: IdealTime) -> _View:
        """The app's :class:`_View`, brought up to date when its stamp changed."""
        v = self._views.get(app.spec.id)
        if v is not None and v.app is app and v.stamp == app.stamp and \
                (v.plan is not None or ideal is not IdealTime.EXACT):
            return v
        same_phase = v is not None and v.app is app and v.phase == app.phase
        if v is not None and same_phase:  # within a phase only the iterations left change
            m = v.model
            app.update_model(m, self.errors.get(app.spec.id, 0.0))
        else:
            m = self._model(app)
        plan = None
        if ideal is IdealTime.EXACT:
            # the plan changes with the phase only (unless it depends on progress)
            if v is not None and same_phase and v.plan is not None and v.plan.progress_free:
                plan = v.plan
            else:
                plan = PlanTime(m)
        v = _View(app, app.stamp, app.phase, m, RemainingTime(m), plan)
        self._views[app.spec.id] = v
        return v

    def observe_finish(self, app: AppState, now: float) -> None:
        self._views.pop(app.spec.id, None)

    def _place(self, topo: Topology) -> Callable[[int], Locality]:
        """GPU count -> the best locality the cluster allows, memoised per topology."""
        if self._topology is not topo:
            self._topology, self._places = topo, {}

        def place(n: int) -> Locality:
            if n not in self._places:
                self._places[n] = best_locality(list(topo.values()), n)
            return self._places[n]

        return place

    def allocate(self, ctx: RoundContext) -> Allocation:
        topo = ctx.topology
        by_id: dict[str, AppState] = {}
        views: dict[str, _View] = {}
        models: dict[str, AppModel] = {}
        held: dict[str, list[Gpu]] = {}
        fairness: dict[str, FairnessContext] = {}
        t_id: dict[str, float] = {}
        room: dict[str, int] = {}
        rho_now: dict[str, float] = {}
        # One pass over the apps (a round's per-app work, in a replay of a long queue most
        # of a round): an app that cannot use more GPUs does not take part in the round;
        # the models and what rho needs of them come from the last round for an app that
        # did not progress since (the same values); T_id changes with N_avg, once per round.
        for a in ctx.apps:
            i = a.spec.id
            by_id[i] = a
            r = a.room()
            if r <= 0:
                continue
            room[i] = r
            v = views[i] = self._view(a, ctx.ideal)
            m = models[i] = v.model
            h = held[i] = a.held_gpus(topo)
            f = fairness[i] = ctx.fairness(i)
            t = t_id[i] = ideal_time(m, f, v.plan)
            r_now = rho(m, len(h), locality_of(h), f, t_id=t, remaining=v.remaining)
            rho_now[i] = r_now if not math.isnan(r_now) else math.inf
        if not rho_now:
            return {}
        priority: dict[str, float] | None = None
        merge: list[str] = []
        if self.starvation.keyed:
            starving = [a for a in rho_now if math.isinf(rho_now[a])]
            if self.starvation.merges:  # ranked: the starving apps that have held GPUs
                merge = [a for a in starving if by_id[a].gpu_time > 0]
            # served-now: the key only orders apps tied at +inf; ranked: it also ranks
            # the apps in ``merge`` among all apps
            if len(starving) > 1 or merge:
                place = self._place(topo)
                priority = {a: served_now_rho(models[a], fairness[a], place, t_id=t_id[a],
                                              remaining=views[a].remaining)
                            for a in starving}
        # The GPUs whose lease each app just lost: its agent names them first among
        # equally placed bundles, and the leftover step renews them (docs/simulator.md).
        previous: dict[str, list[str]] = {}
        for gid, holder in ctx.previous.items():
            previous.setdefault(holder, []).append(gid)

        def collect(bidders: Sequence[str]) -> dict[str, BidTable]:
            out = {}
            t0 = time.perf_counter()
            index = OfferIndex(ctx.free)  # app-independent: built once per offer
            setup = time.perf_counter() - t0
            for b in bidders:
                t0 = time.perf_counter()
                out[b] = make_bid_table(
                    models[b], held[b], index, fairness[b], previous=previous.get(b, ()),
                    t_id=t_id[b], remaining=views[b].remaining,
                )
                self.bid_ms.append((time.perf_counter() - t0 + setup) * 1e3)
            return out

        outcome = run_round(
            ctx.free,
            rho_now,
            collect,
            fairness_knob=self.fairness_knob,
            lease_s=ctx.lease_s,
            now=ctx.now,
            solver=self.solver,
            rng=ctx.rng,
            room=room,
            previous=ctx.previous,
            priority=priority,
            merge=merge,
        )
        if outcome.auction is not None:
            self.auction_ms.append(outcome.auction.solve_ms)
            ctx.info["auction_ms"] = outcome.auction.solve_ms
        alloc: dict[str, tuple[str, ...]] = {}
        for app, gs in outcome.allocation.items():
            alloc[app] = tuple(gs[: room[app]])  # a bundle never exceeds demand; be safe
        return alloc
