"""Finish-time fairness (paper Eq. 1, Eq. 2) including the worked example of section 4.3.3."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.contention import ContentionTracker
from themis.mechanism.fairness import (
    FairnessContext,
    IdealTime,
    ideal_time,
    parse_ideal_time,
    phase_time,
    plan_time,
    rho,
)
from themis.mechanism.model import AppKind, AppModel, FuturePhase, Job, ModelError, PhaseShape
from themis.mechanism.placement import DEFAULT, PlacementProfile
from themis.mechanism.topology import Locality


def table3_app() -> AppModel:
    """Section 4.3.3: 4 jobs at 80/100/100/120 s per iteration, phases of 4, 2, 1 jobs with
    8, 16, 36 iterations, budget 10,000 GPU-seconds, job_demand_max 8, S = 1."""
    jobs = [Job(f"j{i}", t, 8, 8) for i, t in enumerate([80, 100, 100, 120])]
    return AppModel(
        "hp", 0.0, jobs, [FuturePhase(2, 16), FuturePhase(1, 36)],
        AppKind.SUCCESSIVE_HALVING, budget=10_000,
    )


# Table 3 under the paper's form of T_id (section 4.3.1's approximation)
CTX16 = FairnessContext(now=0.0, cluster_gpus=16, n_avg=4.0, ideal=IdealTime.PAPER)


def test_table3_ideal_time_is_2500s() -> None:
    assert ideal_time(table3_app(), CTX16) == pytest.approx(2500.0)


def test_table3_exact_ideal_time_is_also_2500s() -> None:
    """On its 16/4 = 4-GPU share every phase of Table 3's app can use all 4 GPUs (4, 2, 1
    jobs capped at 8): 3200/4 + 3200/4 + 3600/4 = 2500 s, the paper's value."""
    ctx = FairnessContext(now=0.0, cluster_gpus=16, n_avg=4.0, ideal=IdealTime.EXACT)
    assert ideal_time(table3_app(), ctx) == pytest.approx(2500.0)


def test_exact_ideal_time_follows_the_plan_and_its_caps() -> None:
    """Successive halving, 4 jobs of cap 2 then 2 then 1 (no budget): alone on 64 GPUs
    the paper's form assumes the whole budget runs on app_demand_max = 8 GPUs, the exact
    form runs each phase at what it can use (8, 4, 2 GPUs)."""
    jobs = [Job(f"j{i}", 1.0, 100, 2) for i in range(4)]  # 4 x 100 GPU-s
    app = AppModel("sh", 0.0, jobs, [FuturePhase(2, 200), FuturePhase(1, 400)],
                   AppKind.SUCCESSIVE_HALVING)
    alone = FairnessContext(0.0, 64, 1.0, IdealTime.EXACT)
    assert ideal_time(app, alone) == pytest.approx(50 + 100 + 200)
    paper = FairnessContext(0.0, 64, 1.0, IdealTime.PAPER)
    assert ideal_time(app, paper) == pytest.approx(1200 / 8)
    # a 64/40 = 1.6-GPU share: the fluid share is spread over the jobs that can use it
    crowded = FairnessContext(0.0, 64, 40.0, IdealTime.EXACT)
    assert ideal_time(app, crowded) == pytest.approx(3 * 400 / 1.6)
    assert plan_time(app, 0) == math.inf


def test_exact_ideal_time_counts_completed_phases() -> None:
    """Phase 1 done (its shape reported), phase 2 running: the plan is the same as
    before it started, so T_id does not change as the app advances."""
    before = AppModel("sh", 0.0, [Job(f"j{i}", 1.0, 100, 2) for i in range(4)],
                      [FuturePhase(2, 200)], AppKind.SUCCESSIVE_HALVING)
    after = AppModel("sh", 0.0, [Job(f"j{i}", 1.0, 150, 2, iters_total=200) for i in range(2)],
                     [], AppKind.SUCCESSIVE_HALVING, work_done=400.0,
                     done_phases=(PhaseShape.of([(100.0, 2)] * 4),))
    for n_avg in (1.0, 3.0, 20.0):
        ctx = FairnessContext(0.0, 16, n_avg, IdealTime.EXACT)
        assert ideal_time(after, ctx) == pytest.approx(ideal_time(before, ctx))
    # without the shapes, completed work counts as one phase capped at app_demand_max
    bare = AppModel("sh", 0.0, after.jobs, [], AppKind.SUCCESSIVE_HALVING, work_done=400.0)
    assert plan_time(bare, 16) == pytest.approx(400 / 4 + 200 / 2)


def test_parse_ideal_time() -> None:
    assert parse_ideal_time(" Exact ") is IdealTime.EXACT
    assert parse_ideal_time("paper") is IdealTime.PAPER
    with pytest.raises(ModelError, match="exact, paper"):
        parse_ideal_time("gavel")


