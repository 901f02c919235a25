"""Where the engine gets each app's current rho and bid table.

In the RM, :class:`themis.yarn.agents.AgentEndpoint` (the gRPC arbiter service that AMs
reach on ``yarn.resourcemanager.themis.agent-port``) is the source. :class:`ReportedBids`
serves the last rho and bid table each app reported out of band (cached tables, as the
paper's truthfulness proof assumes; used by tests and the engine without agents,
``agent-port`` -1); apps that never reported get ``default_rho`` and take part as
non-bidders. A cached table counts only for the GPUs of the offer it names, and offers name
GPUs anew every round (:func:`themis.yarn.view.gpu_id`): a table serves the round whose
offer it was built from.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from themis.mechanism.bids import BidTable
from themis.mechanism.round import RoundOutcome
from themis.mechanism.topology import Gpu


class BidSource(Protocol):
    def rho(self, app_ids: Sequence[str]) -> Mapping[str, float]:
        """Current rho of each app (every id in ``app_ids`` must be present)."""
        ...

    def priority(self, app_ids: Sequence[str], cluster: Sequence[Gpu]
                 ) -> Mapping[str, float] | None:
        """The (1-f) filter's secondary key of the starving apps (``run_round``'s
        ``priority``), None unless starvation is served-now or ranked; ``cluster`` is
        every GPU of the cluster this round (for the shape announced to agents)."""
        ...

    def merged_keys(self, app_ids: Sequence[str]) -> Collection[str]:
        """The apps of ``app_ids`` whose keys rank them among all apps rather than above
        the apps holding GPUs (``run_round``'s ``merge``): under starvation = ranked, the
        apps granted GPUs before; none otherwise."""
        ...

    def unreachable(self, app_ids: Sequence[str]) -> Collection[str]:
        """The apps of ``app_ids`` whose agent registered but cannot hear this round's
        grants now (its stream is down): the round leaves them out, as GPUs granted to
        them would sit leased and idle until the lease ends. Apps without an agent are
        never among them."""
        ...

    def collect(self, bidders: Sequence[str], offer: Sequence[Gpu],
                held: Mapping[str, Sequence[Gpu]],
                previous: Mapping[str, Sequence[str]] | None = None,
                ) -> Mapping[str, BidTable]:
        """Bid tables of the bidders for this offer; missing apps count as non-bidders.
        ``held``: the GPUs each bidder holds (containers and live leases, from the RM's
        view), which its offer carries so that its bids and rho_current count them;
        ``previous``: per bidder, the offered GPU ids of its leases up for renewal in
        place, which its bids name first among equally placed bundles."""
        ...

    def announce(self, offer: Sequence[Gpu], outcome: RoundOutcome) -> None:
        """The round is decided (grants validated by the RM afterwards); tell the apps."""
        ...

    def rejected_bids(self) -> Mapping[str, int]:
        """Bids refused since the last call, by cause (counts restart at zero)."""
        ...


class ReportedBids:
    """Thread-safe store of the last rho / bid table reported per app."""

    def __init__(self, default_rho: float = 1.0) -> None:
        self._default_rho = default_rho
        self._rho: dict[str, float] = {}
        self._tables: dict[str, BidTable] = {}
        self._lock = threading.Lock()

    def report_rho(self, app_id: str, rho: float) -> None:
        with self._lock:
            self._rho[app_id] = rho

    def report_table(self, table: BidTable) -> None:
        with self._lock:
            self._tables[table.app_id] = table
            self._rho[table.app_id] = table.rho_current

    def forget(self, app_id: str) -> None:
        with self._lock:
            self._rho.pop(app_id, None)
            self._tables.pop(app_id, None)

    def announce(self, offer: Sequence[Gpu], outcome: RoundOutcome) -> None:
        return None  # nobody to tell: tables were reported out of band

    def rejected_bids(self) -> Mapping[str, int]:
        return {}  # tables are reported, not submitted: nothing is refused here

    def priority(self, app_ids: Sequence[str], cluster: Sequence[Gpu]
                 ) -> Mapping[str, float] | None:
        return None  # no filter keys are reported out of band: starvation = inf

    def merged_keys(self, app_ids: Sequence[str]) -> Collection[str]:
        return ()

    def unreachable(self, app_ids: Sequence[str]) -> Collection[str]:
        return ()  # reported out of band: no stream that could be down

    def rho(self, app_ids: Sequence[str]) -> Mapping[str, float]:
        with self._lock:
            return {a: self._rho.get(a, self._default_rho) for a in app_ids}

    def collect(self, bidders: Sequence[str], offer: Sequence[Gpu],
                held: Mapping[str, Sequence[Gpu]] | None = None,
                previous: Mapping[str, Sequence[str]] | None = None,
                ) -> Mapping[str, BidTable]:
        # reported tables were built by their apps, who knew what they held
        offered = {g.id for g in offer}
        out: dict[str, BidTable] = {}
        with self._lock:
            for a in bidders:
                t = self._tables.get(a)
                if t is None:
                    continue
                bids = tuple(b for b in t.bids if set(b.gpus) <= offered)
                if bids:
                    out[a] = BidTable(t.app_id, t.rho_current, bids)
        return out
