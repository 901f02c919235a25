"""N_avg: time-weighted average number of active apps over an app's life (Eq. 1)."""

from __future__ import annotations

from themis.mechanism.model import ModelError


class ContentionTracker:
    """Integrates N(t), the number of active apps, so that any app's N_avg since its
    arrival is one subtraction. Feed it every arrival/departure in time order."""

    __slots__ = ("_active", "_integral", "_last", "_marks")

    def __init__(self, start: float = 0.0) -> None:
        self._active = 0
        self._integral = 0.0
        self._last = start
        self._marks: dict[str, tuple[float, float]] = {}

    def _advance(self, now: float) -> None:
        if now < self._last:
            raise ModelError(f"contention tracker: time went backwards ({now} < {self._last})")
        self._integral += self._active * (now - self._last)
        self._last = now

    def arrive(self, app_id: str, now: float) -> None:
        if app_id in self._marks:
            raise ModelError(f"contention tracker: app {app_id!r} arrived twice")
        self._advance(now)
        self._active += 1
        self._marks[app_id] = (now, self._integral)

    def depart(self, app_id: str, now: float) -> None:
        if app_id not in self._marks:
            raise ModelError(f"contention tracker: unknown app {app_id!r}")
        self._advance(now)
        self._active -= 1
        del self._marks[app_id]

    @property
    def active(self) -> int:
        return self._active

    def n_avg(self, app_id: str, now: float) -> float:
        """N_avg of ``app_id`` at ``now`` (>= 1; the current count at the arrival instant)."""
        if app_id not in self._marks:
            raise ModelError(f"contention tracker: unknown app {app_id!r}")
        self._advance(now)
        t0, i0 = self._marks[app_id]
        if now <= t0:
            return float(max(1, self._active))
        return max(1.0, (self._integral - i0) / (now - t0))
