"""No silent search (docs/am.md, "Objective"): a trial that ends a rung without a value of
the objective is flagged with the tags it did write, and a search in which no trial wrote
the objective fails with a message naming them, unless the objective is ``optional``."""

from __future__ import annotations

from typing import Any

import pytest

from themis.am.core import AmCore
from themis.am.spec import parse_spec
from themis.am.speccheck import SpecError


def _core(**objective: Any) -> AmCore:
    spec = parse_spec({"name": "p", "search_space": {"lr": {"type": "double", "min": 0.1,
                                                            "max": 1.0}},
                       "hyperband": {"max_resource": 2, "eta": 2, "brackets": [1],
                                     "steps_per_unit": 10},
                       "objective": {"metric": "epoch_loss", **objective},
                       "job": {"command": "run {max_steps} {checkpoint_uri} {lr}"}})
    return AmCore(spec, "p", clock=lambda: 0.0)


KERAS_TAGS = ["train/batch_loss", "train/epoch_accuracy", "validation/val_acc"]


def _run_search(core: AmCore, value_of: dict[int, float | None]) -> None:
    """Report every trial at every target until Hyperband ends; trial i's value is
    ``value_of[i]`` (None: the objective is not in its event files)."""
    ids = sorted(core.hb.jobs)
    while not core.done:
        for i, job_id in enumerate(ids):
            job = core.hb.jobs.get(job_id)
            if job is not None and job.status.value == "running":
                v = value_of.get(i)
                core.progress(job_id, job.target_steps, v,
                              source="validation/epoch_loss" if v is not None else None,
                              tags=KERAS_TAGS if v is None else ())
        ids = sorted(core.hb.jobs)


def test_a_search_without_its_objective_fails_naming_the_tags_written() -> None:
    core = _core()
    _run_search(core, {})
    notes = core.take_notes()
    assert len(notes) == len(core.hb.jobs)  # every trial flagged, once
    assert all("no value of the objective 'epoch_loss'" in n and "train/batch_loss" in n
               for n in notes)
    assert all(core.record(j).missing_objective for j in core.hb.jobs)
    assert core.objective_never_seen and core.failed
    why = core.objective_failure()
    assert "'epoch_loss'" in why and "validation/val_acc" in why and "optional" in why
    assert "\n" not in why


def test_an_optional_objective_lets_the_search_end_well() -> None:
    core = _core(optional=True)
    _run_search(core, {})
    assert core.done and not core.failed and not core.objective_never_seen
    assert core.take_notes()  # still flagged: nothing ranked


def test_only_the_trials_without_a_value_are_flagged() -> None:
    core = _core()
    _run_search(core, {0: 0.5})
    flagged = [j for j in core.hb.jobs if core.record(j).missing_objective]
    assert flagged and len(flagged) < len(core.hb.jobs)
    assert not core.failed
    ok = next(j for j in core.hb.jobs if not core.record(j).missing_objective)
    assert core.record(ok).objective_source == "validation/epoch_loss"


def test_optional_must_be_a_boolean() -> None:
    with pytest.raises(SpecError, match=r"objective\.optional"):
        _core(optional="yes")


def test_the_yarn_report_carries_the_source_or_the_tags_and_refuses_bad_ones() -> None:
    import json

    from themis.am.launchers.yarn.report import ReportRefused, parse_report

    ok = parse_report(json.dumps({"job_id": "j", "steps": 5, "loss": None,
                                  "objective_source": None,
                                  "tags": ["train/batch_loss"]}).encode(), "c1")
    assert ok["tags"] == ["train/batch_loss"]
    for bad in ({"tags": "train/batch_loss"}, {"tags": [1]}, {"tags": ["x"] * 257},
                {"objective_source": 3}):
        with pytest.raises(ReportRefused, match=next(iter(bad))):
            parse_report(json.dumps({"job_id": "j", **bad}).encode(), "c1")


def test_themis_status_names_the_trials_without_the_objective_and_their_tags() -> None:
    from themis.client.cli import _render

    app = {"id": "application_1_0001", "name": "k", "state": "RUNNING",
           "finalStatus": "UNDEFINED", "user": "alice"}
    st = {"objective": {"metric": "val_loss"}, "jobs": [
        {"id": "k-s1-c0", "status": "rung-done", "steps": 58, "target_steps": 58,
         "loss": None, "missing_objective": True,
         "tags": ["train/batch_loss", "validation/epoch_loss"]},
        {"id": "k-s1-c1", "status": "running", "steps": 10, "target_steps": 58,
         "loss": 0.5, "objective_source": "validation/val_loss", "missing_objective": False}]}
    text = "\n".join(_render(app, st, detail=True))
    assert "1 trial(s) without any val_loss value" in text
    assert "validation/epoch_loss" in text
    assert "val_loss=0.5000 (validation/val_loss)" in text
