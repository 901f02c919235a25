"""Hyperband app scheduler: bracket plan, successive halving, GPU split, agent model."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.am.hyperband import (
    Hyperband,
    HyperbandError,
    JobStatus,
    hyperband_brackets,
)
from themis.am.objective import Objective
from themis.am.packing import JobNeed, gpu_counts, split
from themis.am.searchspace import (
    Categorical,
    Double,
    Int,
    SearchSpace,
    SearchSpaceError,
)
from themis.mechanism.model import AppKind, AppModel, FuturePhase, PhaseShape
from themis.mechanism.topology import Gpu, Topology

SPACE = SearchSpace([
    Double("learning_rate", 1e-4, 1e-1, log=True),
    Int("hidden_units", 16, 256, log=True),
    Int("num_layers", 1, 4),
    Categorical("optimizer", ("adam", "sgd", "rmsprop")),
])


def test_golden_bracket_table_r81_eta3() -> None:
    # Li et al., JMLR 2018, Table 1 (R = 81, eta = 3).
    table = {b.s: [(r.n, r.r) for r in b.rungs] for b in hyperband_brackets(81, 3)}
    assert table == {
        4: [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        3: [(34, 3), (11, 9), (3, 27), (1, 81)],
        2: [(15, 9), (5, 27), (1, 81)],
        1: [(8, 27), (2, 81)],
        0: [(5, 81)],
    }
    assert [b.s for b in hyperband_brackets(81, 3)] == [4, 3, 2, 1, 0]


def test_bracket_plan_validation() -> None:
    with pytest.raises(HyperbandError, match="eta"):
        hyperband_brackets(81, 1)
    with pytest.raises(HyperbandError, match="R must be"):
        hyperband_brackets(0.5, 3)
    assert [b.s for b in hyperband_brackets(80.99, 3)] == [3, 2, 1, 0]


@given(st.floats(1, 5000), st.integers(2, 5))
def test_bracket_plan_properties(max_r: float, eta: int) -> None:
    plan = hyperband_brackets(max_r, eta)
    s_max = plan[0].s
    assert eta**s_max <= max_r * (1 + 1e-9) < eta ** (s_max + 1)
    for b in plan:
        assert len(b.rungs) == b.s + 1
        assert b.rungs[-1].r == pytest.approx(max_r)
        for a, c in zip(b.rungs, b.rungs[1:], strict=False):
            assert c.n == a.n // eta >= 1  # keep the top 1/eta
            assert c.r == pytest.approx(a.r * eta)


def test_search_space_sampling_is_seeded_and_in_bounds() -> None:
    a = [SPACE.sample(random.Random(5)) for _ in range(3)]
    b = [SPACE.sample(random.Random(5)) for _ in range(3)]
    assert a == b
    rng = random.Random(1)
    samples = [SPACE.sample(rng) for _ in range(2000)]
    lrs = [s["learning_rate"] for s in samples]
    assert all(1e-4 <= x <= 1e-1 for x in lrs)  # type: ignore[operator]
    # log scale: about a third of the mass per decade
    low_decade = sum(x < 1e-3 for x in lrs) / len(lrs)  # type: ignore[operator]
    assert 0.28 < low_decade < 0.39
    units = [s["hidden_units"] for s in samples]
    assert set(units) <= set(range(16, 257)) and 16 in units and max(units) >= 240
    assert {s["num_layers"] for s in samples} == {1, 2, 3, 4}
    assert {s["optimizer"] for s in samples} == {"adam", "sgd", "rmsprop"}


def test_search_space_from_dict_and_errors() -> None:
    space = SearchSpace.from_dict({
        "lr": {"type": "double", "min": 0.001, "max": 0.1, "scale": "log"},
        "bs": {"type": "int", "min": 8, "max": 64},
        "opt": {"type": "categorical", "values": ["adam"]},
    })
    cfg = space.sample(random.Random(0))
    assert set(cfg) == {"lr", "bs", "opt"} and cfg["opt"] == "adam"
    with pytest.raises(SearchSpaceError, match="lr: missing field 'max'"):
        SearchSpace.from_dict({"lr": {"type": "double", "min": 0.1}})
    with pytest.raises(SearchSpaceError, match="log scale"):
        Double("x", 0.0, 1.0, log=True)
    with pytest.raises(SearchSpaceError, match="type must be"):
        SearchSpace.from_dict({"x": {"type": "float", "min": 0, "max": 1}})


def _loss(cfg: dict[str, object]) -> float:
    """A deterministic 'validation loss' of a configuration (lower is better)."""
    lr = float(cfg["learning_rate"])  # type: ignore[arg-type]
    return abs(math.log10(lr) + 2.5) + 0.01 * int(cfg["num_layers"])  # type: ignore[call-overload]


def _run_to_end(hb: Hyperband) -> list[tuple[int, int, int, int]]:
    """Drive every job to its targets; returns (bracket s, rung, jobs, target) per rung."""
    seen = []
    while not hb.done:
        jobs = hb.running_jobs()
        b = hb.plan[hb.bracket_index]
        seen.append((b.s, hb.rung_index, len(hb.current_jobs()), jobs[0].target_steps))
        for j in jobs:
            hb.report(j.id, j.target_steps, _loss(j.config), serial_iter_time=0.1)
    return seen


def test_successive_halving_follows_the_plan_and_keeps_the_best() -> None:
    hb = Hyperband(SPACE, max_resource=81, eta=3, steps_per_unit=10, seed=3)
    rungs = _run_to_end(hb)
    expected = [(b.s, i, r.n, round(r.r * 10)) for b in hb.plan for i, r in enumerate(b.rungs)]
    assert rungs == expected
    assert len(hb.jobs) == 81 + 34 + 15 + 8 + 5
    for b in hb.plan:
        jobs = [j for j in hb.jobs.values() if j.id.startswith(f"app-s{b.s}-")]
        finished = [j for j in jobs if j.status is JobStatus.FINISHED]
        assert len(finished) == b.rungs[-1].n
        assert {j.status for j in jobs} <= {JobStatus.FINISHED, JobStatus.STOPPED}
        # deterministic losses: the best configuration of the bracket always survives
        assert min(finished, key=lambda j: _loss(j.config)).config == \
            min(jobs, key=lambda j: _loss(j.config)).config
        # stopped jobs trained exactly to the target of the rung they were stopped at
        for j in jobs:
            assert j.steps_done in {round(r.r * 10) for r in b.rungs}
    best = hb.best()
    assert best is not None
    assert best.loss == min(_loss(j.config) for j in hb.jobs.values()
                            if j.status is JobStatus.FINISHED)


def test_promotion_keeps_top_one_over_eta_by_loss() -> None:
    hb = Hyperband(SPACE, max_resource=9, eta=3, brackets=[2], seed=0)
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    assert len(jobs) == 9 and all(j.target_steps == 1 for j in jobs)
    losses = {j.id: float(k % 5) + k / 100 for k, j in enumerate(jobs)}
    outcome = None
    for j in jobs:
        assert outcome is None
        outcome = hb.report(j.id, 1, losses[j.id])
    assert outcome is not None
    assert list(outcome.promoted) == sorted(losses, key=losses.__getitem__)[:3]
    assert set(outcome.stopped) == set(losses) - set(outcome.promoted)
    assert {j.id for j in hb.running_jobs()} == set(outcome.promoted)
    assert all(j.target_steps == 3 for j in hb.running_jobs())
    # late reports from stopped jobs are ignored
    assert hb.report(outcome.stopped[0], 5, 0.0) is None


def test_unknown_job_and_bad_reports_raise() -> None:
    hb = Hyperband(SPACE, max_resource=9, eta=3, seed=0)
    with pytest.raises(HyperbandError, match="unknown job"):
        hb.report("nope", 1)
    job = hb.running_jobs()[0]
    with pytest.raises(HyperbandError, match="serial_iter_time"):
        hb.report(job.id, 0, serial_iter_time=0.0)
    with pytest.raises(HyperbandError, match="no bracket"):
        Hyperband(SPACE, max_resource=9, eta=3, brackets=[7])


def test_nan_loss_ranks_last() -> None:
    hb = Hyperband(SPACE, max_resource=3, eta=3, brackets=[1], seed=0)
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    assert len(jobs) == 3
    hb.report(jobs[0].id, 1, float("nan"))
    hb.report(jobs[1].id, 1, 5.0)
    out = hb.report(jobs[2].id, 1, 9.0)
    assert out is not None and out.promoted == (jobs[1].id,)


def test_maximise_objective_promotes_and_reports_the_highest_values() -> None:
    hb = Hyperband(SPACE, max_resource=9, eta=3, brackets=[2], seed=0,
                   objective=Objective("eval_accuracy", "maximize"))
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    acc = {j.id: 0.5 + (k * 7 % 9) / 20 for k, j in enumerate(jobs)}
    acc[jobs[0].id] = float("nan")  # a diverged trial ranks last, also when maximising
    outcome = None
    for j in jobs:
        outcome = hb.report(j.id, 1, acc[j.id])
    assert outcome is not None
    finite = {k: v for k, v in acc.items() if math.isfinite(v)}
    assert list(outcome.promoted) == sorted(finite, key=lambda k: -finite[k])[:3]
    assert jobs[0].id in outcome.stopped
    # the survivors finish their rungs; the highest accuracy is the best trial
    for rung_steps in (3, 9):
        for j in sorted(hb.running_jobs(), key=lambda j: j.id):
            hb.report(j.id, rung_steps, acc[j.id] + rung_steps / 100)
    best = hb.best()
    assert best is not None and best.id == max(finite, key=lambda k: finite[k])
    top = hb.top(3)
    assert top[0].id == best.id
    # a minimising objective on the same values picks the other end
    hb_min = Hyperband(SPACE, max_resource=9, eta=3, brackets=[2], seed=0)
    out_min = None
    for j in sorted(hb_min.running_jobs(), key=lambda j: j.id):
        out_min = hb_min.report(j.id, 1, acc[j.id])
    assert out_min is not None
    assert list(out_min.promoted) == sorted(finite, key=lambda k: finite[k])[:3]


def test_target_value_ends_the_search() -> None:
    hb = Hyperband(SPACE, max_resource=9, eta=3, brackets=[2, 1], seed=0,
                   objective=Objective("eval_accuracy", "maximize", target=0.9))
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    assert hb.report(jobs[0].id, 1, 0.5) is None
    outcome = hb.report(jobs[1].id, 1, 0.95)  # mid-rung: reaches the target
    assert outcome is not None and outcome.finished == (jobs[1].id,)
    assert hb.done and hb.target_reached == jobs[1].id
    assert hb.best() is not None and hb.best().id == jobs[1].id  # type: ignore[union-attr]
    assert all(j.status is JobStatus.STOPPED for j in hb.jobs.values() if j.id != jobs[1].id)
    assert hb.running_jobs() == []
    # minimising with a target: reached at or below it
    assert Objective(target=0.1).reached(0.1) and not Objective(target=0.1).reached(0.2)


def test_to_app_model_matches_agent_types() -> None:
    hb = Hyperband(SPACE, max_resource=9, eta=3, steps_per_unit=10, brackets=[2, 1],
                   max_gpus_per_job=4, seed=0, app_id="hb")
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    for k, j in enumerate(jobs):
        hb.report(j.id, 4, None, serial_iter_time=0.1 * (k + 1))
    model = hb.to_app_model(start_time=100.0)
    assert isinstance(model, AppModel) and model.kind is AppKind.SUCCESSIVE_HALVING
    assert [j.id for j in model.jobs] == [j.id for j in jobs]
    assert all(j.iters_left == 6 and j.iters_total == 10 and j.max_demand == 1
               for j in model.jobs)
    assert [j.serial_iter_time for j in model.jobs] == pytest.approx(
        [0.1 * (k + 1) for k in range(9)])
    # rest of bracket s=2 (3 jobs x (30-10), 1 x (90-30)) then bracket s=1 (5 x 30, 1 x 60)
    assert model.future_phases == [FuturePhase(3, 20.0), FuturePhase(1, 60.0),
                                   FuturePhase(5, 30.0), FuturePhase(1, 60.0)]
    assert model.work_done == 0.0
    states = hb.job_states()
    assert [(s.iters_done, s.iters_left) for s in states] == [(4, 6)] * 9
    # finish rung 0: survivors get demand min(4, eta^1) = 3 and 20 more iterations
    for j in jobs:
        hb.report(j.id, 10, float(j.id[-1]))
    model = hb.to_app_model(start_time=100.0)
    assert len(model.jobs) == 3 and all(j.max_demand == 3 for j in model.jobs)
    assert all(j.iters_left == 20 and j.iters_total == 20 for j in model.jobs)
    assert model.work_done == pytest.approx(sum(10 * 0.1 * (k + 1) for k in range(9)))
    assert model.future_phases[0] == FuturePhase(1, 60.0)
    # the completed rung, for the exact ideal time: 9 jobs of 10 steps, cap 1
    (rung0,) = model.done_phases
    assert rung0 == PhaseShape.of((10 * 0.1 * (k + 1), 1) for k in range(9))
    assert rung0.total == pytest.approx(model.work_done)


def _topology(machines: int, per_machine: int, machines_per_rack: int = 2) -> Topology:
    return Topology(Gpu(f"m{m}g{g}", f"m{m}", f"r{m // machines_per_rack}")
                    for m in range(machines) for g in range(per_machine))


def _split(needs: list[JobNeed], ids: list[str], topo: Topology) -> dict[str, list[str]]:
    """The split of ``ids`` among jobs none of which runs yet."""
    return {j: list(v) for j, v in split(needs, [topo[g] for g in ids], {}).items()}


def test_assign_keeps_jobs_on_one_machine_when_possible() -> None:
    topo = _topology(3, 4)
    hb = Hyperband(SPACE, max_resource=9, eta=3, brackets=[1], max_gpus_per_job=4, seed=0)
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    assert len(jobs) == 5  # bracket s=1 of R=9, eta=3: (5 x 3), (1 x 9)
    for j in jobs:  # finish rung 0 so that the survivor can use 3 GPUs
        hb.report(j.id, 3, float(j.id[-1]))
    (survivor,) = hb.running_jobs()
    need = JobNeed(survivor.id, survivor.iters_left * hb.iter_time(survivor),
                   hb.demand_at(survivor.rung))
    out = _split([need], ["m0g0", "m1g0", "m1g1", "m1g2", "m2g3"], topo)
    assert out == {survivor.id: ["m1g0", "m1g1", "m1g2"]}


def test_gpu_counts_and_packing() -> None:
    needs = [JobNeed("a", 100, 4), JobNeed("b", 50, 4), JobNeed("c", 10, 1)]
    assert gpu_counts(needs, 2) == {"a": 1, "b": 1}
    assert gpu_counts(needs, 7) == {"a": 4, "b": 2, "c": 1}
    assert gpu_counts(needs, 20) == {"a": 4, "b": 4, "c": 1}
    topo = _topology(4, 4)
    ids = [g for g in topo if not g.startswith("m3")] + ["m3g0"]
    out = _split(needs, ids, topo)
    assert {topo.locality(v) for v in out.values()} <= {0, 1}  # each on a single machine
    assert sorted(len(v) for v in out.values()) == [1, 4, 4]


def test_cross_machine_job_stays_in_one_rack() -> None:
    topo = _topology(4, 2, machines_per_rack=2)  # r0: m0,m1; r1: m2,m3
    out = _split([JobNeed("big", 10, 4)], ["m0g0", "m1g0", "m2g0", "m2g1", "m3g0", "m3g1"],
                 topo)
    assert sorted(out["big"]) == ["m2g0", "m2g1", "m3g0", "m3g1"]


@settings(max_examples=200, deadline=None)
@given(
    machines=st.integers(1, 6), per_machine=st.integers(1, 8),
    demands=st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 8)), min_size=0, max_size=8),
    data=st.data(),
)
def test_split_from_nothing_invariants(machines: int, per_machine: int,
                         demands: list[tuple[int, int]], data: st.DataObject) -> None:
    topo = _topology(machines, per_machine)
    ids = data.draw(st.lists(st.sampled_from(sorted(topo)), unique=True))
    needs = [JobNeed(f"j{k}", w, d) for k, (w, d) in enumerate(demands)]
    out = _split(needs, ids, topo)
    given_out = [g for v in out.values() for g in v]
    assert len(given_out) == len(set(given_out)) and set(given_out) <= set(ids)
    demand = {n.job_id: n.max_demand for n in needs}
    assert all(1 <= len(v) <= demand[j] for j, v in out.items())
    # no GPU idles while some job could use more (or is left without any)
    assert len(given_out) == min(len(ids), sum(demand.values()))
    # a job gets a single machine whenever its count fit on the largest free machine
    free = {m: sum(1 for g in ids if topo[g].machine == m) for m in topo.machines}
    for _job, gpus in sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(gpus) <= max(free.values(), default=0):
            assert len({topo[g].machine for g in gpus}) == 1
        for g in gpus:
            free[topo[g].machine] -= 1


def test_split_keeps_a_running_job_whose_count_is_unchanged() -> None:
    """The app scheduler's split (packing.split, the AM's and the simulator's): b runs on
    m1's two GPUs and still gets 2; a, with more work, gets the 2 on m0; nothing moves."""
    topo = _topology(2, 2)
    gpus = [topo[g] for g in sorted(topo)]
    needs = [JobNeed("a", 100, 2), JobNeed("b", 50, 2)]
    out = split(needs, gpus, {"b": ("m1g0", "m1g1")})
    assert out == {"a": ("m0g0", "m0g1"), "b": ("m1g0", "m1g1")}


