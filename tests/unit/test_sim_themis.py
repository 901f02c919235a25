"""Themis inside the simulator drives the real agent bid code and the real round code."""

from __future__ import annotations

from themis.mechanism.topology import Topology
from themis.sim.cluster import build_cluster, default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.experiments import lying_cluster
from themis.sim.policies.base import Allocation, RoundContext
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.synthetic import synthetic
from themis.sim.workload import JobSpec, Workload, single_phase_app


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


def _two_apps_sharing_a_machine() -> tuple[Topology, Workload]:
    topo = build_cluster([(1, [2, 2])], racks=1)
    jobs = [JobSpec(f"{a}-j", 1.0, 2) for a in ("a", "b")]
    w = Workload([
        single_phase_app("a", 0.0, [(jobs[0], 30000.0)], "network"),
        single_phase_app("b", 0.0, [(jobs[1], 36000.0)], "network"),
    ])
    return topo, w


def test_expired_leases_are_renewed_to_their_holders_without_restarts() -> None:
    """Two apps fill one machine for ~5 h of 10-minute leases: at every expiry the
    bidder's menu names its own GPUs first (and wins the tie between equally placed
    bundles), the non-bidder's GPUs come back to it as leftover, and when one app is
    left alone it keeps its slot: each job starts once and is never moved."""
    topo, w = _two_apps_sharing_a_machine()
    r = Simulator(topo, w, ThemisPolicy(fairness_knob=0.5), SimConfig(seed=3)).run()
    assert r.rounds > 20
    assert [a.restarts for a in r.apps] == [1, 1]


def test_renewal_restarts_pause_the_jobs_on_every_expired_lease() -> None:
    """``renewal_restarts`` (YARN today: a lease is not renewed in place): the same run as
    above, but every lease end stops the jobs on it, so each app restarts once per
    expiry of its leases and finishes later."""
    topo, w = _two_apps_sharing_a_machine()
    free = Simulator(topo, w, ThemisPolicy(fairness_knob=0.5), SimConfig(seed=3)).run()
    paid = Simulator(topo, w, ThemisPolicy(fairness_knob=0.5),
                     SimConfig(seed=3, renewal_restarts=True)).run()
    assert all(a.restarts > 10 for a in paid.apps)  # ~5 h of 10-minute leases each
    for f, p in zip(free.apps, paid.apps, strict=True):
        assert p.finish > f.finish + 10 * 35.0 * 0.5  # the pauses show in the finish time


def test_previous_holders_reach_the_policy() -> None:
    topo, w = _two_apps_sharing_a_machine()
    seen: list[dict[str, str]] = []

    class Spy(ThemisPolicy):
        def allocate(self, ctx: RoundContext) -> Allocation:
            seen.append(dict(ctx.previous))
            return super().allocate(ctx)

    # leases of exactly 10 minutes (no spread): both apps' leases end together
    Simulator(topo, w, Spy(fairness_knob=0.5), SimConfig(seed=3, lease_spread_s=0.0)).run()
    assert seen[0] == {}  # arrivals: nothing expired
    renewals = [p for p in seen if p]
    assert renewals and all(set(p.values()) <= {"a", "b"} for p in renewals)
    assert all(len(p) == 4 for p in renewals[:10])  # both apps' leases end together
