"""The YARN AM on a cluster without a Themis arbiter (``THEMIS_ARBITER=none``): YARN's own
scheduler (e.g. the stock CapacityScheduler, FIFO within a queue) alone decides which job
containers the app gets, and when.

How a cluster says so: ``yarn.resourcemanager.themis.agent-address=none`` in the RM's
configuration; ``themis submit`` passes the agents' address to the AM as ``THEMIS_ARBITER``
(``none`` here), and :func:`themis.am.launchers.yarn.am.main` runs :class:`StockAppMaster`.

What changes against :class:`~themis.am.launchers.yarn.am.AppMaster`:

* no agent: no registration, no bids, no leases, no rho reports;
* every waiting job (in the core's job order, up to ``max_parallel_jobs``) keeps one
  container ask anywhere (host ``*``: ``relaxLocality=true``, no node or rack; the JVM
  shell's other asks are node-local), and YARN's scheduler picks node and time;
* every container YARN allocates is launched (no lease decides), and a job keeps its
  container until it reaches its step target (or Hyperband stops its trial): nothing is
  stopped at lease ends, so no job moves;
* the GPUs the app holds are those of its job containers (its status, its GPU-seconds and
  its rho); the live rho uses the cluster's GPU count and N_avg = 1 (no arbiter tells the
  number of competing apps).
"""

from __future__ import annotations

import logging
from typing import Any

from themis.am.core import LiveBidder
from themis.am.launchers.yarn.am import AppMaster
from themis.am.launchers.yarn.launcher import HOLDING
from themis.am.launchers.yarn.placement import stop_unrun
from themis.am.launchers.yarn.records import Run

log = logging.getLogger("themis.am.launchers.yarn.am")

#: the value of ``THEMIS_ARBITER`` (and of ``yarn.resourcemanager.themis.agent-address``)
#: that means: no arbiter, YARN's scheduler alone
NO_ARBITER = "none"
#: the host of an ask anywhere (org.themis.am.AmShell.ANY_HOST, YARN's ResourceRequest.ANY)
ANY_HOST = "*"


def no_arbiter(address: str) -> bool:
    """Whether ``address`` (``THEMIS_ARBITER``) says that the cluster runs no arbiter."""
    return address.strip().lower() == NO_ARBITER


class StockAppMaster(AppMaster):
    """The AM without an arbiter (module docstring)."""

    def start_agent(self, address: str, *, max_gpus: int | None = None,
                    cluster_gpus: int = 0, secret: str | None = None, **options: Any) -> None:
        """No agent: only the bidder's model, for the app's rho."""
        del address, secret, options
        self.bidder = LiveBidder(self.model(), self.clock, max_gpus, gang=self.core.gang)
        self.refresh_nodes(force=True)
        total = sum(int(n.get("gpus", 0) or 0) for n in self.cluster_nodes) or cluster_gpus
        if total:
            self.bidder.set_cluster_gpus(total)
        log.info("no Themis arbiter (THEMIS_ARBITER=%s): YARN's scheduler alone gives the "
                 "app its containers; %d GPUs in the cluster", NO_ARBITER, total)

    def _holding(self) -> list[Run]:
        return [r for r in self.runs if r.state in HOLDING and r.gpus > 0]

    def held(self) -> list[str]:
        """The GPUs of the app's job containers, as ``<node>/<run>.<k>``."""
        return [f"{r.node}/{r.run_id}.{k}" for r in self._holding() for k in range(r.gpus)]

    def _admit(self, run: Run) -> bool:
        """Every container YARN allocates is launched (unless its node cannot run the job's
        Docker image)."""
        if not self._docker_ready(run.node):
            log.error("releasing %s on %s unlaunched: %s", run.container, run.node,
                      self.docker_nodes[run.node])
            return False
        return True

    def place(self, now: float, usable: dict[str, float], placeable: dict[str, float]) -> None:
        """One ask anywhere per waiting job; no lease stops anything."""
        del now, usable, placeable
        g = self.spec.job_gpus()
        stop_unrun(self)  # runs of jobs Hyperband no longer runs
        busy = {r.job_id for r in self.runs if r.live or r.state == "stopping"}
        waiting = self.core.by_remaining_work(j for j in self.core.runnable()
                                              if j.id not in busy)
        cap = self.spec.max_parallel_jobs or 10**9
        active = len({r.job_id for r in self.runs if r.live})
        for job in waiting:
            if active >= cap:
                break
            self._request(job.id, ANY_HOST, g)
            active += 1

    def snapshot(self) -> dict[str, Any]:
        doc = super().snapshot()
        doc["scheduler"] = "yarn (no Themis arbiter)"
        return doc
