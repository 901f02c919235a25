"""One app mix on the dockerised mini-cluster, under the stock CapacityScheduler and under
Themis (docs/minicluster.md, "Stock CapacityScheduler vs Themis").

The mix: three Hyperband apps (examples/am/digits-hyperband.yaml: 5 configurations for 3
units, the best continued to 9 units; real TensorFlow jobs checkpointing to HDFS) of three
sizes (a unit of 50 s, 40 s and 30 s of training on one GPU), submitted 0 s, 60 s and
120 s after the first. Each run brings the mini-cluster up (3 NodeManagers, 4/2/2 GPUs),
submits the mix with ``themis submit``, waits until every app ends, reads what it needs and
takes the cluster down. Runs (``--runs``, in this order):

* ``stock``: the ResourceManager as Hadoop ships it: ``THEMIS_SCHEDULER`` = YARN's
  ``CapacityScheduler`` (the plugin stays out of the scheduler configuration: no engine, no
  agents' endpoint, no leases; one queue, FIFO within it) and
  ``yarn.resourcemanager.themis.agent-address=none``, which ``themis submit`` passes to the
  AM as ``THEMIS_ARBITER=none``: the AM runs without an arbiter
  (:mod:`themis.am.launchers.yarn.stock`), its jobs get whatever containers YARN gives and
  keep them to their step target;
* ``themis``: the Themis plugin with its defaults (f = 0.8, grace 30 s, exact T_id,
  ``starvation=ranked``) but ``--lease-ms`` leases;
* ``themis-served-now`` and ``themis-inf``: the same with ``starvation=served-now`` and
  ``starvation=inf`` set explicitly.

Per app and run: JCT (the RM's finishedTime - startedTime: submission to end), GPU time (the
RM's ``yarn.io/gpu`` resource-seconds of the app's containers) and

    rho = JCT / T_id,  T_id = the app's plan on R_C / N GPUs (themis.mechanism.fairness.
                              plan_time, the exact form of section 3.2's ideal time)

with R_C = 8 and N = 3 (the mix's apps: an independent equal share) in every run, the plan
being the AM's own model of the finished app (``state.json`` in HDFS: every rung's jobs at
their profiled serial iteration times). The same definition in every column: the stock run
has no arbiter and so no N_avg of its own. ``rho_navg`` divides by the plan on R_C / N_avg
GPUs instead, N_avg = the time-average number of the mix's apps present during the app's
life (RM times), also computed the same way in every run. Also: the AM's own final rho (its
status, after the run), moves (jobs stopped at a lease end and resumed) and their median
latency, the load average (1 min) sampled every 10 s and the CPU seconds of every process
on this machine by kind (``bench/proc_cpu.py``: training jobs, RM, engine, AMs, ...). Before
each cluster goes down its RM log and container logs are kept in ``DIR/logs-<run>/``.

    python bench/bench_cluster_compare.py [--runs stock,themis] [--lease-ms 120000]
        [--out DIR] [--timeout 1800] [--no-plot] [--replot]

Writes ``DIR/compare.json``, ``DIR/compare.md`` (the table) and ``DIR/compare.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proc_cpu import ProcCpu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("THEMIS_RM_URL", "http://172.31.0.4:8088")
os.environ.setdefault("THEMIS_WEBHDFS_URL", "http://172.31.0.2:9870")

STOCK_SCHEDULER = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler"
KEY = "yarn.resourcemanager.themis."
CLUSTER_GPUS = 8  # docker/minicluster.sh's default NodeManagers: 4 + 2 + 2
#: the mix: (name, arrival s after the first, seconds of training per Hyperband unit)
MIX = (("hb-large", 0.0, 50.0), ("hb-medium", 60.0, 40.0), ("hb-small", 120.0, 30.0))
STEPS_PER_UNIT = 30
RUNS = ("stock", "themis", "themis-served-now", "themis-inf")
LABELS = {"stock": "stock CapacityScheduler (FIFO)", "themis": "Themis (default: ranked)",
          "themis-served-now": "Themis (starvation=served-now)",
          "themis-inf": "Themis (starvation=inf)"}


def run_env(mode: str, lease_ms: int) -> dict[str, str]:
    """docker/minicluster.sh's environment for one run."""
    env = dict(os.environ)
    env.pop("THEMIS_SCHEDULER", None)
    if mode == "stock":
        env["THEMIS_SCHEDULER"] = STOCK_SCHEDULER
        env["THEMIS_CONF_OVERRIDES"] = f"{KEY}agent-address=none"
    else:
        env["THEMIS_CONF_OVERRIDES"] = f"{KEY}lease-duration-ms={lease_ms}"
        if mode != "themis":
            starvation = mode.removeprefix("themis-")
            env["THEMIS_CONF_OVERRIDES"] += f";{KEY}starvation={starvation}"
    return env


