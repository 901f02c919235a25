"""The replay: the simulator (:class:`themis.sim.engine.Simulator`, docs/simulator.md) runs
the history's trace on the cluster's topology under the cluster's current policy and under
Themis, with the same leases, restart cost and seed. Nothing here simulates: this module
only configures the simulator and shows its progress."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.topology import Topology
from themis.sim.engine import SimConfig, SimResult, Simulator, run_with_progress
from themis.sim.policies import make_policy
from themis.sim.workload import Workload

#: the Themis policy of the replay: Themis as deployed (docs/simulator.md, "Three Themis
#: policies"), its default solver
THEMIS = "themis"


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    fairness_knob: float = DEFAULT_FAIRNESS_KNOB
    lease_minutes: float = 10.0
    restart_seconds: float = 35.0
    seed: int = 0

    def sim_config(self) -> SimConfig:
        return SimConfig(lease_s=self.lease_minutes * 60, restart_s=self.restart_seconds,
                         seed=self.seed, check_invariants=False)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def replay(policy: str, topology: Topology, workload: Workload, config: ReplayConfig,
           progress: bool = True) -> SimResult:
    """One simulation of ``workload`` under ``policy`` (a registered simulator policy);
    ``progress``: a bar on stderr advancing with the GPU-hours of finished apps."""
    sim = Simulator(topology, workload, make_policy(policy, config.fairness_knob),
                    config.sim_config())
    return run_with_progress(sim, f"replay {policy:>9}", progress)
