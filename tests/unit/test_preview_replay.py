"""The preview's replays run at once in worker processes (themis.preview.replay.replay_all):
the results are those of the replays run one after the other, to the bit."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis.preview.cluster import uniform_topology
from themis.preview.history import parse_json, read_apps
from themis.preview.replay import THEMIS, ReplayConfig, replay, replay_all
from themis.preview.trace import select, to_workload
from themis.sim.workload import Workload

APPS = Path(__file__).parent / "data" / "preview-apps.json"


def _workload() -> Workload:
    apps = read_apps(parse_json(APPS.read_bytes(), "apps.json"), "apps.json")
    return to_workload(select(apps, cluster_gpus=16))


@pytest.mark.parametrize("processes", [1, 2])
def test_replays_at_once_are_the_replays_one_after_the_other(
        processes: int, capfd: pytest.CaptureFixture[str]) -> None:
    work = _workload()
    topo = uniform_topology(16, 8).topology
    cfg = ReplayConfig()
    results, wall = replay_all(["fifo", THEMIS, "fifo"], topo, work, cfg, progress=True,
                               processes=processes)
    assert list(results) == ["fifo", THEMIS] and set(wall) == set(results)
    for policy, got in results.items():
        alone = replay(policy, topo, work, cfg, progress=False)
        assert repr(got.apps) == repr(alone.apps)  # every field, NaN included
        assert (got.rounds, got.makespan) == (alone.rounds, alone.makespan)
    err = capfd.readouterr().err
    assert "replay      fifo" in err and "replay    themis" in err  # a bar each


def test_a_coarser_expiry_quantum_replays_in_fewer_rounds() -> None:
    """``expiry_quantum_seconds`` reaches the simulator: leases end only at its multiples,
    so a quantum as long as the lease leaves fewer instants at which a round can run."""
    work = _workload()
    topo = uniform_topology(16, 8).topology
    fine = ReplayConfig(lease_minutes=2.0)
    coarse = ReplayConfig(lease_minutes=2.0, expiry_quantum_seconds=600.0)
    assert fine.sim_config().expiry_quantum_s == 120.0
    assert coarse.sim_config().expiry_quantum_s == 600.0
    assert coarse.to_dict()["expiry_quantum_seconds"] == 600.0
    a = replay(THEMIS, topo, work, fine, progress=False)
    b = replay(THEMIS, topo, work, coarse, progress=False)
    assert b.rounds < a.rounds
    assert {r.id for r in a.apps} == {r.id for r in b.apps}  # every app still finishes
