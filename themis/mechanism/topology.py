"""GPU topology: rack > machine > slot > GPU (paper section 6.1, footnote 6).

A :class:`Topology` is an immutable index over a set of GPUs. It answers the one
question the mechanism needs about placement: at which *locality level* does a set of
GPUs sit (all in one slot, one machine, one rack, or spread across racks)?
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum


class TopologyError(ValueError):
    """A GPU description is malformed or inconsistent (names the GPU and the problem)."""


class Locality(IntEnum):
    """How spread a set of GPUs is; larger is worse (more network between workers)."""

    SLOT = 0  # every GPU in one slot (e.g. an NVLink pair) - or a single GPU
    MACHINE = 1  # one machine, several slots
    RACK = 2  # several machines in one rack ("cross-machine" in the paper)
    CLUSTER = 3  # several racks ("cross-rack")


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU. ``slot`` is unique within its machine; it defaults to the GPU's own id."""

    id: str
    machine: str
    rack: str
    slot: str = ""

    def __post_init__(self) -> None:
        for name in ("id", "machine", "rack"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TopologyError(f"GPU {self.id!r}: field {name!r} must be a non-empty string")
        if not isinstance(self.slot, str):
            raise TopologyError(f"GPU {self.id!r}: field 'slot' must be a string")
        if not self.slot:
            object.__setattr__(self, "slot", self.id)

    @property
    def slot_key(self) -> tuple[str, str]:
        """Slots are named per machine, so the global slot key includes the machine."""
        return (self.machine, self.slot)


def locality_of(gpus: Iterable[Gpu]) -> Locality:
    """Locality level of a GPU set. The empty set and single GPUs are SLOT-local."""
    slots: set[tuple[str, str]] = set()
    machines: set[str] = set()
    racks: set[str] = set()
    for g in gpus:
        slots.add(g.slot_key)
        machines.add(g.machine)
        racks.add(g.rack)
    if len(racks) > 1:
        return Locality.CLUSTER
    if len(machines) > 1:
        return Locality.RACK
    if len(slots) > 1:
        return Locality.MACHINE
    return Locality.SLOT


class Topology(Mapping[str, Gpu]):
    """Immutable mapping GPU id -> :class:`Gpu`, with per-machine and per-rack indexes."""

    __slots__ = ("_by_id", "_by_machine", "_index", "_machine_rack")

    def __init__(self, gpus: Iterable[Gpu]) -> None:
        self._by_id: dict[str, Gpu] = {}
        self._by_machine: dict[str, list[Gpu]] = {}
        self._machine_rack: dict[str, str] = {}
        for g in gpus:
            if g.id in self._by_id:
                raise TopologyError(f"GPU {g.id!r}: duplicate GPU id")
            rack = self._machine_rack.setdefault(g.machine, g.rack)
            if rack != g.rack:
                raise TopologyError(
                    f"GPU {g.id!r}: machine {g.machine!r} is in rack {rack!r}, not {g.rack!r}"
                )
            self._by_id[g.id] = g
            self._by_machine.setdefault(g.machine, []).append(g)
        self._index = {gid: i for i, gid in enumerate(self._by_id)}

    def __getitem__(self, gpu_id: str) -> Gpu:
        return self._by_id[gpu_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def index(self, gpu_id: str) -> int:
        """Dense index of a GPU (stable: insertion order), used for bitsets."""
        return self._index[gpu_id]

    @property
    def indexes(self) -> Mapping[str, int]:
        """GPU id -> :meth:`index`, for sorting many GPUs at once (a key of
        ``indexes.__getitem__`` costs no Python call per GPU)."""
        return self._index

    @property
    def machines(self) -> Mapping[str, list[Gpu]]:
        return self._by_machine

    def rack_of(self, machine: str) -> str:
        return self._machine_rack[machine]

    def subset(self, gpu_ids: Iterable[str]) -> Topology:
        return Topology(self._by_id[g] for g in gpu_ids)

    def locality(self, gpu_ids: Iterable[str]) -> Locality:
        return locality_of(self._by_id[g] for g in gpu_ids)
