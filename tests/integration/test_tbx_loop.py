"""A PyTorch-style training loop writing its scalars with ``tensorboardX``
(examples/jobs/tbx_loop.py: no Themis import, numpy instead of PyTorch) searched by
Hyperband under ``themis standalone`` (docs/jobs.md, "PyTorch"): four trials in rung 0 and
two in rung 1, each with a finite value of ``Loss/val`` read from its run directory
``run/``; each rung promotes the trials its values at that rung rank best; every promoted
run resumes from its ``ckpt-<step>`` instead of starting over.

About 30 s on the project's 2-core VM.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

for module in ("tensorboardX", "sklearn"):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (the example's own dependency)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "jobs" / "tbx-hyperband.yaml"
RUNGS = (40, 80, 160)  # steps of rungs 0, 1, 2 (steps_per_unit 40; 1, 2, 4 units)


def test_tensorboardx_trials_are_ranked_by_their_loss_and_the_best_promoted(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "themis.cli", "standalone", "--out", str(out),
                        "--display", "lines", "--refresh-s", "30", "--machines", "1",
                        "--gpus-per-machine", "2", "--app", str(SPEC)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    app = report["apps"][0] if isinstance(report["apps"], list) else \
        next(iter(report["apps"].values()))
    assert app["state"] == "done"
    jobs = app["jobs"]
    assert len(jobs) == 4
    for job_id, j in jobs.items():
        assert j["loss"] is not None and math.isfinite(j["loss"]), (job_id, j)
        assert j["objective_source"] == "run/Loss/val" and not j["missing_objective"]
        assert j["steps_done"] == j["target_steps"] == RUNGS[j["rung"]], (job_id, j)

    from themis.profiler import Profiler

    root = out / "apps" / "tbx-loop" / "jobs"

    def value_at(job_id: str, step: int) -> float:
        prof = Profiler(metric="Loss/val")
        prof.add_job(job_id, root / job_id / "logs")
        prof.poll()
        return dict(prof.job(job_id).metric_series["run/Loss/val"])[step]

    for rung, steps in enumerate(RUNGS[:-1]):  # each rung promoted its best by that value
        ran = [k for k, j in jobs.items() if j["rung"] >= rung]
        promoted = [k for k in ran if jobs[k]["rung"] > rung]
        assert len(ran) == 4 // 2 ** rung and len(promoted) == len(ran) // 2, jobs
        assert max(value_at(k, steps) for k in promoted) <= min(
            value_at(k, steps) for k in ran if k not in promoted), (rung, jobs)
    best = next(k for k, j in jobs.items() if j["rung"] == 2)
    assert app["best"]["job"] == best and jobs[best]["status"] == "finished"
    assert f"best {best} Loss/val" in p.stdout
    # every run of the best trial after the first resumed where the last one ended
    starts = [re.search(r"starting at step (\d+) of (\d+)", s.read_text())
              for s in sorted((root / best).glob("segment-*.out"))]
    assert [(int(m[1]), int(m[2])) for m in starts if m] == [(0, 40), (40, 80), (80, 160)]
