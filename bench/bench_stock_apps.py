"""Stock YARN apps beside Themis apps on the dockerised mini-cluster (issue "Stock YARN apps
share the cluster"; docs/yarn.md, "Apps that do not speak Themis"). One run, one cluster
(NameNode, DataNode, ResourceManager with the Themis plugin, NodeManagers with 4/2/2 GPUs,
docs/minicluster.md), three measurements, each over ``--trials`` apps:

1. **GPU ask on idle GPUs**: a stock app (``StockGpuApp``, YARN client API, no Themis agent)
   asks one 2-GPU container; time from its ask to the container allocated and started.
2. **GPUs freed by a finishing Themis app**: a Themis single-job app holds the only node
   that fits a 4-GPU container (4 GPUs, a ``sleep`` job); a stock app asks one 4-GPU
   container meanwhile; time from the Themis job's container exiting (its AM then gives the
   GPUs back and finishes) to the stock container running, both from the NodeManager's log
   (one clock); and, for reference, from the Themis app's end in YARN (``finishedTime``,
   which can come after the stock container started: the AM gives its GPUs back first).
3. **Non-GPU container start**: a stock app asks one container with no GPU; time from its
   ask to the container started, on an idle cluster and while two Themis apps hold every
   GPU, interleaved by trial; their ratio (target <= 1.1).

Plus the plugin's own freed-GPU-to-grant metric (``ThemisMetrics.FreedToGrantTime``, JMX).
Prints a JSON document on stdout (figures, medians, p95, ratios, settings); progress on
stderr. Needs Docker (``scripts/docker-setup.sh``) and the images (``docker/build.sh
--with-tf``); takes about 12 minutes on a 2-core VM. Only one mini-cluster can run at a
time (host networking): ``flock /tmp/themis-docker.lock python bench/bench_stock_apps.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.minicluster import _get, themis
from tests.integration.stockapps import (
    RM,
    app_report,
    gpu_containers,
    hyperband_spec,
    nm_logs,
    stock_cluster,
    stock_timings,
    submit_stock_app,
    themis_state,
    wait_for,
)

AGENT_PORT = 8643
# One 4-GPU job: only nm1 (4 GPUs) fits it.
SINGLE_SPEC = """\
name: {name}
kind: single-job
max_steps: 10
job:
  command: sleep {sleep} && true {{max_steps}} {{checkpoint_uri}}
