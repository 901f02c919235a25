"""docs/install.md, followed step by step on the mini-cluster's images, starting from a stock
Hadoop ResourceManager: the ``themis/hadoop`` image (no plugin, no Python package) with the
mini-cluster's configuration stripped of everything Themis needs (scheduler class, every
``yarn.resourcemanager.themis.*`` key, the dominant resource calculator, resource-types.xml).

The commands and configuration blocks come from the guide itself: each fenced block after a
``<!-- install-test: NAME -->`` line is run (bash) or merged into its configuration file (xml)
exactly as written, so the guide and this test cannot drift apart. Checks: before, the stock
CapacityScheduler runs and sees no GPU; after the install and a restart, the Themis scheduler
is initialised, its engine registered, the GPUs counted, the guide's verification commands
pass, and a Themis app submitted from the RM host (as gateway) gets a lease and runs its GPU
jobs; after the guide's rollback and a restart, the stock scheduler runs while that app is
still RUNNING in its first attempt and its job containers still run (work-preserving RM
restart, which the guide enables).

The ResourceManager's configuration directory in the test is the image's configuration
template (``/opt/hadoop/conf.template``, mounted from a temporary directory), which the image's
launcher renders at every start; a restart is a restart of the RM container. Environment: as
tests/integration/minicluster.py (THEMIS_IT_MOUNT_SRC is not used: the RM gets the package
from the wheelhouse the guide builds).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    ADDR,
    NMS,
    NN,
    RM,
    ROOT,
    _get,
    docker_exec,
    running_minicluster,
    themis,
)
from tests.integration.stockapps import put_file, themis_state, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

DOC = ROOT / "docs" / "install.md"
AGENT_PORT = 8642
STOCK_CLASS = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler"
NM_WEB = {name: f"http://{ADDR[name]}:{8042 + 100 * i}" for i, name in enumerate(NMS)}
# The guide's variables, with the image's paths: the launcher renders the RM's configuration
# from conf.template at every start, and /opt/hadoop/lib/* is the daemons' classpath.
CONF_IN_RM = "/opt/hadoop/conf.template"
WHEELHOUSE_IN_RM = "/tmp/themis-wheelhouse"
GUIDE_ENV = {
    "HADOOP_HOME": "/opt/hadoop",
    "HADOOP_CONF_DIR": CONF_IN_RM,
    "RM_LIB": "/opt/hadoop/lib",
    "THEMIS_VENV": "/opt/themis/venv",
    "WHEELHOUSE": WHEELHOUSE_IN_RM,
    "RM_WEB": RM,
    "THEMIS_RM_URL": RM,
    "THEMIS_WEBHDFS_URL": NN,
    "HADOOP_USER_NAME": "root",
}
# block name -> (language, what the test does with it)
BLOCKS = {
    "build": ("bash", "run on the build machine (the host, in a copy of the checkout)"),
    "rm-venv": ("bash", "run in the RM container"),
    "rm-jar": ("bash", "run in the RM container"),
    "rm-tls": ("bash", "run in the RM container"),
    "yarn-site": ("xml", "yarn-site.xml"),
    "yarn-site-recovery": ("xml", "yarn-site.xml"),
    "resource-types": ("xml", "resource-types.xml"),
    "capacity-scheduler": ("xml", "capacity-scheduler.xml"),
    "verify-rm": ("bash", "run in the RM container"),
    "verify-gateway": ("bash", "run in the RM container"),
    "rollback": ("xml", "yarn-site.xml"),
    "rollback-jar": ("bash", "run in the RM container"),
}
# A Themis app whose three 1-GPU jobs outlast the rollback (Hyperband s=1 of max_resource 3,
# eta 3; every command must take the step target and the checkpoint URI: passed to `true`)
SPEC = """\
name: install-guide
search_space:
  learning_rate: {type: double, min: 1.0e-3, max: 3.0e-1, scale: log}
hyperband: {max_resource: 3, eta: 3, steps_per_unit: 10, brackets: [1], seed: 1}
objective: {optional: true}  # the jobs write no event files: nothing to rank
job:
  command: sleep 400 && true {max_steps} {checkpoint_uri}
