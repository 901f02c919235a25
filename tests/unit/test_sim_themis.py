"""Themis inside the simulator drives the real agent bid code and the real round code."""

from __future__ import annotations

from themis.sim.cluster import default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.experiments import lying_cluster
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.synthetic import synthetic


def test_themis_runs_real_bids_and_auctions() -> None:
    w = synthetic(10, seed=2, max_jobs=4, median_job_h=0.3, interarrival_s=60.0)
    pol = ThemisPolicy(fairness_knob=0.8)
    r = Simulator(default_cluster(0.0625), w, pol, SimConfig(seed=0)).run()
    assert len(r.apps) == 10
    assert pol.bid_ms and pol.auction_ms  # make_bid_table and run_auction were called


def test_themis_fairness_knob_changes_outcome() -> None:
    w = synthetic(10, seed=4, max_jobs=4, median_job_h=0.3, interarrival_s=60.0)
    topo = default_cluster(0.0625)
    a = Simulator(topo, w, ThemisPolicy(fairness_knob=0.0), SimConfig(seed=0)).run()
    b = Simulator(topo, w, ThemisPolicy(fairness_knob=0.9), SimConfig(seed=0)).run()
    assert [x.finish for x in a.apps] != [x.finish for x in b.apps]


def test_lying_cluster_matches_section_6_3() -> None:
    topo = lying_cluster()
    assert len(topo) == 64
    sizes = sorted(len(g) for g in topo.machines.values())
    assert sizes.count(8) == 1 and sizes.count(2) == 28