resources: {{gpus: 4, memory_mb: 256, vcores: 1}}
am: {{memory_mb: 512, max_attempts: 1}}
"""


def log(msg: str) -> None:
    print(f"[bench_stock_apps {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stats(xs: list[float]) -> dict[str, Any]:
    s = sorted(xs)
    if not s:
        return {"n": 0}
    p95 = s[min(len(s) - 1, max(0, round(0.95 * len(s) + 0.5) - 1))]
    return {"n": len(s), "median": statistics.median(s), "p95": p95, "min": s[0],
            "max": s[-1], "values": s}


def submit_themis(spec_text: str, name: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix=f"{name}-",
                                     delete=False) as f:
        f.write(spec_text)
    try:
        r = themis("submit", f.name)
    finally:
        os.unlink(f.name)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout.strip().splitlines()[-1]


def run_stock(rm: Any, name: str, *, gpus: int, containers: int = 1,
              sleep_s: int = 1) -> dict[str, Any]:
    c, app_id = submit_stock_app(rm, name, sleep_s, containers=containers, gpus=gpus)
    c.join(timeout=600)
    assert c.code == 0, f"{name} ({app_id}) failed:\n{c.out[-3000:]}"
    t = stock_timings(app_report(app_id)["diagnostics"])
    return {"app": app_id, **t}


def leased(apps: set[str]) -> int:
    return sum(le["gpus"] for le in themis_state()["leases"]
               if le["state"] == "ACTIVE" and le["app_id"] in apps)


def finished(app_id: str) -> dict[str, Any] | None:
    a = app_report(app_id)
    return a if a["state"] in ("FINISHED", "FAILED", "KILLED") else None


def idle_gpu_and_nongpu(rm: Any, trials: int) -> tuple[list[float], list[float]]:
    gpu, plain = [], []
    for i in range(trials):
        log(f"idle cluster, trial {i + 1}/{trials}: 2-GPU ask, then a non-GPU ask")
        gpu.append(float(run_stock(rm, f"idle-gpu-{i}", gpus=2)["running"]))
        plain.append(float(run_stock(rm, f"idle-plain-{i}", gpus=0)["running"]))
    return gpu, plain


def busy_nongpu(rm: Any, trials: int, job_s: int) -> tuple[list[float], int]:
    """Non-GPU starts while two Themis apps hold every GPU; returns the times and how many
    trials ran entirely under that condition (the others are reported, not dropped)."""
    # two Hyperband apps of three 2-GPU jobs each: 12 GPUs asked of 8, every GPU leased while
    # their first jobs run (``sleep``: no TensorFlow start-up in the way of the measurement)
    job = f"sleep {job_s} && true {{max_steps}} {{checkpoint_uri}}"
    apps = {submit_themis(hyperband_spec(f"hb-{i}", i, job), f"hb-{i}") for i in range(2)}
    wait_for("the Themis apps to hold every GPU", 300, lambda: leased(apps) == 8)
    out, held = [], 0
    for i in range(trials):
        before = leased(apps)
        out.append(float(run_stock(rm, f"busy-plain-{i}", gpus=0)["running"]))
        held += before == 8 and leased(apps) == 8
        log(f"Themis apps holding every GPU, trial {i + 1}/{trials}: non-GPU ask -> "
            f"running {out[-1]:.0f} ms")
    for a in apps:
        themis("kill", a)
    for a in apps:
        wait_for(f"{a} to end", 120, lambda a=a: finished(a))
    wait_for("no Themis lease left", 120, lambda: not themis_state()["leases"])
    return out, held


def freed_to_stock(cluster: dict[str, Any], trials: int, job_s: int) -> list[dict[str, Any]]:
    rm = cluster["rm"]
    out = []
    for i in range(trials):
        name = f"single-{i}"
        app = submit_themis(SINGLE_SPEC.format(name=name, sleep=job_s), name)
        wait_for(f"{name} to hold nm1's 4 GPUs", 300, lambda app=app: leased({app}) == 4)
        c, stock_id = submit_stock_app(rm, f"after-{i}", 1, gpus=4)
        # the stock app must be waiting (asking) before the Themis app ends
        wait_for(f"after-{i} to ask", 120, lambda sid=stock_id: any(
            a.get("app_id") == sid and a.get("asks") for a in themis_state().get("apps", [])),
            0.5)
        done = wait_for(f"{name} to end", 300, lambda app=app: finished(app))
        assert done["finalStatus"] == "SUCCEEDED", done
        c.join(timeout=300)
        assert c.code == 0, c.out[-3000:]
        t = stock_timings(app_report(stock_id)["diagnostics"])
        end_ms = int(done["finishedTime"])
        # the NodeManager's view: the Themis job's container exit -> the stock container running
        cs = gpu_containers(nm_logs(cluster))
        job_end = max(x["end"] for x in cs if x["app"] == app)
        stock_start = min(x["start"] for x in cs if x["app"] == stock_id)
        row = {"themis_app": app, "stock_app": stock_id,
               "running_after_job_exit_ms": round((stock_start - job_end) * 1000),
               "running_after_app_end_ms": t["asked"] + t["running"] - end_ms}
        log(f"GPUs freed, trial {i + 1}/{trials}: stock 4-GPU container running "
            f"{row['running_after_job_exit_ms']} ms after the Themis job's container exited "
            f"({row['running_after_app_end_ms']} ms after its app ended in YARN)")
        out.append(row)
    return out


def metrics() -> dict[str, Any]:
    bean = _get(f"{RM}/jmx?qry=Hadoop:service=*,name=ThemisMetrics")["beans"]
    if not bean:
        return {}
    return {k: v for k, v in bean[0].items() if k.startswith(("FreedToGrant", "Rounds",
                                                              "Grants"))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=5,
                   help="apps per measurement (default 5; median and p95 over them)")
    p.add_argument("--lease-ms", type=int, default=120000,
                   help="Themis lease in the RM's yarn-site.xml (default 120000: no lease "
                        "expires during a measurement)")
    p.add_argument("--job-s", type=int, default=45,
                   help="seconds each Themis job sleeps (default 45)")
    p.add_argument("--out", type=Path, default=None,
                   help="also write the JSON document to this file (default: stdout only)")
    a = p.parse_args(argv)
    if a.trials < 1:
        p.error("--trials must be >= 1")
    overrides = {
        "yarn.resourcemanager.themis.lease-duration-ms": str(a.lease_ms),
        "yarn.resourcemanager.themis.grace-period-ms": "5000",
        "yarn.resourcemanager.themis.agent-port": str(AGENT_PORT),
    }
    t0 = time.monotonic()
    log("starting the mini-cluster")
    with stock_cluster("bench", overrides, AGENT_PORT) as c:
        rm = c["rm"]
        run_stock(rm, "warm-up", gpus=0)  # first client JVM and HDFS upload: not measured
        idle_gpu, idle_plain = idle_gpu_and_nongpu(rm, a.trials)
        busy_plain, held = busy_nongpu(rm, a.trials, a.job_s)
        freed = freed_to_stock(c, a.trials, max(10, a.job_s // 3))
        jmx = metrics()
    ratio = statistics.median(busy_plain) / statistics.median(idle_plain)
    doc = {
        "bench": "bench_stock_apps",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores",
        "settings": {"trials": a.trials, "lease_ms": a.lease_ms, "job_s": a.job_s,
                     "round_interval_ms": "250 (docker/conf/yarn-site.xml)",
                     "freed_round_delay_ms": "200 (default)"},
        "idle_gpu_ask_to_running_ms": stats(idle_gpu),
        "freed_gpus": {
            "stock_running_after_themis_job_exit_ms": stats(
                [float(r["running_after_job_exit_ms"]) for r in freed]),
            "stock_running_after_themis_app_end_ms": stats(
                [float(r["running_after_app_end_ms"]) for r in freed]),
            "trials": freed},
        "nongpu_start_ms": {"idle": stats(idle_plain), "themis_holds_every_gpu": stats(busy_plain),
                            "trials_with_every_gpu_held_throughout": held,
                            "ratio_of_medians": round(ratio, 3)},
        "themis_metrics": jmx,
        "targets": {"idle_gpu_median_le_2000_ms": statistics.median(idle_gpu) <= 2000,
                    "freed_gpus_median_le_1000_ms": statistics.median(
                        [r["running_after_job_exit_ms"] for r in freed]) <= 1000,
                    "nongpu_ratio_le_1.1": ratio <= 1.1},
        "wall_s": round(time.monotonic() - t0),
    }
    text = json.dumps(doc, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
