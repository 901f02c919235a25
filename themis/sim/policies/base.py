"""The policy interface: on every resource-available event the simulator hands the free
GPUs and the active apps to a policy, which returns GPUs per app (section 6.1: "on any
resource availability, all apps report ... and we allocate")."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from themis.mechanism.fairness import DEFAULT_IDEAL_TIME, FairnessContext, IdealTime
from themis.mechanism.topology import Gpu, Topology
from themis.sim.state import AppState


@dataclass(slots=True)
class RoundContext:
    now: float
    free: list[Gpu]  # in topology order
    topology: Topology
    apps: list[AppState]  # active apps, by arrival
    rng: random.Random
    n_avg: Callable[[str], float]
    lease_s: float
    info: dict[str, float] = field(default_factory=dict)  # per-round stats for metrics
    # GPU id -> the app whose lease on it expired at this instant (renewal candidates).
    previous: dict[str, str] = field(default_factory=dict)
    ideal: IdealTime = DEFAULT_IDEAL_TIME  # the form of T_id in rho (SimConfig.ideal_time)
    # the ids of ``free`` when the caller has them as a set (read only); else built on use
    free_ids: Collection[str] | None = None

    def free_id_set(self) -> Collection[str]:
        """The ids of the free GPUs (membership tests)."""
        if self.free_ids is None:
            self.free_ids = {g.id for g in self.free}
        return self.free_ids

    def fairness(self, app_id: str) -> FairnessContext:
        return FairnessContext(self.now, len(self.topology), self.n_avg(app_id), self.ideal)


Allocation = dict[str, tuple[str, ...]]


class Policy(ABC):
    """A cross-app scheduling policy. ``allocate`` must return disjoint subsets of
    ``ctx.free``, at most ``app.room()`` GPUs per app, and be deterministic given ctx.rng."""

    name: str = "policy"

    @abstractmethod
    def allocate(self, ctx: RoundContext) -> Allocation: ...

    def observe_finish(self, app: AppState, now: float) -> None:  # noqa: B027
        """Hook: an app finished (history-based policies, e.g. 2D-Gittins)."""


def topology_order(free: Sequence[Gpu], topo: Topology) -> list[Gpu]:
    return sorted(free, key=lambda g: topo.index(g.id))


def check_allocation(ctx: RoundContext, alloc: Mapping[str, Sequence[str]]) -> None:
    """Raise ValueError when an allocation breaks the policy contract."""
    free = {g.id for g in ctx.free}
    rooms = {a.spec.id: a.room() for a in ctx.apps}
    seen: set[str] = set()
    for app, gs in alloc.items():
        if app not in rooms:
            raise ValueError(f"allocation to unknown or inactive app {app!r}")
        if len(gs) > rooms[app]:
            raise ValueError(f"app {app!r}: {len(gs)} GPUs exceed its room {rooms[app]}")
        for g in gs:
            if g not in free:
                raise ValueError(f"app {app!r}: GPU {g!r} is not free")
            if g in seen:
                raise ValueError(f"GPU {g!r} allocated twice")
            seen.add(g)
