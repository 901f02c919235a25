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
