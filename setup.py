"""Build steps pyproject.toml cannot express (everything else is there).

The jars. A wheel ships the ResourceManager plugin (rm-plugin/, the shaded jar) in
themis/yarn/lib/ and the application master (submarine-am/) in themis/submarine_am/lib/,
where themis.hadoop.jars.find_plugin_jar and themis.client.cluster.find_am_jar look
first. ``build_py`` takes each jar from the module's target/ when it is the shaded jar and
newer than the module's src/main, its pom.xml and the root pom.xml; otherwise it first runs
``mvn -B -ntp -q package -DskipTests`` at the repository root (needs Maven and a JDK 17).
The jars are copied into the build directory only, never into the source tree.
- Editable installs (``pip install -e .``) never run Maven: the lookups use target/.
- THEMIS_SKIP_JARS=1 builds a Python-only package (development; docker/build.sh, whose
  image carries the plugin jar itself). Without it, a build that has neither fresh jars
  nor Maven fails with one line saying what to install or build.

The optional C extensions: the LP branch and cut's native LP engine
(themis/mechanism/solvers/_simplex.c), the compiled cores of its cut separation
(_separation.c), of the agent's bid menus (themis/mechanism/_menu.c) and of the simulator's
per-instant pass (themis/sim/_progress.c). ``optional``: a
machine without a C compiler still installs the package and runs HiGHS and the pure-Python
separation and menus instead; ``build_ext`` (BuildExtOptional) ends such a build with a
banner naming what was not built (shown by ``pip install -v``; pip hides a successful
build's output otherwise, so ``themis doctor`` and the run-time warning say it too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CCompilerError, ExecError, PlatformError

ROOT = Path(__file__).resolve().parent
# (Maven module, its main artifact, the package folder that ships it)
JARS = [
    ("rm-plugin", "themis-rm-plugin-*.jar", "themis/yarn/lib"),
    ("submarine-am", "themis-submarine-am-*.jar", "themis/submarine_am/lib"),
]
MAVEN = ["mvn", "-B", "-ntp", "-q", "package", "-DskipTests"]
# The relocated Py4J: only the shaded jar has it (a jar caught mid-build is the plain one).
SHADED = "org/themis/shaded/"
SKIP_VAR = "THEMIS_SKIP_JARS"


def _main_jar(module: str, pattern: str) -> Path | None:
    """The newest main artifact in ``<module>/target`` (the shaded jar, not original-*)."""
    jars = [p for p in (ROOT / module / "target").glob(pattern)
            if not p.name.startswith("original-")
            and not p.name.endswith(("-sources.jar", "-tests.jar", "-javadoc.jar"))]
    return max(jars, key=lambda p: p.stat().st_mtime) if jars else None


def _shaded(jar: Path) -> bool:
    try:
        with zipfile.ZipFile(jar) as z:
            return any(n.startswith(SHADED) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _fresh_jar(module: str, pattern: str) -> Path | None:
    """The module's shaded jar if no source it is built from is newer, else None."""
    jar = _main_jar(module, pattern)
    if jar is None or not _shaded(jar):
        return None
    sources = [ROOT / "pom.xml", ROOT / module / "pom.xml",
               *(p for p in (ROOT / module / "src" / "main").rglob("*") if p.is_file())]
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=0.0)
    return jar if jar.stat().st_mtime >= newest else None


def _has_jdk() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("javac") or (home and (Path(home) / "bin" / "javac").is_file()))


