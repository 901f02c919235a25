"""Choosing which free GPUs an app gets, for the greedy baselines.

* placement-aware (Gandiva, Optimus, SRTF): the best-placed k GPUs - on machines where the
  app already runs, else the tightest single machine that fits k (best fit), else the
  fullest machines of the fullest rack;
* placement-unaware (Tiresias, SLAQ, SRSF, Gavel-FTF, Hermes): the first k free GPUs in
  cluster order (first fit). First fit is not adversarial - consecutive GPUs share machines
  - but it never looks at the app's held GPUs or its sensitivity.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby, islice
from operator import attrgetter, lt

from themis.mechanism.topology import Gpu, Topology

_ID = attrgetter("id")
_MACHINE = attrgetter("machine")


class FreePool:
    """Mutable set of free GPUs indexed by machine and rack."""

    def __init__(self, free: Iterable[Gpu], topo: Topology) -> None:
        self.topo = topo
        self.by_machine: dict[str, list[Gpu]] = {}
        # Each machine's GPUs in topology order. Built every round from every free GPU,
        # so the sort and the grouping run at C level (a machine's GPUs need not be
        # consecutive in the topology: runs of one machine are joined).
        # (The simulator's free GPUs come in topology order already: kept as they are.)
        gpus = list(free)
        keys = list(map(topo.indexes.__getitem__, map(_ID, gpus)))
        if all(map(lt, keys, islice(keys, 1, None))):
            ordered = gpus
        else:
            ordered = list(map(gpus.__getitem__, sorted(range(len(gpus)), key=keys.__getitem__)))
        for m, run in groupby(ordered, key=_MACHINE):
            self.by_machine.setdefault(m, []).extend(run)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_machine.values())

    def _take(self, machine: str, k: int) -> list[Gpu]:
        gs = self.by_machine[machine]
        gs.sort(key=lambda g: (g.slot, g.id))
        # fill whole slots first
        slots: dict[str, list[Gpu]] = {}
        for g in gs:
            slots.setdefault(g.slot, []).append(g)
        order = [g for s in sorted(slots.values(), key=lambda s: -len(s)) for g in s]
        out = order[:k]
        rest = [g for g in gs if g not in out]
        if rest:
            self.by_machine[machine] = rest
        else:
            del self.by_machine[machine]
        return out

    def first_fit(self, k: int) -> list[Gpu]:
        out: list[Gpu] = []
        for m in sorted(self.by_machine, key=lambda m: self.topo.index(self.by_machine[m][0].id)):
            if len(out) >= k:
                break
            out.extend(self._take(m, k - len(out)))
        return out

    def best_placed(self, k: int, held: Iterable[Gpu] = ()) -> list[Gpu]:
        held = list(held)
        near = {g.machine for g in held}
        racks = {g.rack for g in held}
        out: list[Gpu] = []
        for m in sorted(m for m in self.by_machine if m in near):
            if len(out) < k:
                out.extend(self._take(m, k - len(out)))
        need = k - len(out)
        if need <= 0:
            return out
        fits = [m for m, gs in self.by_machine.items() if len(gs) >= need]
        if fits:
            m = min(
                fits, key=lambda m: (self.topo.rack_of(m) not in racks, len(self.by_machine[m]), m)
            )
            return out + self._take(m, need)
        rack_free: dict[str, int] = {}
        for m, gs in self.by_machine.items():
            rack_free[self.topo.rack_of(m)] = rack_free.get(self.topo.rack_of(m), 0) + len(gs)
        rack_order = sorted(rack_free, key=lambda r: (r not in racks, -rack_free[r], r))
        for r in rack_order:
            ms = sorted(
                (m for m in self.by_machine if self.topo.rack_of(m) == r),
                key=lambda m: (-len(self.by_machine[m]), m),
            )
            for m in ms:
                if len(out) >= k:
                    return out
                out.extend(self._take(m, k - len(out)))
        return out
