"""TensorFlow and the OR-Tools CP-SAT back-end loaded into one process.

OR-Tools 9.15 segfaults in ``CpSolver.Solve`` once TensorFlow 2.21 is imported (each alone
works). The project keeps them in separate processes (tests/conftest.py), and the lock
(requirements/lock.txt, requirements/constraints.in) holds versions that do coexist: this
test checks the installed pair in a subprocess, so that a crash is a failing test naming
the versions, not a dead test run. It fails on an incompatible pair (scripts/drift.sh shows
it when the newest versions regress)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("ortools") is None,
    reason="needs both the 'train' extra (TensorFlow) and OR-Tools",
)

_PROGRAM = """
import json, random
import tensorflow as tf
import ortools
from themis.mechanism.solvers import Bundle, PackingProblem
from themis.mechanism.solvers.auto import make_solver
rng = random.Random(3)
apps = tuple(tuple(Bundle(rng.randrange(1, 1 << 12), rng.uniform(0.1, 5.0)) for _ in range(6))
             for _ in range(8))
problem = PackingProblem(12, apps)
cp, hs = make_solver("cpsat").solve(problem), make_solver("highs").solve(problem)
print(json.dumps({"tf": tf.__version__, "ortools": ortools.__version__,
                  "cpsat": cp.objective, "highs": hs.objective}))
"""


def test_tensorflow_then_cpsat_in_one_process() -> None:
    proc = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, (
        f"import tensorflow + CP-SAT solve exited {proc.returncode} (negative: killed by that "
        f"signal): these TensorFlow and OR-Tools versions cannot share a process; pin a "
        f"compatible pair in requirements/constraints.in\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cpsat"] == pytest.approx(out["highs"], rel=1e-6), out