def spec_text(name: str, seed: int, unit_s: float) -> str:
    """examples/am/digits-hyperband.yaml with this app's name, seed and unit length."""
    base = (ROOT / "examples" / "am" / "digits-hyperband.yaml").read_text()
    sleep_ms = round(1000 * unit_s / STEPS_PER_UNIT)
    out = (base.replace("name: digits-hb", f"name: {name}")
           .replace("seed: 0", f"seed: {seed}")
           .replace("steps_per_unit: 40", f"steps_per_unit: {STEPS_PER_UNIT}")
           .replace("--checkpoint-every 40", f"--checkpoint-every {STEPS_PER_UNIT}")
           .replace("--eval-every 40", f"--eval-every {STEPS_PER_UNIT}")
           .replace("--step-sleep-ms 100", f"--step-sleep-ms {sleep_ms}"))
    if f"--step-sleep-ms {sleep_ms}" not in out or f"name: {name}" not in out:
        raise SystemExit("examples/am/digits-hyperband.yaml changed: update bench_cluster_compare")
    return out


def gpu_seconds(app: dict[str, Any]) -> float | None:
    """The RM's yarn.io/gpu resource-seconds of an app (resourceSecondsMap)."""
    entries = (app.get("resourceSecondsMap") or {}).get("entry")
    if isinstance(entries, dict):
        entries = [entries]
    for e in entries or []:
        if e.get("key") == "yarn.io/gpu":
            return float(e.get("value", 0))
    return None


def t_id(c: Any, app_id: str, gpus: float) -> float | None:
    """The app's plan on ``gpus`` GPUs, from the AM's own model of the finished app."""
    from themis.am.core import AmCore
    from themis.am.spec import AppSpec
    from themis.mechanism.fairness import plan_time

    fs = c.hdfs()
    d = c.app_dir(app_id)
    raw_state, raw_spec = fs.read_or_none(f"{d}/state.json"), fs.read_or_none(f"{d}/spec.json")
    if not raw_state or not raw_spec:
        return None
    state = json.loads(raw_state)
    core = AmCore(AppSpec.from_json(raw_spec.decode()), app_id, clock=time.time)
    core.restore(state)
    if not core.done:
        return None
    return plan_time(core.model(float(state.get("start_time", 0.0))), gpus)


def n_avg(life: tuple[float, float], lives: list[tuple[float, float]]) -> float:
    """Time-average number of the mix's apps present during ``life`` (itself included)."""
    a, b = life
    if b <= a:
        return 1.0
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in lives) / (b - a)


