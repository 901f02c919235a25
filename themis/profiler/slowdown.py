"""Placement slowdown S per locality level, estimated from observed iteration times.

Model (paper Eq. 1): a job with serial iteration time ``t_serial`` on ``k`` GPUs at
locality level ``L`` iterates in ``t = t_serial * S(L) / k``. So ``t * k`` - the
iteration time *normalised per GPU count* - estimates ``t_serial * S(L)``.

Estimator, per job ``j`` (jobs differ in ``t_serial``, so ratios are taken within a job):

1. ``m[j, L]`` = median of ``t * k`` over the job's samples at level ``L`` (only levels
   with at least ``min_samples`` samples count);
2. ``b_j`` = the job's best (tightest) observed level; ``r[j, L] = m[j, L] / m[j, b_j]``;
3. levels are processed from tightest to widest: ``S(L) = median_j(S(b_j) * r[j, L])``
   over the jobs that observed ``L``, where ``S(b_j)`` is the estimate already made for
   the tighter level, or its default when that level itself is the anchor.

So with one job seen machine-local and cross-machine, S(cross-machine) is the ratio of
the two medians, exactly "median at that level / median at the best level". Levels no
job observed keep their defaults (1.0 slot and machine, 1.1 cross-machine, 1.3
cross-rack); the result is clamped to >= 1 and made non-decreasing with spread by
:meth:`themis.mechanism.placement.PlacementProfile.with_observed`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from themis.mechanism.placement import DEFAULT, PlacementProfile
from themis.mechanism.topology import Locality


@dataclass(frozen=True, slots=True)
class IterSample:
    """One timed training step: wall seconds on ``num_gpus`` GPUs at ``locality``."""

    step: int
    seconds: float
    num_gpus: int
    locality: Locality

    @property
    def normalised(self) -> float:
        """``seconds * num_gpus``: estimates serial iteration time * S(locality)."""
        return self.seconds * self.num_gpus


def level_medians(samples: Iterable[IterSample], min_samples: int = 5) -> dict[Locality, float]:
    """Median normalised iteration time per level with at least ``min_samples`` samples."""
    by_level: dict[Locality, list[float]] = {}
    for s in samples:
        by_level.setdefault(s.locality, []).append(s.normalised)
    return {
        level: statistics.median(values)
        for level, values in by_level.items()
        if len(values) >= min_samples
    }


def estimate_slowdowns(
    per_job: Mapping[str, Iterable[IterSample]],
    min_samples: int = 5,
    base: PlacementProfile = DEFAULT,
) -> dict[Locality, float]:
    """Observed S per level (see the module docstring); unobserved levels are absent."""
    medians = {j: level_medians(s, min_samples) for j, s in per_job.items()}
    medians = {j: m for j, m in medians.items() if m}
    estimates: dict[Locality, float] = {}
    for level in sorted(Locality):
        values = []
        for m in medians.values():
            if level not in m:
                continue
            best = min(m)
            anchor = estimates.get(best, base.slowdown(best)) if best != level else None
            if anchor is None:
                continue  # this job's tightest level: nothing to compare against
            values.append(anchor * m[level] / m[best])
        if values:
            estimates[level] = statistics.median(values)
    return estimates


def placement_profile(
    per_job: Mapping[str, Iterable[IterSample]],
    min_samples: int = 5,
    base: PlacementProfile = DEFAULT,
) -> PlacementProfile:
    """``base`` with the observed levels replaced (clamped >= 1, monotone)."""
    return base.with_observed(estimate_slowdowns(per_job, min_samples, base))
