"""Kill/restart trials of a real arbiter process under live agents (shared by
``test_arbiter_restart.py`` and ``bench/bench_arbiter_restart.py``).

The arbiter runs as its own process (``python -m tests.integration.arbiter_restart
--serve ...``: the real :class:`ArbiterServer` over a static cluster, with the persisted
lease log of :mod:`themis.arbiter.leaselog` unless ``--no-log``); the agents are real
:class:`AgentClient` threads with the default :class:`ModelBidder` in the driver's process.
Each trial SIGKILLs the arbiter at a random moment and starts a new one on the same port;
the agents reconnect (NOT_FOUND -> re-register) on their own.

Checks, from what the agents were told (Allocation events, their receipt time and the
lease expiry; nobody releases GPUs here):

* **double grant**: GPU g granted to app B at time t while app A's lease on g, granted
  earlier, runs until e > t (a GPU that two apps believe they hold at once);
* **lease lost**: after a restart, once an agent has its Hello again, a GPU whose lease it
  was granted and whose expiry is still ``margin`` s away is missing from the agent's held
  leases (the new arbiter did not honour it).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Grant:
    app: str
    gpu: str
    received: float
    expiry: float


@dataclass
class Result:
    trials: int
    grants: int
    double_grants: list[tuple[Grant, Grant]] = field(default_factory=list)
    lost_leases: list[tuple[str, str, float]] = field(default_factory=list)  # app, gpu, left
    honoured: int = 0  # leases alive across a restart and found in the agent's Hello
    restart_s: list[float] = field(default_factory=list)  # kill -> all agents reconnected

    def summary(self) -> dict[str, Any]:
        rs = sorted(self.restart_s)
        return {"trials": self.trials, "grants": self.grants,
                "double_grants": len(self.double_grants), "lost_leases": len(self.lost_leases),
                "leases_honoured_across_restarts": self.honoured,
                "reconnect_median_s": round(rs[len(rs) // 2], 3) if rs else None,
                "reconnect_max_s": round(rs[-1], 3) if rs else None}


def serve(port: int, lease_log: str | None, lease_s: float, machines: int,
          per_machine: int) -> None:
    from themis.arbiter.cluster_backend import uniform_cluster
    from themis.arbiter.config import ArbiterConfig
    from themis.arbiter.leaselog import LeaseLog
    from themis.arbiter.service import ArbiterServer
    from themis.arbiter.state import ArbiterCore

    cluster = uniform_cluster(machines, per_machine)
    cfg = ArbiterConfig(lease_s=lease_s, bid_timeout_s=0.5, warning_s=lease_s / 4,
                        fairness_knob=0.8, heartbeat_s=1.0, round_delay_s=0.05,
                        solver="open-fast", seed=os.getpid())
    core = ArbiterCore(cluster, cfg,
                       lease_log=LeaseLog(Path(lease_log)) if lease_log else None)
    server = ArbiterServer(cluster, cfg, core=core, max_workers=128)
    server.start(port)
    print("ready", flush=True)
    threading.Event().wait()  # until killed (the server lives while ``server`` does)
    server.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(port: int, log_path: Path | None, lease_s: float, machines: int,
           per_machine: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tests.integration.arbiter_restart", "--serve",
           "--port", str(port), "--lease-s", str(lease_s), "--machines", str(machines),
           "--gpus-per-machine", str(per_machine)]
    if log_path is not None:
        cmd += ["--lease-log", str(log_path)]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        raise RuntimeError(f"arbiter process did not start (exit {p.wait()})")
    return p


def find_double_grants(grants: list[Grant]) -> list[tuple[Grant, Grant]]:
    """Pairs (earlier, later) of different apps' grants of one GPU where the later one was
    received before the earlier one's lease expired."""
    out = []
    by_gpu: dict[str, list[Grant]] = {}
    for g in grants:
        by_gpu.setdefault(g.gpu, []).append(g)
    for gs in by_gpu.values():
        gs.sort(key=lambda x: x.received)
        for i, later in enumerate(gs):
            for earlier in gs[:i]:
                if earlier.app != later.app and later.received < earlier.expiry:
                    out.append((earlier, later))
    return out


def run_trials(tmp: Path, trials: int, *, agents: int = 12, machines: int = 2,
               per_machine: int = 8, lease_s: float = 3.0, use_log: bool = True,
               seed: int = 0, margin: float = 0.3) -> Result:
    from themis.agent.client import AgentClient
    from themis.mechanism.bidder import AllocationInfo, ModelBidder
    from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job

    rng = random.Random(seed)
    port = _free_port()
    log_path = tmp / "arbiter-leases.jsonl" if use_log else None
    grants: list[Grant] = []
    lock = threading.Lock()

    def recorder(app: str) -> Any:
        def on_alloc(a: AllocationInfo) -> None:
            t = time.time()
            with lock:
                grants.extend(Grant(app, g.id, t, a.expiry) for g in a.gpus)
        return on_alloc

    proc = _start(port, log_path, lease_s, machines, per_machine)
    clients = []
    for k in range(agents):
        name = f"app-{k}"
        jobs = [Job(f"j{j}", 0.5 + 0.1 * ((k + j) % 5), 2000 + 100 * (k % 7), 2)
                for j in range(4)]
        model = AppModel(name, time.time() - 10 * (k % 11), jobs, [FuturePhase(2, 500)],
                         AppKind.SUCCESSIVE_HALVING)
        clients.append(AgentClient(f"127.0.0.1:{port}", name, ModelBidder(model, time.time),
                                   on_allocation=recorder(name), seed=k,
                                   backoff=(0.02, 0.2)).start())
    result = Result(trials, 0)
    try:
        time.sleep(lease_s)  # rounds under way
        for _ in range(trials):
            time.sleep(rng.uniform(0.1, lease_s * 0.6))
            killed = time.time()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            with lock:  # the leases alive at the kill, as the agents were told
                alive = {(g.app, g.gpu): g.expiry for g in grants if g.expiry > killed}
            for c in clients:
                c.connected.clear()
            proc = _start(port, log_path, lease_s, machines, per_machine)
            deadline = time.time() + 10
            for c in clients:
                c.connected.wait(max(0.0, deadline - time.time()))
            result.restart_s.append(time.time() - killed)
            now = time.time()
            for c in clients:
                held = set(c.held())
                for (app, gpu), expiry in alive.items():
                    if app != c.app_id or expiry - now < margin:
                        continue
                    if gpu in held:
                        result.honoured += 1
                    else:
                        result.lost_leases.append((app, gpu, expiry - now))
        time.sleep(lease_s)  # grants after the last restart
    finally:
        for c in clients:
            c.stop(unregister=False, timeout=1.0)
        proc.kill()
        proc.wait()
    with lock:
        result.grants = len(grants)
        result.double_grants = find_double_grants(grants)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--serve", action="store_true", help="run one arbiter process")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lease-log", default=None)
    ap.add_argument("--lease-s", type=float, default=3.0)
    ap.add_argument("--machines", type=int, default=2)
    ap.add_argument("--gpus-per-machine", type=int, default=8)
    args = ap.parse_args()
    if args.serve:
        serve(args.port, args.lease_log, args.lease_s, args.machines, args.gpus_per_machine)


if __name__ == "__main__":
    main()
