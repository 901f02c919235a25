"""Lease margins: which leased GPUs a run may keep and which a new run may start on, one
rule for both launchers (docs/am.md, "Leases and margins").

GPUs come as leases that end (paper, section 4.1). A job cannot hand its GPUs back in an
instant: it checkpoints and exits; nor can it use them at once: it loads its framework and
its checkpoint. So the application master works with three margins:

* **stop lead** - a run is told to stop this long before its lease ends, so that its
  checkpoint is written and its GPUs are free when the lease ends: ``stop_lead_s``, or
  1.25x the longest of the last five measured stops (request -> run gone) when longer,
  at most a quarter of the lease;
* **start margin** - a new run starts only on a lease that lasts this much past the stop
  lead (``start_margin_s``, at most an eighth of the lease): one started closer to the end
  would be stopped before it trained;
* **grace** - a GPU whose lease ended, with no allocation received since, stays usable for
  ``grace_s``: the round at that expiry may renew the lease, and a renewed run need not
  restart.

A GPU is *usable* while its lease lasts past the stop lead or it is within its grace, and
*placeable* while its lease lasts past the stop lead plus the start margin. The values
are the launcher's: YARN's enforcer preempts containers when a lease ends, so the YARN
launcher stops runs before the end (a stop lead, no grace); local processes are not
preempted, so standalone keeps runs across the expiry round (a grace, no stop lead).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: stop-duration samples the stop lead is measured from
STOP_SAMPLES = 5
#: a run whose job's event files show its step target reached and that has not exited this
#: long after is stopped (SIGTERM, then the grace period): the step budget of programs that
#: do not read $THEMIS_MAX_STEPS, such as Keras' model.fit (docs/jobs.md)
PAST_TARGET_GRACE_S = 5.0
#: a run told to stop (SIGTERM: a lease end, a move, its step target) that still runs this
#: long after is killed (SIGKILL) by its launcher: the local launcher's default
#: (``themis standalone --shutdown-timeout-s``) and the YARN runner's (``--stop-grace``),
#: well inside the YARN launcher's ``stop_timeout_s`` (60 s, after which the AM releases
#: the container), so that the runner still saves the checkpoints the job wrote before
STOP_GRACE_S = 30.0


@dataclass
class PastTarget:
    """When a run was first seen past its step target: :meth:`due` once it has stayed past
    it ``grace_s`` without exiting (the YARN runner and the local launcher stop it then)."""

    grace_s: float = PAST_TARGET_GRACE_S
    since: float | None = None

    def due(self, past: bool, now: float) -> bool:
        if not past:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.grace_s


@dataclass
class LeaseMargins:
    stop_lead_s: float = 0.0
    start_margin_s: float = 0.0
    grace_s: float = 0.0
    #: measured stops (seconds from the stop request to the run gone); the launcher's
    stop_durations: deque[float] = field(default_factory=lambda: deque(maxlen=STOP_SAMPLES))
    #: GPU id -> length of its current lease (seconds), from the allocations
    lease_len: dict[str, float] = field(default_factory=dict)
    #: clock of the last allocation received (grace ends at the next one)
    last_alloc: float = -math.inf

    def note_allocation(self, gpu_ids: Iterable[str], expiry: float, now: float) -> None:
        for g in gpu_ids:
            self.lease_len[g] = max(0.0, expiry - now)
        self.last_alloc = now

    def stop_lead(self, gpu: str = "") -> float:
        lead = max([self.stop_lead_s, *(1.25 * d for d in self.stop_durations)])
        length = self.lease_len.get(gpu)
        return min(lead, 0.25 * length) if length else lead

    def start_margin(self, gpu: str = "") -> float:
        length = self.lease_len.get(gpu)
        return min(self.start_margin_s, 0.125 * length) if length else self.start_margin_s

    def in_grace(self, expiry: float, now: float) -> bool:
        return expiry <= now < expiry + self.grace_s and self.last_alloc < expiry

    def usable(self, leases: Mapping[str, float], now: float) -> dict[str, float]:
        """Leased GPU id -> expiry, for the GPUs a run may keep now."""
        return {g: exp for g, exp in leases.items()
                if exp > now + self.stop_lead(g) or self.in_grace(exp, now)}

    def placeable(self, leases: Mapping[str, float], now: float) -> dict[str, float]:
        """The leases a *new* run may start on."""
        return {g: exp for g, exp in leases.items()
                if exp > now + self.stop_lead(g) + self.start_margin(g)}
