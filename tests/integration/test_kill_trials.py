"""Job processes SIGKILLed under ``themis standalone`` (issue 22): every killed job is
restarted from its last complete checkpoint, no checkpoint fails verification, no GPU is
used by two job processes or granted to two apps at once. ``bench/bench_kill_trials.py``
runs the long version (>= 20 trials); :mod:`tests.integration.kill_trials` has the
definitions. The checks themselves are tested on hand-made reports (they can fail)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kill_trials import Kill, _check, _double_grants, _double_use, run_once

needs_tf = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                              reason="needs TensorFlow (the 'train' extra)")


@needs_tf
@pytest.mark.slow
@pytest.mark.integration
def test_killed_jobs_resume_from_their_last_complete_checkpoint(tmp_path: Path) -> None:
    r = run_once(tmp_path, 3, seed=1, apps=1, timeout_s=600.0)  # ~80-140 s at load 2-8
    assert r.status == 0, (tmp_path / "driver.log").read_text()[-2000:]
    assert len(r.kills) == 3
    for k in r.kills:
        assert k.corrupt == [], k
        assert k.restored is not None, k
        assert k.restored == (k.last_complete or 0), k  # the newest verified checkpoint
        assert k.skipped == [], k
        assert k.lost_steps is not None and k.lost_steps >= 0, k
        assert k.problem == "", k
    assert any(k.restored for k in r.kills)  # some kill did land after a checkpoint
    assert r.corrupt_at_end == []
    assert r.double_use == []
    assert r.double_grants == []


def _seg(index: int, gpus: list[str], t0: float, t1: float | None) -> dict[str, Any]:
    return {"index": index, "gpus": gpus, "t_start": t0, "t_end": t1}


def test_double_use_check_finds_overlapping_job_processes() -> None:
    apps = {"a": {"jobs": {"j0": {"segments": [_seg(0, ["g0"], 0.0, 10.0)]},
                           "j1": {"segments": [_seg(0, ["g1"], 0.0, 3.0),
                                               _seg(1, ["g1"], 3.5, None)]}}},
            "b": {"jobs": {"j0": {"segments": [_seg(0, ["g1"], 1.0, 2.0),
                                               _seg(1, ["g0"], 10.0, 12.0)]}}}}
    bad = _double_use({"apps": apps})
    assert len(bad) == 1 and "GPU g1" in bad[0] and "a/j1" in bad[0] and "b/j0" in bad[0]
    apps["b"]["jobs"]["j0"]["segments"][0] = _seg(0, ["g1"], 3.0, 3.4)  # between a's two
    assert _double_use({"apps": apps}) == []


def test_double_grant_check_finds_a_gpu_granted_over_a_running_lease() -> None:
    def grant(app: str, start: float, expiry: float) -> dict[str, Any]:
        return {"app": app, "gpus": ["g0"], "start": start, "expiry": expiry}

    apps = {"a": {"completion_s": None}, "b": {"completion_s": None}}
    ok = [{"t": 0.0, "grants": [grant("a", 0.0, 30.0)]},
          {"t": 30.0, "grants": [grant("b", 30.0, 60.0)]}]
    assert _double_grants({"apps": apps, "rounds": ok}) == []
    early = [{"t": 0.0, "grants": [grant("a", 0.0, 30.0)]},
             {"t": 20.0, "grants": [grant("b", 20.0, 50.0)]}]
    assert len(_double_grants({"apps": apps, "rounds": early})) == 1
    apps["a"]["completion_s"] = 19.0  # a finished and gave its lease back
    assert _double_grants({"apps": apps, "rounds": early}) == []


def test_a_kill_names_the_checkpoint_write_it_landed_in() -> None:
    k = Kill("a", "j", 0, 1, 0.0, 10, [], [], [], ["themis-ckpt-x"])
    assert k.phase == ""  # a temporary directory that its live writer removed later
    k.local_left = ["themis-ckpt-x"]
    assert k.phase == "local"
    k.partial = [".tmp-ckpt-000000000020-ab12cd34"]
    assert k.phase == "upload"


def _fake_run(root: Path, start_steps: list[int | None]) -> Path:
    """A run directory with one job whose segments started at ``start_steps``."""
    import json

    run = root / "run"
    job = run / "apps" / "a" / "jobs" / "j"
    (job / "checkpoints").mkdir(parents=True)
    (job / "logs").mkdir()
    segs = []
    for i, step in enumerate(start_steps):
        segs.append({**_seg(i, ["g0"], 10.0 * i, 10.0 * i + 9), "start_step": step})
        ev = [] if step is None else [{"event": "start", "step": step, "skipped": []}]
        (job / f"segment-{i}.out").write_text("".join(json.dumps(e) + "\n" for e in ev))
    report = {"apps": {"a": {"completion_s": 40.0, "jobs": {"j": {"segments": segs}}}},
              "rounds": []}
    (run / "report.json").write_text(json.dumps(report))
    (root / "tmp").mkdir()
    return run


@pytest.mark.parametrize(("start_steps", "problem"), [
    ([0, 50], ""),
    ([0, None, 50], ""),  # segment 1 was stopped before its start event: it restored nothing
    ([0, 40], "resumed from step 40, last complete checkpoint at the kill: 50"),
    ([0, None], "the job was not restarted"),
])
def test_restore_check_compares_with_the_last_complete_checkpoint(
        tmp_path: Path, start_steps: list[int | None], problem: str) -> None:
    run = _fake_run(tmp_path, start_steps)
    k = Kill("a", "j", 0, 1, 5.0, 50, [], [], [], [])
    r = _check(tmp_path, run, 0, [k], 1.0, tmp_path / "tmp")
    assert k.problem.startswith(problem) and bool(k.problem) == bool(problem)
    assert r.lost == ([k] if problem else [])
