"""The wheel carries what it needs: built from a copy of the checkout (setup.py reuses the
fresh jars of rm-plugin/target and submarine-am/target, else runs Maven), installed into a
clean venv at the locked versions, then used from a directory outside the checkout: the jar
lookups find the packaged jars, the jars hold their main classes, ``themis submit`` works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Jar:
    module: str  # Maven module
    pattern: str  # its main artifact in target/
    packaged: str  # where the wheel ships it, under themis/
    main_class: str
    shaded_py4j: str  # the relocated Py4J: present only in the shaded jar


JARS = [
    Jar("rm-plugin", "themis-rm-plugin-*.jar", "yarn/lib",
        "org.themis.yarn.ThemisCapacityScheduler", "org/themis/shaded/py4j/GatewayServer.class"),
    Jar("submarine-am", "themis-submarine-am-*.jar", "submarine_am/lib",
        "org.themis.am.AppMaster", "org/themis/shaded/am/py4j/GatewayServer.class"),
]
SPEC = ROOT / "examples" / "am" / "digits-hyperband.yaml"


def _target_jar(root: Path, jar: Jar) -> Path | None:
    found = [p for p in (root / jar.module / "target").glob(jar.pattern)
             if not p.name.startswith("original-")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _fresh(root: Path, jar: Jar) -> bool:
    """setup.py's rule: the shaded jar, newer than the module's src/main and both poms."""
    built = _target_jar(root, jar)
    if built is None:
        return False
    with zipfile.ZipFile(built) as z:
        if jar.shaded_py4j not in z.namelist():
            return False
    srcs = [root / "pom.xml", root / jar.module / "pom.xml",
            *(p for p in (root / jar.module / "src" / "main").rglob("*") if p.is_file())]
    return built.stat().st_mtime >= max(p.stat().st_mtime for p in srcs)


def _run(cmd: list[str], timeout: float, **kw: object) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                       **kw)  # type: ignore[call-overload]
    assert r.returncode == 0, f"{cmd[:4]}... exit {r.returncode}\n{r.stdout[-3000:]}\n" \
                              f"{r.stderr[-3000:]}"
    return r  # type: ignore[no-any-return]


@dataclass
class Installed:
    wheel: Path
    src: Path  # the copy of the checkout it was built from
    build_log: str
    reused: bool  # the checkout's jars were fresh: the build must not have run Maven
    venv: Path
    site: Path
    outside: Path  # a working directory outside the checkout
    env: dict[str, str]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    for tool in ("git", "javap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    if not all(_fresh(ROOT, j) for j in JARS) and shutil.which("mvn") is None:
        pytest.skip("no fresh jars in rm-plugin/target, submarine-am/target and no Maven")
    base = tmp_path_factory.mktemp("wheel")
    # a copy of the checkout (tracked and new files), so the build leaves nothing in it
    src = base / "src"
    files = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 60, cwd=ROOT).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():  # not a deleted tracked file
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    for j in JARS:  # with their mtimes, so setup.py sees them as fresh as they are
        built = _target_jar(ROOT, j)
        if built is not None:
            (src / j.module / "target").mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, src / j.module / "target" / built.name)
    reused = all(_fresh(src, j) for j in JARS)  # of the copy, as setup.py will see it
    # setuptools and wheel at the locked versions of this interpreter (no download)
    log = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                "-w", str(base / "dist"), str(src)], 900)
    wheels = list((base / "dist").glob("themis_yarn-*.whl"))
    assert len(wheels) == 1, wheels
    # a clean venv (no system site-packages), the wheel and its deps at the locked versions
    venv = base / "venv"
    uv = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True,
                        check=False).returncode == 0
    _run([sys.executable, "-m", "venv", *(["--without-pip"] if uv else []), str(venv)], 300)
    py = venv / "bin" / "python"
    lock = ["-c", str(ROOT / "requirements" / "lock.txt"), str(wheels[0])]
    if uv:
        _run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(py), *lock],
             900)
    else:
        _run([str(py), "-m", "pip", "install", "-q", *lock], 900)
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                     60).stdout.strip())
    outside = base / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "THEMIS_RM_PLUGIN_JAR", "THEMIS_AM_JAR", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(wheels[0], src, log.stdout + log.stderr, reused, venv, site, outside, env)


def test_wheel_ships_the_shaded_jars_and_reuses_fresh_builds(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = whl.namelist()
        for j in JARS:
            shipped = [n for n in names if n.startswith(f"themis/{j.packaged}/")
                       and n.endswith(".jar")]
            assert len(shipped) == 1, (j.module, shipped)
            assert not Path(shipped[0]).name.startswith("original-")
            if installed.reused:  # byte for byte the checkout's jar, not a rebuild
                built = _target_jar(installed.src, j)
                assert built is not None and whl.read(shipped[0]) == built.read_bytes()
    # Maven runs exactly when a jar was missing or older than its sources
    assert ("themis-yarn: building" in installed.build_log) is not installed.reused


def test_lookups_find_the_packaged_jars_outside_the_checkout(installed: Installed) -> None:
    probe = ("import json, themis; from themis.hadoop.jars import find_plugin_jar; "
             "from themis.client.cluster import find_am_jar; "
             "print(json.dumps([themis.__file__, str(find_plugin_jar()), str(find_am_jar())]))")
    r = _run([str(installed.venv / "bin" / "python"), "-c", probe], 120,
             cwd=installed.outside, env=installed.env)
    pkg, plugin, am = (Path(p) for p in json.loads(r.stdout))
    assert pkg.is_relative_to(installed.site), pkg
    for found, j in zip((plugin, am), JARS, strict=True):
        assert found.is_relative_to(installed.site / "themis" / j.packaged), found
        assert not found.is_relative_to(ROOT)
        with zipfile.ZipFile(found) as z:
            entries = set(z.namelist())
            main = j.main_class.replace(".", "/") + ".class"
            assert main in entries and j.shaded_py4j in entries, (found, j.main_class)
            if j.module == "submarine-am":
                assert f"Main-Class: {j.main_class}" in z.read("META-INF/MANIFEST.MF").decode()
        # javap parses the class file out of the jar: a truncated or foreign jar fails here
        out = _run(["javap", "-cp", str(found), j.main_class], 120).stdout
        assert f"class {j.main_class}" in out, out


def test_submit_runs_from_the_clean_venv(installed: Installed) -> None:
    spec = installed.outside / SPEC.name
    shutil.copy2(SPEC, spec)
    themis = str(installed.venv / "bin" / "themis")
    r = _run([themis, "submit", "--dry-run", spec.name], 120, cwd=installed.outside,
             env=installed.env)
    assert json.loads(r.stdout)["name"] == "digits-hb"
    # A real submit finds the packaged AM jar, then fails at the (closed) RM port: the error
    # is about the cluster, not a missing jar.
    r = subprocess.run([themis, "submit", spec.name, "--rm", "http://127.0.0.1:9",
                        "--webhdfs", "http://127.0.0.1:9"], capture_output=True, text=True,
                       timeout=120, cwd=installed.outside, env=installed.env, check=False)
    assert r.returncode == 1, r.stderr
    assert "submit failed" in r.stderr and "127.0.0.1:9" in r.stderr, r.stderr
    assert "jar not found" not in r.stderr and "Traceback" not in r.stderr, r.stderr
