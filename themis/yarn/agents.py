"""The agents' endpoint inside the RM engine: the gRPC arbiter service in "external rounds"
mode, as the :class:`~themis.yarn.bids.BidSource` of :class:`~themis.yarn.rounds.RoundEngine`.

Application masters register over gRPC (proto/themis/v1/arbiter.proto) with their YARN
application id, report rho, and answer offers; the ResourceManager keeps the leases and
decides when a round runs (lease expiry, freed GPUs). Each round:

1. the RM's view gives the free GPUs (synthetic ids ``<node_id>/<k>``, see
   :mod:`themis.yarn.view`) and the apps with pending ``yarn.io/gpu`` asks;
2. :meth:`rho` returns each app's last reported rho (apps without an agent get
   ``default_rho`` and, having no bid table, take part as non-bidders: leftover only);
3. :meth:`collect` sends the offer to the (1-f) worst-off apps chosen by
   :func:`themis.mechanism.round.run_round` and waits for their bids until the deadline;
4. :meth:`announce` sends every registered participant its allocation event (leases on
   ``<node_id>/<k>`` ids), so the AM knows on which nodes to ask for containers.

Leases live in the RM, so what an AM says about them goes there (:class:`ExternalCore`
through a :class:`LeaseOwner`, in the engine the RM's gateway): a registration marks the app
as one whose AM speaks for its leases (the RM then keeps its lease when one of its
containers ends), ``ReleaseGpus`` ends leases on those GPUs now and ``UnregisterApp`` ends
all of the app's leases; the RM then runs a round for the freed GPUs.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Protocol

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.errors import CallError, Code
from themis.arbiter.registration import Registrar
from themis.arbiter.service import ArbiterServer
from themis.arbiter.state import ArbiterCore
from themis.mechanism.bids import BidTable
from themis.mechanism.fairness import ClusterShape
from themis.mechanism.round import LeaseGrant, RoundOutcome
from themis.mechanism.topology import Gpu, Topology
from themis.rpc.convert import lease_to_pb
from themis.rpc.offers import PROTOCOL_VERSION
from themis.rpc.tls import ServerTls
from themis.rpc.v1 import arbiter_pb2 as pb

log = logging.getLogger(__name__)


class OfferView(ClusterBackend):
    """The GPUs of the round in progress. Leases live in the RM, so apply/revoke are no-ops.
    R_C and the cluster's shape announced to agents are those of the whole cluster of the
    last round's view (:meth:`set_cluster`), the offer's until one was seen."""

    def __init__(self) -> None:
        self._topo = Topology([])
        self._cluster: tuple[int, ClusterShape] | None = None
        self._lock = threading.Lock()

    def set_cluster(self, gpus: Sequence[Gpu]) -> None:
        """Every GPU of the cluster (free or not), from the RM's view of a round."""
        if gpus:
            cluster = (len(gpus), ClusterShape.of(gpus))
            with self._lock:
                self._cluster = cluster

    def cluster_gpus(self) -> int:
        with self._lock:
            cluster = self._cluster
        return cluster[0] if cluster is not None else super().cluster_gpus()

    def shape(self) -> ClusterShape | None:
        with self._lock:
            cluster = self._cluster
        return cluster[1] if cluster is not None else super().shape()

    def set_offer(self, gpus: Iterable[Gpu]) -> None:
        topo = Topology(gpus)
        with self._lock:
            self._topo = topo

    def topology(self) -> Topology:
        with self._lock:
            return self._topo

    def free_gpus(self) -> list[Gpu]:
        return list(self.topology().values())

    def apply(self, grants: Sequence[LeaseGrant]) -> None:
        return None

    def revoke(self, app_id: str, gpu_ids: Iterable[str]) -> None:
        return None

    def owners(self) -> dict[str, str]:
        return {}


class LeaseOwner(Protocol):
    """The keeper of the leases (the RM): told what AMs say about theirs."""

    def joined(self, app_id: str) -> None:
        """The app's AM registered: it speaks for the app's leases from now on."""
        ...

    def left(self, app_id: str) -> None:
        """The app's AM unregistered: all the app's leases end now."""
        ...

    def release(self, app_id: str, gpu_ids: Sequence[str]) -> int:
        """End the app's leases on these GPUs now; the number ended. Raises
        :class:`~themis.arbiter.errors.CallError` naming the reason when refused."""
        ...

    def leases(self, app_id: str) -> list[tuple[str, int, float]]:
        """The app's live leases: (node id, GPUs, expiry in Unix seconds)."""
        ...


