"""The objective of a search (themis.am.objective): spec section, profiler tag, ranking and
what ``themis status`` and the reports show. No TensorFlow runs."""

from __future__ import annotations

import math

from themis.am.hyperband import Hyperband
from themis.am.launchers.yarn.commands import container_command
from themis.am.objective import Objective, parse_objective, trial_json
from themis.am.searchspace import Double, SearchSpace
from themis.client.cli import _render
from themis.profiler.events import ScalarPoint
from themis.profiler.profiler import JobProfile


def _parse(raw: object) -> tuple[Objective, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    return parse_objective(raw, lambda f, p: problems.append((f, p))), problems


def test_objective_section_defaults_and_every_bad_field() -> None:
    assert _parse(None) == (Objective("eval_loss", "minimize", None), [])
    obj, problems = _parse({"metric": "eval/top1_accuracy", "goal": "maximize", "target": 1})
    assert problems == [] and obj.maximize and obj.target == 1.0
    assert obj.to_dict() == {"metric": "eval/top1_accuracy", "goal": "maximize", "target": 1.0}
    _, problems = _parse({"metric": "a b", "goal": "largest", "target": float("inf"), "x": 1})
    assert [f for f, _ in problems] == ["objective.x", "objective.metric", "objective.goal",
                                        "objective.target"]
    assert _parse([1])[1][0][0] == "objective"


def test_rank_key_puts_missing_and_diverged_values_last_for_both_goals() -> None:
    for goal in ("minimize", "maximize"):
        o = Objective(goal=goal)
        assert o.rank_key(None) == o.rank_key(math.nan) == o.rank_key(math.inf) == math.inf
    assert Objective(goal="maximize").rank_key(0.9) < Objective(goal="maximize").rank_key(0.1)
    assert Objective(goal="maximize", target=0.9).reached(0.95)
    assert not Objective(goal="maximize", target=0.9).reached(math.nan)


def test_profiler_reads_any_scalar_tag_as_the_objective() -> None:
    prof = JobProfile("j", metric="eval_accuracy")
    for step, (loss, acc) in enumerate([(2.0, 0.3), (1.0, 0.6), (0.5, 0.8)], start=1):
        prof.add(ScalarPoint("loss", step, loss, 0.0, "f"))
        prof.add(ScalarPoint("eval_accuracy", step, acc, 0.0, "f"))
    assert prof.objective_value() == 0.8  # the newest value by step
    assert JobProfile("j", metric="eval_accuracy").objective_value() is None
    default = JobProfile("j")
    default.add(ScalarPoint("loss", 1, 2.0, 0.0, "f"))
    assert default.objective_value() == 2.0  # eval_loss falls back to the training loss


def test_status_shows_the_best_trial_and_its_hyper_parameters() -> None:
    hb = Hyperband(SearchSpace([Double("learning_rate", 1e-3, 1e-1, log=True)]),
                   max_resource=3, eta=3, brackets=[0],
                   objective=Objective("eval_accuracy", "maximize"))
    jobs = sorted(hb.running_jobs(), key=lambda j: j.id)
    assert len(jobs) == 2 and jobs[0].target_steps == 3
    hb.report(jobs[0].id, 1, 0.7)
    st = {"objective": hb.objective.to_dict(), "best": None, "jobs": [],
          "top": [trial_json(j, hb.objective) for j in hb.top(3)]}
    lines = _render({"id": "application_1_0001", "name": "a"}, st, detail=False)
    assert lines[1].startswith(f"    leading trial: {jobs[0].id} eval_accuracy=0.7 "
                               "learning_rate=")
    hb.report(jobs[0].id, 3, 0.7)
    hb.report(jobs[1].id, 3, 0.9)
    best = hb.best()
    assert best is not None and best.id == jobs[1].id
    st["best"] = {"id": best.id, "loss": best.loss, "config": best.config}
    assert f"best trial: {best.id} eval_accuracy=0.9 learning_rate=" in \
        _render({"id": "x", "name": "a"}, st, detail=True)[1]


def test_job_runners_report_the_objective_tag() -> None:
    cmd = container_command("python3", "http://127.0.0.1:9", "j", 1, "", 1.0, "true",
                            "eval_accuracy")
    assert "--metric eval_accuracy " in cmd
