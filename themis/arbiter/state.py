"""The arbiter service's state machine, independent of gRPC (thread-safe): :class:`ArbiterCore`.

The core is composed of three parts over the state they share (:mod:`themis.arbiter.base`):

* :class:`~themis.arbiter.registry.Registry`: the registered apps (id, secret, event
  stream), registration limits, unregistering and expelling;
* :class:`~themis.arbiter.intake.BidIntake`: rho reports (the paper's visibility phase,
  section 4.2.2), offers out and bid tables in (section 3.3.1);
* :class:`~themis.arbiter.loop.RoundLoop`, built on the intake: the rounds (section 3.3.2),
  on a trigger (lease expiry, released GPUs, a new or reconnected app, an app leaving) or
  for work conservation (sections 3 and 4), and the leases they grant, with the lease log;
  or rounds run by someone else (the YARN ResourceManager: external rounds).

Its configuration is :class:`~themis.arbiter.config.ArbiterConfig`. Every public call
validates everything before it changes anything: a call that raises
:class:`~themis.arbiter.errors.CallError` leaves the state exactly as it was
(:meth:`ArbiterCore.snapshot`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.leaselog import LeaseLog
from themis.arbiter.loop import RoundLoop
from themis.arbiter.registry import Registry

if TYPE_CHECKING:
    from themis.arbiter.registration import Registrar


class ArbiterCore(Registry, RoundLoop):
    def __init__(
        self,
        backend: ClusterBackend,
        config: ArbiterConfig | None = None,
        clock: Callable[[], float] = time.time,
        lease_log: LeaseLog | None = None,
        registrar: Registrar | None = None,
    ) -> None:
        """``lease_log``: the persisted lease log (:mod:`themis.arbiter.leaselog`); the
        leases it holds that are alive now are restored here, before any call is served,
        and every later grant is written to it before its app is told.
        ``registrar``: who may register (themis.arbiter.registration); None accepts any
        caller (library use and tests; the YARN engine and standalone mode always set one)."""
        super().__init__(backend, config, clock)
        self._init_registry(registrar)
        self._init_intake()
        self._init_loop(lease_log)  # last: restores the lease log's leases

    # ----------------------------------------------------------------- introspection
    def snapshot(self) -> dict[str, Any]:
        """Everything a call may change (for tests: rejected calls leave it unchanged)."""
        with self._cond:
            r = self._open
            return {
                "apps": {a: (x.secret, x.rho, x.max_gpus, x.stream, x.key)
                         for a, x in sorted(self._apps.items())},
                "leases": self._leases.snapshot(),
                "owners": self.backend.owners(),
                "round_id": self._round_id,
                "open": None if r is None else (r.round_id, r.closed, sorted(r.bidders),
                                                 dict(sorted(r.raw.items()))),
                "trigger": (self._trigger, self._trigger_at),
                "registrations": {a: list(t) for a, t in sorted(self._registered.items())},
            }

    def wait_rounds(self, n: int, timeout: float) -> bool:
        """Block until at least ``n`` rounds have completed (tests, benchmarks)."""
        end = time.monotonic() + timeout
        with self._cond:
            while len(self.stats) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True
