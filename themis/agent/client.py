"""The agent's gRPC client, embedded in the application master.

``AgentClient(address, app_id, bidder).start()`` registers (keeping the per-app secret),
opens the event stream and, on a background thread:

* answers each Offer before its deadline with ``bidder.bid(offer)`` (SubmitBid);
* on an Allocation records the new leases, asks ``bidder.on_allocation`` for an updated
  rho (the cached-table rule, see :mod:`themis.mechanism.bidder`) and reports it, then calls
  ``on_allocation``; on a LeaseWarning calls ``on_lease_warning``;
* refused for its protocol version (an arbiter of another version: FAILED_PRECONDITION, or
  a registration answered with another ``protocol_version``) logs one error naming both
  versions, keeps it in ``stats.last_error`` and ``refused``, and stops: retrying cannot
  help until one side is upgraded;
* on UNAVAILABLE (arbiter down) reconnects with exponential back-off (with jitter);
  on NOT_FOUND (the arbiter restarted and forgot the app) registers again, getting a new
  secret.

``address`` may list several candidates, comma-separated (with RM HA, one per RM id:
:mod:`themis.agent.endpoints`): when the current one is unreachable (UNAVAILABLE, or a
registration that times out) the client moves straight on to the next, and backs off only
after a whole cycle found none; the new endpoint does not know the app (NOT_FOUND), so the
client registers there again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

import grpc

from themis.agent.endpoints import parse_addresses
from themis.mechanism.bidder import AllocationInfo, Bidder, OfferInfo
from themis.mechanism.model import ModelError
from themis.mechanism.round import RENEWAL
from themis.mechanism.topology import Gpu
from themis.rpc import keepalive
from themis.rpc.convert import gpu_from_pb, shape_from_pb
from themis.rpc.offers import (
    MISMATCH,
    PROTOCOL_VERSION,
    OfferError,
    decode_offer,
    mismatch_message,
    table_to_pb,
    version_of,
)
from themis.rpc.v1 import arbiter_pb2 as pb
from themis.rpc.v1 import arbiter_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ClientStats:
    registrations: int = 0
    offers: int = 0
    bids_sent: int = 0
    bids_rejected: int = 0
    allocations: int = 0
    warnings: int = 0
    reconnects: int = 0
    endpoint_switches: int = 0
    offers_unreadable: int = 0  # offers not decoded (unknown node table): not bid on
    last_error: str = ""


class ProtocolRefused(Exception):
    """The arbiter speaks another protocol version (the message names both)."""


_HOST_PORT = re.compile(
    r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")


def check_address(address: str) -> str:
    """``address`` if it is ``host:port`` (a host name, an IPv4 address or a bracketed IPv6
    address, and a TCP port 1-65535); else ValueError naming it. Any host is accepted: the
    AM's agent reaches the RM host's agents' endpoint over the cluster's network."""
    m = _HOST_PORT.fullmatch(address)
    if m is None or not 0 < int(m["port"]) <= 65535:
        raise ValueError(f"arbiter address {address!r}: must be host:port (e.g. rm:8642, "
                         "10.0.0.5:8642 or [fd00::5]:8642)")
    return address


class AgentClient:
    def __init__(
        self,
        address: str,
        app_id: str,
        bidder: Bidder,
        *,
        on_allocation: Callable[[AllocationInfo], None] | None = None,
        on_lease_warning: Callable[[tuple[str, ...], float], None] | None = None,
        on_offer: Callable[[OfferInfo], None] | None = None,
        backoff: tuple[float, float] = (0.05, 2.0),
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        channel: grpc.Channel | None = None,
        registration_token: str | Callable[[], str] = "",
        tls: grpc.ChannelCredentials | None = None,
    ) -> None:
        """``registration_token``: proof that this is the app's AM (proto RegisterAppRequest),
        or a function returning the current one (asked at every registration: a YARN AM's
        AMRMToken rolls over). ``tls``: channel credentials (themis.rpc.tls) for an
        endpoint serving TLS; None = plaintext."""
        self.addresses = parse_addresses(address)
        if not self.addresses or any(c in address for c in "\n\r\t"):
            check_address(address)  # raises, naming it
        for a in self.addresses:
            check_address(a)
        self.address = self.addresses[0]  # the candidate in use
        self.app_id = app_id
        self.bidder = bidder
        self.on_allocation = on_allocation
        self.on_lease_warning = on_lease_warning
        self.on_offer = on_offer
        self.backoff = backoff
        self.clock = clock
        self.stats = ClientStats()
        self.secret: str | None = None
        self.epoch = ""
        self.leases: dict[str, float] = {}  # GPU id -> lease expiry (unix)
        self._gpus: dict[str, Any] = {}  # GPU id -> Gpu, for held GPUs
        self._node_tables: dict[str, pb.NodeTable] = {}  # version -> the arbiter's table
        self.refused = ""  # the protocol-version refusal, once refused (the client stopped)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._token = registration_token
        self._own_channel = channel is None
        self._tls = tls
        self._channel = channel or self._open(self.address)
        self._stub = pb_grpc.ArbiterStub(self._channel)  # type: ignore[no-untyped-call]
        self.connected = threading.Event()  # set once a Hello was received

    # ------------------------------------------------------------------ public API
    def start(self) -> AgentClient:
        self._thread = threading.Thread(target=self._run, name=f"agent-{self.app_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, *, unregister: bool = True, timeout: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        if self._thread is not None:
            self._thread.join(timeout)
        if unregister and self.secret is not None:
            try:
                self._stub.Unregister(pb.UnregisterRequest(credentials=self._creds()),
                                      timeout=timeout)
            except grpc.RpcError as exc:
                log.info("%s: unregister failed: %s", self.app_id, exc.details())
        if self._own_channel:
            self._channel.close()

    def report_rho(self, rho: float) -> None:
        """Report ``rho``; with rho = +inf, also the bidder's ``served-now`` filter key when
        the cluster uses it (:meth:`Bidder.starving_key`)."""
        key = self.bidder.starving_key() if math.isinf(rho) else None
        starving = None if key is None else pb.StarvingKey(served_now_rho=key[0],
                                                           ideal_seconds=key[1])
        self._stub.ReportRho(pb.ReportRhoRequest(credentials=self._creds(), rho=rho,
                                                 starving=starving), timeout=5.0)

    def release(self, gpu_ids: list[str]) -> None:
        self._stub.ReleaseGpus(pb.ReleaseGpusRequest(credentials=self._creds(),
                                                     gpu_ids=gpu_ids), timeout=5.0)
        with self._lock:
            for g in gpu_ids:
                self.leases.pop(g, None)

    def held(self) -> list[str]:
        """GPU ids whose lease has not expired."""
        now = self.clock()
        with self._lock:
            return sorted(g for g, exp in self.leases.items() if exp > now)

    # ------------------------------------------------------------------ internals
    def _open(self, address: str) -> grpc.Channel:
        options = [
            ("grpc.initial_reconnect_backoff_ms", 50),
            ("grpc.min_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # an endpoint whose host vanished (RM host down, failover) ends the Events
            # stream with UNAVAILABLE within a ping and its timeout, not TCP's minutes
            *keepalive.CLIENT_OPTIONS,
        ]
        if self._tls is not None:
            return grpc.secure_channel(address, self._tls, options=options)
        return grpc.insecure_channel(address, options=options)

    def _switch(self) -> bool:
        """Move to the next candidate address (own channel, several candidates only)."""
        if not self._own_channel or len(self.addresses) < 2:
            return False
        old = self._channel
        # not connected from here on: ``address`` must never name an endpoint the agent is
        # not registered at while ``connected`` is still set (seen by the AM in between)
        self.connected.clear()
        i = self.addresses.index(self.address)
        self.address = self.addresses[(i + 1) % len(self.addresses)]
        self._channel = self._open(self.address)
        self._stub = pb_grpc.ArbiterStub(self._channel)  # type: ignore[no-untyped-call]
        old.close()
        self.stats.endpoint_switches += 1
        return True

    def _creds(self) -> pb.Credentials:
        return pb.Credentials(app_id=self.app_id, secret=self.secret or "")

    def _register(self) -> None:
        token = self._token() if callable(self._token) else self._token
        resp = self._stub.RegisterApp(pb.RegisterAppRequest(
            app_id=self.app_id, rho=self.bidder.current_rho(),
            max_gpus=self.bidder.max_gpus(), registration_token=token,
            protocol_version=PROTOCOL_VERSION), timeout=5.0)
        if version_of(resp.protocol_version) != PROTOCOL_VERSION:  # an arbiter of another
            with contextlib.suppress(grpc.RpcError):  # version registered us: leave it
                self._stub.Unregister(pb.UnregisterRequest(credentials=pb.Credentials(
                    app_id=self.app_id, secret=resp.secret)), timeout=5.0)
            raise ProtocolRefused(mismatch_message(repr(self.app_id), PROTOCOL_VERSION,
                                                   resp.protocol_version))
        self.secret = resp.secret
        self.epoch = resp.arbiter_epoch
        self.bidder.set_cluster_gpus(resp.cluster_gpus)
        if resp.ideal_time:  # an older arbiter sends none: the agent's default stays
            self.bidder.set_ideal_time(resp.ideal_time)
        try:  # an older arbiter sends none ("inf"); an unknown option is not used
            self.bidder.set_starvation(resp.starvation or "inf",
                                       shape_from_pb(resp, "cluster_shape"))
        except ModelError as exc:
            log.warning("%s: %s; the filter key is not reported", self.app_id, exc)
            self.bidder.set_starvation("inf", None)
        # The leases known so far stay until the stream's Hello replaces them with the
        # arbiter's view (none from a restarted arbiter without a lease log; the RM's in
        # YARN): cleared here, an AM looking in between would stop jobs whose leases run on.
        self.stats.registrations += 1
        self._report_key()

    def _report_key(self) -> None:
        """Under ``ranked`` or ``served-now``, a starving app sends its filter key right after
        registering (the registration carries rho only)."""
        if not math.isinf(self.bidder.current_rho()) or self.bidder.starving_key() is None:
            return
        try:
            self.report_rho(self.bidder.current_rho())
        except grpc.RpcError as exc:
            log.info("%s: report rho failed: %s", self.app_id, exc.details())

    def _run(self) -> None:
        delay = self.backoff[0]
        unreachable = 0  # candidates found unreachable in a row
        while not self._stop.is_set():
            try:
                if self.secret is None:
                    self._register()
                self._stream = self._stub.Events(pb.EventsRequest(credentials=self._creds()))
                for event in cast(Iterator[pb.Event], self._stream):
                    delay = self.backoff[0]
                    unreachable = 0
                    self._handle(event)
            except ProtocolRefused as exc:
                self._refuse(str(exc))
                break
            except grpc.RpcError as exc:
                code = exc.code()
                if self._stop.is_set():
                    break
                self.stats.last_error = f"{code.name}: {exc.details()}"
                if code == grpc.StatusCode.FAILED_PRECONDITION and MISMATCH in (
                        exc.details() or ""):
                    self._refuse(exc.details() or "")
                    break
                if code == grpc.StatusCode.NOT_FOUND:
                    log.info("%s: arbiter does not know us (restart?); re-registering",
                             self.app_id)
                    self.secret = None
                    continue
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    unreachable += 1
                    was = self.address
                    if unreachable < len(self.addresses) and self._switch():
                        log.info("%s: %s at %s; trying %s (RM failover?)", self.app_id,
                                 self.stats.last_error, was, self.address)
                        continue  # the next RM's endpoint at once
                    unreachable = 0
                    self._switch()  # after the back-off, the cycle goes on from the next one
                # refused credentials (e.g. the registration token) are worth a warning
                log.log(logging.WARNING if code == grpc.StatusCode.PERMISSION_DENIED
                        else logging.INFO, "%s: %s; retrying in %.2fs", self.app_id,
                        self.stats.last_error, delay)
            finally:
                self._stream = None
                self.connected.clear()
            if self._stop.wait(delay * (0.5 + self._rng.random())):
                break
            delay = min(delay * 2, self.backoff[1])
            self.stats.reconnects += 1

    def _refuse(self, message: str) -> None:
        """Stop for good: the arbiter speaks another protocol version."""
        self.refused = message
        self.stats.last_error = f"FAILED_PRECONDITION: {message}"
        log.error("%s: %s; the agent stops", self.app_id, message)

    def _handle(self, event: pb.Event) -> None:
        kind = event.WhichOneof("kind")
        if kind == "hello":
            self.epoch = event.hello.arbiter_epoch
            with self._lock:
                self.leases = {g: lease.expiry_unix for lease in event.hello.leases
                               for g in lease.gpu_ids}
            self.connected.set()
        elif kind == "offer":
            self._on_offer(event.offer)
        elif kind == "allocation":
            self._on_allocation(event.allocation)
        elif kind == "lease_warning":
            self.stats.warnings += 1
            if self.on_lease_warning is not None:
                w = event.lease_warning
                self.on_lease_warning(tuple(w.gpu_ids), w.expiry_unix)

    def _on_offer(self, m: pb.Offer) -> None:
        self.stats.offers += 1
        if m.HasField("node_table"):
            if len(self._node_tables) >= 4:  # a cluster that changes: keep the latest few
                self._node_tables.pop(next(iter(self._node_tables)))
            self._node_tables[m.node_table.version] = m.node_table
        table_pb = self._node_tables.get(m.node_table_version)
        try:
            if table_pb is None:
                raise OfferError(f"node table {m.node_table_version!r} was never sent")
            got = decode_offer(table_pb, m.free, m.held,
                               m.previous if m.HasField("previous") else None)
        except OfferError as exc:
            self.stats.offers_unreadable += 1
            self.stats.last_error = f"offer of round {m.round_id}: {exc}"
            log.error("%s: %s; not bidding", self.app_id, self.stats.last_error)
            return
        offer = OfferInfo(
            round_id=m.round_id,
            gpus=got.gpus,
            held=got.held,
            deadline=m.deadline_unix,
            cluster_gpus=m.cluster_gpus,
            active_apps=m.active_apps,
            # an arbiter older than the field sends none: the epoch of its Hello
            epoch=m.arbiter_epoch or self.epoch,
            shape=shape_from_pb(m, "cluster_shape"),
            previous=got.previous,
        )
        if self.on_offer is not None:
            self.on_offer(offer)
        table = self.bidder.bid(offer)
        left = offer.deadline - self.clock()
        try:
            self._stub.SubmitBid(pb.SubmitBidRequest(
                credentials=self._creds(), round_id=offer.round_id,
                table=table_to_pb(table, got.position)), timeout=max(0.5, left + 0.5))
            self.stats.bids_sent += 1
        except grpc.RpcError as exc:
            self.stats.bids_rejected += 1
            self.stats.last_error = f"{exc.code().name}: {exc.details()}"
            log.warning("%s: bid for round %d rejected: %s", self.app_id, offer.round_id,
                        self.stats.last_error)

    def _machine(self, gpu_id: str) -> str:
        """The machine of a GPU the agent knows (YARN's ids ``<node>/...`` name it)."""
        g = self._gpus.get(gpu_id)
        return g.machine if g is not None else gpu_id.rpartition("/")[0]

    def _renewed(self, ids: Iterable[str], gpus: Iterable[Gpu], now: float) -> dict[str, str]:
        """A renewal (docs/yarn.md, "Renewal in place"): the lease's GPU ids -> the ids the
        app holds on the same machine, soonest-ending first, whose lease it renews; the app
        scheduler's runs there go on under the ids they know. Ids without one held (more
        won than held there) stay new (caller holds the lock)."""
        machine = {g.id: g.machine for g in gpus}
        free: dict[str, list[str]] = {}
        for gid, exp in sorted(self.leases.items(), key=lambda x: (x[1], x[0])):
            if exp > now:
                free.setdefault(self._machine(gid), []).append(gid)
        out: dict[str, str] = {}
        for gid in ids:
            mine = free.get(machine.get(gid) or gid.rpartition("/")[0], [])
            if mine:
                out[gid] = mine.pop(0)
        return out

    def _on_allocation(self, m: pb.Allocation) -> None:
        self.stats.allocations += 1
        gpus = tuple(gpu_from_pb(g) for g in m.gpus)
        with self._lock:
            now = self.clock()
            renamed: dict[str, str] = {}
            for lease in m.leases:
                if lease.via == RENEWAL:
                    renamed.update(self._renewed(lease.gpu_ids, gpus, now))
                for g in lease.gpu_ids:
                    self.leases[renamed.get(g, g)] = lease.expiry_unix
            gpus = tuple(replace(g, id=renamed[g.id]) if g.id in renamed else g for g in gpus)
            for g in gpus:
                self._gpus[g.id] = g
            held = tuple(self._gpus[g] for g, exp in sorted(self.leases.items())
                         if exp > now and g in self._gpus)
        alloc = AllocationInfo(
            round_id=m.round_id, gpus=gpus, vias=tuple(x.via for x in m.leases),
            expiry=max((x.expiry_unix for x in m.leases), default=0.0),
            was_bidder=m.was_bidder, kept_fraction=m.kept_fraction, held=held,
            bundle_rho=m.bundle_rho)
        if self.on_allocation is not None:  # the app scheduler first, then the rho report
            self.on_allocation(alloc)
        new_rho = self.bidder.on_allocation(alloc)
        if new_rho is not None:
            try:
                self.report_rho(new_rho)
            except grpc.RpcError as exc:
                log.info("%s: report rho failed: %s", self.app_id, exc.details())
