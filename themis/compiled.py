"""The optional compiled parts (C extensions built by setup.py) and their pure-Python
fall-backs: which are present, what their absence costs, and the one warning a process
logs when it first falls back (``themis doctor`` lists them all).

Each part is optional at build time: without a C compiler the package still installs and
its modules use their Python references instead - the same results, slower. The costs are
measured on the simulator's captured auctions and bid tables (bench/RESULTS.md,
measured; docs/mechanism.md)."""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass

log = logging.getLogger("themis.compiled")

FIX = ("install a C compiler and the Python headers (Debian/Ubuntu: apt-get install gcc "
       "python3-dev), then reinstall: scripts/setup.sh, or pip install --force-reinstall "
       "--no-deps . in the source directory")


@dataclass(frozen=True, slots=True)
class Part:
    module: str  # the extension's module name
    source: str  # its C source, relative to the repository root
    consequence: str  # what its pure-Python fall-back costs


PARTS: tuple[Part, ...] = (
    Part("themis.mechanism.solvers._simplex", "themis/mechanism/solvers/_simplex.c",
         "the LP branch and cut re-solves its LPs with HiGHS instead of the native dual "
         "simplex: auctions ~1.6x slower"),
    Part("themis.mechanism.solvers._separation", "themis/mechanism/solvers/_separation.c",
         "cut separation in Python/numpy: LP branch and cut auctions up to ~2x slower"),
    Part("themis.mechanism._menu", "themis/mechanism/_menu.c",
         "bid menus and bid tables in pure Python: ~4-5x slower"),
    Part("themis.sim._progress", "themis/sim/_progress.c",
         "the simulator moves every app's progress in pure Python: long replays ~1.1x "
         "slower"),
)
BY_MODULE = {p.module: p for p in PARTS}

_lock = threading.Lock()
_warned = False


def import_error(module: str) -> str | None:
    """None when the compiled part ``module`` imports, else why it does not."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


def missing() -> list[Part]:
    """The compiled parts that do not import in this process."""
    return [p for p in PARTS if import_error(p.module) is not None]


def fell_back(module: str) -> None:
    """Called where the code takes the pure-Python path because ``module`` (a key of
    :data:`BY_MODULE`) is missing: the first call in a process logs ONE warning line that
    names every missing part, what it costs and the fix; later calls do nothing."""
    global _warned
    if _warned:
        return
    with _lock:
        if _warned:
            return
        _warned = True
    parts = [BY_MODULE[module], *(p for p in missing() if p.module != module)]
    what = "; ".join(f"{p.module} ({p.consequence})" for p in parts)
    log.warning("compiled part%s missing, using the pure-Python fall-back%s: %s. Fix: %s "
                "(`themis doctor` lists the compiled parts)",
                "s" if len(parts) > 1 else "", "s" if len(parts) > 1 else "", what, FIX)
