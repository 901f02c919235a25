"""``themis doctor``: what this installation has and what it lacks, one line each.

The version; the compiled parts (C extensions, optional at build time: without them the
pure-Python fall-backs run, slower); the auction's solver back-ends; the pyproject extras;
Java and Maven (YARN mode); the jars of the ResourceManager plugin and the application
master. A *problem* is a missing part the installation should have (a compiled part, a core
dependency, a half-installed extra); optional parts that are absent (an extra not
installed, no Gurobi licence, no Java) are listed with the command that adds them but are
not problems. Exit status 0, or with --strict 1 when there is a problem."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from themis import __version__, compiled

DIST = "themis-yarn"

#: pyproject.toml's extras: (distribution, module looked up to tell it is installed, or
#: None: the distribution's metadata only). tests/unit/test_doctor.py keeps it in step.
EXTRAS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "gurobi": (("gurobipy", "gurobipy"),),
    "cpsat": (("ortools", "ortools"),),
    "train": (("tensorflow-cpu", "tensorflow"), ("tensorboard", "tensorboard"),
              ("scikit-learn", "sklearn")),
    "dev": (("pytest", "pytest"), ("pytest-timeout", "pytest_timeout"),
            ("testcontainers", "testcontainers"), ("docker", "docker"),
            ("hypothesis", "hypothesis"), ("mypy", "mypy"), ("ruff", "ruff"),
            ("import-linter", "importlinter"),
            ("types-PyYAML", None), ("ortools", "ortools"), ("grpcio-tools", "grpc_tools"),
            ("requests-gssapi", "requests_gssapi"), ("tensorboardX", "tensorboardX")),
    "kerberos": (("requests-gssapi", "requests_gssapi"),),
}
JAR_BUILD = "mvn -B -q package -DskipTests (at the repository root)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def pip_extra(extra: str) -> str:
    return f"pip install '{DIST}[{extra}]'"


@dataclass(frozen=True, slots=True)
class Check:
    group: str  # themis | compiled | solver | extra | tool | jar
    name: str
    ok: bool
    detail: str  # what is there (version, path), or what is missing and what that costs
    fix: str = ""  # how to add it ("" when ok)
    required: bool = False  # not ok and required: a problem
    version: str = ""

    @property
    def problem(self) -> bool:
        return self.required and not self.ok

    @property
    def status(self) -> str:
        return "ok" if self.ok else "missing" if self.required else "absent"

    def line(self) -> str:
        status = self.status.upper() if self.problem else self.status
        text = f"{self.group:<9} {self.name:<34} {status:<7} {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix and not self.ok else text

    def brief(self) -> str:
        """:meth:`line` without the column padding (``--brief``)."""
        text = f"themis doctor: {self.group} {self.name}: {self.status} - {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix and not self.ok else text


def dist_version(*names: str) -> str:
    """The installed version of the first of ``names`` that is an installed distribution."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def module_found(name: str) -> bool:
    """``name`` can be imported (looked up, not imported; a bare directory of that name on
    sys.path - a namespace package, e.g. the repository's docker/ - does not count)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin not in (None, "namespace")


# -- the checks ------------------------------------------------------------------------


def check_version() -> Check:
    where = Path(__file__).resolve().parent
    return Check("themis", "version", True,
                 f"themis {__version__} (python {platform.python_version()}, {where})",
                 version=__version__)


def check_compiled() -> list[Check]:
    out = []
    for part in compiled.PARTS:
        error = compiled.import_error(part.module)
        if error is None:
            origin = getattr(sys.modules.get(part.module), "__file__", "") or ""
            out.append(Check("compiled", part.module, True, f"present ({Path(origin).name})",
                             required=True))
        else:
            out.append(Check("compiled", part.module, False,
                             f"{part.consequence} ({error})",
                             compiled.FIX, required=True))
    return out


def check_highs() -> Check:
    try:
        importlib.import_module("highspy")
    except ImportError as exc:
        return Check("solver", "highs", False, f"highspy does not import ({exc}): no MILP "
                     "or LP solver, no auction", f"pip install 'highspy>=1.7' (a core "
                     f"dependency: reinstall {DIST})", required=True)
    version = dist_version("highspy")
    return Check("solver", "highs", True, f"HiGHS MILP (highspy {version})", required=True,
                 version=version)


def check_lpbb(highs: Check) -> Check:
    if not highs.ok:
        return Check("solver", "lpbb", False, "needs HiGHS (see solver highs)", highs.fix,
                     required=True)
    native = compiled.import_error("themis.mechanism.solvers._simplex") is None
    engine = "native dual simplex" if native else "HiGHS LP (compiled _simplex missing)"
    return Check("solver", "lpbb", True, f"LP branch and cut, LP engine: {engine}",
                 required=True)


def check_cpsat() -> Check:
    from themis.mechanism.solvers.base import SolverUnavailable

    try:
        from themis.mechanism.solvers.cpsat import CpSatSolver

        CpSatSolver()
    except SolverUnavailable as exc:
        return Check("solver", "cpsat", False, "OR-Tools CP-SAT does not import "
                     f"({exc.__cause__ or exc})", pip_extra("cpsat"))
    version = dist_version("ortools")
    return Check("solver", "cpsat", True, f"OR-Tools CP-SAT (ortools {version})",
                 version=version)


def gurobi_licence(gp: Any) -> tuple[bool, str]:
    """(usable, what): starts a Gurobi environment with its log in a temporary file, not
    on the console, and returns the licence line Gurobi wrote there (or its error)."""
    with tempfile.TemporaryDirectory(prefix="themis-doctor-") as tmp:
        log_file = os.path.join(tmp, "gurobi.log")
        env = gp.Env(empty=True)
        try:
            env.setParam("LogToConsole", 0)
            env.setParam("LogFile", log_file)
            env.start()
        except gp.GurobiError as exc:
            return False, str(exc)
        finally:
            env.dispose()
        try:
            with open(log_file, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            text = ""
    lines = [ln.strip() for ln in text.splitlines() if "licen" in ln.lower()]
    what = lines[0] if lines else "licence accepted"
    if "restricted" in what.lower():
        what += " (size-limited: models of up to 2000 variables/constraints; auto falls " \
                "back to HiGHS beyond)"
    return True, what


def check_gurobi() -> Check:
    try:
        gp = importlib.import_module("gurobipy")
    except ImportError:
        return Check("solver", "gurobi", False, "gurobipy is not installed (auto uses HiGHS)",
                     pip_extra("gurobi"))
    version = dist_version("gurobipy")
    usable, what = gurobi_licence(gp)
    if not usable:
        return Check("solver", "gurobi", False, f"gurobipy {version}, no usable licence: "
                     f"{what} (auto uses HiGHS)", "set GRB_LICENSE_FILE to a Gurobi licence "
                     "file", version=version)
    return Check("solver", "gurobi", True, f"gurobipy {version}, licensed: {what}",
                 version=version)


def check_extras() -> list[Check]:
    out = []
    for extra, reqs in EXTRAS.items():
        have, lack = [], []
        for dist, module in reqs:
            version = dist_version(dist) or (dist_version(module) if module else "")
            found = module_found(module) if module is not None else bool(version)
            if found:
                have.append(f"{dist} {version}".strip())
            else:
                lack.append(dist)
        if not lack:
            out.append(Check("extra", extra, True, ", ".join(have)))
        elif not have:
            out.append(Check("extra", extra, False, "not installed", pip_extra(extra)))
        else:  # half installed: something removed or broken
            out.append(Check("extra", extra, False, f"partly installed, missing: "
                             f"{', '.join(lack)}", pip_extra(extra), required=True))
    return out


def _first_line(cmd: list[str]) -> str:
    """The first line a ``--version`` style command prints (stdout or stderr), or ""."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        line = _ANSI.sub("", line).strip()
        if line:
            return line
    return ""


