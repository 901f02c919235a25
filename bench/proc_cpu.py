"""CPU seconds by kind of process on this machine while a benchmark runs.

The mini-cluster's hosts are containers on this machine, so every process of the cluster
(the RM and its engine, NodeManagers, HDFS, the AMs, their agents and the training jobs)
is in this machine's ``/proc``. :class:`ProcCpu` reads every process's user + system time
(``/proc/<pid>/stat``, fields 14-15) every ``period`` seconds in a thread and sums the last
value seen per process by kind:

* a Python process by the module it runs (``-m themis.jobs.train``) or its script's name;
* a Java process by its main class's simple name (``ResourceManager``, ``NodeManager``);
* anything else by its command name (``dockerd``).

A process that ends between two reads loses what it used since the last read (at most
``period`` seconds of CPU each), so short processes are under-counted alike in every run.
Linux only.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def kind(argv: list[str], comm: str) -> str:
    """The kind of a process from its command line (``comm`` when it has none)."""
    if not argv:
        return comm
    exe = os.path.basename(argv[0])
    if exe.startswith("python"):
        if "-c" in argv[1:]:
            return f"{exe} -c"
        if "-m" in argv[1:]:
            i = argv.index("-m", 1)
            if i + 1 < len(argv):
                return argv[i + 1]
        for a in argv[1:]:
            if not a.startswith("-"):
                return os.path.basename(a)
        return exe
    if exe == "java":
        main = [a for a in argv[1:] if not a.startswith("-") and "." in a
                and "/" not in a and "=" not in a and not a.endswith(".jar")]
        return main[-1].rsplit(".", 1)[-1] if main else "java"
    return exe or comm


class ProcCpu:
    """Sums CPU seconds by :func:`kind` over the processes seen while it runs."""

    def __init__(self, period: float = 1.0, proc: Path = Path("/proc")) -> None:
        self.period = period
        self.proc = proc
        self._seen: dict[tuple[int, int], tuple[str, float]] = {}
        self._kinds: dict[tuple[int, int], tuple[str, str]] = {}  # key -> (comm, kind)
        self._base: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="proc-cpu", daemon=True)
        self._lock = threading.Lock()

    def _read(self) -> dict[tuple[int, int], tuple[str, float]]:
        out: dict[tuple[int, int], tuple[str, float]] = {}
        for d in self.proc.iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                key = (int(d.name), int(fields[19]))  # pid, start time: pids are reused
                cpu = (int(fields[11]) + int(fields[12])) / TICKS
                known = self._kinds.get(key)
                # a process's kind is read from its command line once, and again after an
                # exec (its comm changes) or while it has no command line yet
                if known is None or known[0] != comm:
                    argv = [a.decode(errors="replace")
                            for a in (d / "cmdline").read_bytes().split(b"\0") if a]
                    known = (comm, kind(argv, comm))
                    if argv:
                        self._kinds[key] = known
            except (OSError, ValueError, IndexError):  # ended, or read mid-write
                continue
            out[key] = (known[1], cpu)
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = self._read()
            with self._lock:
                self._seen.update(now)
            self._stop.wait(self.period)

    def start(self) -> ProcCpu:
        # what processes running already had used does not count
        self._base = {k: cpu for k, (_, cpu) in self._read().items()}
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> dict[str, dict[str, float]]:
        """Stop and return ``{kind: {"cpu_s", "processes"}}``, most CPU first."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._seen.update(self._read())
            by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
            for key, (k, cpu) in self._seen.items():
                by[k][0] += cpu - self._base.get(key, 0.0)
                by[k][1] += 1
        wall = time.monotonic() - self._t0
        rows = sorted(by.items(), key=lambda kv: -kv[1][0])
        return {"_wall_s": {"cpu_s": round(wall, 1), "processes": 0}} | {
            k: {"cpu_s": round(c, 1), "processes": int(n)} for k, (c, n) in rows if c >= 0.05}