@pytest.mark.parametrize(("gpus", "expected"), [(1, 4.0), (2, 2.0)])
def test_table3_exact_values(gpus: int, expected: float) -> None:
    assert rho(table3_app(), gpus, Locality.SLOT, CTX16) == expected


@pytest.mark.parametrize(("gpus", "expected"), [(4, 1.0), (8, 0.5), (16, 0.34)])
def test_table3_larger_allocations(gpus: int, expected: float) -> None:
    """Our work-conserving phase model gives exactly 2500/2500, 1250/2500 and 850/2500:
    phase times (800+800+900), (400+400+450), (200+200+450) seconds. The paper's 1, 0.5
    and 0.34 are therefore exact, not rounded, under this model; a rigid one-job-per-GPU
    model would give 1.064, 0.532 and 0.356 (the 120 s job dominating phase 1), see
    docs/mechanism.md."""
    assert rho(table3_app(), gpus, Locality.SLOT, CTX16) == pytest.approx(expected, abs=1e-12)


def test_table3_job_demand_max_caps_16_gpus() -> None:
    """Phase 3's single job cannot use more than 8 GPUs: 3600/8 = 450 s, not 225 s."""
    app = table3_app()
    assert rho(app, 16, Locality.SLOT, CTX16) > rho(app, 8, Locality.SLOT, CTX16) / 2


def test_median_revision_when_slow_jobs_survive() -> None:
    """Section 4.3.3: if the 120 and 100 s jobs survive, the paper re-estimates phase 2 as
    120*16 = 1920 s on 2 GPUs (one job per GPU; its "3200" is a typo). Work-conserving, the
    100 s job's GPU joins the 120 s job when it finishes: (1920+1600)/2 = 1760 s, and the
    future phase now uses the median of the survivors (110 s): 110*36/2 = 1980 s."""
    jobs = [Job("a", 120, 16, 8), Job("b", 100, 16, 8)]
    app = AppModel("hp", 0.0, jobs, [FuturePhase(1, 36)], AppKind.SUCCESSIVE_HALVING, budget=1e4)
    assert phase_time(((j.work_left, j.max_demand) for j in app.jobs), 2) == 1760
    from themis.mechanism.fairness import remaining_time

    assert remaining_time(app, 2) == 1760 + 110 * 36 / 2


def test_single_job_eq1() -> None:
    app = AppModel("s", 100.0, [Job("j", 2.0, 1000, 4, iters_total=2000)])
    ctx = FairnessContext(now=600.0, cluster_gpus=64, n_avg=2.0, ideal=IdealTime.PAPER)
    # T_cluster = 2000*2/min(64,4) = 1000; T_id = 2000; T_sh = 500 + 1000*2*1.1/2
    assert rho(app, 2, Locality.RACK, ctx) == pytest.approx((500 + 1100) / 2000)
    # exact: a 64/2 = 32-GPU share, of which the job uses 4: T_id = 4000/4 = 1000
    exact = FairnessContext(now=600.0, cluster_gpus=64, n_avg=2.0, ideal=IdealTime.EXACT)
    assert rho(app, 2, Locality.RACK, exact) == pytest.approx((500 + 1100) / 1000)


def test_no_gpu_means_infinite_rho_and_finished_app_is_finite() -> None:
    app = AppModel("s", 0.0, [Job("j", 1.0, 10, 1)])
    ctx = FairnessContext(now=5.0, cluster_gpus=4, n_avg=1.0)
    assert math.isinf(rho(app, 0, Locality.SLOT, ctx))
    app.jobs[0].iters_left = 0
    assert rho(app, 0, Locality.SLOT, ctx) == pytest.approx(5.0 / 10.0)


def test_placement_profile_validation_and_profiled_values() -> None:
    with pytest.raises(ValueError, match="rack"):
        PlacementProfile(rack=0.5)
    with pytest.raises(ValueError, match="not decrease"):
        PlacementProfile(machine=1.5, rack=1.2)
    p = DEFAULT.with_observed({Locality.RACK: 1.4})
    assert p.slowdown(Locality.RACK) == 1.4
    assert p.slowdown(Locality.CLUSTER) == 1.4  # kept monotone


def test_bad_models_are_refused_with_names() -> None:
    with pytest.raises(ModelError, match="job 'x'.*serial_iter_time"):
        Job("x", -1.0, 10, 1)
    with pytest.raises(ModelError, match="max_demand"):
        Job("x", 1.0, 10, 0)
    with pytest.raises(ModelError, match="duplicate job"):
        AppModel("a", 0.0, [Job("x", 1.0, 1, 1), Job("x", 1.0, 1, 1)], kind=AppKind.CURVE_STOPPING)
    with pytest.raises(ModelError, match="n_avg"):
        FairnessContext(now=0.0, cluster_gpus=4, n_avg=0.5)


