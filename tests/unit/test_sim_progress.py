"""The simulator's per-instant pass: the compiled ``themis.sim._progress.advance`` leaves
every app exactly as the Python reference ``engine.advance_apps`` does (bit for bit: a
replay's results depend on every rounding), and the reference is AppState.progress."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.sim.engine import advance_apps
from themis.sim.errors import InvariantError
from themis.sim.state import AppState
from themis.sim.workload import AppSpec, JobSpec

_progress = pytest.importorskip("themis.sim._progress",
                                reason="compiled part not built (themis doctor)")

APP_FIELDS = ("gpu_time", "service", "score_time", "last_progress", "stamp", "open_jobs",
              "open_demand", "work_finished", "unsettled", "iters_done")
JOB_FIELDS = ("iters_left", "iters_done_total", "gpus", "paused_until", "slowdown")

times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@st.composite
def apps(draw: st.DrawFn) -> list[AppState]:
    out = []
    for a in range(draw(st.integers(1, 4))):
        n_jobs = draw(st.integers(1, 3))
        jobs = tuple(JobSpec(f"a{a}j{k}", draw(st.floats(0.01, 10.0)), draw(st.integers(1, 4)))
                     for k in range(n_jobs))
        iters = [draw(st.floats(1.0, 1e5)) for _ in range(n_jobs)]
        state = AppState(AppSpec(f"a{a}", 0.0, jobs, (tuple(enumerate(iters)),), "compute"))
        gpu = 0
        for j in state.jobs:
            n = draw(st.integers(0, 3))
            j.gpus = tuple(f"g{gpu + i}" for i in range(n))
            gpu += n
            j.paused_until = draw(times)
            j.slowdown = draw(st.sampled_from([1.0, 1.05, 1.3]))
            if draw(st.booleans()):  # nearly done: this step may finish it
                j.iters_left = draw(st.floats(0.0, 2.0))
        state.held = {f"g{i}": 0.0 for i in range(gpu + draw(st.integers(0, 2)))}
        state.set_busy()
        state.last_progress = draw(times)
        out.append(state)
    return out


def _same(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return x.hex() == y.hex() or (math.isnan(x) and math.isnan(y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return type(x) is type(y) and x == y


def _assert_same(ref: list[AppState], got: list[AppState]) -> None:
    for a, b in zip(ref, got, strict=True):
        for f in APP_FIELDS:
            assert _same(getattr(a, f), getattr(b, f)), (a.spec.id, f)
        for j, k in zip(a.jobs, b.jobs, strict=True):
            for f in JOB_FIELDS:
                assert _same(getattr(j, f), getattr(k, f)), (a.spec.id, j.index, f)


@settings(max_examples=300, deadline=None)
@given(state=apps(), steps=st.lists(st.floats(0.0, 5e4), min_size=1, max_size=4))
def test_compiled_pass_equals_the_reference_bit_for_bit(
        state: list[AppState], steps: list[float]) -> None:
    ref, got = state, copy.deepcopy(state)
    now = max(a.last_progress for a in state)
    for dt in steps:
        now += dt
        assert _progress.advance(got, now) == advance_apps(ref, now)
        _assert_same(ref, got)


def test_reference_is_app_progress() -> None:
    job = JobSpec("j", 2.0, 2)
    a = AppState(AppSpec("a", 0.0, (job,), (((0, 100.0),),), "compute"))
    a.jobs[0].gpus = ("g0", "g1")
    a.held = {"g0": 0.0, "g1": 0.0, "g2": 0.0}
    a.set_busy()
    b = copy.deepcopy(a)
    assert advance_apps([a], 60.0) == 0  # demand 2, 3 held: no room
    b.progress(60.0)
    _assert_same([b], [a])
    assert a.jobs[0].iters_left == pytest.approx(100.0 - 60.0)  # 2 GPUs x 1/2 s per iteration


def test_an_app_ahead_of_the_clock_raises_the_engines_error() -> None:
    a = AppState(AppSpec("a", 0.0, (JobSpec("j", 1.0, 1),), (((0, 10.0),),), "compute"))
    a.jobs[0].gpus = ("g0",)
    a.held = {"g0": 0.0}
    a.set_busy()
    a.last_progress = 100.0
    with pytest.raises(InvariantError, match="time went backwards"):
        _progress.advance([a], 50.0)


def test_a_bad_attribute_is_a_type_error_not_a_crash() -> None:
    a = AppState(AppSpec("a", 0.0, (JobSpec("j", 1.0, 1),), (((0, 10.0),),), "compute"))
    a.jobs[0].gpus = ("g0",)
    a.held = {"g0": 0.0}
    a.set_busy()
    a.jobs[0].demand = "1"  # type: ignore[assignment]
    with pytest.raises(TypeError, match="demand"):
        _progress.advance([a], 50.0)


def test_a_replay_without_the_compiled_pass_gives_the_same_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from themis.sim import engine
    from themis.sim.cluster import build_cluster
    from themis.sim.engine import SimConfig, Simulator
    from themis.sim.policies import make_policy
    from themis.sim.synthetic import synthetic

    topo = build_cluster([(2, [4, 4])], racks=1)
    work = synthetic(12, seed=3)

    def run() -> list[tuple[str, float, float, int]]:
        r = Simulator(topo, work, make_policy("themis"), SimConfig(seed=1)).run()
        return [(a.id, a.finish, a.gpu_time, a.restarts) for a in r.apps]

    compiled = run()
    monkeypatch.setattr(engine, "_progress", None)
    assert run() == compiled
