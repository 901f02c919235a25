"""Standard output is for data: native libraries' chatter goes to standard error.

Commands whose standard output is data (``themis auction``'s JSON, ``themis sim``'s result
lines) do their work inside :func:`stdout_to_stderr` and print only after it, so nothing a
library writes meanwhile - through Python or straight to file descriptor 1 from C, where
``contextlib.redirect_stdout`` cannot reach - lands among the data. Libraries are also
silenced at the source where they allow it: ``highspy.Highs()`` writes HiGHS' banner
("Running HiGHS 1.16.0 ...", highspy 1.16) to fd 1 from its constructor, before any
option can be set, so HiGHS models are made from the core class it extends, which prints
nothing (themis.mechanism.solvers.highs.new_highs; made inside :func:`stdout_to_stderr`
too, should a version print there); ``gurobipy.Env(params={"OutputFlag": 0})`` starts
Gurobi's environment without its licence lines.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0  # stdout_to_stderr blocks open, in all threads (file descriptors are per process)
_saved = -1  # a duplicate of the original fd 1 while redirected, else -1
_libc: ctypes.CDLL | None = None


def _flush_all() -> None:
    """Write out what Python's and C's standard output buffers hold, to wherever fd 1
    leads now."""
    global _libc
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)  # every C stdio stream, stdout among them
    except (OSError, AttributeError):  # pragma: no cover - no C library to flush
        pass


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Within the block, everything written to standard output - by Python code or by a
    native library writing to file descriptor 1 - goes to standard error instead. Blocks
    nest and may overlap across threads: fd 1 is restored when the last one ends. When
    fd 1 or fd 2 is closed, nothing is redirected."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _flush_all()
            try:
                saved = os.dup(1)
            except OSError:
                saved = -1
            if saved >= 0:
                try:
                    os.dup2(2, 1)
                except OSError:
                    os.close(saved)
                    saved = -1
            _saved = saved
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved >= 0:
                _flush_all()
                os.dup2(_saved, 1)
                os.close(_saved)
                _saved = -1