def test_contention_tracker_time_weighted_average() -> None:
    t = ContentionTracker()
    t.arrive("a", 0.0)
    t.arrive("b", 10.0)
    t.depart("b", 20.0)
    # a saw 1 app for 10 s, 2 apps for 10 s, 1 app for 20 s -> (10+20+20)/40
    assert t.n_avg("a", 40.0) == pytest.approx(50 / 40)
    with pytest.raises(ModelError, match="backwards"):
        t.arrive("c", 1.0)


def _remaining_reference(app: AppModel, gpus: int) -> float:
    """Eq. 2's sum of phase times, phase by phase through phase_time."""
    current = phase_time(((j.work_left, j.max_demand) for j in app.jobs), gpus)
    if not app.future_phases:
        return current
    median = app.median_iter_time()
    d = app.job_demand_max
    return current + sum(phase_time([(p.iters * median, d)] * p.jobs, gpus)
                         for p in app.future_phases)


@settings(max_examples=200, deadline=None)
@given(
    jobs=st.lists(st.tuples(st.floats(0.01, 100.0), st.floats(0.0, 1e5), st.integers(1, 8)),
                  min_size=1, max_size=12),
    future=st.lists(st.tuples(st.integers(1, 40), st.floats(0.5, 1e5)), max_size=4),
    gpus=st.lists(st.integers(0, 300), min_size=1, max_size=10),
)
def test_remaining_time_for_many_counts_is_bit_identical_to_phase_times(
        jobs: list[tuple[float, float, int]], future: list[tuple[int, float]],
        gpus: list[int]) -> None:
    from themis.mechanism.fairness import RemainingTime

    app = AppModel("a", 0.0, [Job(f"j{k}", t, it, d) for k, (t, it, d) in enumerate(jobs)],
                   [FuturePhase(n, it) for n, it in future], AppKind.SUCCESSIVE_HALVING)
    many = RemainingTime(app)
    for g in gpus:
        assert many(g) == _remaining_reference(app, g)  # exact, not approximate
        assert many(g, 1.3) == 1.3 * _remaining_reference(app, g)


def test_served_now_rho_is_rho_at_full_demand_best_placed() -> None:
    from themis.mechanism.fairness import best_locality, served_now_rho
    from themis.mechanism.topology import Gpu

    # 2 machines of 4 GPUs (2 slots of 2 each), one rack
    cluster = [Gpu(f"m{m}g{i}", f"m{m}", "r0", f"s{i // 2}") for m in range(2) for i in range(4)]
    assert best_locality(cluster, 1) is Locality.SLOT
    assert best_locality(cluster, 2) is Locality.SLOT
    assert best_locality(cluster, 4) is Locality.MACHINE
    assert best_locality(cluster, 8) is Locality.RACK
    assert best_locality([*cluster, Gpu("x", "m9", "r1")], 9) is Locality.CLUSTER
    # an app of demand 4 that arrived at 0 and has waited 100 s: 400 s of serial work
    app = AppModel("w", 0.0, [Job("j", 1.0, 400, 4)],
                   placement=PlacementProfile(1.0, 1.1, 1.5, 2.0))
    ctx = FairnessContext(now=100.0, cluster_gpus=8, n_avg=2.0)
    place = lambda n: best_locality(cluster, n)  # noqa: E731
    got = served_now_rho(app, ctx, place)
    assert got == pytest.approx(rho(app, 4, Locality.MACHINE, ctx))
    assert got == pytest.approx((100 + 400 / 4 * 1.1) / ideal_time(app, ctx))
    # it grows with the wait, and a short app that waited as long ranks worse
    later = FairnessContext(now=1000.0, cluster_gpus=8, n_avg=2.0)
    assert served_now_rho(app, later, place) > got
    short = AppModel("s", 0.0, [Job("j", 1.0, 40, 4)])
    assert served_now_rho(short, ctx, place) > got
    assert math.isinf(rho(short, 0, Locality.SLOT, ctx))  # rho itself stays +inf


def test_parse_starvation() -> None:
    from themis.mechanism.fairness import (
        DEFAULT_STARVATION,
        STARVATION_NAMES,
        Starvation,
        parse_starvation,
    )

    assert parse_starvation(" Served-Now ") is Starvation.SERVED_NOW
    assert parse_starvation("inf") is Starvation.INF
    assert parse_starvation(" INF ") is Starvation.INF  # the paper's reading, by name
    assert parse_starvation("Ranked") is Starvation.RANKED
    # served-now is the default; ranked and inf (the paper's reading) are named options
    assert DEFAULT_STARVATION is Starvation.RANKED
    assert STARVATION_NAMES == ("inf", "served-now", "ranked")
    assert [s.keyed for s in Starvation] == [False, True, True]
    assert [s.merges for s in Starvation] == [False, False, True]
    with pytest.raises(ModelError,
                       match="starvation 'never': must be one of inf, served-now, ranked"):
        parse_starvation("never")