def test_split_keeps_running_jobs_and_deals_the_rest_one_each_first() -> None:
    """Three GPUs, three jobs: b runs on two of them and keeps them (a move costs a
    restart); the third GPU goes to the waiting job with the most work (a), c waits. With
    one of b's GPUs gone b runs on a single GPU now, placed again, and c still waits; with
    two GPUs, the job running on one (c, the least work) keeps it and a gets the other."""
    topo = _topology(3, 1)
    gpus = [topo[g] for g in sorted(topo)]
    needs = [JobNeed("a", 100, 2), JobNeed("b", 50, 2), JobNeed("c", 10, 1)]
    assert split(needs, gpus, {"b": ("m0g0", "m1g0")}) == {"b": ("m0g0", "m1g0"),
                                                           "a": ("m2g0",)}
    lost = split(needs, gpus[1:], {"b": ("m0g0", "m1g0")})
    assert sorted(lost) == ["a", "b"] and all(len(v) == 1 for v in lost.values())
    assert split(needs, gpus[:2], {"c": ("m1g0",)}) == {"c": ("m1g0",), "a": ("m0g0",)}
    assert split(needs, gpus, {}, max_jobs=1) == {"a": ("m0g0", "m1g0")}
    assert gpu_counts(needs, 3) == {"a": 1, "b": 1, "c": 1}  # nobody runs: one each
    assert gpu_counts(needs, 5, {"b": 2}) == {"b": 2, "a": 2, "c": 1}