def one_run(mode: str, lease_ms: int, timeout: float, out: Path) -> dict[str, Any]:
    from themis.client.cluster import Cluster

    mc = str(ROOT / "docker" / "minicluster.sh")
    print(f"\n==== run {mode}: {LABELS[mode]} ====", flush=True)
    subprocess.run([mc, "up"], env=run_env(mode, lease_ms), check=True)
    c = Cluster.from_env()
    cpu = ProcCpu(period=1.0).start()
    loads: list[float] = []
    apps: dict[str, str] = {}
    t_start = time.time()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            for i, (name, at, unit_s) in enumerate(MIX):
                while time.monotonic() - t0 < at:
                    time.sleep(1)
                spec = Path(tmp) / f"{name}.yaml"
                spec.write_text(spec_text(name, i, unit_s))
                sub = subprocess.run([sys.executable, "-m", "themis.cli", "submit", str(spec)],
                                     capture_output=True, text=True, check=True, cwd=ROOT)
                apps[name] = sub.stdout.strip().splitlines()[-1]
                print(f"  t={time.monotonic() - t0:5.0f}s submitted {name}: {apps[name]}",
                      flush=True)
        last = 0.0
        while time.monotonic() - t0 < timeout:
            try:
                states = {n: c.app(a)["state"] for n, a in apps.items()}
            except Exception:  # the RM is busy: ask again
                states = {}
            if states and all(s in ("FINISHED", "FAILED", "KILLED") for s in states.values()):
                break
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                loads.append(os.getloadavg()[0])
                line = []
                for n, a in apps.items():
                    st = c.am_status(a) or {}
                    rho = st.get("rho")
                    line.append(f"{n} {states.get(n, '?')[:4]} "
                                f"gpus={(st.get('gpus') or {}).get('count', 0)} "
                                f"rho={'-' if rho is None else f'{rho:.2f}'}")
                print(f"  t={time.monotonic() - t0:5.0f}s load {loads[-1]:.1f} | "
                      + " | ".join(line), flush=True)
            time.sleep(2)
        else:
            print(f"  run {mode}: timeout after {timeout:.0f}s", flush=True)
        cpu_by_kind = cpu.stop()
        wall = time.time() - t_start
        info = {n: c.app(a) for n, a in apps.items()}
        status = {n: c.am_status(a) or {} for n, a in apps.items()}
        lives = [(float(x["startedTime"]) / 1000, float(x["finishedTime"]) / 1000)
                 for x in info.values() if int(x.get("finishedTime") or 0) > 0]
        rows = []
        for name, _, unit_s in MIX:
            a, x, st = apps[name], info[name], status[name]
            start, end = float(x["startedTime"]) / 1000, float(x.get("finishedTime") or 0) / 1000
            jct = end - start if end > 0 else math.nan
            tid = t_id(c, a, CLUSTER_GPUS / len(MIX))
            na = n_avg((start, end), lives) if end > 0 else math.nan
            tid_navg = t_id(c, a, CLUSTER_GPUS / na) if end > 0 else None
            moves = st.get("reallocations", [])
            lat = [float(m["latency_s"]) for m in moves]
            rows.append({
                "app": name, "app_id": a, "unit_s": unit_s, "final": x.get("finalStatus"),
                "jct_s": jct, "t_id_s": tid, "rho": jct / tid if tid else None,
                "n_avg": na, "rho_navg": jct / tid_navg if tid_navg else None,
                "am_rho": st.get("rho"), "gpu_s": gpu_seconds(x),
                "am_busy_gpu_s": st.get("busy_gpu_seconds"), "moves": len(moves),
                "move_median_s": statistics.median(lat) if lat else None,
                "history": st.get("history", []), "start": start, "end": end,
            })
        (out / f"report-{mode}.json").write_text(json.dumps(
            {"apps": apps, "rm": info, "status": status}, indent=1, default=str))
        return {"mode": mode, "label": LABELS[mode], "wall_s": wall, "t_start": t_start,
                "loadavg_1min": {"mean": statistics.mean(loads) if loads else None,
                                 "max": max(loads) if loads else None},
                "cpu_by_kind": cpu_by_kind, "apps": rows}
    finally:
        save_logs(mode, out)
        subprocess.run([mc, "down"], check=False)


def save_logs(mode: str, out: Path) -> None:
    """Before the cluster goes: the RM's log (its rounds; ``minicluster.sh logs rm``) and
    every container's logs (AMs, jobs) into ``out/logs-<mode>/``, best effort."""
    dest = out / f"logs-{mode}"
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "rm.log", "w") as f:
        subprocess.run([str(ROOT / "docker" / "minicluster.sh"), "logs", "rm"], stdout=f,
                       stderr=subprocess.STDOUT, check=False)
    docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
    for nm in ("nm1", "nm2", "nm3"):
        subprocess.run([docker, "cp", f"themis-mc-{nm}:/data/nm-logs", str(dest / nm)],
                       capture_output=True, check=False)


def fmt(x: Any, nd: int = 0) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{nd}f}"


