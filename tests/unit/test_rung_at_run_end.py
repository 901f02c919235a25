"""A rung is decided on a trial's final values (themis/am/core.py, module docstring): while
a run is live its steps count at most to one short of the target, because writers show the
target step before the value that belongs to it (Keras writes ``evaluation_*_vs_iterations``
about 40 ms before the epoch's ``epoch_loss``)."""

from __future__ import annotations

import pytest

from themis.am.core import AmCore, LaunchCode, LaunchEvent
from themis.am.hyperband import JobStatus
from themis.am.spec import parse_spec


def _core() -> AmCore:
    """Two trials in rung 0 (target 10 steps), the better one promoted to 20 steps."""
    spec = parse_spec({"name": "p", "search_space": {"lr": {"type": "double", "min": 0.1,
                                                            "max": 1.0}},
                       "hyperband": {"max_resource": 2, "eta": 2, "brackets": [1],
                                     "steps_per_unit": 10},
                       "objective": {"metric": "epoch_loss"},
                       "job": {"command": "run {max_steps} {checkpoint_uri} {lr}"}})
    return AmCore(spec, "p", clock=lambda: 0.0)


def _start(core: AmCore, job_id: str) -> None:
    core.apply(LaunchEvent(job_id, LaunchCode.STARTED, 0))


def test_the_target_step_before_its_value_does_not_decide_the_rung() -> None:
    core = _core()
    a, b = sorted(core.hb.jobs)
    assert core.hb.jobs[a].target_steps == 10
    for j in (a, b):
        _start(core, j)
    core.progress(b, 10, 0.5)  # b's last epoch: 0.5
    core.apply(LaunchEvent(b, LaunchCode.REACHED, 10, 0))
    assert core.hb.jobs[b].status is JobStatus.RUNG_DONE
    # a's event files show step 10 with the previous epoch's value (0.4, better than b's)
    assert core.progress(a, 10, 0.4) is None
    assert core.hb.jobs[a].status is JobStatus.RUNNING
    assert core.hb.jobs[a].steps_done == 9 and core.record(a).seen_steps == 10
    core.progress(a, 10, 0.9)  # its last epoch's value, read when the run has ended
    core.apply(LaunchEvent(a, LaunchCode.REACHED, 10, 0))
    assert core.hb.jobs[b].status is JobStatus.RUNNING and core.hb.jobs[b].rung == 1
    assert core.hb.jobs[a].status is JobStatus.STOPPED
    assert core.hb.jobs[a].loss == 0.9 and core.hb.jobs[a].steps_done == 10


def test_a_run_that_ran_past_its_target_counts_its_steps() -> None:
    """A program that ignores its step budget is stopped once it ran past its target; both
    launchers report that as REACHED (its run is complete), and the steps count in full."""
    core = _core()
    a, b = sorted(core.hb.jobs)
    for j in (a, b):
        _start(core, j)
    core.progress(a, 12, 0.3)  # past the target (one epoch over)
    assert core.hb.jobs[a].steps_done == 9
    core.apply(LaunchEvent(a, LaunchCode.REACHED, 12, 0))
    assert core.hb.jobs[a].status is JobStatus.RUNG_DONE and core.hb.jobs[a].steps_done == 12


@pytest.mark.parametrize("seen", [10, 12])
def test_a_run_stopped_after_its_target_step_runs_again(seen: int) -> None:
    """A lease end between the target step and the run's own exit (Keras: the last batch
    is logged before the epoch's ``epoch_loss`` and backup): the STOPPED run does not decide
    the rung, nor do reports read after it; the job's next run, from its checkpoint, does."""
    core = _core()
    a, b = sorted(core.hb.jobs)
    for j in (a, b):
        _start(core, j)
    core.progress(b, 10, 0.5)
    core.apply(LaunchEvent(b, LaunchCode.REACHED, 10, 0))
    core.progress(a, seen, 0.4)  # the previous epoch's value, better than b's
    core.apply(LaunchEvent(a, LaunchCode.STOPPED, seen, -15))
    assert core.hb.jobs[a].status is JobStatus.RUNNING and core.hb.jobs[a].steps_done == 9
    assert a in {j.id for j in core.runnable()}  # launched again
    assert core.progress(a, seen, 0.4) is None  # a late read of its event files
    assert core.hb.jobs[a].steps_done == 9
    core.apply(LaunchEvent(a, LaunchCode.STARTED, 10))  # restored at its last backup
    core.progress(a, 10, 0.9)  # the target's own value
    core.apply(LaunchEvent(a, LaunchCode.REACHED, 10, 0))
    assert core.hb.jobs[a].status is JobStatus.STOPPED and core.hb.jobs[a].loss == 0.9
    assert core.hb.jobs[b].rung == 1


def test_a_run_stopped_before_its_target_counts_its_steps() -> None:
    core = _core()
    a, _ = sorted(core.hb.jobs)
    _start(core, a)
    core.progress(a, 7, 0.4)
    core.apply(LaunchEvent(a, LaunchCode.STOPPED, 7, -15))
    assert core.hb.jobs[a].steps_done == 7 and core.record(a).last_run_stopped
    core.progress(a, 10, 0.4)  # its last value, read after the stop: not the rung's end
    assert core.hb.jobs[a].steps_done == 9


def test_without_a_live_run_steps_count_at_once() -> None:
    """Reports after the run ended (late, or a resumed run's restore) are not capped."""
    core = _core()
    a, _ = sorted(core.hb.jobs)
    core.progress(a, 10, 0.3)
    assert core.hb.jobs[a].status is JobStatus.RUNG_DONE


def test_a_new_attempt_has_no_live_run() -> None:
    core = _core()
    a, _ = sorted(core.hb.jobs)
    _start(core, a)
    state = core.to_state()
    assert "live" not in state["jobs"][a]
    core2 = _core()
    core2.restore(state)
    assert not core2.record(a).live
    core2.progress(a, 10, 0.3)
    assert core2.hb.jobs[a].status is JobStatus.RUNG_DONE
