"""The YARN AM without a Themis arbiter (themis/am/launchers/yarn/stock.py): YARN's own
scheduler gives the containers; one ask anywhere per waiting job, every allocated
container launched and kept to the job's step target, nothing moved, a finite final rho."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.unit.test_submarine_am import NODES, FakeShell, _run_am, _spec
from themis.am.launchers.yarn.stock import ANY_HOST, StockAppMaster, no_arbiter


class SchedulerShell(FakeShell):
    """A FakeShell whose "RM" places every ask anywhere, on the first node with room (as a
    FIFO scheduler would), and reports the cluster's nodes with their used GPUs."""

    def nodes(self) -> str:
        used: dict[str, int] = {}
        for c in self.containers.values():
            used[c["node"]] = used.get(c["node"], 0) + c["gpus"]
        return json.dumps([{"node": n, "host": n.split(":")[0], "rack": r, "gpus": g,
                            "used_gpus": used.get(n, 0)} for n, (r, g) in NODES.items()])

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int,
                priority: int) -> int:
        self.hosts.append(host)
        rid = self.next_id
        self.next_id += 1
        self.asks[rid] = (host, gpus)
        return rid

    def poll_events(self, timeout_ms: int) -> str:
        time.sleep(self.poll_sleep)
        for rid, (_, gpus) in list(self.asks.items()):
            for node, (_, total) in NODES.items():
                inuse = sum(c["gpus"] for c in self.containers.values() if c["node"] == node)
                if total - inuse >= gpus:
                    self._allocate(rid, node, gpus)
                    break
        self._run_containers()
        out, self.events = self.events, []
        return json.dumps(out)


def test_no_arbiter_values() -> None:
    assert no_arbiter("none") and no_arbiter(" None ")
    assert not no_arbiter("") and not no_arbiter("rm:8642")


def test_stock_am_runs_the_search_on_what_yarn_gives() -> None:
    shell = SchedulerShell(steps_per_poll=1, poll_sleep=0.02)
    shell.hosts = []
    am = StockAppMaster(_spec(), "application_1700000000000_0001", shell, arbiter="none",
                        hdfs=None, app_dir="/tmp/x", report_every_s=0.1)
    shell.am = am
    rc = _run_am(am, 60)
    snap: dict[str, Any] = am.snapshot()
    assert rc == 0 and am.state == "FINISHED", (am.state, am.message)
    assert shell.hosts and set(shell.hosts) == {ANY_HOST}  # asks anywhere only
    assert am.reallocations == []  # no lease ends: nothing moved
    assert snap["scheduler"] == "yarn (no Themis arbiter)"
    assert snap["gpu_seconds"] > 0
    rho = snap["rho"]
    assert rho is not None and 0 < rho < float("inf")  # the final rho, not inf
