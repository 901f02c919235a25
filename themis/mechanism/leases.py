"""The arbiter's lease table: which app leases which GPU until when (not thread-safe: the
arbiter core guards it with its lock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from themis.mechanism.round import LeaseGrant


@dataclass(slots=True)
class Lease:
    app_id: str
    gpu_id: str
    start: float
    expiry: float
    via: str
    warned: bool = False


class LeaseTable:
    def __init__(self) -> None:
        self._by_gpu: dict[str, Lease] = {}

    def add(self, grant: LeaseGrant) -> None:
        for gid in grant.gpus:
            if gid in self._by_gpu:
                raise ValueError(f"GPU {gid!r} already leased to {self._by_gpu[gid].app_id!r}")
        for gid in grant.gpus:
            self._by_gpu[gid] = Lease(grant.app_id, gid, grant.start, grant.expiry, grant.via)

    def held_by(self, app_id: str) -> list[Lease]:
        return [lease for lease in self._by_gpu.values() if lease.app_id == app_id]

    def held_counts(self) -> Counter[str]:
        """App id -> GPUs it leases (one pass over the table)."""
        return Counter(lease.app_id for lease in self._by_gpu.values())

    def holder(self, gpu_id: str) -> str | None:
        lease = self._by_gpu.get(gpu_id)
        return lease.app_id if lease is not None else None

    def remove(self, gpu_ids: Iterable[str]) -> list[Lease]:
        return [self._by_gpu.pop(g) for g in list(gpu_ids) if g in self._by_gpu]

    def expired(self, now: float) -> list[Lease]:
        return [lease for lease in self._by_gpu.values() if lease.expiry <= now]

    def due_warnings(self, now: float, warning_s: float) -> list[Lease]:
        return [
            lease for lease in self._by_gpu.values()
            if not lease.warned and lease.expiry - warning_s <= now
        ]

    def next_event(self, warning_s: float) -> float | None:
        """Earliest time at which a warning or an expiry is due."""
        times = [lease.expiry if lease.warned else lease.expiry - warning_s
                 for lease in self._by_gpu.values()]
        return min(times, default=None)

    def snapshot(self) -> dict[str, tuple[str, float, float, str, bool]]:
        return {g: (x.app_id, x.start, x.expiry, x.via, x.warned)
                for g, x in sorted(self._by_gpu.items())}
