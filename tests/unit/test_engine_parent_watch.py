"""The engine exits when its ResourceManager dies without stopping it (kill -9): the parent
watch of ``themis.yarn.engine`` (docs/yarn.md, "Restart and HA"), with real processes. The
in-JVM case (engine killed with the RM, restart with a fresh engine) is RmEngineKillIT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# The "engine": the real parent watch, as main() runs it (here on the main thread).
# The parent is read before anything slow (as main() does): an RM killed while the engine
# still imports must not leave it watching its new parent.
CHILD = ("import os\nparent = os.getppid()\nfrom themis.yarn.engine import _watch_parent\n"
         "_watch_parent(parent)\n")
# The "RM": starts the engine, prints its PID, then lives until killed.
PARENT = (
    "import subprocess, sys, time\n"
    f"p = subprocess.Popen([sys.executable, '-c', {CHILD!r}])\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_engine_exits_when_its_rm_is_killed() -> None:
    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH", "")) if p))
    rm = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                          env=env)
    engine = -1
    try:
        assert rm.stdout is not None
        engine = int(rm.stdout.readline())
        time.sleep(1.5)  # more than one watch interval: it stays while its RM lives
        assert _alive(engine)
        os.kill(rm.pid, signal.SIGKILL)
        rm.wait(10)
        deadline = time.monotonic() + 15
        while _alive(engine) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(engine), f"engine {engine} outlived its killed RM"
    finally:
        rm.kill()
        rm.wait(10)
        if engine > 0 and _alive(engine):
            os.kill(engine, signal.SIGKILL)
