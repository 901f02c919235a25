"""The state the parts of the arbiter core share, and the calls one part makes on another.

:class:`~themis.arbiter.state.ArbiterCore` is composed of three parts, each a mixin over
:class:`CoreBase`:

* the registry (:mod:`themis.arbiter.registry`): who is registered, with which secret, and
  the apps' event streams;
* the bid intake (:mod:`themis.arbiter.intake`): rho reports (the paper's visibility phase,
  section 4.2.2), offers out and bid tables in (the partial-allocation auction's input,
  section 3.3.1);
* the round loop (:mod:`themis.arbiter.loop`, built on the intake): when rounds run, what
  they grant and for how long (multi-round auctions with leases, section 3.3.2), the lease
  log.

This module holds what all of them read and write: the registered apps (:class:`AppRecord`),
the lease table, the open round (:class:`OpenRound`) and the round counter, all guarded by
one lock (``_cond``); a method whose docstring says "caller holds the lock" is only called
with it held. The few methods one part calls in another are declared here (abstract) and
defined in the part named in their docstrings.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from themis.arbiter.cluster_backend import ClusterBackend
from themis.arbiter.config import ArbiterConfig
from themis.mechanism.bids import BidTable
from themis.mechanism.leases import LeaseTable
from themis.mechanism.topology import Gpu
from themis.rpc.offers import NodeIndex
from themis.rpc.v1 import arbiter_pb2 as pb


@dataclass(slots=True)
class AppRecord:
    app_id: str
    secret: str
    rho: float
    max_gpus: int
    stream: int = 0  # generation of the open event stream, 0 = none
    # starvation = served-now: the reported key (served-now rho, T_id seconds, clock() of
    # the report), or None
    key: tuple[float, float, float] | None = None
    # granted GPUs since it registered (or holding a restored lease then): under
    # starvation = ranked its key ranks it among all apps once it starves again
    served: bool = False
    node_table: str = ""  # the NodeTable version sent on the open stream ("" = none)
    events: queue.SimpleQueue[pb.Event | None] | None = None


@dataclass(slots=True)
class OpenRound:
    round_id: int
    offer_ids: tuple[str, ...]
    bidders: frozenset[str]
    deadline: float
    tables: dict[str, BidTable] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)  # for idempotent re-submission
    closed: bool = False
    offer: pb.Offer | None = None  # the part of the offer that every bidder gets
    gpus: tuple[Gpu, ...] = ()  # the offered GPUs, in offer order
    nodes: NodeIndex | None = None  # the node table the offer refers to
    fill: dict[int, list[str]] = field(default_factory=dict)  # node -> ids in fill order
    #: the GPUs each bidder holds, when the lease owner is outside the core (the RM);
    #: None: the core's own lease table says
    held: Mapping[str, Sequence[Gpu]] | None = None
    #: per bidder, the offered GPU ids whose lease it held until this round (expired, or
    #: up for renewal in place): its offer names them (``Offer.previous``)
    previous: Mapping[str, Sequence[str]] = field(default_factory=dict)
    where: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> fill position


class CoreBase(ABC):
    def __init__(
        self,
        backend: ClusterBackend,
        config: ArbiterConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.config = config or ArbiterConfig()
        self.clock = clock
        self.epoch = uuid.uuid4().hex
        self._cond = threading.Condition()
        self._apps: dict[str, AppRecord] = {}
        self._leases = LeaseTable()
        self._round_id = 0
        self._open: OpenRound | None = None
        self._stopped = False

    # ----------------------------------------------------------------- helpers
    def _send(self, app_id: str, event: pb.Event) -> None:
        rec = self._apps.get(app_id)
        if rec is not None and rec.events is not None:
            rec.events.put(event)

    def _held_ids(self, app_id: str) -> list[str]:
        return sorted(lease.gpu_id for lease in self._leases.held_by(app_id))

    def _connected(self) -> list[str]:
        return sorted(a for a, rec in self._apps.items() if rec.events is not None)

    def _live(self, app_id: str) -> bool:
        rec = self._apps.get(app_id)
        return rec is not None and rec.events is not None

    # ----------------------------------------------------------------- across the parts
    @abstractmethod
    def _auth(self, app_id: str, secret: str) -> AppRecord:
        """The record of the registered app ``app_id`` if ``secret`` is its secret, else
        :class:`~themis.arbiter.errors.CallError` (caller holds the lock): the registry."""

    @abstractmethod
    def _offer_event(self, app_id: str, r: OpenRound) -> pb.Event:
        """The app's offer in the open round ``r`` (caller holds the lock): the bid
        intake."""

    _last_bids: dict[str, dict[int, float]]  # the bid intake's (caller holds the lock)

    @abstractmethod
    def _kick(self, delay: float | None = None) -> None:
        """Ask for a round (caller holds the lock): the round loop."""

    @abstractmethod
    def _log_release(self, gpu_ids: Sequence[str]) -> None:
        """Record released leases in the lease log (caller holds the lock): the round
        loop."""