def check_tools() -> list[Check]:
    out = []
    java = shutil.which("java")
    if java is None:
        out.append(Check("tool", "java", False, "no java on PATH (building the jars needs "
                         "a JDK 17; they run on Java 8+ in Hadoop 3.3/3.4 RMs, 17+ in 3.5)",
                         "install a JDK 17 (Debian/Ubuntu: "
                         "apt-get install openjdk-17-jdk-headless)"))
    else:
        jdk = "JDK: javac found" if shutil.which("javac") else "no javac (a JRE: cannot " \
            "build the jars)"
        out.append(Check("tool", "java", True, f"{_first_line([java, '-version'])} "
                         f"({java}; {jdk})"))
    mvn = shutil.which("mvn")
    if mvn is None:
        out.append(Check("tool", "mvn", False, "no mvn on PATH (building the jars needs "
                         "Maven)", "install Maven 3.8+ (Debian/Ubuntu: apt-get install maven)"))
    else:
        out.append(Check("tool", "mvn", True, f"{_first_line([mvn, '-B', '-v'])} ({mvn})"))
    return out


def check_jars() -> list[Check]:
    from themis.client.cluster import ClientError, find_am_jar
    from themis.hadoop.jars import PluginJarNotFound, find_plugin_jar

    out = []
    try:
        out.append(Check("jar", "rm-plugin", True, f"found {find_plugin_jar()}"))
    except PluginJarNotFound as exc:
        out.append(Check("jar", "rm-plugin", False, f"not found: {exc}", JAR_BUILD))
    try:
        out.append(Check("jar", "submarine-am", True, f"found {find_am_jar()}"))
    except ClientError as exc:
        out.append(Check("jar", "submarine-am", False, f"not found: {exc}", JAR_BUILD))
    return out


def run_checks(optional: bool = True) -> list[Check]:
    """Every check; without ``optional``, only those that can find a problem (--brief:
    the optional solvers, Java and the jars take seconds and are never problems)."""
    highs = check_highs()
    required = [check_version(), *check_compiled(), highs, check_lpbb(highs),
                Check("solver", "bnb", True, "pure-Python branch and bound", required=True)]
    if not optional:
        return [*required, *check_extras()]
    return [*required, check_cpsat(), check_gurobi(), *check_extras(), *check_tools(),
            *check_jars()]


def report(checks: Sequence[Check]) -> dict[str, Any]:
    """The JSON document of ``--json``."""
    return {
        "version": __version__,
        "python": platform.python_version(),
        "ok": not any(c.problem for c in checks),
        "problems": sum(c.problem for c in checks),
        "checks": [{**asdict(c), "status": c.status, "problem": c.problem} for c in checks],
    }


# -- the command -----------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "doctor", help="list the installed compiled parts, solvers, extras, Java and jars",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true",
                      help="print the report as JSON only (default: one line per check)")
    form.add_argument("--brief", action="store_true",
                      help="print only the problems, nothing when there is none (default: "
                      "every check)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when there is a problem (default: exit 0 always)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    checks = run_checks(optional=not args.brief)
    if args.json:
        print(json.dumps(report(checks), indent=2))
    elif args.brief:
        for c in checks:
            if c.problem:
                print(c.brief())
    else:
        for c in checks:
            print(c.line())
    return 1 if args.strict and any(c.problem for c in checks) else 0
