"""Placement slowdown S(G) (paper Eq. 1 and footnote 3).

S(G) >= 1 multiplies the iteration time of a job whose GPUs sit at a given locality
level. The paper starts from crude defaults - machine-local 1.0, cross-machine 1.1,
cross-rack 1.3 - and replaces them with profiled values (``themis.profiler``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from themis.mechanism.topology import Locality


@dataclass(frozen=True, slots=True)
class PlacementProfile:
    """Slowdown per locality level. Levels must be >= 1 and non-decreasing with spread."""

    slot: float = 1.0
    machine: float = 1.0
    rack: float = 1.1
    cluster: float = 1.3

    def __post_init__(self) -> None:
        values = (self.slot, self.machine, self.rack, self.cluster)
        for name, v in zip(("slot", "machine", "rack", "cluster"), values, strict=True):
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 1.0:
                raise ValueError(f"placement slowdown {name}={v!r}: must be a finite number >= 1")
        if any(a > b for a, b in itertools.pairwise(values)):
            raise ValueError(f"placement slowdowns must not decrease with spread: {values}")

    def slowdown(self, locality: Locality) -> float:
        return (self.slot, self.machine, self.rack, self.cluster)[int(locality)]

    def with_observed(self, observed: Mapping[Locality, float]) -> PlacementProfile:
        """Replace defaults by profiled values (kept monotone: a level is never better
        than a tighter one)."""
        vals = [self.slot, self.machine, self.rack, self.cluster]
        for loc, v in observed.items():
            vals[int(loc)] = max(1.0, float(v))
        for i in range(1, 4):
            vals[i] = max(vals[i], vals[i - 1])
        return PlacementProfile(*vals)

    @property
    def score_at(self) -> tuple[float, float, float, float]:
        """Placement score (<= 1) per level: 1/S (paper section 6.1, metric iii)."""
        return (1 / self.slot, 1 / self.machine, 1 / self.rack, 1 / self.cluster)


#: The paper's crude initial estimates (footnote 3).
DEFAULT = PlacementProfile()
#: Compute-intensive models (Inception-v3 in Table 1: 242 vs 243 images/s across servers).
COMPUTE_INTENSIVE = PlacementProfile(slot=1.0, machine=1.0, rack=1.0, cluster=1.05)
#: Network-intensive models (VGG16 in Table 1: 103.6 -> 80.4 images/s across 2 servers,
#: S = 103.6 / 80.4 = 1.289 cross-machine; cross-rack extrapolated).
NETWORK_INTENSIVE = PlacementProfile(slot=1.0, machine=1.05, rack=103.6 / 80.4, cluster=1.6)