resources: {gpus: 1, memory_mb: 256, vcores: 1}
am: {memory_mb: 512, max_attempts: 1}
"""


def guide_blocks() -> dict[str, str]:
    """The marked blocks of docs/install.md by name (each name once, the expected language)."""
    text = DOC.read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for m in re.finditer(r"<!-- install-test: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", text, re.S):
        name, lang, body = m.groups()
        assert name in BLOCKS, f"docs/install.md: unknown block {name!r}"
        assert name not in found, f"docs/install.md: block {name!r} twice"
        assert lang == BLOCKS[name][0], f"docs/install.md: block {name!r} is {lang}"
        found[name] = body
    missing = set(BLOCKS) - set(found)
    assert not missing, f"docs/install.md lost the blocks {sorted(missing)}"
    return found


# ------------------------------------------------------------------- Hadoop XML files
def _parse(path: Path) -> ET.Element:
    """The root element of a Hadoop configuration file (comments kept)."""
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    return ET.parse(path, parser).getroot()


def _write(conf: ET.Element, path: Path) -> None:
    tree = ET.ElementTree(conf)
    ET.indent(tree)
    tree.write(path, encoding="unicode", xml_declaration=True)


def merge(path: Path, fragment: str) -> None:
    """Merge the ``<property>`` elements of ``fragment`` into the configuration file ``path``
    (a property of the same name takes the new value; the file is created if missing)."""
    conf = _parse(path) if path.exists() else ET.Element("configuration")
    for prop in ET.fromstring(f"<configuration>{fragment}</configuration>").iter("property"):
        name = prop.findtext("name", "").strip()
        value = prop.findtext("value", "").strip()
        assert name, f"a property without a name in {fragment!r}"
        old = next((p for p in conf.iter("property") if p.findtext("name", "").strip() == name),
                   None)
        if old is None:
            old = ET.SubElement(conf, "property")
            ET.SubElement(old, "name").text = name
            ET.SubElement(old, "value")
        v = old.find("value")
        assert v is not None
        v.text = value
    _write(conf, path)


def drop(path: Path, keep: Callable[[str], bool]) -> None:
    """Remove the properties whose name ``keep`` refuses."""
    conf = _parse(path)
    for prop in list(conf.iter("property")):
        if not keep(prop.findtext("name", "").strip()):
            conf.remove(prop)
    _write(conf, path)


def stock_conf(dest: Path) -> Path:
    """The mini-cluster's configuration (docker/conf) as on a stock Hadoop cluster without GPU
    scheduling: Hadoop's default scheduler class and resource calculator, no resource types,
    no Themis key."""
    shutil.copytree(ROOT / "docker" / "conf", dest)
    drop(dest / "yarn-site.xml", lambda n: not n.startswith("yarn.resourcemanager.themis.")
         and n != "yarn.resourcemanager.scheduler.class")
    drop(dest / "capacity-scheduler.xml", lambda n: n != "yarn.scheduler.capacity.resource-calculator")
    (dest / "resource-types.xml").unlink()
    return dest


# ------------------------------------------------------------------- the build machine
def build_wheelhouse(script: str, base: Path) -> Path:
    """Run the guide's build block in a copy of the checkout (tracked and new files, and the
    Maven jars with their mtimes: setup.py reuses them when fresh, else runs Maven)."""
    src = base / "src"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for f in filter(None, files.split("\0")):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    for module in ("rm-plugin", "submarine-am"):
        for jar in (ROOT / module / "target").glob("themis-*.jar"):
            (src / module / "target").mkdir(parents=True, exist_ok=True)
            shutil.copy2(jar, src / module / "target" / jar.name)
    # `python3` of the block = this interpreter (the images' Python is 3.11 too)
    # (without the jar overrides a developer or scripts/test.sh may set: the guide's build
    # takes the jars of its own checkout)
    env = {**{k: v for k, v in os.environ.items()
              if k not in ("THEMIS_AM_JAR", "THEMIS_RM_PLUGIN_JAR", "THEMIS_PLUGIN_JAR")},
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=src, env=env,
                       capture_output=True, text=True, timeout=1200, check=False)
    assert r.returncode == 0, f"build block failed ({r.returncode}):\n{r.stdout[-2000:]}\n" \
                              f"{r.stderr[-3000:]}"
    wheels = list((src / "wheelhouse").glob("themis_yarn-*.whl"))
    assert len(wheels) == 1, wheels
    return src / "wheelhouse"


# ------------------------------------------------------------------- the RM container
def run_in(rm: Any, what: str, script: str, **extra_env: str) -> str:
    r = docker_exec(rm, ["bash", "-euo", "pipefail", "-c", script],
                    env={**GUIDE_ENV, **extra_env}, merge_stderr=True)
    assert r.returncode == 0, \
        f"{what}: exit {r.returncode}:\n{script}\n---\n{r.stdout[-4000:]}"
    return r.stdout


def rm_log(rm: Any, since: float = 0) -> str:
    """The RM container's output (its log) since the epoch second ``since`` (0: all)."""
    return str(rm.logs(since=int(since) if since else None).decode(errors="replace"))


