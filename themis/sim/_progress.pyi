"""Types of the compiled per-instant pass (themis/sim/_progress.c)."""

from collections.abc import Iterable

from themis.sim.state import AppState

def advance(apps: Iterable[AppState], now: float) -> int: ...