class ExternalCore(ArbiterCore):
    """The arbiter core for external rounds: registration, releases and departures are
    passed on to the lease owner (the core's own lease table stays empty). An agent's Hello
    carries the leases the owner holds for its app, so that an agent that connects again,
    or to a restarted engine, knows them (else its AM would stop its jobs as if their
    leases had ended); their GPU ids are ``<node_id>/h<k>``, one per leased GPU."""

    def __init__(self, backend: ClusterBackend, config: ArbiterConfig | None,
                 owner: LeaseOwner, registrar: Registrar | None = None) -> None:
        super().__init__(backend, config, registrar=registrar)
        self.owner = owner
        self._hello: dict[str, list[LeaseGrant]] = {}  # app -> its leases, for its Hello

    def open_stream(self, app_id: str, secret: str,
                    events: queue.SimpleQueue[pb.Event | None] | None = None,
                    ) -> tuple[int, queue.SimpleQueue[pb.Event | None]]:
        with self._cond:
            self._auth(app_id, secret)  # no call to the owner for an unknown caller
        now = self.clock()
        grants, seen = [], Counter[str]()
        # Not under the lock: a round trip to the RM
        for node, n, expiry in self.owner.leases(app_id):
            ids = tuple(f"{node}/h{seen[node] + k}" for k in range(max(0, n)))
            seen[node] += len(ids)
            if ids and expiry > now:
                grants.append(LeaseGrant(app_id, ids, now, expiry, "rm"))
        with self._cond:
            self._hello[app_id] = grants
        return super().open_stream(app_id, secret, events)

    def _leases_pb(self, app_id: str) -> list[pb.Lease]:
        return [lease_to_pb(g) for g in self._hello.pop(app_id, [])]

    def register(self, app_id: str, rho: float, max_gpus: int,
                 token: str = "", protocol_version: int = PROTOCOL_VERSION
                 ) -> pb.RegisterAppResponse:
        reply = super().register(app_id, rho, max_gpus, token, protocol_version)
        self.owner.joined(app_id)
        return reply

    def release(self, app_id: str, secret: str, gpu_ids: Sequence[str]) -> None:
        with self._cond:  # the base checks, without its own lease table
            self._auth(app_id, secret)
            if not gpu_ids:
                raise CallError(Code.INVALID_ARGUMENT, f"app {app_id!r}: no GPU to release")
            if len(set(gpu_ids)) != len(gpu_ids):
                raise CallError(Code.INVALID_ARGUMENT, f"app {app_id!r}: duplicate GPU ids")
        # Not under the lock: a round trip to the RM, which starts the round itself.
        n = self.owner.release(app_id, list(gpu_ids))
        log.info("%s released %d of %d GPU(s) %s", app_id, n, len(gpu_ids), list(gpu_ids))

    def unregister(self, app_id: str, secret: str) -> None:
        super().unregister(app_id, secret)
        self.owner.left(app_id)


class AgentEndpoint:
    """gRPC service for AMs + bid source for the RM's rounds. Without a lease owner, releases
    and departures change nothing outside the endpoint (tests). ``registrar``: who may
    register (the engine's checks the AM's AMRMToken with the RM; None: anyone, tests);
    ``tls``: serve TLS with this certificate (None: plaintext)."""

    def __init__(self, config: ArbiterConfig | None = None, default_rho: float = 1.0,
                 owner: LeaseOwner | None = None, *, registrar: Registrar | None = None,
                 tls: ServerTls | None = None) -> None:
        self.view = OfferView()
        core = (ExternalCore(self.view, config, owner, registrar) if owner is not None
                else ArbiterCore(self.view, config, registrar=registrar))
        self.server = ArbiterServer(self.view, config, core=core, tls=tls)
        self.default_rho = default_rho
        self._round_id = 0

    @property
    def core(self) -> ArbiterCore:
        return self.server.core

    def start(self, port: int, host: str = "127.0.0.1") -> str:
        """Listen (port 0 = ephemeral); returns ``host:port``."""
        self.server.start(port, host=host, own_rounds=False)
        return self.server.address

    def stop(self) -> None:
        self.server.stop()

    # ------------------------------------------------------------------ BidSource
    def rho(self, app_ids: Sequence[str]) -> Mapping[str, float]:
        return self.server.core.rho_of(app_ids, self.default_rho)

    def priority(self, app_ids: Sequence[str], cluster: Sequence[Gpu]
                 ) -> Mapping[str, float] | None:
        self.view.set_cluster(cluster)
        return self.server.core.priority_of(app_ids)

    def merged_keys(self, app_ids: Sequence[str]) -> Collection[str]:
        return self.server.core.merged_keys(app_ids)

    def unreachable(self, app_ids: Sequence[str]) -> Collection[str]:
        return self.server.core.unreachable(app_ids)

    def collect(self, bidders: Sequence[str], offer: Sequence[Gpu],
                held: Mapping[str, Sequence[Gpu]] | None = None,
                previous: Mapping[str, Sequence[str]] | None = None,
                ) -> Mapping[str, BidTable]:
        self.view.set_offer(offer)
        rid, tables = self.server.core.collect_external(offer, bidders,
                                                        held if held is not None else {},
                                                        previous)
        self._round_id = rid
        return tables

    def rejected_bids(self) -> Mapping[str, int]:
        return self.server.core.drain_rejected_bids()

    def announce(self, offer: Sequence[Gpu], outcome: RoundOutcome) -> None:
        self.view.set_offer(offer)
        # A round whose bidders were all agent-less never opened a gRPC round: the id of
        # the last opened round is still the right one to report (it is only informative).
        self.server.core.announce_external(self._round_id, outcome)