def build_jars() -> list[tuple[Path, str]]:
    """(jar, package folder) for each shipped jar, running Maven if any is missing or stale."""
    fresh = [(_fresh_jar(m, pat), dest) for m, pat, dest in JARS]
    if all(jar is not None for jar, _ in fresh):
        return [(jar, dest) for jar, dest in fresh if jar is not None]
    missing = ", ".join(f"{m}/target/{pat}" for m, pat, _ in JARS if _fresh_jar(m, pat) is None)
    how = f"or set {SKIP_VAR}=1 for a Python-only package"
    if not (ROOT / "pom.xml").is_file():
        raise ExecError(f"themis-yarn: {missing} missing or stale and no Java sources "
                        f"(pom.xml) in {ROOT}: build from a full checkout or the sdist, {how}")
    if shutil.which("mvn") is None or not _has_jdk():
        tool = "Maven (mvn)" if shutil.which("mvn") is None else "a JDK 17 (javac)"
        raise ExecError(f"themis-yarn: {missing} missing or stale and {tool} is not installed: "
                        f"install Maven and a JDK 17, or copy jars built by `{' '.join(MAVEN)}` "
                        f"into the modules' target/, {how}")
    print(f"themis-yarn: building {missing} with `{' '.join(MAVEN)}`", file=sys.stderr)
    rc = subprocess.run(MAVEN, cwd=ROOT, check=False).returncode
    # Maven decides what is up to date: after a successful run its jars are the ones to ship.
    built = [(_main_jar(m, pat), dest) for m, pat, dest in JARS]
    if rc != 0 or any(jar is None or not _shaded(jar) for jar, _ in built):
        raise ExecError(f"themis-yarn: `{' '.join(MAVEN)}` in {ROOT} failed to build the "
                        f"shaded jars (exit {rc}; its output is above)")
    return [(jar, dest) for jar, dest in built if jar is not None]


class BuildPyWithJars(build_py):
    """build_py, then the jars into the build directory (see the module docstring)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode or os.environ.get(SKIP_VAR) == "1":
            return
        for jar, dest in build_jars():
            out = Path(self.build_lib) / dest
            out.mkdir(parents=True, exist_ok=True)
            for old in out.glob("*.jar"):  # a reused build/ may hold an older version
                old.unlink()
            shutil.copy2(jar, out / jar.name)
            print(f"themis-yarn: {jar.relative_to(ROOT)} -> {dest}/", file=sys.stderr)


class BuildExtOptional(build_ext):
    """build_ext that does not let an optional C extension fail quietly: one that does not
    compile (no C compiler, no Python headers) is reported in a banner at the end of the
    build, not in a line lost in its log. The package still works, with the pure-Python
    fall-backs (themis/compiled.py), and says so at run time and in `themis doctor`."""

    def run(self) -> None:
        self._unbuilt: list[tuple[str, str]] = []
        try:
            super().run()
        except (CCompilerError, ExecError, PlatformError) as exc:  # no usable compiler at all
            if not all(getattr(e, "optional", False) for e in self.extensions):
                raise
            self._unbuilt = [(e.name, str(exc)) for e in self.extensions]
        if self._unbuilt:
            rule = "*" * 78
            print("\n".join([
                rule,
                f"themis-yarn: WARNING: {len(self._unbuilt)} optional C extension(s) NOT built:",
                *(f"  {name}: {why}" for name, why in self._unbuilt),
                "The package works without them, slower (pure-Python fall-backs: auctions up",
                "to ~4x, bid tables ~4-5x). Fix: install a C compiler and the Python headers",
                "(Debian/Ubuntu: apt-get install gcc python3-dev) and reinstall;",
                "`themis doctor` lists what is missing.",
                rule,
            ]), file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, ExecError, PlatformError, OSError) as exc:
            if not getattr(ext, "optional", False):
                raise
            lines = str(exc).strip().splitlines()
            self._unbuilt.append((ext.name, lines[-1] if lines else type(exc).__name__))


setup(
    cmdclass={"build_py": BuildPyWithJars, "build_ext": BuildExtOptional},
    ext_modules=[
        Extension(
            "themis.mechanism.solvers._simplex",
            ["themis/mechanism/solvers/_simplex.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "themis.mechanism.solvers._separation",
            ["themis/mechanism/solvers/_separation.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "themis.mechanism._menu",
            ["themis/mechanism/_menu.c"],
            # no fused multiply-add: rho must be rounded as in the Python reference
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
        Extension(
            "themis.sim._progress",
            ["themis/sim/_progress.c"],
            # no fused multiply-add: progress must be rounded as in the Python reference
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
    ],
)