@settings(max_examples=200, deadline=None)
@given(machines=st.integers(1, 4), per_machine=st.integers(1, 4),
       demands=st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 4)), max_size=6),
       data=st.data())
def test_split_uses_each_gpu_once_and_keeps_what_it_can(
    machines: int, per_machine: int, demands: list[tuple[int, int]], data: st.DataObject
) -> None:
    """Every GPU at most once, each job within its demand, as many GPUs used as the jobs
    can use; a running job keeps its GPUs (sticky) unless it gains more."""
    topo = _topology(machines, per_machine)
    ids = data.draw(st.lists(st.sampled_from(sorted(topo)), unique=True))
    needs = [JobNeed(f"j{k}", w, d) for k, (w, d) in enumerate(demands)]
    pool = list(ids)
    current: dict[str, tuple[str, ...]] = {}
    for n in needs:  # some jobs run on some of the GPUs already
        k = data.draw(st.integers(0, min(n.max_demand, len(pool))))
        if k:
            current[n.job_id], pool = tuple(pool[:k]), pool[k:]
    out = split(needs, [topo[g] for g in ids], current)
    used = [g for v in out.values() for g in v]
    assert len(used) == len(set(used)) and set(used) <= set(ids)
    demand = {n.job_id: n.max_demand for n in needs}
    assert all(1 <= len(v) <= demand[j] for j, v in out.items())
    assert len(used) == min(len(ids), sum(demand.values()))
    for j, mine in current.items():  # kept, or grown (a new placement of more GPUs)
        assert out[j] == mine or len(out[j]) > len(mine), (j, mine, out)


@settings(max_examples=300, deadline=None)
@given(machines=st.integers(1, 4), per_machine=st.integers(1, 4),
       demands=st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 4)), max_size=6),
       data=st.data())
def test_split_again_with_the_same_gpus_and_jobs_changes_nothing(
    machines: int, per_machine: int, demands: list[tuple[int, int]], data: st.DataObject
) -> None:
    """Splitting the same GPUs among the same jobs again, whatever work they have left by
    then, gives every job the GPUs it got: the simulator skips that split
    (themis.sim.state.AppState.assign)."""
    topo = _topology(machines, per_machine)
    ids = data.draw(st.lists(st.sampled_from(sorted(topo)), unique=True))
    needs = [JobNeed(f"j{k}", w, d) for k, (w, d) in enumerate(demands)]
    first = split(needs, [topo[g] for g in ids], {})
    later = [JobNeed(n.job_id, data.draw(st.integers(0, 1000)), n.max_demand) for n in needs]
    again = split(later, [topo[g] for g in ids], first)
    assert {j: set(v) for j, v in again.items()} == {j: set(v) for j, v in first.items()}
