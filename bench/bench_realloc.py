"""Reallocation latency on the dockerised mini-cluster (paper: 35 s median / 50 s p95).

Brings up the mini-cluster with short leases (``docker/minicluster.sh up`` with
``THEMIS_CONF_OVERRIDES``), submits competing Hyperband apps of real TensorFlow jobs with
``themis submit``, waits for them, and reads each AM's reallocation records: for every job
stopped at a lease end and started again elsewhere,

* latency = job's ``start`` event of the new run (checkpoint restored, training resumes)
  minus the lease expiry that ended the previous run;
* checkpoint time = duration of the checkpoint the job wrote to HDFS when told to stop;
* downtime = the new run's ``start`` minus the stop request of the previous run (the AM
  stops a run shortly before its lease ends so that the GPUs are free at the expiry).

``--repeat N`` submits the apps N times, one wave after the other, on the same cluster and
pools the moves. After the last wave it prints the per-move timeline of
``bench/realloc_timeline.py`` (where the time goes) and the load average of the machine.
Prints median / p95 and, with ``--append``, adds a section to bench/RESULTS.md.

    python bench/bench_realloc.py [--apps 2] [--lease-ms 40000] [--repeat 1] [--append] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the mini-cluster's RM and NameNode at their containers' addresses (docs/minicluster.md),
# for Cluster.from_env() and the `themis` CLI runs below
os.environ.setdefault("THEMIS_RM_URL", "http://172.31.0.4:8088")
os.environ.setdefault("THEMIS_WEBHDFS_URL", "http://172.31.0.2:9870")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_wave(c: Any, n_apps: int, wave: int, timeout: float) -> list[str]:
    """Submits ``n_apps`` Hyperband apps and waits until they end; returns their ids."""
    apps = []
    with tempfile.TemporaryDirectory() as tmp:
        base = (ROOT / "examples" / "am" / "digits-hyperband.yaml").read_text()
        for i in range(n_apps):
            spec = Path(tmp) / f"bench{i}.yaml"
            spec.write_text(base.replace("name: digits-hb", f"name: realloc-{wave}-{i}")
                            .replace("seed: 0", f"seed: {wave * n_apps + i}"))
            out = subprocess.run([sys.executable, "-m", "themis.cli", "submit", str(spec)],
                                 capture_output=True, text=True, check=True, cwd=ROOT)
            apps.append(out.stdout.strip().splitlines()[-1])
            time.sleep(3)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            states = [c.app(a)["state"] for a in apps]
        except Exception:
            states = ["?"]
        if all(s in ("FINISHED", "FAILED", "KILLED") for s in states):
            break
        time.sleep(5)
    return apps


def main() -> int:
    from themis.client.cluster import Cluster

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apps", type=int, default=2, help="apps submitted per wave (default 2)")
    p.add_argument("--lease-ms", type=int, default=40000,
                   help="the RM's Themis lease in milliseconds (default 40000)")
    p.add_argument("--timeout", type=float, default=1500, help="seconds per wave")
    p.add_argument("--repeat", type=int, default=1, help="waves of --apps apps, pooled")
    p.add_argument("--append", action="store_true", help="append to bench/RESULTS.md")
    p.add_argument("--keep", action="store_true", help="leave the mini-cluster up")
    p.add_argument("--no-up", action="store_true", help="use a running mini-cluster")
    args = p.parse_args()
    env = dict(os.environ)
    env["THEMIS_CONF_OVERRIDES"] = ";".join([
        f"yarn.resourcemanager.themis.lease-duration-ms={args.lease_ms}",
        "yarn.resourcemanager.themis.grace-period-ms=15000",
        "yarn.resourcemanager.themis.fairness-knob=0.8",
    ])
    if not args.no_up:
        subprocess.run([str(ROOT / "docker" / "minicluster.sh"), "up"], env=env, check=True)
    c = Cluster.from_env()
    apps: list[str] = []
    load0 = os.getloadavg()
    try:
        for wave in range(args.repeat):
            apps += run_wave(c, args.apps, wave, args.timeout)
        load1 = os.getloadavg()
        moves: list[dict[str, Any]] = []
        finals = {}
        for a in apps:
            st = c.am_status(a) or {}
            moves += st.get("reallocations", [])
            finals[a] = c.app(a).get("finalStatus")
        lat = [float(m["latency_s"]) for m in moves]
        ckpt = [float(m["checkpoint_s"]) for m in moves if m.get("checkpoint_s") is not None]
        stop_to_start = [float(m["started"]) - float(m["stopped"]) for m in moves]
        downtime = [float(m["started"]) - float(m["stop_requested"]) for m in moves]
        res = {
            "apps": finals, "reallocations": len(moves),
            "latency_median_s": statistics.median(lat) if lat else None,
            "latency_p95_s": pct(lat, 0.95) if lat else None,
            "container_gone_to_running_median_s": statistics.median(stop_to_start)
            if stop_to_start else None,
            "downtime_median_s": statistics.median(downtime) if downtime else None,
            "downtime_p95_s": pct(downtime, 0.95) if downtime else None,
            "checkpoint_median_s": statistics.median(ckpt) if ckpt else None,
            "checkpoint_p95_s": pct(ckpt, 0.95) if ckpt else None,
            "lease_ms": args.lease_ms, "waves": args.repeat,
            "loadavg_start": [round(x, 2) for x in load0],
            "loadavg_end": [round(x, 2) for x in load1],
        }
        print(json.dumps(res, indent=1))
        try:
            sys.path.insert(0, str(ROOT / "bench"))
            from realloc_timeline import collect, print_table

            print_table(collect(apps))
        except Exception as e:  # the timeline is a diagnosis; the figures above stand
            print(f"(no timeline: {e})")
        if args.append and lat:
            with open(ROOT / "bench" / "RESULTS.md", "a") as f:
                f.write(
                    "\n## Reallocation latency on the mini-cluster (bench/bench_realloc.py)\n\n"
                    f"{args.apps} competing Hyperband apps (examples/am/digits-hyperband.yaml, "
                    f"real TensorFlow jobs) x {args.repeat} wave(s), leases "
                    f"{args.lease_ms / 1000:.0f} s, {len(moves)} reallocations, load average "
                    f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end.\n\n"
                    "| metric | median | p95 |\n|---|---|---|\n"
                    f"| lease expiry -> job running on new GPUs, checkpoint restored | "
                    f"{res['latency_median_s']:.1f} s | {res['latency_p95_s']:.1f} s |\n"
                    f"| stop request -> job running again (downtime) | "
                    f"{res['downtime_median_s']:.1f} s | {res['downtime_p95_s']:.1f} s |\n"
                    f"| HDFS checkpoint on stop | {res['checkpoint_median_s'] or 0:.2f} s | "
                    f"{res['checkpoint_p95_s'] or 0:.2f} s |\n\n"
                    "Paper: 35 s / 50 s reallocation, 5-10 s HDFS checkpoint.\n")
    finally:
        if not args.keep and not args.no_up:
            subprocess.run([str(ROOT / "docker" / "minicluster.sh"), "down"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
