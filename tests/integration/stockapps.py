"""Stock YARN apps on the dockerised mini-cluster: the pieces shared by
``test_stock_apps.py`` and ``bench/bench_stock_apps.py``. ``StockGpuApp`` (rm-plugin test
sources) is an app written against YARN's client API, DistributedShell-style, that knows
nothing of Themis; it is compiled into a small jar, copied into the RM container and run
there with ``themis-daemon client``. Environment: as tests/integration/minicluster.py."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import subprocess
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.integration.minicluster import (
    RM,
    ROOT,
    _get,
    am_jar_and_mounts,
    docker_exec,
    running_minicluster,
    shell_read,
)

JAR_IN_RM = "/tmp/stock-gpu-app.jar"
CLASSES = ROOT / "rm-plugin" / "target" / "test-classes" / "org" / "themis" / "yarn"
MAIN_CLASSES = ROOT / "rm-plugin" / "target" / "classes" / "org" / "themis" / "yarn"
SOURCE = ROOT / "rm-plugin" / "src" / "test" / "java" / "org" / "themis" / "yarn" / \
    "StockGpuApp.java"


def hyperband_spec(name: str, seed: int, command: str) -> str:
    """A Themis app spec: Hyperband s=1 of max_resource 3, eta 3 (three 2-GPU jobs, then
    the best one again) running ``command`` (which takes ``{max_steps}`` and
    ``{checkpoint_uri}``, as every job command must), small AM and containers."""
    return f"""\
name: {name}
search_space:
  learning_rate: {{type: double, min: 1.0e-3, max: 3.0e-1, scale: log}}
hyperband: {{max_resource: 3, eta: 3, steps_per_unit: 10, brackets: [1], seed: {seed}}}
objective: {{optional: true}}  # the jobs write no event files: nothing to rank
job:
  command: >-
    {command}
resources: {{gpus: 2, memory_mb: 256, vcores: 1}}
am: {{memory_mb: 512, max_attempts: 1}}
"""


def stock_jar() -> bytes:
    """StockGpuApp (+ Gpus) as a small jar, compiled from the test sources when stale."""
    cls = CLASSES / "StockGpuApp.class"
    if not cls.is_file() or cls.stat().st_mtime < SOURCE.stat().st_mtime:
        r = subprocess.run(["mvn", "-q", "-B", "-o", "-pl", "rm-plugin", "test-compile"],
                           cwd=ROOT, timeout=900)
        assert r.returncode == 0 and cls.is_file(), "cannot compile StockGpuApp"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in [*CLASSES.glob("StockGpuApp*.class"), MAIN_CLASSES / "Gpus.class"]:
            z.write(f, f"org/themis/yarn/{f.name}")
    return buf.getvalue()


def put_file(container: Any, path: str, data: bytes) -> None:
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        info = tarfile.TarInfo(Path(path).name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    assert container.put_archive(str(Path(path).parent), tar.getvalue())


@contextlib.contextmanager
def stock_cluster(prefix: str, overrides: Mapping[str, str],
                  agent_port: int) -> Iterator[dict[str, Any]]:
    """The mini-cluster with ``overrides`` in the RM's yarn-site.xml and the StockGpuApp jar
    in the RM container; yields running_minicluster's dict plus ``rm`` (the RM container)."""
    mounts = am_jar_and_mounts()
    jar = stock_jar()
    with running_minicluster(prefix, conf_overrides=overrides, extra_ports=[agent_port],
                             mounts=mounts) as c:
        rm = next(x for x in c["containers"] if "-rm-" in x.get_wrapped_container().name)
        c["rm"] = rm.get_wrapped_container()
        put_file(c["rm"], JAR_IN_RM, jar)
        yield c


class Client(threading.Thread):
    """A Hadoop client run in the RM container (``themis-daemon client``)."""

    def __init__(self, rm: Any, *args: str) -> None:
        super().__init__(daemon=True)
        self.rm, self.args = rm, args
        self.code: int | None = None
        self.out = ""

    def run(self) -> None:
        r = docker_exec(self.rm, ["themis-daemon", "client", *self.args],
                        env={"THEMIS_EXTRA_CLASSPATH": JAR_IN_RM}, merge_stderr=True,
                        timeout=None)
        self.code, self.out = r.returncode, r.stdout