def nodes() -> dict[str, tuple[str, int]]:
    """NodeManager host -> (state, yarn.io/gpu) as the RM sees them."""
    out = {}
    for n in (_get(f"{RM}/ws/v1/cluster/nodes").get("nodes") or {}).get("node", []):
        infos = (n.get("totalResource", {}).get("resourceInformations") or {}).get(
            "resourceInformation", [])
        gpus = next((int(i["value"]) for i in infos if i.get("name") == "yarn.io/gpu"), 0)
        out[n["nodeHostName"]] = (n["state"], gpus)
    return out


def restart(rm: Any, expect_gpus: dict[str, int]) -> float:
    """Restart the RM container; wait until every NodeManager is RUNNING again with
    ``expect_gpus``. Returns the time of the restart (for the log since then)."""
    t = time.time() - 1
    rm.restart(timeout=60)
    want = {k: ("RUNNING", g) for k, g in expect_gpus.items()}

    def back() -> bool:
        rm.reload()
        if rm.status != "running":
            raise AssertionError(f"the RM container stopped:\n{rm_log(rm, t)[-4000:]}")
        return nodes() == want

    try:
        wait_for("the NodeManagers to re-register", 150, back, 2)
    except AssertionError:
        raise AssertionError(f"nodes {nodes() if _up() else 'RM down'}, expected {want}; RM "
                             f"log:\n{rm_log(rm, t)[-4000:]}") from None
    return t


def _up() -> bool:
    try:
        _get(f"{RM}/ws/v1/cluster/info")
        return True
    except OSError:
        return False


def themis_bean() -> list[Any]:
    return list(_get(f"{RM}/jmx?qry=Hadoop:service=ResourceManager,name=Themis")["beans"])


def app_containers(app_id: str) -> dict[str, str]:
    """Container id -> state of ``app_id``'s containers on the NodeManagers."""
    out = {}
    key = app_id.removeprefix("application_")
    for url in NM_WEB.values():
        doc = _get(f"{url}/ws/v1/node/containers")
        for c in ((doc or {}).get("containers") or {}).get("container", []):
            if f"_{key}_" in c["id"]:
                out[c["id"]] = c["state"]
    return out


def job_containers(app_id: str) -> set[str]:
    """The app's running containers other than its AM's (attempt 1, container 1)."""
    return {c for c, st in app_containers(app_id).items()
            if st == "RUNNING" and not c.endswith("_01_000001")}


# ------------------------------------------------------------------- the test
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    blocks = guide_blocks()
    base = tmp_path_factory.mktemp("install")
    t0 = time.monotonic()
    wheelhouse = build_wheelhouse(blocks["build"], base)
    build_s = time.monotonic() - t0
    conf = stock_conf(base / "conf")
    with running_minicluster("install", extra_ports=[AGENT_PORT], rm_image="themis/hadoop:latest",
                             rm_volumes={str(conf): CONF_IN_RM},
                             mounts={str(wheelhouse): WHEELHOUSE_IN_RM}) as c:
        rm = next(x for x in c["containers"] if "-rm-" in x.get_wrapped_container().name)
        yield {**c, "rm": rm.get_wrapped_container(), "conf": conf, "blocks": blocks,
               "build_s": build_s, "t0": t0}


