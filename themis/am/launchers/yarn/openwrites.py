"""Which files under a directory the processes of a group hold open for writing: how the job
runner tells a job that is writing its checkpoint from one that is between two writes, when
it must stop a job that checkpoints more often than its quiet-period rule allows (Keras'
backup at the end of every short epoch; :mod:`themis.am.launchers.yarn.runner`, "stop").

Read from ``/proc`` (Linux, where NodeManagers run): each process's group from
``/proc/PID/stat``, its descriptors from ``/proc/PID/fd`` and their access mode from
``/proc/PID/fdinfo``. psutil would give the same, but it is not among the base package's
dependencies, which is all a YARN container may hold; these are the three files it reads.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _group_pids(pgid: int, proc: Path) -> list[int]:
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # (the process left meanwhile)
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid):
            pids.append(int(entry.name))
    return pids


def stopped(pgid: int, proc: Path = PROC) -> bool:
    """Whether every thread of every process of group ``pgid`` is stopped (state ``T``: a
    SIGSTOP took effect; a thread in the middle of a write stops once the write's call
    returned)."""
    for pid in _group_pids(pgid, proc):
        try:
            tids = os.listdir(proc / str(pid) / "task")
        except OSError:  # (the process left meanwhile)
            continue
        for tid in tids:
            try:
                stat = (proc / str(pid) / "task" / tid / "stat").read_text()
            except OSError:
                continue
            if stat[stat.rfind(")") + 2:].split()[0] not in ("T", "t", "Z", "X"):  # or dead
                return False
    return True


def _writable(fdinfo: Path) -> bool:
    for line in fdinfo.read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & (os.O_WRONLY | os.O_RDWR) != 0
    return False


def open_for_writing(pgid: int, under: Path, proc: Path = PROC) -> list[str] | None:
    """Paths under ``under`` that a process of group ``pgid`` holds open for writing (or
    reading and writing); None when ``/proc`` cannot tell (not Linux, not readable)."""
    if not (proc / "self" / "fd").is_dir():
        return None
    root = os.path.realpath(under)
    found: list[str] = []
    for pid in _group_pids(pgid, proc):
        fds = proc / str(pid) / "fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for fd in names:
            try:
                target = os.readlink(fds / fd)
                if (target == root or target.startswith(root + os.sep)) \
                        and _writable(proc / str(pid) / "fdinfo" / fd):
                    found.append(target)
            except (OSError, ValueError):  # (closed meanwhile)
                continue
    return found
