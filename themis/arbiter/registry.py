"""The arbiter's registry: which apps are registered, their secrets and event streams.

``RegisterApp`` admits an app: its registration token is checked by the core's registrar
(:mod:`themis.arbiter.registration`: who may register), at most ``max_registrations``
registrations of one app id are accepted per ``registration_window_s`` (the history of
recent registrations is pruned once it names more than 4 x ``MAX_APPS_HINT`` apps), at most
``max_apps`` apps are registered at once (docs/yarn.md, "Security"; docs/protocol.md,
"Limits"); the app gets a fresh secret that every later call carries (:meth:`_auth`). An
app's event stream (``Events``: Hello, then offers, allocations, lease warnings; one stream
per app) is opened and closed here; an app that reconnects during a round it was offered
gets the same offer again. ``Unregister`` and :meth:`Registry.expel` end a registration and
the app's leases; a new, reconnected or departing app asks for a round.

The paper (section 4) has each app's agent talk to the arbiter and leaves admission out:
registration, secrets and their bounds are this implementation's.
"""

from __future__ import annotations

import hmac
import logging
import queue
import secrets
from typing import TYPE_CHECKING

from themis.arbiter.base import AppRecord, CoreBase
from themis.arbiter.config import MAX_APP_ID, MAX_APPS_HINT, MAX_SECRET
from themis.arbiter.errors import CallError, Code
from themis.arbiter.intake import check_rho
from themis.mechanism.round import LeaseGrant
from themis.rpc.convert import lease_to_pb, shape_to_pb
from themis.rpc.offers import PROTOCOL_VERSION, mismatch_message, version_of
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.safeinput import short

if TYPE_CHECKING:
    from themis.arbiter.registration import Registrar

# log lines of every part of the core carry one name, the core's
log = logging.getLogger("themis.arbiter.state")