def themis_state() -> dict[str, Any]:
    """The plugin's status bean (leases, asks, wait reasons), from the RM's /jmx."""
    bean = _get(f"{RM}/jmx?qry=Hadoop:service=ResourceManager,name=Themis")["beans"][0]
    return dict(json.loads(bean["StatusJson"]))


def app_report(app_id: str) -> dict[str, Any]:
    return dict(_get(f"{RM}/ws/v1/cluster/apps/{app_id}", timeout=15)["app"])


def wait_for(what: str, timeout: float, cond: Callable[[], Any], pause: float = 1.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got = cond()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(pause)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def submit_stock_app(rm: Any, name: str, sleep_s: int, *, containers: int = 1,
                     gpus: int = 2) -> tuple[Client, str]:
    """Start StockGpuApp (``containers`` containers of ``gpus`` GPUs running ``sleep``);
    returns its client thread and, once YARN lists it, its application id."""
    c = Client(rm, "org.themis.yarn.StockGpuApp", "submit", JAR_IN_RM, str(containers),
               str(gpus), str(sleep_s), name)
    c.start()

    def submitted() -> str | None:
        assert c.code is None, f"{name}: client exited {c.code} before submitting:\n{c.out}"
        apps = (_get(f"{RM}/ws/v1/cluster/apps", timeout=15).get("apps") or {}).get("app", [])
        return next((a["id"] for a in apps if a["name"] == name), None)
    app_id = wait_for(f"{name} submitted", 180, submitted)
    return c, str(app_id)


def stock_timings(diagnostics: str) -> dict[str, int]:
    """StockGpuApp's timings from its final diagnostics: ``asked`` (epoch ms of its ask),
    ``allocated`` and ``running`` (ms after the ask)."""
    m = re.search(r"stock-gpu-app: asked=(\d+) allocated=(-?\d+) running=(-?\d+)", diagnostics)
    assert m, diagnostics
    return {"asked": int(m[1]), "allocated": int(m[2]), "running": int(m[3])}


def am_log(cluster: dict[str, Any], app_id: str) -> str:
    """The tail of an app's AM log, from whichever NodeManager ran it."""
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        if "-nm" not in w.name:
            continue
        f = f"/data/nm-logs/{app_id}/*_000001/AppMaster.stderr"
        text = shell_read(w, f"for f in {f}; do [ -f \"$f\" ] && tail -n 40 \"$f\"; done",
                          f"the AM log of {app_id}")
        if text.strip():
            return f"AM log of {app_id} ({w.name}):\n{text}"
    return f"no AM log of {app_id} found"


def rm_log(cluster: dict[str, Any]) -> str:
    return str(cluster["rm"].logs().decode(errors="replace"))


# --------------------------------------------------- no GPU used by two containers at once
_TS = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "


def _ts(text: str) -> float:
    """A Hadoop log time stamp as seconds (only differences are used: the daemons share the
    host's clock and time zone)."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _app_of(container_id: str) -> str:
    parts = container_id.split("_")  # container_<cluster ts>_<app>_<attempt>_<n>
    return f"application_{parts[-4]}_{parts[-3]}"


def gpu_containers(nm_logs: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every container with GPUs, from the NodeManagers' logs (``{host: log}``): its node
    host, app, GPUs and the times its process ran (from RUNNING to the next state; +inf
    while still running)."""
    out = []
    for host, text in nm_logs.items():
        gpus = {m[1]: int(m[2]) for m in re.finditer(
            r"Start request for (container_\S+) by user .* with resource <[^>]*yarn\.io/gpu: "
            r"(\d+)>", text)}
        start: dict[str, float] = {}
        end: dict[str, float] = {}
        for m in re.finditer(_TS + r".*Container (container_\S+) transitioned from (\S+) to "
                             r"(\S+)", text, re.M):
            cid = m[2]
            if m[4] == "RUNNING" and cid not in start:
                start[cid] = _ts(m[1])
            elif m[3] == "RUNNING" and cid not in end:
                end[cid] = _ts(m[1])
        for cid, g in gpus.items():
            if g > 0 and cid in start:
                out.append({"container": cid, "host": host, "app": _app_of(cid), "gpus": g,
                            "start": start[cid], "end": end.get(cid, math.inf)})
    return out


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    """One line of the RM's lease log: a grant ("Themis lease N: k GPU(s) on host:port to
    app until ...", ``gpus`` = k) or a renewal ("Themis lease N of app on host:port
    renewed", ``gpus`` None), at ``t`` (seconds, :func:`_ts`)."""

    t: float
    app: str
    host: str
    gpus: int | None


_LEASE_LINE = re.compile(_TS + r".*Themis lease \d+(?:: (\d+) GPU\(s\) on (\S+?):\d+ to (\S+) "
                         r"until| of (\S+) on (\S+?):\d+ renewed)", re.M)


def lease_events(rm_text: str) -> list[LeaseEvent]:
    """The grants and renewals in the RM log, in the log's order."""
    return [LeaseEvent(_ts(m[1]), m[4], m[3], int(m[2])) if m[2]
            else LeaseEvent(_ts(m[1]), m[5], m[6], None)
            for m in _LEASE_LINE.finditer(rm_text)]


def lease_windows(rm_text: str, lease_s: float, grace_s: float, spread_s: float | None = None
                  ) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """From the RM log: for each (app, node host), the times its leases allowed it to run GPU
    containers there: from each grant or renewal to the longest a lease of it lasts (lease +
    ``spread_s`` / 2: yarn-site lease-spread-ms, by default half the lease) + grace after
    it."""
    longest = lease_s + (lease_s / 2 if spread_s is None else spread_s) / 2
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for e in lease_events(rm_text):
        out.setdefault((e.app, e.host), []).append((e.t, e.t + longest + grace_s))
    return out


def gpu_use_violations(nm_logs: Mapping[str, str], capacity: Mapping[str, int], rm_text: str,
                       *, lease_s: float, grace_s: float, slack_s: float = 5.0,
                       containers: list[dict[str, Any]] | None = None) -> list[str]:
    """What the logs show against "no GPU is used by two containers at once": a node whose
    running GPU containers add up to more GPUs than it has at some instant (NodeManager
    logs), or a GPU container that ran on a node outside every lease of its app there (the
    lease log; ``slack_s`` for the kill after the grace period to take effect).
    ``containers``: :func:`gpu_containers` of the logs, corrected by the caller (e.g. the
    end of the containers of a host that was killed: its log never tells)."""
    bad = []
    cs = gpu_containers(nm_logs) if containers is None else containers
    for host, cap in capacity.items():
        events = sorted([(c["start"], c["gpus"], c["container"]) for c in cs
                         if c["host"] == host]
                        + [(c["end"], -c["gpus"], c["container"]) for c in cs
                           if c["host"] == host], key=lambda e: (e[0], e[1]))
        used = 0
        for _t, d, cid in events:
            used += d
            if used > cap:
                bad.append(f"{host}: {used} GPUs in use by containers (has {cap}) when "
                           f"{cid} started")
    windows = lease_windows(rm_text, lease_s, grace_s)
    for c in cs:
        w = windows.get((c["app"], c["host"]), [])
        covering = [(a, b) for a, b in w if a <= c["start"] <= b]
        if not covering:
            bad.append(f"{c['container']} ({c['gpus']} GPUs) started on {c['host']} without "
                       f"a lease of {c['app']} there")
            continue
        # the container may outlive one lease under the next one of the same app
        reach = max(b for _, b in covering)
        for a, b in sorted(w):
            if a <= reach:
                reach = max(reach, b)
        if c["end"] > reach + slack_s:
            bad.append(f"{c['container']} ({c['gpus']} GPUs) ran on {c['host']} "
                       f"{c['end'] - reach:.1f} s past its app's leases there")
    return bad


def nm_logs(cluster: dict[str, Any]) -> dict[str, str]:
    """``{node host: NodeManager log}`` of the mini-cluster."""
    out = {}
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        m = re.search(r"-(nm\d+)-", w.name)
        if m:
            out[m[1]] = str(w.logs().decode(errors="replace"))
    return out
