"""Splitting an app's GPUs among its jobs, keeping each job on as few machines as possible.

Two steps:

1. *How many* GPUs per job: jobs already running keep their GPU count (:func:`split`);
   of the other GPUs, with fewer GPUs than waiting jobs, the jobs with the most work left
   get one each (the others wait for a later lease); otherwise every job gets one and
   the rest go one at a time to the job with the most work left per GPU it already has,
   never beyond its maximum demand. GPUs no job can use stay unassigned.
2. *Which* GPUs: jobs in decreasing GPU count; a job that fits on one machine takes the
   machine with the fewest free GPUs that is still enough (best fit, leaving big holes
   for big jobs); otherwise it takes whole machines, largest first, from the tightest
   rack that can hold it, else from the whole set. Inside a machine GPUs are taken in
   slot order, so jobs also stay within slots where they can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from themis.mechanism.topology import Gpu


class PackingError(ValueError):
    """Invalid input to :func:`gpu_counts` or :func:`place` (names the job or the GPUs)."""


@dataclass(frozen=True, slots=True)
class JobNeed:
    job_id: str
    work_left: float  # serial GPU-seconds left (any consistent unit)
    max_demand: int


def gpu_counts(jobs: Sequence[JobNeed], num_gpus: int,
               have: Mapping[str, int] | None = None) -> dict[str, int]:
    """Step 1 of the module docstring: GPU count per job (jobs absent get none). ``have``:
    GPUs jobs run on now and keep (each at most its maximum demand; the caller's keeps fit
    in ``num_gpus``); the other GPUs are dealt by the same rule, a GPU each to the jobs
    without one first."""
    for j in jobs:
        if j.max_demand < 1:
            raise PackingError(f"job {j.job_id!r}: max_demand must be >= 1")
    order = sorted(jobs, key=lambda j: (-j.work_left, j.job_id))
    rank = {j.job_id: i for i, j in enumerate(order)}
    counts = {j.job_id: min(have[j.job_id], j.max_demand) for j in order
              if have and have.get(j.job_id, 0) > 0}
    spare = num_gpus - sum(counts.values())
    if spare < 0:
        raise PackingError(f"jobs keep {sum(counts.values())} GPUs, only {num_gpus} given")
    for j in order:
        if spare == 0:
            break
        if j.job_id not in counts:
            counts[j.job_id] = 1
            spare -= 1
    while spare > 0:
        open_jobs = [j for j in order if counts.get(j.job_id, 0) < j.max_demand]
        if not open_jobs:
            break
        best = max(open_jobs, key=lambda j: (j.work_left / counts[j.job_id], -rank[j.job_id]))
        counts[best.job_id] += 1
        spare -= 1
    return counts


def _take(free: dict[str, list[Gpu]], machine: str, n: int) -> list[Gpu]:
    taken, free[machine] = free[machine][:n], free[machine][n:]
    return taken


def place(counts: Mapping[str, int], gpus: Iterable[Gpu]) -> dict[str, list[str]]:
    """Step 2 of the module docstring: concrete GPU ids per job."""
    free: dict[str, list[Gpu]] = {}
    rack_of: dict[str, str] = {}
    for g in sorted(gpus, key=lambda g: (g.machine, g.slot, g.id)):
        free.setdefault(g.machine, []).append(g)
        rack_of[g.machine] = g.rack
    if sum(counts.values()) > sum(len(v) for v in free.values()):
        raise PackingError(f"{sum(counts.values())} GPUs asked, only "
                           f"{sum(len(v) for v in free.values())} given")
    out: dict[str, list[str]] = {}
    for job_id, need in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        fits = [m for m, fs in free.items() if len(fs) >= need]
        chosen: list[Gpu] = []
        if fits:
            m = min(fits, key=lambda m: (len(free[m]), m))
            chosen = _take(free, m, need)
        else:
            rack_free: dict[str, int] = {}
            for m, fs in free.items():
                rack_free[rack_of[m]] = rack_free.get(rack_of[m], 0) + len(fs)
            racks = [r for r, n in rack_free.items() if n >= need]
            rack = min(racks, key=lambda r: (rack_free[r], r)) if racks else None
            machines = [m for m in free if rack is None or rack_of[m] == rack]
            for m in sorted(machines, key=lambda m: (-len(free[m]), m)):
                chosen += _take(free, m, need - len(chosen))
                if len(chosen) == need:
                    break
        out[job_id] = [g.id for g in chosen]
    return out


def split(jobs: Sequence[JobNeed], gpus: Sequence[Gpu], current: Mapping[str, Sequence[str]],
          counts: Callable[[Sequence[JobNeed], int, Mapping[str, int]], dict[str, int]]
          = gpu_counts,
          max_jobs: int = 0) -> dict[str, tuple[str, ...]]:
    """The app's ``gpus`` split among its ``jobs`` (the app scheduler's split, section
    4.2.2), sticky: jobs running on GPUs of ``gpus`` (``current``: job id -> its GPUs)
    come first among the jobs that get GPUs (at most ``max_jobs`` of them, 0: no limit),
    then the others by most work left; :func:`gpu_counts` (or ``counts``) says how many
    GPUs each gets, running jobs keeping theirs; a running job whose count is unchanged
    keeps its GPUs, the others (new, grown or moved off lost GPUs) are placed by
    :func:`place` on what is left. Jobs without GPUs are left out."""
    avail = {g.id for g in gpus}

    def bound(j: JobNeed) -> bool:
        mine = current.get(j.job_id, ())
        return bool(mine) and set(mine) <= avail

    by_work = sorted(jobs, key=lambda j: (-j.work_left, j.job_id))
    order = sorted(by_work, key=lambda j: not bound(j))
    limit = min(len(avail), max_jobs or len(avail))
    n = counts(order[:limit], len(avail),
               {j.job_id: len(current[j.job_id]) for j in order[:limit] if bound(j)})
    out: dict[str, tuple[str, ...]] = {}
    for j in order[:limit]:
        mine = tuple(current.get(j.job_id, ()))
        if bound(j) and len(mine) == n.get(j.job_id, 0):
            out[j.job_id] = mine
            avail -= set(mine)
    rest = {k: c for k, c in n.items() if k not in out and c > 0}
    placed = place(rest, [g for g in gpus if g.id in avail])
    out.update({k: tuple(v) for k, v in placed.items() if v})
    return out