class Registry(CoreBase):
    """The registry part of :class:`~themis.arbiter.state.ArbiterCore` (module doc)."""

    def _init_registry(self, registrar: Registrar | None) -> None:
        self.registrar = registrar
        self._streams = 0
        self._registered: dict[str, list[float]] = {}  # app -> clock() of recent registrations

    # ----------------------------------------------------------------- helpers
    def _auth(self, app_id: str, secret: str) -> AppRecord:
        if not app_id:
            raise CallError(Code.PERMISSION_DENIED, "missing credentials: app_id is empty")
        if len(app_id) > MAX_APP_ID:
            raise CallError(Code.NOT_FOUND, f"app {short(app_id)} is not registered (app ids "
                                            f"have at most {MAX_APP_ID} characters)")
        rec = self._apps.get(app_id)
        if rec is None:
            raise CallError(Code.NOT_FOUND, f"app {app_id!r} is not registered")
        if not secret:
            raise CallError(Code.PERMISSION_DENIED, f"app {app_id!r}: missing secret")
        if len(secret) > MAX_SECRET or not hmac.compare_digest(rec.secret.encode(),
                                                                secret.encode()):
            raise CallError(Code.PERMISSION_DENIED, f"app {app_id!r}: wrong secret")
        return rec

    def _leases_pb(self, app_id: str) -> list[pb.Lease]:
        groups: dict[tuple[float, float, str], list[str]] = {}
        for lease in self._leases.held_by(app_id):
            groups.setdefault((lease.start, lease.expiry, lease.via), []).append(lease.gpu_id)
        return [
            lease_to_pb(LeaseGrant(app_id, tuple(sorted(g)), s, e, v))
            for (s, e, v), g in sorted(groups.items())
        ]

    # ----------------------------------------------------------------- calls
    def register(self, app_id: str, rho: float, max_gpus: int,
                 token: str = "", protocol_version: int = PROTOCOL_VERSION
                 ) -> pb.RegisterAppResponse:
        """Register ``app_id``; ``token`` proves the caller is its application master when the
        core has a :attr:`registrar`; ``protocol_version``: the agent's (the request's field,
        0 = version 1), refused with FAILED_PRECONDITION unless it is this arbiter's."""
        if version_of(protocol_version) != PROTOCOL_VERSION:
            raise CallError(Code.FAILED_PRECONDITION,
                            mismatch_message(short(app_id), protocol_version, PROTOCOL_VERSION))
        if not app_id or len(app_id) > MAX_APP_ID or not app_id.isprintable():
            raise CallError(Code.INVALID_ARGUMENT,
                            f"app_id {short(app_id)} must be 1-{MAX_APP_ID} printable "
                            "characters")
        check_rho(rho, f"app {app_id!r}")
        if max_gpus < 1:
            raise CallError(Code.INVALID_ARGUMENT,
                            f"app {app_id!r}: max_gpus={max_gpus} must be >= 1")
        if self.registrar is not None:  # not under the lock: may ask the RM
            self.registrar.check(app_id, token)
        with self._cond:
            if app_id in self._apps:
                raise CallError(Code.ALREADY_EXISTS, f"app {app_id!r} is already registered")
            if len(self._apps) >= self.config.max_apps:
                raise CallError(Code.RESOURCE_EXHAUSTED,
                                f"app {app_id!r}: the arbiter has {len(self._apps)} registered "
                                f"apps (at most {self.config.max_apps}, max_apps); try again "
                                "when an app ends")
            now = self.clock()
            window = self.config.registration_window_s
            recent = [t for t in self._registered.get(app_id, []) if t > now - window]
            if len(recent) >= self.config.max_registrations:
                raise CallError(Code.RESOURCE_EXHAUSTED,
                                f"app {app_id!r}: {len(recent)} registrations in the last "
                                f"{window:g} s (at most {self.config.max_registrations}); "
                                "try again later")
            self._registered[app_id] = [*recent, now]
            if len(self._registered) > 4 * MAX_APPS_HINT:  # forget apps registered long ago
                self._registered = {a: t for a, t in self._registered.items()
                                    if t[-1] > now - window}
            secret = secrets.token_urlsafe(24)
            self._apps[app_id] = AppRecord(app_id, secret, rho, max_gpus,
                                           served=bool(self._leases.held_by(app_id)))
            self._kick()
            return pb.RegisterAppResponse(
                secret=secret,
                arbiter_epoch=self.epoch,
                lease_seconds=self.config.lease_s,
                bid_timeout_seconds=self.config.bid_timeout_s,
                cluster_gpus=self.backend.cluster_gpus(),
                ideal_time=self.config.ideal_time,
                starvation=self.config.starvation,
                cluster_shape=shape_to_pb(self.backend.shape()),
                protocol_version=PROTOCOL_VERSION,
            )

    def open_stream(
        self, app_id: str, secret: str,
        events: queue.SimpleQueue[pb.Event | None] | None = None,
    ) -> tuple[int, queue.SimpleQueue[pb.Event | None]]:
        """Open the app's event stream (closing a previous one: one stream per app); the
        first event is Hello. ``events``: the queue to use (the gRPC layer's, which wakes its
        event loop), else a new one."""
        with self._cond:
            rec = self._auth(app_id, secret)
            if self._stopped:
                raise CallError(Code.FAILED_PRECONDITION, "arbiter is shutting down")
            if rec.events is not None:
                rec.events.put(None)
            self._streams += 1
            rec.stream = self._streams
            rec.node_table = ""  # a new stream gets the node table with its next offer
            rec.events = events if events is not None else queue.SimpleQueue()
            rec.events.put(pb.Event(hello=pb.Hello(
                arbiter_epoch=self.epoch, leases=self._leases_pb(app_id))))
            if self._open is not None and app_id in self._open.bidders and not self._open.closed \
                    and app_id not in self._open.tables:
                # Reconnected during a round it was offered: re-send the same offer.
                rec.events.put(self._offer_event(app_id, self._open))
            self._kick()
            return rec.stream, rec.events

    def close_stream(self, app_id: str, generation: int) -> None:
        with self._cond:
            rec = self._apps.get(app_id)
            if rec is not None and rec.stream == generation:
                rec.stream = 0
                rec.events = None
                self._cond.notify_all()  # a round waiting for this app's bid stops waiting

    def unregister(self, app_id: str, secret: str) -> None:
        with self._cond:
            self._auth(app_id, secret)
            self._drop(app_id)

    def expel(self, app_id: str) -> bool:
        """End ``app_id``'s registration without its secret (its YARN application or AM
        attempt ended; docs/yarn.md, "Security"): as :meth:`unregister`. False if it was not
        registered."""
        with self._cond:
            if app_id not in self._apps:
                return False
            self._drop(app_id)
        log.info("%s: registration ended (the application or its AM attempt ended)", app_id)
        return True

    def _drop(self, app_id: str) -> None:
        """Forget a registered app: its leases end, its stream closes (caller holds the lock)."""
        rec = self._apps[app_id]
        held = self._held_ids(app_id)
        self._leases.remove(held)
        self.backend.revoke(app_id, held)
        self._log_release(held)
        if rec.events is not None:
            rec.events.put(None)
        del self._apps[app_id]
        self._last_bids.pop(app_id, None)
        if self._open is not None:
            self._open.tables.pop(app_id, None)
        self._kick()