def test_install_guide(cluster: dict[str, Any]) -> None:
    rm, conf, blocks = cluster["rm"], cluster["conf"], cluster["blocks"]
    timings = {"build wheelhouse": cluster["build_s"], "cluster up": cluster["startup_s"]}
    gpus = {name: g for name, (g, _rack) in NMS.items()}

    # --- the starting point: a stock ResourceManager that knows no GPUs
    log = rm_log(rm)
    assert "NOTICE: no Themis plugin" in log and "Themis scheduler initialised" not in log, log
    sched = _get(f"{RM}/ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]
    assert sched["type"] == "capacityScheduler", sched.get("type")
    assert nodes() == {k: ("RUNNING", 0) for k in NMS}, nodes()
    assert themis_bean() == []
    r = themis("status", "--all")
    assert r.returncode == 1 and "runs no Themis plugin" in r.stderr, (r.returncode, r.stderr)

    # --- the ResourceManager host, as the guide says
    t = time.monotonic()
    run_in(rm, "rm-venv", blocks["rm-venv"])
    run_in(rm, "rm-jar", blocks["rm-jar"])
    run_in(rm, "rm-tls", blocks["rm-tls"])
    jars = run_in(rm, "ls", 'ls "$RM_LIB"/themis-rm-plugin-*.jar').split()
    assert jars == ["/opt/hadoop/lib/themis-rm-plugin-0.1.0.jar"], jars
    for name in ("yarn-site", "yarn-site-recovery", "resource-types", "capacity-scheduler"):
        merge(conf / BLOCKS[name][1], blocks[name])
    timings["RM host steps"] = time.monotonic() - t
    t = time.monotonic()
    since = restart(rm, gpus)
    timings["restart into Themis"] = time.monotonic() - t

    # --- the Themis scheduler runs
    log = rm_log(rm, since)
    for line in ("Themis scheduler initialised: fairness-knob=0.8, lease-duration-ms=600000",
                 "Themis engine registered",
                 # the RM's host name: agent-bind-host's default (no key in the guide)
                 f"Themis agents' endpoint (gRPC) for application masters: rm:{AGENT_PORT}",
                 "Recovery started"):
        assert line in log, f"no {line!r} in the RM log:\n{log[-4000:]}"
    assert len(themis_bean()) == 1
    out = run_in(rm, "verify-rm", blocks["verify-rm"])
    assert re.search(r"jar\s+rm-plugin\s+ok\s+found /opt/themis/venv/lib/python3\.\d+/"
                     r"site-packages/themis/yarn/lib/themis-rm-plugin-0\.1\.0\.jar", out), out
    assert '"GpusTotal"' in out, out
    out = run_in(rm, "verify-gateway", blocks["verify-gateway"])

    # --- a Themis app, submitted from the RM host as gateway, gets a lease and runs its jobs
    t = time.monotonic()
    put_file(rm, "/tmp/install-guide.yaml", SPEC.encode())
    out = run_in(rm, "themis submit", '"$THEMIS_VENV/bin/themis" submit /tmp/install-guide.yaml')
    app = out.strip().splitlines()[-1]
    assert re.fullmatch(r"application_\d+_\d+", app), out
    leases = wait_for(f"a lease for {app}", 120, lambda: [
        le for le in themis_state()["leases"] if le["app_id"] == app and le["gpus"] > 0], 1)
    jobs = wait_for(f"{app}'s jobs to run", 90, lambda: job_containers(app), 1)
    timings["submit to lease"] = time.monotonic() - t
    out = run_in(rm, "verify-gateway", blocks["verify-gateway"])
    assert app in out, out

    # --- rollback: the stock scheduler again, the app and its containers survive
    merge(conf / BLOCKS["rollback"][1], blocks["rollback"])
    run_in(rm, "rollback-jar", blocks["rollback-jar"])
    t = time.monotonic()
    since = restart(rm, gpus)
    timings["restart into stock"] = time.monotonic() - t
    log = rm_log(rm, since)
    assert "Themis scheduler initialised" not in log, log[-4000:]
    assert "Recovering app" in log or "Recovering application" in log, log[-4000:]
    assert themis_bean() == []
    r = themis("status", "--all")
    assert r.returncode == 1 and "runs no Themis plugin" in r.stderr, (r.returncode, r.stderr)
    report = _get(f"{RM}/ws/v1/cluster/apps/{app}")["app"]
    assert report["state"] == "RUNNING", report
    attempts = _get(f"{RM}/ws/v1/cluster/apps/{app}/appattempts")["appAttempts"]["appAttempt"]
    assert len(attempts) == 1, attempts
    still = job_containers(app)
    assert jobs <= still, (jobs, app_containers(app))
    # the RM has taken the running containers back from the NodeManagers (AM + jobs)
    wait_for("the RM to recover the app's containers", 60, lambda: _get(
        f"{RM}/ws/v1/cluster/apps/{app}")["app"]["runningContainers"] >= 1 + len(jobs), 2)
    timings["total"] = time.monotonic() - cluster["t0"]
    print({"app": app, "leases": leases, "jobs": sorted(jobs),
           "timings_s": {k: round(v, 1) for k, v in timings.items()}})
