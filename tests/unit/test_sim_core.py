"""Simulator core: progress model, restart overhead, leases, invariants, phases."""

from __future__ import annotations

import pytest

from themis.sim.cluster import build_cluster, default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.errors import InvariantError
from themis.sim.policies import make_policy
from themis.sim.state import check_owners
from themis.sim.synthetic import synthetic
from themis.sim.workload import AppSpec, JobSpec, Workload, single_phase_app


def one_app(
    iters: float = 3600.0, demand: int = 2, arrival: float = 0.0, aid: str = "a"
) -> AppSpec:
    return single_phase_app(aid, arrival, [(JobSpec(f"{aid}-j", 1.0, demand), iters)], "compute")


def test_default_cluster_is_256_gpus() -> None:
    topo = default_cluster()
    assert len(topo) == 256
    sizes = sorted(len(gs) for gs in topo.machines.values())
    assert sizes.count(8) == 24 and sizes.count(4) == 9 and sizes.count(1) == 28


def test_single_job_duration_matches_eq1_plus_restart() -> None:
    topo = build_cluster([(1, [2])], racks=1)
    w = Workload([one_app(3600.0, demand=2)])
    r = Simulator(topo, w, make_policy("themis"), SimConfig(restart_s=35.0)).run()
    # 3600 iterations of 1 s on 2 GPUs = 1800 s, plus one 35 s restart at start.
    assert r.apps[0].jct == pytest.approx(1835.0)
    # alone in a 2-GPU cluster with demand 2: T_id = 1800 s, so rho ~= 1.02
    assert r.apps[0].rho == pytest.approx(1835.0 / 1800.0)


def test_lease_renewal_to_same_app_costs_no_restart() -> None:
    topo = build_cluster([(1, [1])], racks=1)
    w = Workload([one_app(36000.0, demand=1)])  # 10 h, many 10-minute leases
    r = Simulator(topo, w, make_policy("themis"), SimConfig(restart_s=35.0)).run()
    assert r.apps[0].restarts == 1
    assert r.apps[0].jct == pytest.approx(36035.0)


def test_sharing_two_apps_and_restart_on_moves() -> None:
    topo = build_cluster([(1, [1])], racks=1)
    w = Workload([one_app(3600, 1, 0.0, "a"), one_app(3600, 1, 0.0, "b")])
    r = Simulator(topo, w, make_policy("tiresias"), SimConfig(restart_s=10.0)).run()
    total = sum(a.gpu_time for a in r.apps)
    assert total >= 7200  # all work done on one GPU
    assert r.makespan >= 7200 + 20


def test_successive_halving_phases_run_in_order() -> None:
    topo = build_cluster([(2, [2, 2])], racks=1)
    jobs = tuple(JobSpec(f"j{i}", 1.0, 1, 100.0 * (i + 1)) for i in range(4))
    phases = (tuple((i, 100.0) for i in range(4)), ((0, 200.0), (1, 200.0)), ((0, 400.0),))
    app = AppSpec("sh", 0.0, jobs, phases, "compute")
    r = Simulator(topo, Workload([app]), make_policy("gandiva"), SimConfig(restart_s=0.0)).run()
    # 4 jobs x 100 on 4 GPUs, 2 x 200 on 2 used, 1 x 400 on 1 GPU (max demand 1)
    assert r.apps[0].jct == pytest.approx(100 + 200 + 400)


def test_invariant_check_catches_double_holding() -> None:
    topo = build_cluster([(1, [2])], racks=1)
    from themis.sim.state import AppState

    a, b = AppState(one_app(aid="a")), AppState(one_app(aid="b"))
    g = next(iter(topo))
    a.held[g] = 1.0
    b.held[g] = 1.0
    with pytest.raises(InvariantError, match="held by"):
        check_owners({"a": a, "b": b}, set(topo) - {g}, topo)


def test_invariant_check_catches_capacity_leak() -> None:
    topo = build_cluster([(1, [2])], racks=1)
    with pytest.raises(InvariantError, match="capacity"):
        check_owners({}, set(list(topo)[:1]), topo)


def test_synthetic_run_all_apps_finish_with_invariants() -> None:
    w = synthetic(12, seed=3, max_jobs=6, median_job_h=0.3, successive_halving=True)
    r = Simulator(default_cluster(0.125), w, make_policy("themis"), SimConfig(seed=1)).run()
    assert len(r.apps) == 12
    assert all(a.rho > 0 and a.finish >= a.arrival for a in r.apps)


def test_the_reported_model_equals_one_built_with_job_checks() -> None:
    """AppState.model skips Job's validation (values from the checked spec): the model
    must equal the one the checked constructor gives, and a bad error is refused."""
    from themis.mechanism.model import Job, ModelError
    from themis.sim.state import AppState

    jobs = tuple(JobSpec(f"j{i}", 0.5 + i, 1 + i % 3, 100.0 * (i + 1)) for i in range(4))
    phases = (tuple((i, 40.0 + i) for i in range(4)), ((0, 80.0), (2, 90.0)))
    state = AppState(AppSpec("sh", 0.0, jobs, phases, "compute"))
    state.jobs[1].iters_left = 12.5
    for error in (0.0, 0.2, -0.3):
        m = state.model(error)
        f = 1.0 + error
        want = [Job(f"j{j.index}", jobs[j.index].serial_iter_time, max(0.0, j.iters_left) * f,
                    jobs[j.index].max_demand, max(j.iters_phase * f, 1e-9))
                for j in state.jobs]
        assert m.jobs == want
    with pytest.raises(ModelError, match="estimate error"):
        state.model(-1.0)


def test_run_restores_the_gc_thresholds() -> None:
    import gc

    from themis.sim import engine

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    class Spy(engine.Simulator):
        def _run(self, progress):  # type: ignore[no-untyped-def]
            seen.append(gc.get_threshold())
            raise RuntimeError("stop")

    sim = Spy.__new__(Spy)
    with pytest.raises(RuntimeError, match="stop"):
        sim.run()
    assert seen[0][0] >= engine.GC_YOUNG_THRESHOLD
    assert gc.get_threshold() == before