def table(runs: list[dict[str, Any]]) -> str:
    """The per-app table (one column group per run) and each run's worst rho."""
    head = "| app (unit, arrival) |"
    sep = "|---|"
    for r in runs:
        m = r["mode"]
        head += f" rho {m} | JCT {m} (s) | GPU time {m} (GPU-s) | moves {m} |"
        sep += "---|---|---|---|"
    lines = [head, sep]
    for i, (name, at, unit_s) in enumerate(MIX):
        row = f"| {name} ({unit_s:.0f} s, +{at:.0f} s) |"
        for r in runs:
            a = r["apps"][i]
            row += (f" {fmt(a['rho'], 2)} | {fmt(a['jct_s'])} | {fmt(a['gpu_s'])} |"
                    f" {a['moves']} |")
        lines.append(row)
    worst = "| **worst rho** |"
    for r in runs:
        rhos = [a["rho"] for a in r["apps"] if a["rho"] is not None]
        worst += f" **{fmt(max(rhos) if rhos else None, 2)}** | | | |"
    lines.append(worst)
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path, lease_ms: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1 + len(runs), 1, figsize=(9, 3.2 + 2.2 * len(runs)),
                             gridspec_kw={"height_ratios": [1.6] + [1] * len(runs)})
    ax = axes[0]
    width = 0.8 / len(runs)
    for k, r in enumerate(runs):
        xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(MIX))]
        ys = [a["rho"] or 0.0 for a in r["apps"]]
        bars = ax.bar(xs, ys, width, label=r["label"])
        for b, y in zip(bars, ys, strict=True):
            ax.annotate(f"{y:.2f}", (b.get_x() + b.get_width() / 2, y), ha="center",
                        va="bottom", fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(MIX)))
    ax.set_xticklabels([f"{n}\n(unit {u:.0f} s, arrives +{at:.0f} s)" for n, at, u in MIX])
    ax.set_ylabel("rho = JCT / T_id (1)")
    ax.set_title("Same Hyperband mix on the YARN mini-cluster (8 GPUs): stock "
                 f"CapacityScheduler vs Themis (lease {lease_ms / 1000:.0f} s)\n"
                 "T_id = the app's plan on 8/3 GPUs; lower is fairer; dashed: rho = 1",
                 fontsize=10)
    ax.set_ylim(0, 1.3 * max([a["rho"] or 0.0 for r in runs for a in r["apps"]] + [1.0]))
    ax.legend(fontsize=8, loc="upper left", ncol=len(runs))
    for ax, r in zip(axes[1:], runs, strict=True):
        t0 = min(a["start"] for a in r["apps"])
        for a in r["apps"]:
            h = a["history"]
            if h:
                ax.step([x[0] - t0 for x in h], [x[1] for x in h], where="post", label=a["app"])
        ax.set_ylabel("GPUs held")
        ax.set_ylim(0, CLUSTER_GPUS)
        ax.set_title(f"{r['label']}: GPUs each app held (its AM's history, last 600 s kept)",
                     fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("time since the first submission (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="stock,themis",
                   help=f"comma-separated, of {', '.join(RUNS)} (default stock,themis)")
    p.add_argument("--lease-ms", type=int, default=120000,
                   help="Themis runs' lease length (default 120000)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "cluster-compare")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--replot", action="store_true",
                   help="no runs: the table and plot again from DIR/compare.json")
    args = p.parse_args()
    if args.replot:
        saved = json.loads((args.out / "compare.json").read_text())
        (args.out / "compare.md").write_text(table(saved["runs"]) + "\n")
        plot(saved["runs"], args.out / "compare.png", int(saved["lease_ms"]))
        print(table(saved["runs"]))
        return 0
    modes = [m.strip() for m in args.runs.split(",") if m.strip()]
    bad = [m for m in modes if m not in RUNS]
    if bad:
        p.error(f"unknown run(s) {bad}: choose from {', '.join(RUNS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for m in modes:
        runs.append(one_run(m, args.lease_ms, args.timeout, args.out))
        # what is done so far survives a later run's failure
        (args.out / "compare.json").write_text(json.dumps(
            {"lease_ms": args.lease_ms, "cluster_gpus": CLUSTER_GPUS, "runs": runs},
            indent=1, default=str))
    md = table(runs)
    (args.out / "compare.md").write_text(md + "\n")
    print()
    for r in runs:
        ld = r["loadavg_1min"]
        print(f"{r['mode']}: {r['label']}: wall {r['wall_s']:.0f} s, load average (1 min) "
              f"mean {fmt(ld['mean'], 1)} max {fmt(ld['max'], 1)}")
        top = [(k, v) for k, v in (r.get("cpu_by_kind") or {}).items() if k != "_wall_s"]
        print("  CPU s by process kind: " + ", ".join(
            f"{k} {v['cpu_s']:.0f} ({v['processes']})" for k, v in top[:12]))
        for a in r["apps"]:
            print(f"  {a['app']:<10} {a['final']:<10} JCT {fmt(a['jct_s'])} s  T_id "
                  f"{fmt(a['t_id_s'])} s  rho {fmt(a['rho'], 2)}  (N_avg {fmt(a['n_avg'], 2)}:"
                  f" {fmt(a['rho_navg'], 2)})  AM's rho {fmt(a['am_rho'], 2)}  GPU time "
                  f"{fmt(a['gpu_s'])} GPU-s  moves {a['moves']} (median "
                  f"{fmt(a['move_median_s'], 1)} s)")
    print()
    print(md)
    if not args.no_plot:
        try:
            plot(runs, args.out / "compare.png", args.lease_ms)
            print(f"\nplot: {args.out / 'compare.png'}")
        except Exception as e:  # the figures above stand without it
            print(f"(no plot: {e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
