"""Per-move timeline of reallocations on a running (or kept) dockerised mini-cluster.

For every reallocation an AM recorded (``reallocations[]`` of its status: a job stopped at a
lease end and started again from its checkpoint), this joins the AM's log, the job
containers' stdout/stderr (NodeManager log dirs), the ResourceManager's and the
NodeManagers' logs, and prints when each step happened, in seconds after the lease expiry:

  stop      AM asks the job to stop (runner -> SIGTERM)        AM record
  ckpt      checkpoint on stop written to HDFS                  old job's stdout event
  exit      old container exited                                NM log
  rm_done   RM sees the old container COMPLETED                 RM log
  am_done   AM gets the completion                              AM record
  grant     RM round grants the lease the new container uses    RM log
  am_grant  AM receives that allocation event                   AM log
  ask       AM's node-local ask for the job                     AM log
  alloc     RM allocates the container                          RM log
  launch    AM launches it (NMClientAsync)                      AM log
  nm_run    NM starts the launch script                         NM log
  py        job's python process starts                         job's start event (timings)
  tf        TensorFlow imported                                 job's start event (timings)
  ready     data loaded, model built                            job's start event (timings)
  started   checkpoint restored, training resumes (the metric)  AM record
  step1     first training step done                            job's stdout event

    python bench/realloc_timeline.py [--json OUT] [APP_ID ...]

Without APP_IDs: every THEMIS application the RM knows. Needs ``docker`` (reads the
mini-cluster containers' logs) and the RM / WebHDFS at their containers' addresses.
"""

from __future__ import annotations

import argparse
import calendar
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from themis.am.launchers.yarn.runner import parse_event

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the mini-cluster's RM and NameNode at their containers' addresses (docs/minicluster.md),
# for Cluster.from_env() and the `themis` CLI runs below
os.environ.setdefault("THEMIS_RM_URL", "http://172.31.0.4:8088")
os.environ.setdefault("THEMIS_WEBHDFS_URL", "http://172.31.0.2:9870")

PREFIX = "themis-mc-"
TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
STEPS = ("stop", "ckpt", "exit", "rm_done", "am_done", "grant", "am_grant", "ask", "alloc",
         "launch", "nm_run", "py", "tf", "ready", "started", "step1")


def ts(line: str) -> float | None:
    """Log timestamp (the containers log in UTC) as a Unix time."""
    m = TS.match(line)
    if not m:
        return None
    t = time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return calendar.timegm(t) + int(m.group(2)) / 1000.0


def docker(*args: str) -> bytes:
    return subprocess.run(["docker", *args], capture_output=True, check=False).stdout


def daemon_log(name: str) -> list[str]:
    out = subprocess.run(["docker", "logs", PREFIX + name], capture_output=True, check=False)
    return (out.stdout + out.stderr).decode(errors="replace").splitlines()


def nm_names() -> list[str]:
    names = docker("ps", "--filter", "label=themis.minicluster=1", "--format", "{{.Names}}")
    return sorted(n[len(PREFIX):] for n in names.decode().split() if n.startswith(PREFIX + "nm"))


def container_files(nms: list[str], app: str) -> dict[str, dict[str, str]]:
    """container id -> file name -> text, from every NM's log dir of ``app``."""
    out: dict[str, dict[str, str]] = {}
    for nm in nms:
        raw = docker("exec", PREFIX + nm, "tar", "-C", "/data/nm-logs", "-cf", "-", app)
        if not raw:
            continue
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for m in tar.getmembers():
                parts = m.name.split("/")
                if len(parts) != 3 or not m.isfile():
                    continue
                f = tar.extractfile(m)
                if f is not None:
                    out.setdefault(parts[1], {})[parts[2]] = f.read().decode(errors="replace")
    return out


def json_events(text: str) -> list[dict[str, Any]]:
    return [e for line in text.splitlines() if (e := parse_event(line)) is not None]


def am_log(files: dict[str, dict[str, str]]) -> list[str]:
    for cid, fs in files.items():
        if cid.endswith("_000001") and "AppMaster.stderr" in fs:
            return fs["AppMaster.stderr"].splitlines()
    return []


def last_before(items: list[tuple[float, Any]], t: float) -> tuple[float, Any] | None:
    best = None
    for x in items:
        if x[0] <= t and (best is None or x[0] >= best[0]):
            best = x
    return best


def first_after(items: list[tuple[float, Any]], t: float) -> tuple[float, Any] | None:
    best = None
    for x in items:
        if x[0] >= t and (best is None or x[0] < best[0]):
            best = x
    return best


