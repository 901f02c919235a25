"""The lower bound on the worst app's stretch (themis/sim/bound.py): hand-built cases whose
optimum is known by hand, and no simulated policy ever below it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis.sim.bound import app_tasks, bounds, least_rho
from themis.sim.cluster import build_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.isolated import isolated_finish_times
from themis.sim.metrics import summarize
from themis.sim.policies import make_policy
from themis.sim.workload import AppSpec, JobSpec, Workload, single_phase_app

ONE_MACHINE = [(1, [4])]  # 4 GPUs in one slot: every placement has slowdown 1


def _job_app(aid: str, arrival: float, hours: float, gpus: int = 4) -> AppSpec:
    """One job of ``hours`` on ``gpus`` GPUs (1 s per iteration on one GPU)."""
    return single_phase_app(aid, arrival, [(JobSpec(f"{aid}-j", 1.0, gpus), hours * 3600 * gpus)],
                            "compute")


def _stretch_bound(apps: list[AppSpec], shape: list[tuple[int, list[int]]] = ONE_MACHINE,
                   restart_s: float = 0.0) -> float:
    topo = build_cluster(shape, racks=1)
    iso = isolated_finish_times(apps, len(topo))
    return bounds(apps, topo, restart_s, iso)["bound_max_stretch"]


def test_alone_the_bound_is_one() -> None:
    assert _stretch_bound([_job_app("a", 100.0, 2.0)]) == pytest.approx(1.0)


def test_two_identical_apps_at_once_one_waits_a_whole_run() -> None:
    """Two 1-h jobs that each need the whole cluster, arriving together: one of them ends
    at 2 h at best, so the worst stretch is 2 (serial order; sharing is no better)."""
    b = _stretch_bound([_job_app("a", 0.0, 1.0), _job_app("b", 0.0, 1.0)])
    assert b == pytest.approx(2.0, rel=2e-3)
    assert b <= 2.0


def test_staggered_arrival() -> None:
    """A (1 h, whole cluster) at 0, B (the same) at 0.5 h: the best worst stretch is 1.5
    (A runs first, B waits 0.5 h; any split makes one of them worse)."""
    b = _stretch_bound([_job_app("a", 0.0, 1.0), _job_app("b", 1800.0, 1.0)])
    assert b == pytest.approx(1.5, rel=2e-3)


def test_apps_that_fit_side_by_side_do_not_wait() -> None:
    """Two 2-GPU jobs on 4 GPUs run side by side: stretch 1 for both."""
    b = _stretch_bound([_job_app("a", 0.0, 1.0, gpus=2), _job_app("b", 0.0, 1.0, gpus=2)])
    assert b == pytest.approx(1.0)


def test_a_short_app_behind_a_long_one() -> None:
    """A long app (10 h) and a short one (1 h), both needing the whole cluster, arrive
    together. Short first: stretches 1 and 1.1; long first: 1 and 11. The bound is 1.1."""
    b = _stretch_bound([_job_app("long", 0.0, 10.0), _job_app("short", 0.0, 1.0)])
    assert b == pytest.approx(1.1, rel=2e-3)


def test_phases_run_one_after_the_other() -> None:
    """An app of two 1-h phases (one 4-GPU job each) and a 1-h one-phase app B arriving
    with it. Phases keep their order and their length, so at best: B first (stretch 1,
    A ends at 3 h: 1.5), or A first (A 1, B ends at 3 h: 3), or B between A's phases
    (A ends at 3 h: 1.5, B ends at 2 h: 2). The bound is 1.5."""
    jobs = (JobSpec("a-j0", 1.0, 4), JobSpec("a-j1", 1.0, 4))
    a = AppSpec("a", 0.0, jobs, (((0, 4 * 3600.0),), ((1, 4 * 3600.0),)), "compute")
    b = _stretch_bound([a, _job_app("b", 0.0, 1.0)])
    assert b == pytest.approx(1.5, rel=2e-3)


def test_restart_pauses_cost_gpu_time() -> None:
    """With restart pauses each job holds a GPU while it starts: 8 one-GPU jobs of 100 s
    on 4 GPUs take at least (8 * 100 + 8 * 35) / 4 = 270 s, not 200 + 35."""
    jobs = tuple(JobSpec(f"j{i}", 1.0, 1) for i in range(8))
    app = AppSpec("a", 0.0, jobs, (tuple((i, 100.0) for i in range(8)),), "compute")
    topo = build_cluster(ONE_MACHINE, racks=1)
    tasks = app_tasks(app, topo, 35.0)
    assert tasks.phases[0].work == pytest.approx(8 * 135.0)
    # scale 1 second: the least finish time itself
    assert least_rho([tasks], [1.0], 4) == pytest.approx(270.0, rel=2e-3)


def test_bad_scales_are_refused() -> None:
    tasks = app_tasks(_job_app("a", 0.0, 1.0), build_cluster(ONE_MACHINE, racks=1), 0.0)
    with pytest.raises(ValueError, match="scale"):
        least_rho([tasks], [0.0], 4)
    with pytest.raises(ValueError, match="gpus"):
        least_rho([tasks], [1.0], 0)


_APP = st.tuples(
    st.floats(0.0, 4 * 3600.0),  # arrival
    st.lists(st.tuples(st.floats(0.05, 3.0), st.integers(1, 6)), min_size=1, max_size=3),
    st.integers(1, 3),  # phases
    st.sampled_from(["compute", "network"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_APP, min_size=1, max_size=5), st.sampled_from([0.0, 35.0]),
       st.sampled_from(["themis", "themis-inf", "srsf", "fifo", "gavel"]))
def test_no_policy_beats_the_bound(raw: list[tuple[float, list[tuple[float, int]], int, str]],
                                   restart_s: float, policy: str) -> None:
    """Random small traces on a 2-machine, 2-rack cluster: every policy's worst stretch
    is at least the bound (the sweep asserts the same on every run)."""
    apps = []
    for k, (arrival, jobs, n_phases, placement) in enumerate(raw):
        specs = tuple(JobSpec(f"a{k}-j{i}", 1.0, d) for i, (_, d) in enumerate(jobs))
        phases = tuple(tuple((i, h * 3600 * d / n_phases) for i, (h, d) in enumerate(jobs))
                       for _ in range(n_phases))
        apps.append(AppSpec(f"a{k}", arrival, specs, phases, placement))
    topo = build_cluster([(1, [2, 2]), (1, [1, 1])], racks=2)
    cfg = SimConfig(restart_s=restart_s, lease_s=600.0)
    result = Simulator(topo, Workload(list(apps)), make_policy(policy), cfg).run()
    iso = isolated_finish_times(apps, len(topo))
    bound = bounds(apps, topo, restart_s, iso)["bound_max_stretch"]
    assert summarize(result)["max_stretch"] >= bound * (1 - 1e-6)
