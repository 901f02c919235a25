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
   :func:`themis.arbiter.round.run_round` and waits for their bids until the deadline;
4. :meth:`announce` sends every registered participant its allocation event (leases on
   ``<node_id>/<k>`` ids), so the AM knows on which nodes to ask for containers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

from themis.agent.bids import BidTable
from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.round import LeaseGrant, RoundOutcome
from themis.arbiter.service import ArbiterServer
from themis.arbiter.state import ArbiterConfig, ArbiterCore
from themis.cluster.topology import Gpu, Topology


class OfferView(ClusterBackend):
    """The GPUs of the round in progress. Leases live in the RM, so apply/revoke are no-ops."""

    def __init__(self) -> None:
        self._topo = Topology([])
        self._lock = threading.Lock()

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


class AgentEndpoint:
    """gRPC service for AMs + bid source for the RM's rounds."""

    def __init__(self, config: ArbiterConfig | None = None, default_rho: float = 1.0) -> None:
        self.view = OfferView()
        self.server = ArbiterServer(self.view, config)
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

    def collect(self, bidders: Sequence[str], offer: Sequence[Gpu]) -> Mapping[str, BidTable]:
        self.view.set_offer(offer)
        rid, tables = self.server.core.collect_external(offer, bidders)
        self._round_id = rid
        return tables

    def announce(self, offer: Sequence[Gpu], outcome: RoundOutcome) -> None:
        self.view.set_offer(offer)
        # A round whose bidders were all agent-less never opened a gRPC round: the id of
        # the last opened round is still the right one to report (it is only informative).
        self.server.core.announce_external(self._round_id, outcome)
