"""A job container's watch for its host thawing after a freeze (docs/am.md, "Faults").

A host frozen (a paused VM, a cgroup freezer, a stalled kernel) for longer than YARN's
NodeManager liveness expiry is declared LOST; the RM completes its containers as aborted
and the AM runs their jobs elsewhere from their last checkpoint. When the host thaws, its
processes run again until its NodeManager hears from the RM that it must resync and kills
its containers: a heartbeat and the kill's delay, a second or more, during which the same
job would run on two hosts. Nothing can act on the host while it is frozen, but a thread
of the runner is the first to notice the thaw: it sleeps :data:`PERIOD_S` at a time, and
one that wakes ``late_s`` seconds after it should have was frozen (or not scheduled at all)
for that long. Past ``after_s`` the run may have been replaced, so the runner kills its
job at once (SIGKILL of its process group, no grace: the other run may be writing): the
thawed job runs again for at most about one period.

``after_s`` comes from the AM (:func:`fence_after`): below the liveness expiry by two
NodeManager heartbeats, so that every freeze long enough for YARN to declare the node lost
is caught, and shorter ones (a slow disk, a busy machine) are not. The standard library's
clocks cannot tell a frozen process from one that was not scheduled (CLOCK_MONOTONIC and
CLOCK_BOOTTIME both run through a cgroup freeze), so lateness is the only measure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: the watch's sleep between two looks at the clock (s): how long a thawed job can run
#: before its runner kills it
PERIOD_S = 0.1

#: YARN's defaults for the keys :func:`fence_after` reads (yarn-default.xml)
LIVENESS_EXPIRY_KEY = "yarn.nm.liveness-monitor.expiry-interval-ms"
HEARTBEAT_KEY = "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms"
DEFAULT_EXPIRY_MS = 600_000
DEFAULT_HEARTBEAT_MS = 1_000


def fence_after(conf: Callable[[str, str], str]) -> float:
    """Seconds a runner may be frozen before it takes its run for replaced: the
    cluster's NodeManager liveness expiry less two NodeManager heartbeats (a node's last
    heartbeat may have been up to one before the freeze), and at least half the expiry.
    A value the cluster's configuration gets wrong falls back to YARN's default, with a
    warning."""
    def ms(key: str, default: int) -> int:
        raw = str(conf(key, str(default)) or default).strip()
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value <= 0:
            log.warning("%s = %r is not a positive number of milliseconds: %d is used",
                        key, raw, default)
            return default
        return value

    expiry = ms(LIVENESS_EXPIRY_KEY, DEFAULT_EXPIRY_MS)
    heartbeat = ms(HEARTBEAT_KEY, DEFAULT_HEARTBEAT_MS)
    return max(expiry / 2, expiry - 2 * heartbeat) / 1000


class ThawWatch:
    """Calls ``on_thaw(late_s)`` once, from its own thread, when a sleep of ``period_s``
    ended at least ``after_s`` seconds late (``after_s`` <= 0: never)."""

    def __init__(self, after_s: float, on_thaw: Callable[[float], None], *,
                 period_s: float = PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.after_s = after_s
        self.on_thaw = on_thaw
        self.period_s = period_s
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    def late(self, slept_from: float, woke_at: float) -> float | None:
        """How late a sleep begun at ``slept_from`` ended at ``woke_at``, if it is a thaw."""
        late = woke_at - slept_from - self.period_s
        return late if self.after_s > 0 and late >= self.after_s else None

    def start(self) -> None:
        if self.after_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="thaw-watch",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.period_s + 1)

    def _watch(self) -> None:
        while True:
            t0 = self.clock()
            if self._stop.wait(self.period_s):
                return
            late = self.late(t0, self.clock())
            if late is not None:
                self.fired = True
                self.on_thaw(late)
                return
