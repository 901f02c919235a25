"""The replay: the simulator (:class:`themis.sim.engine.Simulator`, docs/simulator.md) runs
the history's trace on the cluster's topology under the cluster's current policy and under
Themis, with the same leases, restart cost and seed. Nothing here simulates: this module
only configures the simulator, runs the replays (at once, in worker processes, when the
machine has the cores: they share nothing) and shows their progress."""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.topology import Topology
from themis.sim.engine import (
    SimConfig,
    SimResult,
    Simulator,
    advance_bar,
    progress_bar,
    run_with_progress,
)
from themis.sim.policies import make_policy
from themis.sim.workload import Workload

#: the Themis policy of the replay: Themis as deployed (docs/simulator.md, "Three Themis
#: policies"), its default solver
THEMIS = "themis"

#: the simulator's expiry quantum (seconds), the replay's default
DEFAULT_QUANTUM_S = SimConfig().expiry_quantum_s

#: how often a worker process reports its progress, at most (seconds)
REPORT_S = 0.5


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    fairness_knob: float = DEFAULT_FAIRNESS_KNOB
    lease_minutes: float = 10.0
    restart_seconds: float = 35.0
    seed: int = 0
    # leases end at multiples of this (the simulator's expiry quantum, docs/simulator.md).
    # Not a preview option: a coarser quantum was measured to change Themis' results far
    # more than it saves time (docs/preview.md, "How fast"); bench_preview.py sets it
    expiry_quantum_seconds: float = DEFAULT_QUANTUM_S

    def sim_config(self) -> SimConfig:
        return SimConfig(lease_s=self.lease_minutes * 60, restart_s=self.restart_seconds,
                         seed=self.seed, check_invariants=False,
                         expiry_quantum_s=self.expiry_quantum_seconds)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _label(policy: str) -> str:
    return f"replay {policy:>9}"


def _simulator(policy: str, topology: Topology, workload: Workload,
               config: ReplayConfig) -> Simulator:
    return Simulator(topology, workload, make_policy(policy, config.fairness_knob),
                     config.sim_config())


def replay(policy: str, topology: Topology, workload: Workload, config: ReplayConfig,
           progress: bool = True) -> SimResult:
    """One simulation of ``workload`` under ``policy`` (a registered simulator policy);
    ``progress``: a bar on stderr advancing with the GPU-hours of finished apps."""
    return run_with_progress(_simulator(policy, topology, workload, config),
                             _label(policy), progress)


def default_processes(replays: int) -> int:
    """Worker processes for ``replays`` replays: one each, at most one per CPU this
    process may use."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(replays, cpus or 1))


_reports: Any = None  # a worker's queue towards the parent's progress bars


def _init_worker(reports: Any) -> None:
    global _reports
    _reports = reports


def _replay_in_worker(policy: str, topology: Topology, workload: Workload,
                      config: ReplayConfig, progress: bool) -> tuple[SimResult, float]:
    """A worker process's replay and its wall seconds; with ``progress`` it sends
    (policy, serial GPU-seconds done) to the parent every :data:`REPORT_S` at most."""
    t0 = time.perf_counter()
    sim = _simulator(policy, topology, workload, config)
    if not progress:
        return sim.run(), time.perf_counter() - t0
    last = [0.0]

    def tick(done_s: float) -> None:
        now = time.monotonic()
        if now - last[0] >= REPORT_S:
            last[0] = now
            _reports.put((policy, done_s))

    result = sim.run(tick)
    _reports.put((policy, sum(a.total_work for a in workload.apps)))
    return result, time.perf_counter() - t0


def replay_all(policies: Sequence[str], topology: Topology, workload: Workload,
               config: ReplayConfig, progress: bool = True,
               processes: int | None = None) -> tuple[dict[str, SimResult], dict[str, float]]:
    """The replay under each of ``policies`` (in order, duplicates once) and each one's
    wall seconds. With ``processes`` > 1 (default :func:`default_processes`) they run at
    once in that many worker processes, one bar each on stderr: each replay is the same
    deterministic simulation (its own seeded RNG, nothing shared), so the results are
    those of a run one after the other."""
    names = list(dict.fromkeys(policies))
    n = default_processes(len(names)) if processes is None else max(1, processes)
    results: dict[str, SimResult] = {}
    wall: dict[str, float] = {}
    if n == 1 or len(names) == 1:
        for p in names:
            t0 = time.perf_counter()
            results[p] = replay(p, topology, workload, config, progress)
            wall[p] = time.perf_counter() - t0
        return results, wall
    # spawn: a worker starts from a clean interpreter (no threads or locks inherited)
    ctx = multiprocessing.get_context("spawn")
    reports = ctx.Queue()
    bars = {p: progress_bar(workload, _label(p), position=i)
            for i, p in enumerate(names)} if progress else {}
    try:
        with ProcessPoolExecutor(max_workers=min(n, len(names)), mp_context=ctx,
                                 initializer=_init_worker, initargs=(reports,)) as pool:
            futures: dict[str, Future[tuple[SimResult, float]]] = {
                p: pool.submit(_replay_in_worker, p, topology, workload, config, progress)
                for p in names}
            while True:
                done = all(f.done() for f in futures.values())
                try:  # drain what the workers said, then look again
                    while True:
                        p, done_s = reports.get(timeout=0.2 if not done else 0.05)
                        advance_bar(bars[p], done_s)
                except queue.Empty:
                    pass
                if done:
                    break
            for p, f in futures.items():
                results[p], wall[p] = f.result()
    finally:
        for bar in bars.values():
            bar.close()
        reports.close()
    return results, wall