def timelines(app: str, status: dict[str, Any], rm: list[str], nms: dict[str, list[str]],
              files: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    am = am_log(files)
    stops: list[tuple[float, tuple[str, str]]] = []
    launches: list[tuple[float, tuple[str, str, str]]] = []
    asks: list[tuple[float, tuple[str, str]]] = []
    grants_am: list[tuple[float, str]] = []
    r_stop = re.compile(r"stopping (\S+) in (\S+) on (\S+): ")
    r_launch = re.compile(r"launching (\S+) \(run \d+\) in (\S+) on (\S+):")
    r_ask = re.compile(r"asking for \d+ GPU\(s\) on (\S+) for (\S+) \(request")
    r_grant = re.compile(r"round \d+: granted (\[.*?\])")
    for line in am:
        t = ts(line)
        if t is None:
            continue
        if m := r_stop.search(line):
            stops.append((t, (m.group(1), m.group(2))))
        elif m := r_launch.search(line):
            launches.append((t, (m.group(1), m.group(2), m.group(3))))
        elif m := r_ask.search(line):
            asks.append((t, (m.group(2), m.group(1))))
        elif m := r_grant.search(line):
            grants_am.append((t, m.group(1)))
    rm_lease: list[tuple[float, str]] = []
    rm_cont: dict[tuple[str, str], float] = {}
    r_lease = re.compile(r"Themis lease \d+: \d+ GPU\(s\) on (\S+) to (\S+) until")
    r_rmc = re.compile(r"(container_\S+) Container Transitioned from (\S+) to (\S+)")
    for line in rm:
        t = ts(line)
        if t is None:
            continue
        if (m := r_lease.search(line)) and m.group(2) == app:
            rm_lease.append((t, m.group(1)))
        elif m := r_rmc.search(line):
            rm_cont.setdefault((m.group(1), m.group(3)), t)
    nm_cont: dict[tuple[str, str], float] = {}
    r_nmc = re.compile(r"Container (container_\S+) transitioned from (\S+) to (\S+)")
    for lines in nms.values():
        for line in lines:
            t = ts(line)
            if t is not None and (m := r_nmc.search(line)):
                nm_cont.setdefault((m.group(1), m.group(3)), t)
    out = []
    for r in status.get("reallocations", []):
        job, exp = r["job_id"], float(r["lease_expiry"])
        tl: dict[str, float | None] = dict.fromkeys(STEPS)
        tl["stop"], tl["am_done"], tl["started"] = r["stop_requested"], r["stopped"], r["started"]
        old = last_before([(t, c) for t, (j, c) in stops if j == job], r["stop_requested"] + 0.5)
        new = last_before([(t, (c, n)) for t, (j, c, n) in launches if j == job], r["started"])
        old_c = old[1] if old else ""
        new_c, node = new[1] if new else ("", r["to_node"])
        if old_c:
            tl["exit"] = next((nm_cont[(old_c, s)] for s in ("EXITED_WITH_SUCCESS",
                               "EXITED_WITH_FAILURE", "CONTAINER_CLEANEDUP_AFTER_KILL")
                               if (old_c, s) in nm_cont), None)
            tl["rm_done"] = rm_cont.get((old_c, "COMPLETED"))
            for e in json_events(files.get(old_c, {}).get("stdout", "")):
                if e["event"] == "checkpoint" and str(e.get("reason", "")).startswith("signal"):
                    tl["ckpt"] = e.get("time")
        if new_c:
            tl["launch"] = new[0] if new else None
            tl["alloc"] = rm_cont.get((new_c, "ALLOCATED"))
            tl["nm_run"] = nm_cont.get((new_c, "RUNNING"))
            for e in json_events(files.get(new_c, {}).get("stdout", "")):
                if e["event"] == "start":
                    tm = e.get("timings") or {}
                    tl["py"], tl["tf"], tl["ready"] = (tm.get("process"), tm.get("imported"),
                                                       tm.get("ready"))
                elif e["event"] == "first-step":
                    tl["step1"] = e.get("time")
            alloc = tl["alloc"] or tl["launch"] or r["started"]
            ask = last_before([(t, n) for t, (j, n) in asks if j == job], alloc)
            tl["ask"] = ask[0] if ask else None
            lease = last_before([x for x in rm_lease if x[1] == node], alloc)
            tl["grant"] = lease[0] if lease else None
            g = last_before([x for x in grants_am if node in x[1]], alloc)
            tl["am_grant"] = g[0] if g else None
        rel = {k: (None if v is None else round(float(v) - exp, 2)) for k, v in tl.items()}
        out.append({"app": app, "job": job, "from": r["from_node"], "to": r["to_node"],
                    "old": old_c, "new": new_c, "latency_s": r["latency_s"],
                    "lease_expiry": exp, "t": rel})
    return out


def collect(apps: list[str] | None = None) -> list[dict[str, Any]]:
    """Timelines of every move of ``apps`` (default: every THEMIS app the RM knows)."""
    from themis.client.cluster import Cluster

    c = Cluster.from_env()
    if not apps:
        apps = [a["id"] for a in c.apps() if a.get("applicationType") == "THEMIS"]
    rm = daemon_log("rm")
    nms = {n: daemon_log(n) for n in nm_names()}
    rows = []
    for app in apps:
        st = c.am_status(app) or {}
        rows += timelines(app, st, rm, nms, container_files(list(nms), app))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("apps", nargs="*")
    p.add_argument("--json", type=Path, help="write the timelines here")
    args = p.parse_args()
    rows = collect(args.apps)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def print_table(rows: list[dict[str, Any]]) -> None:
    print("seconds after the lease expiry, per move:")
    print(f"{'job':<14}{'lat':>6}" + "".join(f"{s:>9}" for s in STEPS))
    for r in rows:
        print(f"{r['job'][-14:]:<14}{r['latency_s']:>6.1f}"
              + "".join("        -" if r["t"][s] is None else f"{r['t'][s]:>9.2f}"
                        for s in STEPS))
    if not rows:
        return
    print(f"{'median':<20}" + "".join(
        f"{statistics.median(v):>9.2f}" if (v := [r['t'][s] for r in rows
                                                  if r['t'][s] is not None]) else "        -"
        for s in STEPS))


if __name__ == "__main__":
    sys.exit(main())
