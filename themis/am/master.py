"""The control loop of both application masters (docs/am.md, "The control loop").

:class:`AppMasterBase` is the one loop; the standalone AM
(:mod:`themis.am.launchers.local.appmaster`) and the YARN AM
(:mod:`themis.am.launchers.yarn.am`) subclass it with what differs between local processes
and YARN containers: how progress arrives, where a job is placed (GPU ids on this machine,
or a GPU count on a node YARN allocates), the lease margins' values and how the app's end is
published. Every tick (:meth:`AppMasterBase.tick`):

1. the launcher's events (runs started, stopped, failed) go to the core's job policy
   (:meth:`~themis.am.core.AmCore.apply`), progress to Hyperband;
2. the agent's app model is refreshed, so rho and bids come from profiled iteration times
   (paper, section 4.2);
3. leased GPU-seconds are counted;
4. while the search runs: the app's current rho goes to the arbiter every ``report_s`` (the
   visibility phase, section 4.1), then the launcher places jobs on the GPUs the lease
   margins (:mod:`themis.am.margins`) call usable and placeable, in the core's job order
   (:meth:`~themis.am.core.AmCore.by_remaining_work`);
5. once the search is over and no run is live: the one finish path (:meth:`finish`);
6. the status snapshot is published.

The agent's allocations go to one allocation log (:attr:`AppMasterBase.rounds`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from themis.am.core import AmCore, Launcher, LiveBidder
from themis.am.hyperband import Hyperband, RungOutcome
from themis.am.margins import LeaseMargins
from themis.am.spec import AppSpec
from themis.mechanism.bidder import AllocationInfo
from themis.mechanism.model import AppModel
from themis.mechanism.placement import DEFAULT, PlacementProfile
from themis.mechanism.topology import Locality

log = logging.getLogger(__name__)

#: outcomes of :meth:`AppMasterBase.finish`: the search ended (done, failed), or the AM was
#: stopped before (killed; crashed: a YARN attempt that another attempt continues)
OUTCOMES = ("done", "failed", "killed", "crashed")


class AppMasterBase:
    """The app's :class:`AmCore`, its agent (a :class:`LiveBidder` on :meth:`model` and the
    bidder's AgentClient), the GPUs the agent holds and the control loop around them (see
    the module docstring). A subclass sets :attr:`launcher` and implements the hooks
    :meth:`collect_progress`, :meth:`place`, :meth:`wind_down`, :meth:`release_runs`,
    :meth:`on_finished` and :meth:`publish`."""

    agent: Any = None  # the AgentClient once started (tests put a fake here)
    bidder: LiveBidder | None = None
    launcher: Launcher
    start_time = 0.0  # the app model's start (unix time of submission)
    profile: PlacementProfile = DEFAULT  # the app model's placement slowdowns
    gpu_seconds = 0.0  # leased GPU-seconds (count_gpu_seconds)
    counted_at: float | None = None  # clock of the last count_gpu_seconds
    ended = False  # finish() ran
    outcome = ""  # one of OUTCOMES once ended
    end_time: float | None = None
    #: every job runs on exactly ``spec.job_gpus()`` GPUs (:class:`AmCore`'s ``whole_jobs``)
    whole_jobs = False

    def __init__(self, spec: AppSpec, app_id: str, clock: Callable[[], float],
                 default_iter_time: float = 1.0, *, margins: LeaseMargins | None = None,
                 report_s: float = 2.0) -> None:
        self.spec, self.app_id, self.clock = spec, app_id, clock
        self.core = AmCore(spec, app_id, clock=clock, default_iter_time=default_iter_time,
                           on_outcome=self._on_outcome, whole_jobs=self.whole_jobs)
        self.margins = margins or LeaseMargins()
        self.report_s = report_s
        #: the one allocation log: every allocation the agent received, in order
        self.rounds: list[dict[str, Any]] = []
        #: the rho last reported to the arbiter by :meth:`report_rho` (None after an
        #: allocation: the agent then reports the cached-table rho itself)
        self.rho_reported: float | None = None
        self._last_report = -math.inf
        self._reporter: threading.Thread | None = None

    def _on_outcome(self, outcome: RungOutcome) -> None:
        """A rung completed (the AM's log line)."""

    @property
    def hb(self) -> Hyperband:
        return self.core.hb

    def model(self) -> AppModel:
        return self.core.model(self.start_time, self.profile)

    # ------------------------------------------------------------------ the agent
    def start_agent(self, address: str, *, max_gpus: int | None = None,
                    cluster_gpus: int = 0, secret: str | None = None, **options: Any) -> None:
        """``options``: the AgentClient's other arguments; ``cluster_gpus`` and ``secret``:
        what a previous AM attempt knew (the secret keeps its registration). Allocations go
        to :meth:`record_allocation`, lease warnings to :meth:`on_lease_warning`."""
        from themis.agent.client import AgentClient  # (grpc: only once an agent runs)

        self.bidder = LiveBidder(self.model(), self.clock, max_gpus, gang=self.core.gang)
        if cluster_gpus:
            self.bidder.set_cluster_gpus(cluster_gpus)
        self.agent = AgentClient(address, self.app_id, self.bidder,
                                 on_allocation=self.record_allocation,
                                 on_lease_warning=self.on_lease_warning, **options)
        if secret:
            self.agent.secret = secret
        self.agent.start()

    def record_allocation(self, alloc: AllocationInfo) -> None:
        """The agent's allocation callback (its thread): the allocation log, the margins'
        lease lengths, then :meth:`on_allocation`."""
        now = self.clock()
        ids = [g.id for g in alloc.gpus]
        self.margins.note_allocation(ids, alloc.expiry, now)
        self.rho_reported = None
        self.rounds.append({"round": alloc.round_id, "time": now, "gpus": ids,
                            "vias": list(alloc.vias), "expiry": alloc.expiry,
                            "was_bidder": alloc.was_bidder,
                            "kept_fraction": alloc.kept_fraction})
        self.on_allocation(alloc)

    def on_allocation(self, alloc: AllocationInfo) -> None:
        """Hook: an allocation arrived (logged already)."""

    def on_lease_warning(self, gpu_ids: tuple[str, ...], expiry: float) -> None:
        """Hook: the arbiter warned that leases end at ``expiry``."""

    def held(self) -> list[str]:
        """The GPU ids of the app's unexpired leases."""
        return list(self.agent.held()) if self.agent is not None else []

    def leases(self) -> dict[str, float]:
        """GPU id -> expiry of every lease the agent knows (expired ones too)."""
        if self.agent is None:
            return {}
        with self.agent._lock:
            return dict(self.agent.leases)

    def held_locality(self, held: list[str]) -> Locality:
        """How the held GPUs are spread (rho's placement term); YARN knows nodes only."""
        return Locality.MACHINE

    def live_rho(self, held: list[str] | None = None) -> float | None:
        """The app's rho now (Eq. 1/2 of the current model with the GPUs held; None before
        the cluster size is known)."""
        ids = self.held() if held is None else held
        if self.bidder is None:
            return None
        return self.bidder.live_rho(len(ids), self.held_locality(ids))

    def report_rho(self, now: float) -> None:
        """Visibility phase (paper, section 4.1): every ``report_s`` tell the arbiter the
        app's current rho, so that the next round's filter sees progress and lost GPUs, not
        only the value cached at the last allocation. The call runs in a thread of its own
        (one at a time): an arbiter that is slow to answer never delays the loop's stops at
        lease ends."""
        agent = self.agent
        if agent is None or now - self._last_report < self.report_s:
            return
        connected = getattr(agent, "connected", None)
        if connected is not None and not connected.is_set():
            return  # the agent reconnects; its Hello carries the state again
        if self._reporter is not None and self._reporter.is_alive():
            return
        self._last_report = now
        value = self.live_rho()
        if value is None or value <= 0:
            return
        self._reporter = threading.Thread(target=self._send_rho, args=(agent, value),
                                          name=f"rho-{self.app_id}", daemon=True)
        self._reporter.start()

    def _send_rho(self, agent: Any, value: float) -> None:
        try:
            agent.report_rho(value)
            self.rho_reported = value
        except Exception as exc:  # gRPC: the arbiter is away; the next report retries
            log.info("%s: report rho failed: %s", self.app_id, exc)

    def count_gpu_seconds(self, now: float, held: int) -> float:
        """Count ``held`` GPUs since the last count (none at the first) in
        :attr:`gpu_seconds`; returns that time."""
        dt = 0.0 if self.counted_at is None else max(0.0, now - self.counted_at)
        self.counted_at, self.gpu_seconds = now, self.gpu_seconds + held * dt
        return dt

    # ------------------------------------------------------------------ the loop
    @property
    def search_over(self) -> bool:
        """Hyperband finished, or every trial failed past its restarts."""
        return self.core.done or self.core.failed

    def tick(self) -> None:
        """One pass of the control loop (module docstring)."""
        self.poll_launcher()
        self.collect_progress()
        if self.bidder is not None and not self.hb.done:
            self.bidder.app = self.model()
        now = self.clock()
        held = self.held()
        self.account(now, held, self.count_gpu_seconds(now, len(held)))
        if self.ended:
            self.publish(now)
            return
        for line in self.core.take_notes():
            self.note(line)
        if self.search_over:
            self.wind_down(now)
            if self.core.failed or not self.launcher.live():
                self.finish(now, "failed" if self.core.failed else "done")
        elif self.placing():
            self.report_rho(now)
            leases = self.leases()
            self.place(now, self.margins.usable(leases, now),
                       self.margins.placeable(leases, now))
        self.publish(now)

    def poll_launcher(self) -> None:
        """The launcher's events -> the core's job policy (:meth:`on_event` first)."""
        for ev in self.launcher.poll():
            self.on_event(ev)
            line = self.core.apply(ev)
            if line:
                self.note(line)

    def finish(self, now: float, outcome: str) -> None:
        """The one finish path: the launcher's runs given back, the agent stopped (it
        unregisters, releasing every lease, unless the attempt crashed: the next YARN
        attempt reuses its registration), then :meth:`on_finished`."""
        if self.ended:
            return
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} is not one of {OUTCOMES}")
        self.ended, self.outcome, self.end_time = True, outcome, now
        self.release_runs(outcome)
        if self.agent is not None:
            self.agent.stop(unregister=outcome != "crashed", timeout=3.0)
        self.on_finished(now, outcome)

    def summary(self) -> str:
        """The app's last line: the best trial, or that none finished."""
        return self.core.best_line() or f"best - {self.spec.objective.metric} nan"

    # ------------------------------------------------------------------ hooks
    def on_event(self, ev: Any) -> None:
        """Hook: a launcher event before the core's policy sees it."""

    def note(self, line: str) -> None:
        """Hook: a line for the app's log (the job policy's retries and give-ups)."""
        log.warning("%s: %s", self.app_id, line)

    def collect_progress(self) -> None:
        """Hook: progress not delivered by the launcher's events (standalone's profiler)."""

    def account(self, now: float, held: list[str], dt: float) -> None:
        """Hook: the held GPUs and the GPU-seconds of this tick (``dt`` seconds)."""

    def placing(self) -> bool:
        """Hook: whether the AM places jobs now (YARN: not while it shuts down)."""
        return True

    def place(self, now: float, usable: dict[str, float], placeable: dict[str, float]) -> None:
        """Hook: stop runs on GPUs no longer usable, start the core's runnable jobs on
        placeable ones (in :meth:`~themis.am.core.AmCore.by_remaining_work` order)."""
        raise NotImplementedError

    def wind_down(self, now: float) -> None:
        """Hook: the search is over; stop what must stop before :meth:`finish`."""

    def release_runs(self, outcome: str) -> None:
        """Hook: give back what the launcher still holds (finish path)."""

    def on_finished(self, now: float, outcome: str) -> None:
        """Hook: publish the app's end (finish path)."""

    def publish(self, now: float) -> None:
        """Hook: the status snapshot, after every tick."""
