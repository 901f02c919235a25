"""The job runner's node-wide start-up slots: with one slot, a second job starts only when
the first has reported ``start``; with no limit both start at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# a "job" that takes 1 s to start (like a TensorFlow import), then reports start and runs on
JOB = ('import json, sys, time; t0 = time.time(); time.sleep(1.0); '
       'print(json.dumps({"event": "start", "step": 0}), flush=True); '
       'print("T", t0, flush=True); time.sleep(0.5)')


def _starts(tmp: Path, slots: int) -> list[float]:
    procs = [subprocess.Popen(
        [sys.executable, "-m", "themis.am.launchers.yarn.runner", "--am", "http://127.0.0.1:9",
         "--job-id", f"j{i}", "--logdir", str(tmp / f"logs{i}"), "--report-every", "0.2",
         "--start-slots", str(slots), "--slot-dir", str(tmp), "--", sys.executable, "-c", JOB],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(2)]
    starts = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        starts += [float(line.split()[1]) for line in out.splitlines() if line.startswith("T ")]
    return sorted(starts)


def test_one_slot_serialises_job_start_ups(tmp_path: Path) -> None:
    t0 = time.time()
    a, b = _starts(tmp_path, slots=1)
    assert b - a >= 0.9  # the second job waited for the first one's start
    assert a >= t0


def test_no_limit_starts_jobs_at_once(tmp_path: Path) -> None:
    a, b = _starts(tmp_path, slots=0)
    assert b - a < 0.9
